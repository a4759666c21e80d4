"""`focus export`: the tables a paper reports, as CSV or Parquet files, with a manifest that keeps them traceable.

Every exported file is one table as it is now (`metrics` is `metrics.values`, `predictions` is
`predictions.samples`, ... : `TABLES`), every column kept: values with their intervals (`ci_low`, `ci_high`),
reasons, metric ids and the lineage columns. Whole-set metric rows have the group `''` in the tables; the files
write a null group for them, in every exported table with a `group` column, so that a whole-set row never reads
as a group named by the empty string.

`manifest.json`, written last, says what the files hold: the code version and time of the export, the filters,
per file its table, row count, sha256 and the table partitions its rows came from, each with the id of the
lineage stamp of the commit that wrote it; `stamps` holds those stamps (the asset partition, its run and
version, whether it is still what that asset partition holds, and the whole recorded chain), and `row_stamps`
the stamps the rows' own lineage ids name. A metric id of an exported row is what `focus trace` takes.

Like `focus trace`, the export reads the table store alone (DuckDB over the current Parquet files), never the
Dagster instance. Each file is written beside its final name and renamed into place, so a killed export leaves
no half file under a finished name, and a folder without `manifest.json` holds no finished export.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from focus_dagster.errors import FocusError
from focus_dagster.files import atomic_path, file_sha256, write_bytes_atomically
from focus_dagster.version import code_version
from resources import layout

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
FORMATS = ("csv", "parquet")
# The names `--tables` takes, and the table each one exports.
TABLES = {
    "metrics": layout.METRICS,  # performance, calibration, fairness, quality and cross-dataset rows
    "predictions": layout.SAMPLES,
    "unavailable": layout.UNAVAILABLE,
    "lora_effects": layout.LORA_EFFECTS,
    "lora_summary": layout.LORA_SUMMARY,
    "comparisons": layout.COMPARISONS,  # model A - model B for the pairs focus.yaml declares
    "robustness": layout.ROBUSTNESS,  # every degraded number against its clean one, with the degradation's parameters
    "robustness_summary": layout.ROBUSTNESS_SUMMARY,  # per configuration: quality axis, worst degradation, mCE
    "zero_shot": layout.ZERO_SHOT,
    "labels": layout.LABELS,
    "attributes": layout.ATTRIBUTES,
    "rejects": layout.LABEL_REJECTS,
    "quarantine": layout.QUARANTINE,
    "unlisted_images": layout.UNLISTED_IMAGES,
    "image_notes": layout.IMAGE_NOTES,
}
# What a paper reports: every number with its interval and reason, the per-image predictions behind them, the
# configurations that have none and why, the LoRA effects, the declared model comparisons and the image-quality
# robustness. The default of `--tables`.
RESULTS = ("metrics", "predictions", "unavailable", "lora_effects", "lora_summary", "comparisons", "robustness",
           "robustness_summary")
ALL = "all"
DATASET, MODEL, GROUP = "dataset", "model", "group"
WHOLE_SET_GROUP = "a null group is a whole-set row (the tables write its group as '')"
_SOURCE = "__export_source_file"  # the column DuckDB names each row's file in while the export reads it
# A table's current files, each row with the file it came from (parameter: their urls).
_READ = f"read_parquet(?, union_by_name = true, filename = '{_SOURCE}')"
_COPY_OPTIONS = {"csv": "FORMAT csv, HEADER", "parquet": "FORMAT parquet"}


class ExportError(FocusError):
    """An export that cannot be made as asked (unknown table, dataset or model; a folder holding other files)."""


@dataclass(frozen=True)
class _Source:
    """One table to export: its `--tables` name and its current partitions (`TableStore.partitions`)."""

    name: str
    partitions: list[dict]

    @property
    def table(self) -> str:
        return TABLES[self.name].qualified

    @property
    def urls(self) -> list[str]:
        return [found["url"] for found in self.partitions]


def export_tables(storage_or_home, out, format: str = "csv", tables=None, datasets=None, models=None,
                  force: bool = False) -> dict:
    """Write the current tables into the folder `out`, one file per table, and `manifest.json`; returns the manifest.

    storage_or_home: a FocusConfig, a FocusStorage, a TableStore, or the path of a FOCUS_HOME (its default table
    store). format: `csv` or `parquet`. tables: names of `TABLES` (or `all`); by default `RESULTS`, those
    written so far (a table named here that nothing has written yet is an error). datasets / models: keep the
    rows whose `dataset` / `model` column is one of these; a table without that column is exported whole (the
    manifest's `filtered_by` says which filters applied to a file). A cross-dataset row's dataset is the one it
    was evaluated on; its `train_dataset` is not filtered. In the files a whole-set row's `group` is null (the
    tables write it as '').

    `out` must be new or empty unless `force`, which replaces an earlier export there: its manifest goes first,
    then the files this export writes are replaced, then the files the earlier manifest named that this export
    does not write are removed; other files are left as they are.
    """
    if format not in FORMATS:
        raise ExportError(f"unknown format {format!r}; allowed: {', '.join(FORMATS)}")
    out = Path(out)
    _check_folder(out, force)
    store = _store(storage_or_home)
    sources, not_written = _sources(store, tables)
    filters = {DATASET: _listed(datasets), MODEL: _listed(models)}
    written, row_ids = {}, set()
    with store.connection() as con:
        for column, wanted in filters.items():
            _check_names(con, sources, column, wanted)
        earlier = _clear_earlier(out)
        for source in sources:
            name = f"{source.name}.{format}"
            written[name], ids = _write(con, source, out / name, format, filters)
            row_ids |= ids
    for name in earlier - set(written):
        (out / name).unlink(missing_ok=True)
    manifest = {"schema": SCHEMA_VERSION, "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "code_version": code_version(), "source": store.url, "format": format,
                "filters": {"tables": [source.name for source in sources], "datasets": filters[DATASET],
                            "models": filters[MODEL]},
                "group": WHOLE_SET_GROUP, "not_written": not_written, "files": written,
                **_stamps(store, written, row_ids)}
    write_bytes_atomically(out / MANIFEST, json.dumps(manifest, indent=2, default=str).encode())
    return manifest


def _store(where):
    """The table store of a FocusConfig (`tables`), a FocusStorage (`tables_url`), a TableStore, or a FOCUS_HOME."""
    from resources.tables import TableStore

    if isinstance(where, TableStore):
        return where
    url = getattr(where, "tables", None) or getattr(where, "tables_url", None)
    if url is None:
        from focus_dagster.config import FocusConfig

        url = FocusConfig(home=Path(where).expanduser().resolve(), roots={}).tables
    return TableStore(str(url))


def _listed(values) -> list[str] | None:
    """Names as given (a list, or one comma-separated string), in order, each once; None for none."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    names = [name.strip() for value in values for name in str(value).split(",") if name.strip()]
    return list(dict.fromkeys(names)) or None


