"""`focus trace METRIC_ID`: the chain behind one number, from the metric row back to the files on disk.

Like `demo.py`, this is wiring: it reads the metric row from DuckDB (read-only, so a running UI is not
disturbed) and walks the Dagster instance's event log upstream, one link per asset:

    metric row                              the value, its interval, the run that computed it
    predictions partition                   the run that assembled the per-sample rows, their content version
    model output partition                  probe / zero-shot / yes-no run, weights hash, checkpoint audit
    labels partition                        the label rule id and split method used
    dataset release                         fingerprint (data version) and the root folder it was read from

Each link says whether the instance's latest event is still the one the number was computed from (a
newer one means the number is stale until the metrics are rematerialised).
"""

from __future__ import annotations

import json
from typing import Any

from focus_dagster.errors import FocusError
from focus_dagster.instance import latest_materialization, latest_observation
from resources import layout


class TraceError(FocusError):
    """A metric id that cannot be traced (unknown id, no metric table, database busy)."""


def trace(metric_id: str, config, dagster_home=None) -> dict[str, Any]:
    """The lineage chain of `metric_id` as a dict (what `--json` prints)."""
    import dagster as dg

    row = _metric_row(metric_id, config)
    with dg.DagsterInstance.from_config(str(dagster_home or config.dagster_home)) as instance:
        chain = [_metric_link(row, instance)]
        chain.append(_predictions_link(row, instance))
        chain += _model_links(row, instance)
        chain.append(_labels_link(row, instance))
        chain.append(_release_link(row, instance))
    return {"metric_id": metric_id, "value": row["value"], "ci": [row["ci_low"], row["ci_high"]], "chain": chain}


def _metric_row(metric_id: str, config) -> dict:
    import duckdb

    if not config.database.exists():
        raise TraceError(f"no metric tables yet at {config.database}: run `make demo` or materialise `metrics`.")
    try:
        with duckdb.connect(str(config.database), read_only=True) as con:
            rows = con.execute(f"SELECT * FROM {layout.METRICS} WHERE metric_id = ?", [metric_id]).df()
    except duckdb.Error as exc:
        raise TraceError(f"cannot read {config.database} ({exc}); if `dagster dev` is writing to it, try again "
                         "when its runs have finished.") from exc
    if rows.empty:
        raise TraceError(f"metric id {metric_id!r} is not in {layout.METRICS} ({config.database}); ids are shown in "
                         "the leaderboard and in every metric row.")
    return {k: (None if _missing(v) else v) for k, v in rows.iloc[0].to_dict().items()}


def _missing(value) -> bool:
    try:
        return value is None or value != value
    except (TypeError, ValueError):
        return False


def _latest(instance, asset: str, partition: str | None, observation: bool = False) -> dict:
    """The latest materialisation (or observation) of an asset partition as plain data; {} when there is none."""
    produced = (latest_observation if observation else latest_materialization)(instance, asset, partition)
    if produced is None:
        return {}
    return {"run_id": produced.run_id, "data_version": produced.data_version, "metadata": produced.metadata}


def _run(instance, run_id: str | None) -> dict:
    if not run_id:
        return {}
    run = instance.get_run_by_id(run_id)
    if run is None:
        return {"run_id": run_id, "status": "not in this instance"}
    stats = instance.get_run_stats(run_id)
    return {"run_id": run_id, "job": run.job_name, "status": run.status.value,
            "started": stats.start_time, "ended": stats.end_time}


def _metric_link(row: dict, instance) -> dict:
    fields = ("model", "dataset", "task", "method", "train_dataset", "axis", "metric", "group", "value", "ci_low",
              "ci_high", "n", "n_pos", "reason", "code_version")
    return {"link": "metric", "asset": "cross_dataset_metrics" if _is_cross(row) else "metrics",
            "partition": row["partition"], **{k: row.get(k) for k in fields}, "run": _run(instance, row["run_id"])}


