"""FocusStorage: the tables (Parquet files per partition, resources/tables.py) and the artifact folder of heavy files.

Every table partition is its own file, written in a commit that readers see whole or not at all, so steps
that write different partitions never wait for each other; DuckDB reads the files (in memory, `views()`).
`focus.duckdb`, where earlier versions held the tables, is only read once, to migrate it.
Tables and paths are named by `resources.layout`; this class only moves data.
"""

from __future__ import annotations

import json

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd
from dagster import ConfigurableResource

from focus_dagster import lineage
from focus_dagster.errors import FocusError, NotMaterialisedError
from focus_dagster.files import atomic_path, confined, file_sha256
from resources.layout import (
    ADAPTERS,
    EMBEDDINGS,
    HARMONISED_LABELS,
    IMAGE_EMBEDDINGS,
    PROBE_PREDICTIONS,
    PROBE_SCORES,
    PROBE_SKIPPED,
    PROBES,
    TOKEN_PROBABILITIES,
    TOKEN_PROBABILITIES_ASSET,
    YES_NO_QUESTIONS,
    Table,
    labels_file,
    model_dataset_key,
    questions_file,
    records_table,
)
from resources.tables import TableStore

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


class TableMissingError(FocusError):
    """A table nothing has written yet."""


class FocusStorage(ConfigurableResource):
    """Tables as Parquet files per partition under `tables_url` (resources/tables.py: a folder or an fsspec
    URL), heavy outputs under `artifacts_dir`."""

    tables_url: str
    artifacts_dir: str

    @classmethod
    def from_config(cls, config) -> FocusStorage:
        """The storage of a configuration; a FOCUS_HOME whose tables are still in focus.duckdb (before the
        Parquet store) is migrated on this first use."""
        from resources.tables import migrate_if_needed

        migrate_if_needed(config.database, str(config.tables))
        return cls(tables_url=str(config.tables), artifacts_dir=str(config.artifacts))

    @property
    def store(self) -> TableStore:
        return TableStore(self.tables_url)

    @contextmanager
    def views(self) -> Iterator:
        """A DuckDB connection (in memory, through dagster-duckdb) where every table is a view over its current
        Parquet files (`metrics.values`, `lineage.stamps`, ...)."""
        from dagster_duckdb import DuckDBResource

        with DuckDBResource(database=":memory:").get_connection() as con:
            self.store.define_views(con)
            yield con

    # ------------------------------------------------------------------------------------------- tables

    def replace_table(self, table: Table, frame: pd.DataFrame, stamp: dict | None = None) -> str:
        """Replace the whole table with `frame` (with its lineage `stamp`); returns its name."""
        return self.replace_partitions([(table, None, frame)], stamp)[0]

    def replace_partition(self, table: Table, partition: str, frame: pd.DataFrame, stamp: dict | None = None,
                          stamps: tuple[dict, ...] = ()) -> str:
        """Replace the rows of one partition of a shared table (its `partition_column` equals `partition`).

        `stamp` becomes the current lineage of its asset partition and `stamps` (the lineage rows refer to by
        `lineage_id`) are kept, in the commit that writes the rows (resources/tables.py)."""
        return self.replace_partitions([(table, partition, frame)], stamp, stamps)[0]

    def replace_partitions(self, writes: list[tuple[Table, str | None, pd.DataFrame]], stamp: dict | None = None,
                           stamps: tuple[dict, ...] = ()) -> list[str]:
        """Several replacements (of one partition each, or of a whole table where the partition is None) and
        their lineage, in one commit: a reader of the asset partition's lineage sees all of them or none."""
        for table, partition, _ in writes:
            _qualified(table)
            if partition is not None:
                _partition_column(table)
        return self.store.commit(writes, stamp, stamps)

    def read_table(self, table: Table) -> pd.DataFrame:
        frame = self.store.read(_qualified(table))
        if frame is None:
            raise TableMissingError(f"table {table} has no rows yet: materialise the asset that writes it first")
        return frame

    def read_partition(self, table: Table, partition: str) -> pd.DataFrame:
        """The rows of one partition of a shared table (none when that partition was never written)."""
        _partition_column(table)
        frame = self.store.read(_qualified(table), partition)
        return frame if frame is not None else self._no_rows(table)

    def _no_rows(self, table: Table) -> pd.DataFrame:
        """An empty frame with the table's columns (from any partition), or the error that it has none."""
        return self.read_table(table).head(0)

    def read_records(self, dataset: str) -> pd.DataFrame:
        return self.read_table(records_table(dataset))

    def read_stamped(self, reads: list[tuple[Table, str | None]], asset: str, partition: str
                     ) -> tuple[list[pd.DataFrame], dict | None]:
        """Tables (whole, or one partition each) and the current lineage of `asset`/`partition`: where that
        asset partition wrote a table, its rows come from the same commit as the stamp, even while another
        step writes it again."""
        store = self.store
        current = store.current(asset, partition)
        committed = (current or {}).get("files", {})
        frames = []
        for table, key in reads:
            name = _qualified(table)
            entry = committed.get(f"{name}@{'' if key is None else key}")
            frame = (store.read_files([store.path(entry)]) if entry is not None
                     else store.read(name, key))
            frames.append(frame if frame is not None else self._no_rows(table))
        return frames, (current or {}).get("stamp")

    def current_stamp(self, asset: str, partition: str) -> dict | None:
        return (self.store.current(asset, partition) or {}).get("stamp")

    def stamp(self, stamp_id: str) -> dict | None:
        """A stamp kept by any commit, by id."""
        return self.store.stamp(stamp_id)

    def read_tables_with_lineage(self, tables: list[Table]) -> tuple[list[pd.DataFrame | None], dict[str, str]]:
        """Whole tables (None for one not written yet) and the current lineage stamp id of every asset
        partition (`asset[partition]`)."""
        store = self.store
        snapshot = store.snapshot()  # the stamps first, then each table through the same owner pointers
        current = snapshot.current_stamps()
        frames = [store.read_files(snapshot.files(_qualified(table))) for table in tables]
        return frames, {f"{asset}[{partition}]" if partition else asset: stamp_id
                        for (asset, partition), stamp_id in current.items()}

    # ---------------------------------------------------------------------------------------- artifacts

    def artifact_path(self, rel: str) -> Path:
        """The path of an artifact in the store; a name in `rel` can never lead out of it (PathOutsideRootError)."""
        return confined(self.artifacts_dir, rel, "artifact")

    def write_artifact(self, rel: str, write: Callable[[Path], None], suffix: str = "") -> tuple[Path, str]:
        """Write an artifact atomically (`write` fills a temporary path); returns its path and sha256."""
        path = self.artifact_path(rel)
        with atomic_path(path, suffix) as partial:
            write(partial)
        return path, file_sha256(path)

    def write_parquet(self, rel: str, frame: pd.DataFrame, stamp: dict | None = None) -> tuple[Path, str]:
        """A Parquet artifact, with its lineage stamp in the file's key-value metadata (one atomic rename)."""
        return self.write_artifact(rel, lambda partial: write_stamped_parquet(partial, frame, stamp))

    def read_parquet(self, rel: str) -> pd.DataFrame:
        """A Parquet artifact; NotMaterialisedError naming the asset partition that writes it when it is missing."""
        return pd.read_parquet(self._existing_artifact(rel))

    def read_stamped_parquet(self, rel: str) -> tuple[pd.DataFrame, dict | None]:
        """A Parquet artifact and the stamp written with it (None for a file written without lineage);
        NotMaterialisedError naming the asset partition that writes it when it is missing."""
        return read_stamped_parquet(self._existing_artifact(rel))

    def adapter_skipped_reason(self, adapter_key: str) -> str | None:
        """Why no adapter `adapter_key` was trained (the record lora_adapters wrote), or None when one was."""
        path = self.artifact_path(ADAPTERS.skipped(adapter_key))
        return json.loads(path.read_text())["reason"] if path.is_file() else None

    def read_labels(self, dataset: str) -> pd.DataFrame:
        """The harmonised labels of one dataset, from the Parquet copy (no DuckDB connection needed)."""
        return self.read_parquet(labels_file(dataset))

    def read_stamped_labels(self, dataset: str) -> tuple[pd.DataFrame, dict | None]:
        return self.read_stamped_parquet(labels_file(dataset))

    def _existing_artifact(self, rel: str) -> Path:
        """The artifact's path, or the error saying which upstream step has not written it (its run failed, a
        blocking check stopped it, or it never ran): a later step then names that step, not a missing file."""
        path = self.artifact_path(rel)
        if not path.is_file():
            asset, partition = artifact_producer(rel)
            raise NotMaterialisedError(asset, partition, str(path))
        return path

    def has_labels(self, dataset: str) -> bool:
        return self.artifact_path(labels_file(dataset)).exists()