# ------------------------------------------------------------------------------------------ what is read


def _sources(store, tables) -> tuple[list[_Source], list[str]]:
    """The tables to export with their current partitions, and the default ones skipped as not written yet."""
    names = _listed(tables)
    named = names is not None and ALL not in names
    unknown = [name for name in names or () if name not in TABLES and name != ALL]
    if unknown:
        raise ExportError(f"unknown table {', '.join(map(repr, unknown))} for --tables; allowed: "
                          f"{', '.join(TABLES)} (or {ALL})")
    names = list(TABLES) if names is not None and ALL in names else names or list(RESULTS)
    sources, not_written = [], []
    for name in names:
        partitions = store.partitions(TABLES[name].qualified)
        if partitions:
            sources.append(_Source(name, partitions))
        elif named:
            raise ExportError(f"table {name} ({TABLES[name]}) has no rows yet in {store.url}: materialise the "
                              "assets that write it first (`focus demo`, or the UI)")
        else:
            not_written.append(name)
    if not sources:
        raise ExportError(f"no table to export in {store.url} yet ({', '.join(names)}): materialise the pipeline "
                          "first (`focus demo`, or the UI)")
    return sources, not_written


def _columns(con, source: _Source) -> list[str]:
    found = con.execute(f"SELECT * FROM {_READ} LIMIT 0", [source.urls]).description
    return [name for name, *_ in found if name != _SOURCE]


def _check_names(con, sources: list[_Source], column: str, wanted: list[str] | None) -> None:
    """Refuse a dataset or model that no row of the tables exported has, naming the ones they have."""
    if not wanted:
        return
    held = set()
    for source in sources:
        if column in _columns(con, source):
            held |= {value for (value,) in con.execute(f'SELECT DISTINCT "{column}" FROM {_READ} '
                                                       f'WHERE "{column}" IS NOT NULL', [source.urls]).fetchall()}
    unknown = [value for value in wanted if value not in held]
    if unknown:
        tables = ", ".join(source.name for source in sources)
        raise ExportError(f"unknown {column} {', '.join(map(repr, unknown))} for --{column}s: no row of the tables "
                          f"exported ({tables}) has it; {column}s there: {', '.join(sorted(held)) or 'none'}")


# ---------------------------------------------------------------------------------------- what is written


def _check_folder(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} is a file: --out names the folder to export into")
    present = sorted(path.name for path in out.iterdir()) if out.is_dir() else []
    if present and not force:
        raise ExportError(f"{out} is not empty (it holds {len(present)} entries, e.g. {present[0]}): export into a "
                          "new or empty folder, or pass --force to replace an earlier export there")


