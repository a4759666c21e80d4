"""Evaluation: linear probes, the per-sample predictions table, metric tables and the leaderboard."""

import hashlib

import dagster as dg
import pandas as pd

from assets.automation import GATED_EAGER
from assets.labels import labels_export
from assets.lineage import (
    code_version,
    latest_materialization,
    latest_observation,
    model_partition,
)
from assets.mllm import token_probabilities_path
from assets.models import (
    ZERO_SHOT_SCHEMA,
    ZERO_SHOT_TABLE,
    embeddings_path,
    model_keys,
    model_partitions,
    same_model_and_dataset,
)
from focus_dagster.evaluation import predictions as P
from focus_dagster.evaluation.probes import PROBE_METHOD
from resources import FocusStorage

EVALUATION_GROUP = "evaluation"
PREDICTIONS_SCHEMA, PREDICTIONS_TABLE, UNAVAILABLE_TABLE = "predictions", "samples", "unavailable"
METRICS_SCHEMA, METRICS_TABLE = "metrics", "values"
CROSS = "cross"
LINEAGE_COLUMNS = ["release_version", "labels_version", "model_revision", "weights_sha256", "source_asset",
                   "source_run_id", "predictions_version", "code_version", "run_id"]

PROBES_DESCRIPTION = (
    "In-domain linear probes of one encoder on one dataset: per task, logistic regression (balanced class weights, "
    "max_iter 1000) on L2-normalised embeddings of the train split, scored on the test split; the Youden threshold "
    "of the training scores is kept. Probes: `probes/<model>/<dataset>.npz`; scores: "
    "`probe_predictions/<model>/<dataset>.parquet` (artifact store)."
)
PREDICTIONS_DESCRIPTION = (
    "One per-sample table for every interface and method on one dataset (DuckDB `predictions.samples`): linear "
    "probe, zero-shot and yes/no rows with score, reference-form score, Youden threshold, label, split, and the "
    "lineage of each row (dataset release, labels version, model revision and weights hash, the run that produced "
    "the model output, code version). Rows with non-finite scores are rejected and counted; a configuration whose "
    "upstream is missing or blocked gets no rows and a reason in `predictions.unavailable`."
)
METRICS_DESCRIPTION = (
    "Metric table of one dataset (DuckDB `metrics.values`, one row per number): performance, calibration, "
    "fairness (sex, age, camera, only where metadata_coverage finds the attribute) and image quality, each with a "
    "95% stratified bootstrap interval, n, n_pos, a reason where undefined, the lineage of its predictions, and a "
    "stable `metric_id` that `focus trace` resolves."
)
CROSS_DESCRIPTION = (
    "The cross-dataset matrix: every in-domain probe trained on dataset A scored on the test split of every other "
    "dataset B that has the task; predictions in `predictions.samples` and performance / calibration rows in "
    "`metrics.values` (partition 'cross')."
)
LEADERBOARD_DESCRIPTION = (
    "The leaderboard: the top configurations per model family and task by test AUROC (with interval, ECE and "
    "metric ids), over everything in `metrics.values`. Markdown in the metadata, and `reports/leaderboard.md`."
)


class MetricsConfig(dg.Config):
    n_resamples: int = 1000
    seed: int = 0


def build_evaluation_assets(datasets: dg.StaticPartitionsDefinition, specs: dict) -> list:
    encoders = [m for m, s in specs.items() if s.interface in ("vm", "vlm")]
    assets = []
    if encoders:
        assets.append(_probe_asset(model_partitions(encoders, datasets)))
    assets.append(_predictions_asset(datasets, specs))
    assets.append(_metrics_asset(datasets))
    if encoders:
        assets.append(_cross_dataset_asset(specs, encoders, datasets.get_partition_keys()))
    assets.append(_leaderboard_asset(bool(encoders)))
    return assets


def probes_path(model: str, dataset: str) -> str:
    return f"probes/{model}/{dataset}.npz"


def probe_scores_path(model: str, dataset: str) -> str:
    return f"probe_predictions/{model}/{dataset}.parquet"


# ------------------------------------------------------------------------------------------------ probes


