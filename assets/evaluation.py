"""Evaluation: linear probes, the per-sample predictions table, metric tables and the leaderboard."""

import dagster as dg
import pandas as pd

from assets.automation import GATED_EAGER
from assets.partitions import BY_DATASET, ENCODERS, SAME_MODEL_AND_DATASET, Registered, model_and_dataset
from focus_dagster.evaluation.predictions import (
    CONFIG_COLUMNS,
    empty_predictions,
    finish,
    finite_scores,
    frame_version,
    train_youden,
    with_labels,
    with_lineage,
)
from focus_dagster.evaluation.leaderboard import cross_matrix_markdown, leaderboard_markdown
from focus_dagster.evaluation.probes import PROBE_METHOD
from focus_dagster.instance import latest_materialization, latest_observation
from focus_dagster.version import code_version
from resources import FocusStorage, layout

EVALUATION_GROUP = "evaluation"
PROBES_JOB = "focus_linear_probes"
ENCODER_JOB = "focus_encoder_outputs"
EVALUATION_JOB = "focus_evaluation"
SUMMARY_JOB = "focus_cross_dataset_and_leaderboard"

PROBES_DESCRIPTION = (
    "In-domain linear probes of one encoder on one dataset: per task, logistic regression (balanced class weights, "
    "max_iter 1000) on L2-normalised embeddings of the train split, scored on the test split; the Youden threshold "
    f"of the training scores is kept. Probes: `{layout.PROBES.file('<model>', '<dataset>')}`; scores: "
    f"`{layout.PROBE_SCORES.file('<model>', '<dataset>')}` (artifact store)."
)
PREDICTIONS_DESCRIPTION = (
    f"One per-sample table for every interface and method on one dataset (DuckDB `{layout.SAMPLES}`): linear "
    "probe, zero-shot and yes/no rows with score, reference-form score, Youden threshold, label, split, and the "
    "lineage of each row (dataset release, labels version, model revision and weights hash, the run that produced "
    "the model output, code version). Rows with non-finite scores are rejected and counted; a configuration whose "
    f"upstream is missing or blocked gets no rows and a reason in `{layout.UNAVAILABLE}`."
)
METRICS_DESCRIPTION = (
    f"Metric table of one dataset (DuckDB `{layout.METRICS}`, one row per number): performance, calibration, "
    "fairness (sex, age, camera, only where metadata_coverage finds the attribute) and image quality, each with a "
    "95% stratified bootstrap interval, n, n_pos, a reason where undefined, the lineage of its predictions, and a "
    "stable `metric_id` that `focus trace` resolves."
)
CROSS_DESCRIPTION = (
    "The cross-dataset matrix: every in-domain probe trained on dataset A scored on the test split of every other "
    f"dataset B that has the task; predictions in `{layout.SAMPLES}` and performance / calibration rows in "
    f"`{layout.METRICS}` (partition '{layout.CROSS_PARTITION}')."
)
LEADERBOARD_DESCRIPTION = (
    "The leaderboard: the top configurations per model family and task by test AUROC (with interval, ECE and "
    f"metric ids), over everything in `{layout.METRICS}`. Markdown in the metadata, and `{layout.LEADERBOARD_REPORT}`."
)


class MetricsConfig(dg.Config):
    n_resamples: int = 1000
    seed: int = 0


def definitions(registered: Registered) -> dg.Definitions:
    """Probes (model x dataset), predictions + metrics (dataset), the cross-dataset matrix and the leaderboard."""
    with_encoders = bool(registered.models(ENCODERS))
    assets, jobs = [], []
    if with_encoders:
        encoders = registered.model_partitions(ENCODERS)
        assets.append(_probe_asset(encoders))
        jobs.append(dg.define_asset_job(PROBES_JOB, selection=dg.AssetSelection.assets("probe_predictions"),
                                        partitions_def=encoders,
                                        description="Linear probes of every selected encoder (model x dataset)."))
        jobs.append(dg.define_asset_job(
            ENCODER_JOB, selection=dg.AssetSelection.assets("image_embeddings", "probe_predictions"),
            partitions_def=encoders,
            description="Embeddings and linear probes of one encoder on one dataset, in one run.",
        ))
    assets += [_predictions_asset(registered.datasets, registered.specs), _metrics_asset(registered.datasets)]
    jobs.append(dg.define_asset_job(
        EVALUATION_JOB, selection=dg.AssetSelection.assets("predictions", "metrics"),
        partitions_def=registered.datasets,
        description="The per-sample predictions table and the metric tables of one dataset.",
    ))
    summary = ["cross_dataset_metrics", "leaderboard"] if with_encoders else ["leaderboard"]
    if with_encoders:
        assets.append(_cross_dataset_asset(registered.specs, registered.models(ENCODERS), registered.dataset_keys))
    assets.append(_leaderboard_asset(with_encoders))
    jobs.append(dg.define_asset_job(SUMMARY_JOB, selection=dg.AssetSelection.assets(*summary),
                                    description="The cross-dataset matrix and the leaderboard over every dataset."))
    return dg.Definitions(assets=assets, jobs=jobs)