def _clear_earlier(out: Path) -> set[str]:
    """Remove the manifest of an earlier export in `out` (the folder holds no finished export until the new one is
    written) and the temporary files of a killed one; returns the files that manifest named."""
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / MANIFEST
    try:
        named = set(json.loads(manifest.read_text()).get("files", {}))
    except (FileNotFoundError, ValueError, AttributeError):  # none, or not one this command wrote: names nothing
        named = set()
    manifest.unlink(missing_ok=True)
    for partial in out.glob(".*.tmp-*"):
        if partial.is_file():
            partial.unlink()
    return {name for name in named if Path(name).name == name}  # never a path outside the folder


def _write(con, source: _Source, path: Path, format: str, filters: dict) -> tuple[dict, set[str]]:
    """One table's rows that pass the filters, written to `path` in one rename; returns its manifest entry and the
    stamp ids its rows' lineage columns name."""
    columns = _columns(con, source)
    applied = {column: wanted for column, wanted in filters.items() if wanted and column in columns}
    where = " AND ".join(f'"{column}" IN (SELECT unnest(?::VARCHAR[]))' for column in applied)
    con.execute(f"CREATE OR REPLACE TEMP TABLE export_rows AS SELECT * FROM {_READ}"
                + (f" WHERE {where}" if where else ""), [source.urls, *applied.values()])
    read = {url for (url,) in con.execute(f'SELECT DISTINCT "{_SOURCE}" FROM export_rows').fetchall()}
    row_ids = {value for column in columns if column.endswith("lineage_id")
               for (value,) in con.execute(f'SELECT DISTINCT "{column}" FROM export_rows '
                                           f'WHERE "{column}" IS NOT NULL').fetchall()}
    shown = f'* EXCLUDE ("{_SOURCE}")' + (f' REPLACE (NULLIF("{GROUP}", \'\') AS "{GROUP}")' if GROUP in columns else "")
    with atomic_path(path) as partial:
        target = str(partial).replace("'", "''")
        (rows,) = con.execute(f"COPY (SELECT {shown} FROM export_rows) TO '{target}' "
                              f"({_COPY_OPTIONS[format]})").fetchone()
    con.execute("DROP TABLE export_rows")
    return {"table": source.table, "rows": int(rows), "sha256": file_sha256(path), "columns": columns,
            "filtered_by": list(applied),
            "partitions": [{"partition": found["partition"], "stamp_id": found["stamp_id"]}
                           for found in source.partitions if found["url"] in read]}, row_ids


def _stamps(store, written: dict, row_ids: set[str]) -> dict:
    """`stamps`: the stamp of every table partition the files' rows came from, by id, as lineage.stamps keeps
    it, with whether its asset partition still holds it (lineage.current); `row_stamps`: the stamps the rows'
    lineage ids name (None for an id no commit kept)."""
    writers = {found["stamp_id"] for entry in written.values() for found in entry["partitions"] if found["stamp_id"]}
    kept = store.stamps(writers | row_ids)
    current = store.current_stamps()
    stamps = {}
    for stamp_id in sorted(writers):
        stamp = kept.get(stamp_id) or {}
        asset, partition = stamp.get("asset"), stamp.get("partition") or ""
        stamps[stamp_id] = {"asset": asset, "partition": partition, "run_id": stamp.get("run_id"),
                            "version": stamp.get("version"), "code_version": stamp.get("code_version"),
                            "current": current.get((asset, partition)) == stamp_id, "stamp": kept.get(stamp_id)}
    return {"stamps": stamps, "row_stamps": {stamp_id: kept.get(stamp_id) for stamp_id in sorted(row_ids)}}


def format_summary(manifest: dict, out) -> str:
    """What `focus export` prints: one line per file, the tables skipped, the manifest."""
    lines = [f"exported {len(manifest['files'])} table(s) to {out} ({manifest['format']}):"]
    for name, entry in manifest["files"].items():
        unfiltered = [f"--{column}s" for column in (DATASET, MODEL)
                      if manifest["filters"][f"{column}s"] and column not in entry["filtered_by"]]
        note = f"  (not filtered by {', '.join(unfiltered)}: no such column)" if unfiltered else ""
        lines.append(f"  {name:<22} {entry['rows']:>9} rows  {entry['table']}{note}")
    if manifest["not_written"]:
        lines.append(f"not written yet, skipped: {', '.join(manifest['not_written'])}")
    lines.append(f"  {MANIFEST:<22} {len(manifest['stamps'])} lineage stamps, code {manifest['code_version']}")
    return "\n".join(lines)
