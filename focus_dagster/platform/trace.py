"""`focus trace METRIC_ID`: what one number stands on, as recorded when it was computed, and what is newer now.

Every step writes, with its output, the lineage stamp of what it read (focus_dagster/lineage.py), so the chain
behind a metric row is in the data, not in the instance's event log:

    metric row            -> the predictions it was computed from (lineage_id: table lineage.stamps)
    predictions           -> the model output and the labels the step read
    model output          -> embeddings / questions, labels, and the model weights (id, revision, snapshot, hash)
    adapted scores        -> the LoRA adapter (its manifest's stamp: training labels and questions), questions,
                             labels, and the base model's weights
    harmonised_labels     -> the records (and the label rule, the split)
    dataset_records       -> the release fingerprint the records were read from, and its root

A cross-dataset row has both chains: the probes' (the training dataset's embeddings, labels, records, release)
and the evaluated dataset's. Each link is then compared with what is there now: an input rewritten with other
content (a newer version in `lineage.current` or in its Parquet file's stamp), a release observed with another
fingerprint, a weights file changed on disk. A link is `stale` when one of its inputs changed, or an input
itself is stale; `changed` says what. Only the table store's Parquet files (as in-memory DuckDB views, so a running
UI is not disturbed) and the artifact files are read, so the command answers in well under a second; `--runs` adds
each run's job and status from the Dagster instance.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from focus_dagster import lineage
from focus_dagster.errors import FocusError
from focus_dagster.files import confined
from focus_dagster.platform.instance import UI_HOST, UI_PORT
from resources import layout

SCHEMA_VERSION = 1
# Facts shown per link (the rest of a stamp's facts stays in lineage.stamps).
_MODEL_FACTS = ("id", "source", "revision", "snapshot", "weights_sha256", "weights_path", "audit_clean")


class TraceError(FocusError):
    """A metric id that cannot be traced (unknown id, no metric table, database busy)."""


def trace(metric_id: str, config, dagster_home=None, runs: bool = False) -> dict[str, Any]:
    """The recorded chain of `metric_id` and what changed upstream since (what `--json` prints)."""
    import duckdb

    from resources.tables import TableStore

    store = TableStore(config.tables)
    if not any(store.has(table.qualified) for table in TRACED_TABLES):
        raise TraceError(f"no metric tables yet in {config.tables}: run `make demo` or materialise `metrics`.")
    try:
        with store.views() as con:
            row = _State(con, Path(config.artifacts)).metric_row(metric_id)
            result = chain_of(chains({metric_id: row}, con, config.artifacts), metric_id)
    except duckdb.Error as exc:
        raise TraceError(f"cannot read the tables in {config.tables} ({exc}).") from exc
    if runs:
        _add_run_details(result["links"], dagster_home or config.dagster_home)
    return result


def chains(rows: dict[str, dict], con, artifacts) -> dict[str, Any]:
    """The chains of many metric rows (metric id -> its row as `traced_row` gives it), walked once: each distinct
    link (a recorded stamp, or a model's weights) is compared with the current state once and kept once in `links`
    (by its key: the stamp's content id, or `weights:` and the weights' facts' id), whichever rows stand on it; each
    metric keeps its value and its own link (the row's facts, what changed, and the keys of the links it stands on).
    `chain_of` turns one metric of it into the chain `trace` returns; the arena report embeds it whole. `con`: a
    DuckDB connection with the table store's views, `artifacts`: the artifact folder (the current state)."""
    state = _State(con, Path(artifacts))
    state.read_stamps({stamp_id for row in rows.values() for stamp_id in row["lineage_ids"] if stamp_id})
    walk = _Walk(state)
    metrics = {metric_id: {"value": row["value"], "ci": [row.get("ci_low"), row.get("ci_high")],
                           "reason": row.get("reason"), "link": walk.metric_link(row)}
               for metric_id, row in rows.items()}
    return {"schema": SCHEMA_VERSION, "links": walk.links, "metrics": metrics}


def chain_of(walked: dict, metric_id: str) -> dict[str, Any]:
    """One metric's chain out of `chains`: its links in the order `focus trace` shows them (the metric, then depth
    first), each named `asset[partition]` (numbered #2, ... when another stamp of that partition is in the chain)."""
    metric = walked["metrics"][metric_id]
    links = _named_links(walked["links"], metric["link"])
    return {"schema": SCHEMA_VERSION, "metric_id": metric_id, "value": metric["value"], "ci": list(metric["ci"]),
            "reason": metric["reason"], "stale": any(link["stale"] for link in links), "links": links}


def _named_links(links: dict[str, dict], top: dict) -> list[dict]:
    """The links reachable from `top`, depth first, each once, named as the chain shows them: a stamp's link by its
    `asset[partition]`, numbered when another stamp of it (another version, or the same version read for another
    configuration) came first; a model's weights by `weights[model]`, the first read of that model standing for
    every read of it in the chain."""
    named: dict[str, dict] = {top["id"]: {**top, "inputs": []}}
    shown: dict[str, str] = {}  # link key -> its name in this chain
    owner: dict[str, str] = {}  # name -> the key of the link it shows

    def visit(key: str) -> str:
        if key in shown:
            return shown[key]
        link = links[key]
        name, n = link["id"], 1
        if link["link"] == "weights" and name in named:
            shown[key] = name
            return name
        while name in named and owner.get(name, key) != key:
            n += 1
            name = f"{link['id']}#{n}"
        shown[key], owner[name] = name, key
        named[name] = {**link, "id": name, "inputs": []}
        named[name]["inputs"] = [visit(child) for child in link["inputs"]]
        return name

    named[top["id"]]["inputs"] = [visit(key) for key in top["inputs"]]
    return list(named.values())


class _State:
    """What the chain is compared with: the current stamps in DuckDB and in the artifact files, the latest
    release observations and the weights files on disk."""

    def __init__(self, con, artifacts: Path):
        self.con, self.artifacts = con, artifacts
        self._stamps: dict[str, dict | None] = {}
        self._current: dict[tuple[str, str], dict | None] = {}
        self._tables: dict = {}  # table -> whether the store has it

    def metric_row(self, metric_id: str) -> dict:
        """The row of `metric_id` in the metric table, or else in the LoRA effects, the comparisons or the
        robustness tables, as the walk reads it (`traced_row`)."""
        for table in TRACED_TABLES:
            found = self._row(table, metric_id) if self._has(table) else None
            if found is not None:
                return traced_row(table, found)
        raise TraceError(f"metric id {metric_id!r} is not in {layout.METRICS}, {layout.LORA_EFFECTS}, "
                         f"{layout.COMPARISONS}, {layout.ROBUSTNESS} nor {layout.ROBUSTNESS_SUMMARY}; ids are shown "
                         "in the leaderboard, the arena report and every metric row.")

    def _row(self, table, metric_id: str) -> dict | None:
        found = self.con.execute(f"SELECT * FROM {table} WHERE metric_id = ?", [metric_id])
        names = [d[0] for d in found.description]
        rows = found.fetchall()
        return dict(zip(names, rows[0])) if rows else None

    def read_stamps(self, stamp_ids: set[str]) -> None:
        """Read these stamps in one query (a walk over many rows would otherwise ask for each in turn)."""
        wanted = sorted(set(stamp_ids) - set(self._stamps))
        if not wanted or not self._has(layout.STAMPS):
            return
        found = dict(self.con.execute(f"SELECT stamp_id, any_value(stamp) FROM {layout.STAMPS} WHERE stamp_id IN "
                                      "(SELECT unnest(?)) GROUP BY stamp_id", [wanted]).fetchall())
        self._stamps.update({stamp_id: lineage.loads(found[stamp_id]) if stamp_id in found else None
                             for stamp_id in wanted})

    def stamp(self, stamp_id: str | None) -> dict | None:
        if not stamp_id:
            return None
        if stamp_id not in self._stamps:
            row = (self.con.execute(f"SELECT stamp FROM {layout.STAMPS} WHERE stamp_id = ?", [stamp_id]).fetchone()
                   if self._has(layout.STAMPS) else None)
            self._stamps[stamp_id] = lineage.loads(row[0]) if row else None
        return self._stamps[stamp_id]

    def current(self, asset: str, partition: str) -> dict | None:
        """The stamp of what `asset`/`partition` holds now (None when it has none), read once per walk."""
        if (asset, partition) not in self._current:
            self._current[(asset, partition)] = self._read_current(asset, partition)
        return self._current[(asset, partition)]

    def _read_current(self, asset: str, partition: str) -> dict | None:
        if asset == layout.DATASET_RELEASE:
            return self._json(layout.release_file(partition))
        if asset == layout.LORA_ADAPTERS:  # an adapter's stamp is in its manifest
            return (self._json(f"{layout.ADAPTERS.adapter(partition)}/manifest.json") or {}).get("lineage")
        artifact = _artifact_of(asset, partition)
        if artifact is not None:
            return self._parquet_stamp(artifact)
        if not self._has(layout.CURRENT):
            return None
        row = self.con.execute(layout.CURRENT_STAMP_SQL, [asset, partition or ""]).fetchone()
        return lineage.loads(row[0]) if row else None

    def _json(self, rel: str) -> dict | None:
        path = confined(self.artifacts, rel, "artifact")  # rel holds a partition key read from the tables
        return json.loads(path.read_text()) if path.exists() else None

    def _parquet_stamp(self, rel: str) -> dict | None:
        path = confined(self.artifacts, rel, "artifact")
        if not path.exists():
            return None
        row = self.con.execute("SELECT value FROM parquet_kv_metadata(?) WHERE decode(key) = ?",
                               [str(path), lineage.PARQUET_KEY.decode()]).fetchone()
        return lineage.loads(row[0]) if row else None

    def _has(self, table) -> bool:
        """Whether the store has `table` (asked once per walk: the views do not change under it)."""
        if table not in self._tables:
            self._tables[table] = bool(self.con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                [table.schema, table.name]).fetchone()[0])
        return self._tables[table]


def _artifact_of(asset: str, partition: str) -> str | None:
    """The Parquet file whose stamp says what an artifact asset partition holds now."""
    if asset == layout.YES_NO_QUESTIONS:
        return layout.questions_file(partition)
    files = {layout.IMAGE_EMBEDDINGS: layout.EMBEDDINGS, layout.PROBE_PREDICTIONS: layout.PROBE_SCORES,
             layout.TOKEN_PROBABILITIES_ASSET: layout.TOKEN_PROBABILITIES,
             layout.ADAPTED_TOKEN_PROBABILITIES_ASSET: layout.ADAPTED_TOKEN_PROBABILITIES,
             layout.DEGRADED_EMBEDDINGS_ASSET: layout.DEGRADED_EMBEDDINGS,
             layout.DEGRADED_TOKEN_PROBABILITIES_ASSET: layout.DEGRADED_TOKEN_PROBABILITIES}.get(asset)
    return files.file(*partition.split("|", 1)) if files else None


class _Walk:
    """Turns recorded stamp trees into links, each compared with the current state. One walk serves many rows: a
    stamp's link is built once (`links`, by the stamp's content id) and every row that stands on it refers to it."""

    def __init__(self, state: _State):
        self.state = state
        self.links: dict[str, dict] = {}  # key -> link, its inputs by key
        self._read: dict[str, str] = {}  # lineage id of a row -> the key of its stamp's link
        self._weights: dict[str, str | None] = {}  # weights key -> what changed in that file since it was read

    def metric_link(self, row: dict) -> dict:
        """The link of one metric row: its facts, and the keys of the links of the stamps it was computed from."""
        asset = row.get("asset") or _metric_asset(row["partition"])
        metric = {"id": f"metric:{row['metric_id']}", "link": "metric", "asset": asset, "partition": row["partition"],
                  "version": None, "run": _run(row.get("run_id")),
                  "recorded": {k: row.get(k) for k in ("model", "dataset", "task", "method", "train_dataset", "axis",
                                                       "metric", "group", "value", "ci_low", "ci_high", "n", "n_pos",
                                                       "reason", "predictions_version", "weights_sha256",
                                                       "model_revision", "model_snapshot", "code_version")}
                  | {k: row[k] for k in ("domain", "model_a", "model_b", "a", "b", "delta", "p_value", "q_value")
                     if k in row}
                  | {k: row[k] for k in ROBUSTNESS_FACTS if k in row},
                  "inputs": [], "changed": [], "stale": False}
        for stamp_id in row["lineage_ids"]:
            recorded = self.state.stamp(stamp_id)
            if recorded is None:
                metric["changed"].append("this row was written without a lineage stamp (by an earlier version): "
                                         f"rematerialise {asset} to record what it stands on")
                continue
            if stamp_id not in self._read:
                self._read[stamp_id] = self._visit(recorded)
            metric["inputs"].append(self._read[stamp_id])
            self._compare(metric, recorded, self.state.current(recorded["asset"], recorded["partition"]))
        metric["stale"] = bool(metric["changed"]) or any(self.links[i]["stale"] for i in metric["inputs"])
        return metric

    def _visit(self, stamp: dict) -> str:
        """Add the link of one recorded stamp (and, depth first, of its inputs) unless it is there; returns its key."""
        key = lineage.stamp_id(stamp)
        if key in self.links:
            return key
        link = {"id": f"{stamp['asset']}[{stamp['partition']}]", "link": _kind(stamp["asset"]), "asset": stamp["asset"],
                "partition": stamp["partition"], "version": stamp.get("version"), "run": _run(stamp.get("run_id")),
                "recorded": {"code_version": stamp.get("code_version"), **_shown_facts(stamp)},
                "inputs": [], "changed": [], "stale": False}
        self.links[key] = link
        for name, child in sorted((stamp.get("inputs") or {}).items()):
            if child is None:
                link["changed"].append(f"its {name} input was read without a lineage stamp (an earlier version "
                                       "wrote it): rematerialise that input and this asset")
                continue
            link["inputs"].append(self._visit(child))
            self._compare(link, child, self.state.current(child["asset"], child["partition"]))
        model = lineage.fact(stamp, "facts", "model")
        if model:
            link["inputs"].append(self._weights_link(model, link))
        link["stale"] = bool(link["changed"]) or any(self.links[i]["stale"] for i in link["inputs"])
        return key

    def _compare(self, link: dict, read: dict, now: dict | None) -> None:
        """Note in `link` what changed in an input since it was read (`read`: the stamp recorded, `now`: current)."""
        name = f"{read['asset']}[{read['partition']}]"
        if now is None and read["asset"] == layout.DATASET_RELEASE:
            return  # never observed (records materialised by hand): nothing newer is known
        if now is None:
            link["changed"].append(f"{name} holds nothing now (deleted, or its last write failed)")
        elif now.get("version") != read.get("version"):
            verb = "observed" if read["asset"] == layout.DATASET_RELEASE else "rewritten"
            link["changed"].append(f"{name} was {verb} with other content since: version {now.get('version')} "
                                   f"(run {now.get('run_id')}); this read version {read.get('version')}")

    def _weights_link(self, model: dict, reader: dict) -> str:
        """The link of a model's weights as one step read them (keyed by those facts); what changed in the file since
        goes to `reader`, the link of the step."""
        key = f"weights:{lineage.stamp_id(model)}"
        if key not in self._weights:
            self._weights[key] = _weights_change(model)
            self.links[key] = {"id": f"weights[{model.get('id')}]", "link": "weights", "asset": "model weights",
                               "partition": model.get("id"), "version": model.get("weights_sha256"), "run": None,
                               "recorded": {k: model.get(k) for k in _MODEL_FACTS}, "inputs": [], "changed": [],
                               "stale": False}
        if self._weights[key]:
            reader["changed"].append(self._weights[key])
        return key


def _weights_change(model: dict) -> str | None:
    """What changed in a model's weights file since a step read it, or None. The file's size and modification
    time are compared first; only when they differ is the file hashed again (a touched file is not a new one)."""
    path = model.get("weights_path")
    if not path:
        return None
    signature = lineage.file_signature(Path(path))
    if all(signature.get(k) == model.get(k) for k in ("weights_bytes", "weights_mtime_ns")):
        return None
    if signature.get("weights_bytes") is None:
        return f"the weights of {model.get('id')} at {path} are gone (removed or moved since they were read)"
    from focus_dagster.files import file_sha256

    now = file_sha256(Path(path))
    if now == model.get("weights_sha256"):
        return None
    return (f"the weights of {model.get('id')} at {path} changed on disk since they were read: sha256 {now}; this "
            f"read {model.get('weights_sha256')}")


# The tables whose rows carry metric ids `focus trace` resolves.
TRACED_TABLES = (layout.METRICS, layout.LORA_EFFECTS, layout.COMPARISONS, layout.ROBUSTNESS, layout.ROBUSTNESS_SUMMARY)
LORA_EFFECTS_PARTITION = "lora_effects"  # a LoRA effects row's `partition` as the walk sees it
COMPARISONS_PARTITION = "model_comparisons"  # a comparison row's
ROBUSTNESS_SUMMARY_PARTITION = "robustness_summary"  # a robustness summary row's (the table is not partitioned)
# What a robustness row (or summary row) records beside the common columns: the degradation with its parameters.
ROBUSTNESS_FACTS = ("degradation", "severity", "registry", "parameters", "clean", "degraded", "delta", "delta_low",
                    "delta_high", "relative_drop", "variants", "mean_relative_drop", "quality_axis",
                    "worst_degradation", "worst_severity", "worst_relative_drop", "ce_baseline", "mce", "mce_reason")


def traced_row(table, row: dict) -> dict:
    """A row of one of TRACED_TABLES as the walk reads it (missing values as None): a metric row leads to its
    predictions' stamp (`lineage_id`); a LoRA effect (`partition`: that table's name, the value its delta) to both
    score sets; a comparison to both models' predictions (and the group attributes of a group's delta); a degraded
    number (its value the degraded metric, with the clean one and the degradation's parameters) or a configuration's
    quality axis from the robustness summary to the robustness rows' stamp, whose inputs are the degraded embeddings
    (with every degradation's parameters), the clean probe scores, the probes and the labels."""
    row = {name: (None if _missing(value) else value) for name, value in row.items()}
    if table == layout.LORA_EFFECTS:
        return {**row, "partition": LORA_EFFECTS_PARTITION, "value": row["delta"],
                "lineage_ids": [row.get("adapted_lineage_id"), row.get("base_lineage_id")]}
    if table == layout.COMPARISONS:
        ids = [row.get("a_lineage_id"), row.get("b_lineage_id")]
        if row.get("attributes_lineage_id"):
            ids.append(row["attributes_lineage_id"])
        return {**row, "partition": COMPARISONS_PARTITION, "value": row["delta"],
                "model": f"{row['model_a']} - {row['model_b']}", "lineage_ids": ids}
    if table == layout.ROBUSTNESS:
        return {**row, "asset": layout.ROBUSTNESS_ROW_ASSETS.get(row["method"], layout.ROBUSTNESS_METRICS),
                "value": row["degraded"], "axis": "robustness", "group": f"{row['degradation']}@{row['severity']}",
                "lineage_ids": [row.get("lineage_id")]}
    if table == layout.ROBUSTNESS_SUMMARY:
        return {**row, "asset": layout.ROBUSTNESS_SUMMARY_ASSET, "partition": ROBUSTNESS_SUMMARY_PARTITION,
                "value": row["quality_axis"], "ci_low": None, "ci_high": None, "axis": "robustness",
                "metric": "quality_axis", "lineage_ids": [row.get("lineage_id")]}
    return {**row, "lineage_ids": [row.get("lineage_id")]}


def _metric_asset(partition: str) -> str:
    """The asset that wrote a metric row, from its `partition` (dataset, `<dataset>|<axis>`, cross, or the LoRA
    effects)."""
    if partition == layout.CROSS_PARTITION:
        return layout.CROSS_DATASET_METRICS
    if partition in (LORA_EFFECTS_PARTITION, COMPARISONS_PARTITION):
        return partition
    return layout.AXIS_ASSETS[partition.split('|', 1)[1]] if "|" in partition else layout.METRICS_ASSET


def _kind(asset: str) -> str:
    return {layout.PREDICTIONS: "predictions", layout.CROSS_DATASET_METRICS: "predictions",
            layout.HARMONISED_LABELS: "labels", layout.DATASET_RECORDS: "records",
            layout.DATASET_RELEASE: "dataset release",
            layout.YES_NO_QUESTIONS: "questions", layout.LORA_ADAPTERS: "adapter",
            layout.GROUP_ATTRIBUTES: "group attributes"}.get(asset, "model output")


def _shown_facts(stamp: dict) -> dict:
    facts = dict(stamp.get("facts") or {})
    facts.pop("model", None)
    return facts


def _run(run_id: str | None) -> dict | None:
    if not run_id:
        return None
    return {"run_id": run_id, "ui": f"http://{UI_HOST}:{UI_PORT}/runs/{run_id}"}


def _add_run_details(links: list[dict], dagster_home) -> None:
    """Job, status and times of every run in the chain, from the Dagster instance (slower: imports Dagster)."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        for link in links:
            run = link.get("run")
            if not run:
                continue
            found = instance.get_run_by_id(run["run_id"])
            if found is None:
                run["status"] = "not in this instance"
                continue
            stats = instance.get_run_stats(run["run_id"])
            run.update(job=found.job_name, status=found.status.value, started=stats.start_time, ended=stats.end_time)


def _missing(value) -> bool:
    try:
        return value is None or value != value
    except (TypeError, ValueError):
        return type(value).__name__ == "NAType"  # pandas' NA (a nullable column of a frame) has no truth value


def format_trace(result: dict) -> str:
    """The chain as an indented tree, one block per link, stale links marked with what changed."""
    links = {link["id"]: link for link in result["links"]}
    lines = [f"{result['metric_id']}: value {_fmt(result['value'])} (95% CI {_fmt(result['ci'][0])} to "
             f"{_fmt(result['ci'][1])})" + ("  [STALE]" if result["stale"] else "")]
    if result.get("reason"):
        lines.append(f"  reason: {result['reason']}")
    shown: set[str] = set()

    def show(link_id: str, depth: int) -> None:
        link = links[link_id]
        pad = "  " + "   " * depth
        state = "  [STALE]" if link["stale"] else ""
        if link_id in shown:
            lines.append(f"{pad}<- {link_id} (shown above){state}")
            return
        shown.add(link_id)
        version = f"  version {link['version']}" if link.get("version") else ""
        lines.append(f"{pad}{'<- ' if depth else ''}{link['link']}: {link_id}{version}{state}")
        if link.get("run"):
            run = link["run"]
            extra = f" ({run['job']}, {run['status']})" if run.get("job") else ""
            lines.append(f"{pad}     run: {run['run_id']}{extra}")
        for key, value in link["recorded"].items():
            if value not in (None, {}, [], ""):
                text = json.dumps(value, default=str) if isinstance(value, (dict, list)) else value
                lines.append(f"{pad}     {key}: {text}")
        for change in link["changed"]:
            lines.append(f"{pad}     CHANGED: {change}")
        for child in link["inputs"]:
            show(child, depth + 1)

    show(result["links"][0]["id"], 0)
    return "\n".join(lines)


def _fmt(value) -> str:
    return "null" if value is None else f"{value:.4f}"