def _predictions_link(row: dict, instance) -> dict:
    asset = "cross_dataset_metrics" if _is_cross(row) else "predictions"
    latest = _latest(instance, asset, None if _is_cross(row) else row["dataset"])
    return {"link": "predictions", "asset": asset, "partition": row["partition"],
            "predictions_version": row.get("predictions_version"), "run": _run(instance, row.get("predictions_run_id")),
            "current": bool(latest) and latest["run_id"] == row.get("predictions_run_id")}


def _is_cross(row: dict) -> bool:
    return row["partition"] == layout.CROSS_PARTITION


def _model_links(row: dict, instance) -> list[dict]:
    """The model output the predictions came from, and for probes the embeddings under them."""
    dataset = row.get("train_dataset") or row["dataset"]
    links = []
    for asset in _model_assets(row):
        partition = dataset if asset == "yes_no_questions" else str(layout.model_dataset_key(row["model"], dataset))
        latest = _latest(instance, asset, partition)
        meta = latest.get("metadata", {})
        audit = meta.get("checkpoint_audit") if isinstance(meta.get("checkpoint_audit"), dict) else {}
        links.append({
            "link": "model output", "asset": asset, "partition": partition,
            "run": _run(instance, latest.get("run_id")),
            "weights_sha256": meta.get("weights_sha256") or audit.get("weights_sha256"),
            "checkpoint_audit": {k: audit.get(k) for k in ("clean", "matched", "model_tensors", "missing_count",
                                                             "unexpected_count", "checkpoint") if k in audit},
            "model_source": meta.get("model_source"),
            "current": bool(latest) and (asset != row.get("source_asset") or latest["run_id"] == row.get("source_run_id")),
        })
    return links


def _model_assets(row: dict) -> list[str]:
    if row["method"] == "linear_probe":
        return ["probe_predictions", "image_embeddings"]
    if row["method"] == "zero_shot":
        return ["zero_shot_scores", "image_embeddings"]
    return ["token_probabilities", "yes_no_questions"] if row["method"] == "yes_no" else []


def _labels_link(row: dict, instance) -> dict:
    latest = _latest(instance, "harmonised_labels", row["dataset"])
    meta = latest.get("metadata", {})
    version = meta.get("export_sha256") or latest.get("data_version")
    return {"link": "labels", "asset": "harmonised_labels", "partition": row["dataset"],
            "label_rule": meta.get("label_rule"), "split_method": meta.get("split_method"),
            "labels_version": row.get("labels_version"), "run": _run(instance, latest.get("run_id")),
            "current": version == row.get("labels_version")}


def _release_link(row: dict, instance) -> dict:
    latest = _latest(instance, "dataset_release", row["dataset"], observation=True)
    meta = latest.get("metadata", {})
    return {"link": "dataset release", "asset": "dataset_release", "partition": row["dataset"],
            "fingerprint": latest.get("data_version"), "root": meta.get("root"), "label_files": meta.get("label_files"),
            "images": meta.get("images"), "release_version": row.get("release_version"),
            "current": latest.get("data_version") == row.get("release_version")}


def format_trace(result: dict) -> str:
    """The chain as indented text, one block per link."""
    lines = [f"{result['metric_id']}: value {_fmt(result['value'])} (95% CI {_fmt(result['ci'][0])} to "
             f"{_fmt(result['ci'][1])})"]
    for link in result["chain"]:
        state = "" if link.get("current", True) else "  [STALE: a newer event exists upstream]"
        lines.append(f"  <- {link['link']}: {link['asset']} [{link['partition']}]{state}")
        for key, value in link.items():
            if key in ("link", "asset", "partition", "current") or value in (None, {}, [], ""):
                continue
            if key == "run":
                value = f"{value.get('run_id')} ({value.get('job', '?')}, {value.get('status', '?')})"
            lines.append(f"       {key}: {json.dumps(value, default=str) if isinstance(value, (dict, list)) else value}")
    return "\n".join(lines)


def _fmt(value) -> str:
    return "null" if value is None else f"{value:.4f}"