def _probe_asset(partitions: dg.MultiPartitionsDefinition):
    @dg.asset(
        partitions_def=partitions,
        deps=[dg.AssetDep("image_embeddings", partition_mapping=same_model_and_dataset())],
        group_name=EVALUATION_GROUP,
        kinds={"scikitlearn", "parquet"},
        automation_condition=GATED_EAGER,
        description=PROBES_DESCRIPTION,
    )
    def probe_predictions(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        from focus_dagster.evaluation.probes import in_domain_probes, save_probes

        model, dataset = model_keys(context)
        labels = pd.read_parquet(storage.artifact_path(labels_export(dataset)))
        embeddings = pd.read_parquet(storage.artifact_path(embeddings_path(model, dataset)))
        run = in_domain_probes(dataset, embeddings, labels)
        target = storage.artifact_path(probes_path(model, dataset))
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.stem}.tmp.npz")
        save_probes(tmp, run.probes)
        tmp.replace(target)
        path, sha = storage.write_parquet(probe_scores_path(model, dataset), run.predictions)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(run.predictions),
            "tasks": sorted(run.probes),
            "skipped": dg.MetadataValue.json(run.skipped),
            "youden_thresholds": dg.MetadataValue.json({t: p.threshold for t, p in run.probes.items()}),
            "train_sizes": dg.MetadataValue.json({t: [p.n_train, p.n_train_positive] for t, p in run.probes.items()}),
            "path": dg.MetadataValue.path(str(path)),
            "sha256": sha,
        })

    return probe_predictions


# ------------------------------------------------------------------------------------------- predictions


def _predictions_asset(datasets: dg.StaticPartitionsDefinition, specs: dict):
    by_dataset = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="dataset")
    deps = [dg.AssetDep("harmonised_labels")]
    interfaces = {s.interface for s in specs.values()}
    if interfaces & {"vm", "vlm"}:
        deps.append(dg.AssetDep("probe_predictions", partition_mapping=by_dataset))
    if "vlm" in interfaces:
        deps.append(dg.AssetDep("zero_shot_scores", partition_mapping=by_dataset))
    if "mllm" in interfaces:
        deps.append(dg.AssetDep("token_probabilities", partition_mapping=by_dataset))

    @dg.asset(
        partitions_def=datasets,
        deps=deps,
        group_name=EVALUATION_GROUP,
        pool="duckdb",
        kinds={"duckdb"},
        automation_condition=GATED_EAGER,
        description=PREDICTIONS_DESCRIPTION,
    )
    def predictions(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        dataset = context.partition_key
        labels = pd.read_parquet(storage.artifact_path(labels_export(dataset)))
        base = _dataset_lineage(context.instance, dataset)
        parts, unavailable, rejected, examples = [], [], {}, []
        for model, spec in specs.items():
            for method, load in _sources(spec.interface):
                produced, frame, reason = load(context, storage, model, dataset, labels)
                if frame is None:
                    unavailable.append({"dataset": dataset, "model": model, "method": method, "reason": reason})
                    continue
                checked = P.finite_scores(frame, f"{method} {model}/{dataset}")
                rejected.update(checked.rejected)
                examples += checked.rejected_examples
                parts.append(P.finish(checked.frame, dataset=dataset, model=model, interface=spec.interface,
                                      method=method, **base, **_model_lineage(context.instance, produced, model, dataset),
                                      run_id=context.run_id))
        frame = pd.concat(parts, ignore_index=True) if parts else _empty_predictions()
        frame["predictions_version"] = _frame_version(frame)
        frame["partition"] = dataset
        storage.replace_rows(PREDICTIONS_SCHEMA, PREDICTIONS_TABLE, frame, "partition", dataset)
        storage.replace_rows(PREDICTIONS_SCHEMA, UNAVAILABLE_TABLE, _unavailable_frame(unavailable), "dataset", dataset)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(frame),
            "configurations": int(frame.groupby(P.CONFIG_COLUMNS, dropna=False).ngroups) if len(frame) else 0,
            "rows_by_method": dg.MetadataValue.json(frame["method"].value_counts().to_dict()),
            "rejected_rows": dg.MetadataValue.json(rejected),
            "rejected_examples": dg.MetadataValue.json(examples[:10]),
            "unavailable": dg.MetadataValue.json(unavailable),
            "predictions_version": frame["predictions_version"].iloc[0] if len(frame) else "",
        })

    return predictions


def _sources(interface: str):
    if interface in ("vm", "vlm"):
        yield PROBE_METHOD, _probe_source
    if interface == "vlm":
        yield "zero_shot", _zero_shot_source
    if interface == "mllm":
        yield "yes_no", _yes_no_source