def artifact_producer(rel: str) -> tuple[str | None, str | None]:
    """(asset, partition key as the UI spells it) of the step that writes the artifact `rel`; (None, None)
    for a path the layout does not name."""
    for name_file, asset in ((labels_file, HARMONISED_LABELS), (questions_file, YES_NO_QUESTIONS)):
        found = re.fullmatch(_placeholders(name_file(_DATASET)), rel)
        if found:
            return asset, found["dataset"]
    outputs = ((PROBE_SKIPPED.file, PROBE_PREDICTIONS), (TOKEN_PROBABILITIES.quarantine,
               TOKEN_PROBABILITIES_ASSET), (EMBEDDINGS.file, IMAGE_EMBEDDINGS),
               (TOKEN_PROBABILITIES.file, TOKEN_PROBABILITIES_ASSET), (PROBES.file, PROBE_PREDICTIONS),
               (PROBE_SCORES.file, PROBE_PREDICTIONS))
    for model_file, asset in outputs:
        found = re.fullmatch(_placeholders(model_file(_MODEL, _DATASET)), rel)
        if found:
            return asset, str(model_dataset_key(found["model"], found["dataset"]))
    return None, None


_MODEL, _DATASET = "<model>", "<dataset>"


def _placeholders(template: str) -> str:
    """A pattern matching the paths of a layout template written with the placeholders `<model>`, `<dataset>`."""
    pattern = re.escape(template)
    return pattern.replace(re.escape(_MODEL), "(?P<model>[^/]+)").replace(re.escape(_DATASET), "(?P<dataset>[^/]+?)")


def write_stamped_parquet(path: Path, frame: pd.DataFrame, stamp: dict | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if stamp is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               lineage.PARQUET_KEY: lineage.dumps(stamp).encode()})
    pq.write_table(table, path)


def read_stamped_parquet(path: Path) -> tuple[pd.DataFrame, dict | None]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return table.to_pandas(), lineage.loads((table.schema.metadata or {}).get(lineage.PARQUET_KEY))


def _qualified(table: Table) -> str:
    for part in (table.schema, table.name):
        if not _IDENTIFIER.match(part):
            raise ValueError(f"{part!r} is not a plain lower-case SQL identifier")
    return table.qualified


def _partition_column(table: Table) -> str:
    if table.partition_column is None:
        raise ValueError(f"{table} holds one partition only; replace or read it whole")
    return table.partition_column