# ------------------------------------------------------------------------------------------------ probes


def _probe_asset(partitions: dg.MultiPartitionsDefinition):
    @dg.asset(
        partitions_def=partitions,
        deps=[dg.AssetDep("image_embeddings", partition_mapping=SAME_MODEL_AND_DATASET)],
        group_name=EVALUATION_GROUP,
        kinds={"scikitlearn", "parquet"},
        automation_condition=GATED_EAGER,
        description=PROBES_DESCRIPTION,
    )
    def probe_predictions(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        from focus_dagster.evaluation.probes import in_domain_probes, save_probes

        model, dataset = model_and_dataset(context)
        labels = storage.read_labels(dataset)
        embeddings = storage.read_parquet(layout.EMBEDDINGS.file(model, dataset))
        run = in_domain_probes(dataset, embeddings, labels)
        storage.write_artifact(layout.PROBES.file(model, dataset), lambda partial: save_probes(partial, run.probes),
                               suffix=".npz")
        path, sha = storage.write_parquet(layout.PROBE_SCORES.file(model, dataset), run.predictions)
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
    deps = [dg.AssetDep("harmonised_labels")]
    interfaces = {s.interface for s in specs.values()}
    if interfaces & {"vm", "vlm"}:
        deps.append(dg.AssetDep("probe_predictions", partition_mapping=BY_DATASET))
    if "vlm" in interfaces:
        deps.append(dg.AssetDep("zero_shot_scores", partition_mapping=BY_DATASET))
    if "mllm" in interfaces:
        deps.append(dg.AssetDep("token_probabilities", partition_mapping=BY_DATASET))

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
        labels = storage.read_labels(dataset)
        base = _dataset_lineage(context.instance, dataset)
        parts, unavailable, rejected, examples = [], [], {}, []
        for model, spec in specs.items():
            for method, load in _sources(spec.interface):
                produced, frame, reason = load(context, storage, model, dataset, labels)
                if frame is None:
                    unavailable.append({"dataset": dataset, "model": model, "method": method, "reason": reason})
                    continue
                checked = finite_scores(frame, f"{method} {model}/{dataset}")
                rejected.update(checked.rejected)
                examples += checked.rejected_examples
                parts.append(finish(checked.frame, dataset=dataset, model=model, interface=spec.interface,
                                    method=method, **base, **_model_lineage(context.instance, produced, model, dataset),
                                    run_id=context.run_id))
        frame = pd.concat(parts, ignore_index=True) if parts else empty_predictions()
        frame["predictions_version"] = frame_version(frame)
        frame["partition"] = dataset
        storage.replace_partition(layout.SAMPLES, dataset, frame)
        storage.replace_partition(layout.UNAVAILABLE, dataset, _unavailable_frame(unavailable))
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(frame),
            "configurations": int(frame.groupby(CONFIG_COLUMNS, dropna=False).ngroups) if len(frame) else 0,
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
    scores = storage.read_parquet(layout.PROBE_SCORES.file(model, dataset))
    return produced, with_labels(scores, labels, f"probe_predictions {model}/{dataset}"), None


def _zero_shot_source(context, storage, model, dataset, labels):
    produced, reason = _upstream(context.instance, "zero_shot_scores", model, dataset)
    if produced is None:
        return None, None, reason
    scores = storage.read_partition(layout.ZERO_SHOT, layout.model_dataset_row_key(model, dataset))
    frame = train_youden(with_labels(scores[["image_id", "task", "score"]], labels, f"zero_shot_scores {model}/{dataset}"))
    return produced, frame.assign(train_dataset=None), None


def _yes_no_source(context, storage, model, dataset, labels):
    produced, reason = _upstream(context.instance, "token_probabilities", model, dataset)
    if produced is None:
        return None, None, reason
    scores = storage.read_parquet(layout.TOKEN_PROBABILITIES.file(model, dataset))
    scores = scores.rename(columns={"p_yes_reference": "score_reference"})[["image_id", "task", "score",
                                                                            "score_reference"]]
    frame = train_youden(with_labels(scores, labels, f"token_probabilities {model}/{dataset}"))
    return produced, frame.assign(train_dataset=None), None


def _upstream(instance, asset: str, model: str, dataset: str):
    """The latest materialisation of a model output, or why there is none (never run, or blocked by a check)."""
    produced = latest_materialization(instance, asset, layout.model_dataset_key(model, dataset))
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
        embeddings = latest_materialization(instance, "image_embeddings", layout.model_dataset_key(model, dataset))
        meta = {**meta, **(embeddings.metadata if embeddings else {})}
    return {
        "model_revision": meta.get("model_source"),
        "weights_sha256": meta.get("weights_sha256"),
        "source_asset": produced.asset,
        "source_run_id": produced.run_id,
    }


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
        from focus_dagster.labels.rules import AXIS_METADATA

        dataset = context.partition_key
        labels = storage.read_labels(dataset)
        samples = storage.read_partition(layout.SAMPLES, dataset)
        coverage = {column: share > 0 for column, share in check_metadata_coverage(labels).info.items()}
        metadata = labels[["image_id", *AXIS_METADATA]]
        rows = metric_rows(samples, metadata, coverage, Settings(config.n_resamples, config.seed))
        table = with_lineage(rows, samples, context.run_id).assign(partition=dataset)
        storage.replace_partition(layout.METRICS, dataset, table)
        return dg.MaterializeResult(metadata=metrics_metadata(table, coverage))

    return metrics


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

        datasets = [d for d in registered if storage.has_labels(d)]
        labels = {d: storage.read_labels(d) for d in datasets}
        parts, lineage = [], {d: _dataset_lineage(context.instance, d) for d in datasets}
        for model in encoders:
            for source in datasets:
                probes_file = storage.artifact_path(layout.PROBES.file(model, source))
                produced = latest_materialization(context.instance, "probe_predictions",
                                                  layout.model_dataset_key(model, source))
                if not probes_file.exists() or produced is None:
                    continue
                for task, probe in load_probes(probes_file).items():
                    for target in datasets:
                        frame = _cross_scores(storage, model, source, target, task, probe, labels[target],
                                              cross_dataset_scores)
                        if frame is None:
                            continue
                        parts.append(finish(frame, dataset=target, model=model, interface=specs[model].interface,
                                            method=PROBE_METHOD, **lineage[target],
                                            **_model_lineage(context.instance, produced, model, source),
                                            run_id=context.run_id))
        samples = pd.concat(parts, ignore_index=True) if parts else empty_predictions()
        samples["predictions_version"] = frame_version(samples)
        samples["partition"] = layout.CROSS_PARTITION
        rows = metric_rows(samples, pd.DataFrame({"image_id": samples["image_id"].unique()}), {},
                           Settings(config.n_resamples, config.seed))
        table = with_lineage(rows, samples, context.run_id).assign(partition=layout.CROSS_PARTITION)
        storage.replace_partition(layout.SAMPLES, layout.CROSS_PARTITION, samples)
        storage.replace_partition(layout.METRICS, layout.CROSS_PARTITION, table)
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
    path = layout.EMBEDDINGS.file(model, target)
    if not storage.artifact_path(path).exists():
        return None
    frame = score(probe, source, storage.read_parquet(path), target_labels)
    if frame.empty:
        return None
    return with_labels(frame, target_labels, f"probe {model}/{source} on {target}")


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
        table = storage.read_table(layout.METRICS)
        text = leaderboard_markdown(table, top=5)
        path, _ = storage.write_artifact(layout.LEADERBOARD_REPORT, lambda partial: partial.write_text(text + "\n"))
        return dg.MaterializeResult(metadata={"leaderboard": dg.MetadataValue.md(text),
                                              "path": dg.MetadataValue.path(str(path)), "metric_rows": len(table)})

    return leaderboard