def _probe_source(context, storage, model, dataset, labels):
    produced, reason = _upstream(context.instance, "probe_predictions", model, dataset)
    if produced is None:
        return None, None, reason
    scores = pd.read_parquet(storage.artifact_path(probe_scores_path(model, dataset)))
    return produced, P.with_labels(scores, labels, f"probe_predictions {model}/{dataset}"), None


def _zero_shot_source(context, storage, model, dataset, labels):
    produced, reason = _upstream(context.instance, "zero_shot_scores", model, dataset)
    if produced is None:
        return None, None, reason
    scores = storage.read_table(ZERO_SHOT_SCHEMA, ZERO_SHOT_TABLE, "partition = ?", [f"{model}|{dataset}"])
    frame = P.train_youden(P.with_labels(scores[["image_id", "task", "score"]], labels,
                                         f"zero_shot_scores {model}/{dataset}"))
    return produced, frame.assign(train_dataset=None), None


def _yes_no_source(context, storage, model, dataset, labels):
    produced, reason = _upstream(context.instance, "token_probabilities", model, dataset)
    if produced is None:
        return None, None, reason
    scores = pd.read_parquet(storage.artifact_path(token_probabilities_path(model, dataset)))
    scores = scores.rename(columns={"p_yes_reference": "score_reference"})[["image_id", "task", "score",
                                                                            "score_reference"]]
    frame = P.train_youden(P.with_labels(scores, labels, f"token_probabilities {model}/{dataset}"))
    return produced, frame.assign(train_dataset=None), None


def _upstream(instance, asset: str, model: str, dataset: str):
    """The latest materialisation of a model output, or why there is none (never run, or blocked by a check)."""
    produced = latest_materialization(instance, asset, model_partition(model, dataset))
    if produced is not None:
        return produced, None
    return None, f"{asset} {model}/{dataset} is not materialised (its run failed or a blocking check upstream " \
                 "stopped it: see the asset in the UI)"


def _dataset_lineage(instance, dataset: str) -> dict:
    release = latest_observation(instance, "dataset_release", dataset)
    labels = latest_materialization(instance, "harmonised_labels", dataset)
    return {
        "release_version": release.data_version if release else None,
        "labels_version": (labels.metadata.get("export_sha256") or labels.data_version) if labels else None,
        "code_version": code_version(),
    }


def _model_lineage(instance, produced, model: str, dataset: str) -> dict:
    """Model revision and weights hash of a model output; probes and zero-shot scores take them from the
    embeddings they were computed from."""
    meta = produced.metadata
    if not meta.get("weights_sha256"):
        embeddings = latest_materialization(instance, "image_embeddings", model_partition(model, dataset))
        meta = {**meta, **(embeddings.metadata if embeddings else {})}
    return {
        "model_revision": meta.get("model_source"),
        "weights_sha256": meta.get("weights_sha256"),
        "source_asset": produced.asset,
        "source_run_id": produced.run_id,
    }


def _frame_version(frame: pd.DataFrame) -> str:
    """A content hash of the predictions (the lineage columns that name this run excluded)."""
    columns = [c for c in P.PREDICTION_COLUMNS if c in frame]
    data = frame[columns].sort_values(P.KEY_COLUMNS).to_csv(index=False) if len(frame) else ""
    return hashlib.sha256(data.encode()).hexdigest()[:20]


def _empty_predictions() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=float if c in ("score", "score_reference", "threshold") else object)
                          for c in P.PREDICTION_COLUMNS + LINEAGE_COLUMNS})
    frame["label"] = frame["label"].astype("int64")
    return frame


def _unavailable_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["dataset", "model", "method", "reason"]).astype(str)


# ----------------------------------------------------------------------------------------------- metrics


def _metrics_asset(datasets: dg.StaticPartitionsDefinition):
    @dg.asset(
        partitions_def=datasets,
        deps=["predictions", "harmonised_labels"],
        group_name=EVALUATION_GROUP,
        pool="duckdb",
        kinds={"duckdb"},
        automation_condition=GATED_EAGER,
        description=METRICS_DESCRIPTION,
    )
    def metrics(context: dg.AssetExecutionContext, config: MetricsConfig, storage: FocusStorage):
        from focus_dagster.evaluation.tables import Settings, metric_rows
        from focus_dagster.labels.expectations import check_metadata_coverage

        dataset = context.partition_key
        labels = pd.read_parquet(storage.artifact_path(labels_export(dataset)))
        samples = storage.read_table(PREDICTIONS_SCHEMA, PREDICTIONS_TABLE, "partition = ?", [dataset])
        coverage = {column: share > 0 for column, share in check_metadata_coverage(labels).info.items()}
        metadata = labels[["image_id", "age", "sex", "quality", "camera"]]
        rows = metric_rows(samples, metadata, coverage, Settings(config.n_resamples, config.seed))
        table = with_lineage(rows, samples, context.run_id).assign(partition=dataset)
        storage.replace_rows(METRICS_SCHEMA, METRICS_TABLE, table, "partition", dataset)
        return dg.MaterializeResult(metadata=metrics_metadata(table, coverage))

    return metrics


def with_lineage(rows: pd.DataFrame, samples: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """Each metric row with the lineage columns of the predictions it was computed from."""
    if rows.empty:
        return rows.assign(**{c: pd.Series(dtype=object) for c in LINEAGE_COLUMNS}, predictions_run_id=None)
    keys = [c for c in P.CONFIG_COLUMNS if c != "train_dataset"] + ["_train"]
    lineage = _keyed(samples).groupby(keys)[LINEAGE_COLUMNS].first().reset_index()
    lineage = lineage.rename(columns={"run_id": "predictions_run_id"})
    merged = _keyed(rows).merge(lineage, on=keys, how="left").drop(columns="_train")
    return merged.assign(run_id=run_id)


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    """`train_dataset` as text for joins (empty for methods without training: never NaN against None)."""
    return frame.assign(_train=frame["train_dataset"].astype(object).where(frame["train_dataset"].notna(), ""))


def metrics_metadata(table: pd.DataFrame, coverage: dict) -> dict:
    defined = table["value"].notna()
    return {
        "dagster/row_count": len(table),
        "rows_by_axis": dg.MetadataValue.json(table["axis"].value_counts().to_dict()),
        "undefined_rows": int((~defined).sum()),
        "metadata_coverage": dg.MetadataValue.json(coverage),
        "leaderboard": dg.MetadataValue.md(leaderboard_markdown(table)),
    }


# ------------------------------------------------------------------------------------------ cross-dataset


def _cross_dataset_asset(specs: dict, encoders: list[str], registered: list[str]):
    @dg.asset(
        deps=["probe_predictions", "image_embeddings", "harmonised_labels"],
        group_name=EVALUATION_GROUP,
        pool="duckdb",
        kinds={"scikitlearn", "duckdb"},
        automation_condition=GATED_EAGER,
        description=CROSS_DESCRIPTION,
    )
    def cross_dataset_metrics(context: dg.AssetExecutionContext, config: MetricsConfig, storage: FocusStorage):
        from focus_dagster.evaluation.probes import cross_dataset_scores, load_probes
        from focus_dagster.evaluation.tables import Settings, metric_rows

        datasets = [d for d in registered if storage.artifact_path(labels_export(d)).exists()]
        labels = {d: pd.read_parquet(storage.artifact_path(labels_export(d))) for d in datasets}
        parts, lineage = [], {d: _dataset_lineage(context.instance, d) for d in datasets}
        for model in encoders:
            for source in datasets:
                probes_file = storage.artifact_path(probes_path(model, source))
                produced = latest_materialization(context.instance, "probe_predictions", model_partition(model, source))
                if not probes_file.exists() or produced is None:
                    continue
                for task, probe in load_probes(probes_file).items():
                    for target in datasets:
                        frame = _cross_scores(storage, model, source, target, task, probe, labels[target],
                                              cross_dataset_scores)
                        if frame is None:
                            continue
                        parts.append(P.finish(frame, dataset=target, model=model, interface=specs[model].interface,
                                              method=PROBE_METHOD, **lineage[target],
                                              **_model_lineage(context.instance, produced, model, source),
                                              run_id=context.run_id))
        samples = pd.concat(parts, ignore_index=True) if parts else _empty_predictions()
        samples["predictions_version"] = _frame_version(samples)
        samples["partition"] = CROSS
        rows = metric_rows(samples, pd.DataFrame({"image_id": samples["image_id"].unique()}), {},
                           Settings(config.n_resamples, config.seed))
        table = with_lineage(rows, samples, context.run_id).assign(partition=CROSS)
        storage.replace_rows(PREDICTIONS_SCHEMA, PREDICTIONS_TABLE, samples, "partition", CROSS)
        storage.replace_rows(METRICS_SCHEMA, METRICS_TABLE, table, "partition", CROSS)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(table),
            "predictions": len(samples),
            "pairs": int(samples.groupby(["model", "train_dataset", "dataset", "task"]).ngroups) if len(samples) else 0,
            "matrix": dg.MetadataValue.md(cross_matrix_markdown(table)),
        })

    return cross_dataset_metrics


def _cross_scores(storage, model, source, target, task, probe, target_labels, score):
    if target == source or task not in target_labels or not target_labels[task].notna().any():
        return None
    path = storage.artifact_path(embeddings_path(model, target))
    if not path.exists():
        return None
    frame = score(probe, source, pd.read_parquet(path), target_labels)
    if frame.empty:
        return None
    return P.with_labels(frame, target_labels, f"probe {model}/{source} on {target}")


def cross_matrix_markdown(table: pd.DataFrame) -> str:
    auroc = table[(table["metric"] == "auroc") & table["group"].eq("")]
    if auroc.empty:
        return "no cross-dataset pairs"
    lines = ["| model | task | trained on | tested on | AUROC | 95% CI | metric_id |", "|---|---|---|---|---|---|---|"]
    for row in auroc.sort_values(["model", "task", "train_dataset", "dataset"]).itertuples():
        lines.append(f"| {row.model} | {row.task} | {row.train_dataset} | {row.dataset} | {_fmt(row.value)} | "
                     f"{_fmt(row.ci_low)}-{_fmt(row.ci_high)} | `{row.metric_id}` |")
    return "\n".join(lines[:202])


# ------------------------------------------------------------------------------------------- leaderboard


def _leaderboard_asset(with_cross: bool):
    deps = ["metrics"] + (["cross_dataset_metrics"] if with_cross else [])

    @dg.asset(
        deps=deps,
        group_name=EVALUATION_GROUP,
        pool="duckdb",
        kinds={"duckdb", "markdown"},
        automation_condition=GATED_EAGER,
        description=LEADERBOARD_DESCRIPTION,
    )
    def leaderboard(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        table = storage.read_table(METRICS_SCHEMA, METRICS_TABLE)
        text = leaderboard_markdown(table, top=5)
        path = storage.artifact_path("reports/leaderboard.md")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(".leaderboard.md.tmp")
        tmp.write_text(text + "\n")
        tmp.replace(path)
        return dg.MaterializeResult(metadata={"leaderboard": dg.MetadataValue.md(text),
                                              "path": dg.MetadataValue.path(str(path)), "metric_rows": len(table)})

    return leaderboard


def leaderboard_markdown(table: pd.DataFrame, top: int = 3) -> str:
    """Top configurations per family (interface x method) and task by test AUROC, with ECE and metric ids."""
    auroc = table[(table["metric"] == "auroc") & (table["group"] == "") & table["value"].notna()]
    if auroc.empty:
        return "no defined AUROC yet"
    ece = table[(table["metric"] == "ece") & (table["group"] == "")][P.CONFIG_COLUMNS + ["value"]]
    auroc = _with_ece(auroc, ece)
    lines = ["| method | task | model | dataset | trained on | AUROC (95% CI) | ECE | metric_id |",
             "|---|---|---|---|---|---|---|---|"]
    for (method, task), rows in auroc.groupby(["method", "task"], sort=True):
        for row in rows.sort_values("value", ascending=False).head(top).itertuples():
            lines.append(
                f"| {method} | {task} | {row.model} | {row.dataset} | {row.train_dataset or '-'} | "
                f"{_fmt(row.value)} ({_fmt(row.ci_low)}-{_fmt(row.ci_high)}) | {_fmt(row.ece)} | "
                f"`{row.metric_id}` |")
    return "\n".join(lines)


def _with_ece(auroc: pd.DataFrame, ece: pd.DataFrame) -> pd.DataFrame:
    """AUROC rows with the ECE of the same configuration."""
    keys = ["model", "dataset", "task", "method", "_train"]
    right = _keyed(ece).rename(columns={"value": "ece"})[keys + ["ece"]]
    return _keyed(auroc).merge(right, on=keys, how="left")


def _fmt(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.3f}"
