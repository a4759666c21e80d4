"""Evaluation: linear probes, the per-sample predictions table, metric tables and the leaderboard."""

from dataclasses import dataclass, field

import dagster as dg
import pandas as pd

from assets.automation import GATED_EAGER
from assets.partitions import (
    BY_DATASET,
    DUAL_ENCODERS,
    ENCODERS,
    MLLMS,
    SAME_MODEL_AND_DATASET,
    Registered,
    model_and_dataset,
)
from focus_dagster.evaluation.configurations import (
    by_pair,
    cross_dataset_configurations,
    in_domain_configurations,
    methods_of,
    unavailable_frame,
    unavailable_rows,
)
from focus_dagster.evaluation.predictions import (
    CONFIG_COLUMNS,
    Assembled,
    empty_predictions,
    finish,
    finite_scores,
    frame_version,
    train_youden,
    with_labels,
    with_lineage,
)
from focus_dagster.evaluation.leaderboard import cross_matrix_markdown, leaderboard_markdown
from focus_dagster.evaluation.probes import PROBE_METHOD, skipped_frame, skipped_tasks
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
    f"`{layout.PROBE_SCORES.file('<model>', '<dataset>')}`; tasks without a probe (a training split lacking a "
    f"class, no test images) and why: `{layout.PROBE_SKIPPED.file('<model>', '<dataset>')}` (artifact store)."
)
PREDICTIONS_DESCRIPTION = (
    f"One per-sample table for every interface and method on one dataset (DuckDB `{layout.SAMPLES}`): linear "
    "probe, zero-shot and yes/no rows with score, reference-form score, Youden threshold, label, split, and the "
    "lineage of each row (dataset release, labels version, model revision and weights hash, the run that produced "
    "the model output, code version). Rows with non-finite scores are rejected and counted. Every configuration the "
    "selection implies (model x method of its interface x task the labels define) has test-split rows here or a "
    f"row with the reason in `{layout.UNAVAILABLE}`: upstream not materialised or blocked, probe not fit (the "
    "training split lacks a class), no scores for the task, every score rejected."
)
METRICS_DESCRIPTION = (
    f"Metric table of one dataset (DuckDB `{layout.METRICS}`, one row per number): performance, calibration, "
    "fairness (sex, age, camera, only where metadata_coverage finds the attribute) and image quality, each with a "
    "95% stratified bootstrap interval, n, n_pos, a reason where undefined, the lineage of its predictions, and a "
    "stable `metric_id` that `focus trace` resolves. A configuration without predictions has one row: its AUROC "
    f"(axis performance, group empty), null, with the reason recorded in `{layout.UNAVAILABLE}`."
)
CROSS_DESCRIPTION = (
    "The cross-dataset matrix: every in-domain probe trained on dataset A scored on the test split of every other "
    f"dataset B that has the task; predictions in `{layout.SAMPLES}` and performance / calibration rows in "
    f"`{layout.METRICS}` (partition '{layout.CROSS_PARTITION}'). A pair without predictions (probe not fit on A, "
    f"outputs not materialised, no test image of B with the task) is a row with the reason in `{layout.UNAVAILABLE}` "
    "and a null AUROC row in the metrics."
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
        skipped_path, _ = storage.write_parquet(layout.PROBE_SKIPPED.file(model, dataset), skipped_frame(run.skipped))
        path, sha = storage.write_parquet(layout.PROBE_SCORES.file(model, dataset), run.predictions)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(run.predictions),
            "tasks": sorted(run.probes),
            "skipped": dg.MetadataValue.json(run.skipped),
            "skipped_path": dg.MetadataValue.path(str(skipped_path)),
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
    if interfaces & set(ENCODERS):
        deps.append(dg.AssetDep("probe_predictions", partition_mapping=BY_DATASET))
    if interfaces & set(DUAL_ENCODERS):
        deps.append(dg.AssetDep("zero_shot_scores", partition_mapping=BY_DATASET))
    if interfaces & set(MLLMS):
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
        expected = in_domain_configurations(dataset, labels, {model: spec.interface for model, spec in specs.items()})
        parts, gaps, rejected, examples = [], [], {}, []
        for model, spec in specs.items():
            for method in methods_of(spec.interface):
                configs = [c for c in expected if (c.model, c.method) == (model, method)]
                part, missing, checked = _method_predictions(context, storage, model, spec, method, configs, labels,
                                                             base)
                parts += part
                gaps += missing
                rejected.update(checked.rejected)
                examples += checked.rejected_examples
        frame = pd.concat(parts, ignore_index=True) if parts else empty_predictions()
        version = frame_version(frame)
        frame["predictions_version"] = version
        frame["partition"] = dataset
        unavailable = unavailable_frame(gaps, predictions_version=version, run_id=context.run_id, partition=dataset)
        storage.replace_partition(layout.SAMPLES, dataset, frame)
        storage.replace_partition(layout.UNAVAILABLE, dataset, unavailable)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(frame),
            "configurations": int(frame.groupby(CONFIG_COLUMNS, dropna=False).ngroups) if len(frame) else 0,
            "expected_configurations": len(expected),
            "rows_by_method": dg.MetadataValue.json(frame["method"].value_counts().to_dict()),
            "rejected_rows": dg.MetadataValue.json(rejected),
            "rejected_examples": dg.MetadataValue.json(examples[:10]),
            "unavailable": dg.MetadataValue.json(_unavailable_summary(gaps)),
            "predictions_version": frame["predictions_version"].iloc[0] if len(frame) else "",
        })

    return predictions


@dataclass
class _Output:
    """A model output read for the predictions table (with labels attached), or the reason it cannot be read."""

    produced: object = None
    frame: pd.DataFrame | None = None
    reason: str | None = None
    skipped: dict = field(default_factory=dict)  # task -> why no probe was fit (probes only)


def _method_predictions(context, storage, model, spec, method, configs, labels, base):
    """One model x method on one dataset: its finished rows, the unavailable rows of its configurations without
    test predictions (each with the lineage known so far), and the rows rejected as non-finite."""
    dataset = context.partition_key
    output = _SOURCES[method](context, storage, model, dataset, labels)
    lineage = {**base, **(_model_lineage(context.instance, output.produced, model, dataset) if output.produced else {})}
    if output.frame is None:
        return [], [{**c.unavailable(output.reason), **lineage} for c in configs], Assembled(pd.DataFrame())
    checked = finite_scores(output.frame, f"{method} {model}/{dataset}")
    missing = unavailable_rows(configs, output.frame, checked.frame, f"{output.produced.asset} {model}/{dataset}",
                               output.skipped)
    part = finish(checked.frame, dataset=dataset, model=model, interface=spec.interface, method=method, **lineage,
                  run_id=context.run_id)
    return [part], [{**row, **lineage} for row in missing], checked


def _probe_source(context, storage, model, dataset, labels) -> _Output:
    produced, reason = _upstream(context.instance, "probe_predictions", model, dataset)
    if produced is None:
        return _Output(reason=reason)
    scores = storage.read_parquet(layout.PROBE_SCORES.file(model, dataset))
    return _Output(produced, with_labels(scores, labels, f"probe_predictions {model}/{dataset}"),
                   skipped=_probe_skipped(storage, model, dataset))


def _probe_skipped(storage, model: str, dataset: str) -> dict[str, str]:
    """The tasks the probe step could not fit and why ({} for probes stored before the reasons were kept)."""
    path = layout.PROBE_SKIPPED.file(model, dataset)
    return skipped_tasks(storage.read_parquet(path)) if storage.artifact_path(path).exists() else {}


def _zero_shot_source(context, storage, model, dataset, labels) -> _Output:
    produced, reason = _upstream(context.instance, "zero_shot_scores", model, dataset)
    if produced is None:
        return _Output(reason=reason)
    scores = storage.read_partition(layout.ZERO_SHOT, layout.model_dataset_row_key(model, dataset))
    frame = train_youden(with_labels(scores[["image_id", "task", "score"]], labels, f"zero_shot_scores {model}/{dataset}"))
    return _Output(produced, frame.assign(train_dataset=None))


def _yes_no_source(context, storage, model, dataset, labels) -> _Output:
    produced, reason = _upstream(context.instance, "token_probabilities", model, dataset)
    if produced is None:
        return _Output(reason=reason)
    scores = storage.read_parquet(layout.TOKEN_PROBABILITIES.file(model, dataset))
    scores = scores.rename(columns={"p_yes_reference": "score_reference"})[["image_id", "task", "score",
                                                                            "score_reference"]]
    frame = train_youden(with_labels(scores, labels, f"token_probabilities {model}/{dataset}"))
    return _Output(produced, frame.assign(train_dataset=None))


# The reader of each method's model output (the methods of an interface: configurations.METHODS).
_SOURCES = {PROBE_METHOD: _probe_source, "zero_shot": _zero_shot_source, "yes_no": _yes_no_source}


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


def _unavailable_summary(rows: list[dict]) -> list[dict]:
    """The unavailable configurations as the UI shows them (the table has their lineage too)."""
    keys = ("model", "method", "task", "train_dataset", "dataset", "reason")
    return [{k: row[k] for k in keys} for row in rows]


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
        from focus_dagster.evaluation.tables import Settings, metric_rows, with_unavailable
        from focus_dagster.labels.expectations import check_metadata_coverage
        from focus_dagster.labels.rules import AXIS_METADATA

        dataset = context.partition_key
        labels = storage.read_labels(dataset)
        samples = storage.read_partition(layout.SAMPLES, dataset)
        unavailable = storage.read_partition(layout.UNAVAILABLE, dataset)
        coverage = {column: share > 0 for column, share in check_metadata_coverage(labels).info.items()}
        metadata = labels[["image_id", *AXIS_METADATA]]
        rows = metric_rows(samples, metadata, coverage, Settings(config.n_resamples, config.seed))
        table = with_unavailable(with_lineage(rows, samples, context.run_id), unavailable, context.run_id)
        table = table.assign(partition=dataset)
        storage.replace_partition(layout.METRICS, dataset, table)
        return dg.MaterializeResult(metadata=metrics_metadata(table, coverage, len(unavailable)))

    return metrics


def metrics_metadata(table: pd.DataFrame, coverage: dict, unavailable: int) -> dict:
    defined = table["value"].notna()
    return {
        "dagster/row_count": len(table),
        "rows_by_axis": dg.MetadataValue.json(table["axis"].value_counts().to_dict()),
        "undefined_rows": int((~defined).sum()),
        "unavailable_configurations": unavailable,
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
        from focus_dagster.evaluation.tables import Settings, metric_rows, with_unavailable

        datasets = [d for d in registered if storage.has_labels(d)]
        labels = {d: storage.read_labels(d) for d in datasets}
        lineage = {d: _dataset_lineage(context.instance, d) for d in datasets}
        parts, gaps, trained = [], [], {}
        for (model, source, target), configs in by_pair(cross_dataset_configurations(encoders, labels)):
            if (model, source) not in trained:
                trained[model, source] = _trained_probes(context, storage, model, source)
            part, missing = _cross_pair(context, storage, specs[model], configs, trained[model, source],
                                        labels[target], lineage[target])
            parts += part
            gaps += missing
        samples = pd.concat(parts, ignore_index=True) if parts else empty_predictions()
        version = frame_version(samples)
        samples["predictions_version"] = version
        samples["partition"] = layout.CROSS_PARTITION
        unavailable = unavailable_frame(gaps, predictions_version=version, run_id=context.run_id,
                                        partition=layout.CROSS_PARTITION)
        rows = metric_rows(samples, pd.DataFrame({"image_id": samples["image_id"].unique()}), {},
                           Settings(config.n_resamples, config.seed))
        table = with_unavailable(with_lineage(rows, samples, context.run_id), unavailable, context.run_id)
        table = table.assign(partition=layout.CROSS_PARTITION)
        storage.replace_partition(layout.SAMPLES, layout.CROSS_PARTITION, samples)
        storage.replace_partition(layout.UNAVAILABLE, layout.CROSS_PARTITION, unavailable)
        storage.replace_partition(layout.METRICS, layout.CROSS_PARTITION, table)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(table),
            "predictions": len(samples),
            "pairs": int(samples.groupby(["model", "train_dataset", "dataset", "task"]).ngroups) if len(samples) else 0,
            "unavailable": dg.MetadataValue.json(_unavailable_summary(gaps)),
            "matrix": dg.MetadataValue.md(cross_matrix_markdown(table)),
        })

    return cross_dataset_metrics


@dataclass
class _Trained:
    """The in-domain probes of one encoder on one dataset, or the reason there are none."""

    produced: object = None
    probes: dict = field(default_factory=dict)  # task -> Probe
    skipped: dict = field(default_factory=dict)  # task -> why no probe was fit
    reason: str | None = None


def _trained_probes(context, storage, model: str, source: str) -> _Trained:
    from focus_dagster.evaluation.probes import load_probes

    produced, reason = _upstream(context.instance, "probe_predictions", model, source)
    path = storage.artifact_path(layout.PROBES.file(model, source))
    if produced is None or not path.exists():
        return _Trained(reason=reason or f"probe_predictions {model}/{source} is materialised but {path} is missing: "
                                         "rematerialise it")
    return _Trained(produced, load_probes(path), _probe_skipped(storage, model, source))


def _cross_pair(context, storage, spec, configs, trained: _Trained, target_labels, target_lineage):
    """The predictions of one encoder's probes trained on dataset A for dataset B, and an unavailable row (with
    the reason) for each of the pair's tasks without test predictions."""
    from focus_dagster.evaluation.probes import cross_dataset_scores

    model, source, target = configs[0].model, configs[0].train_dataset, configs[0].dataset
    lineage = {**target_lineage,
               **(_model_lineage(context.instance, trained.produced, model, source) if trained.produced else {})}
    embeddings = layout.EMBEDDINGS.file(model, target)
    reason = trained.reason or (None if storage.artifact_path(embeddings).exists() else
                                f"image_embeddings {model}/{target} is not materialised ({embeddings} is missing)")
    if reason:
        return [], [{**c.unavailable(reason), **lineage} for c in configs]
    vectors = storage.read_parquet(embeddings)
    frames = [cross_dataset_scores(trained.probes[c.task], source, vectors, target_labels)
              for c in configs if c.task in trained.probes]
    scored = with_labels(pd.concat([f for f in frames if len(f)] or [_no_scores()], ignore_index=True),
                         target_labels, f"probe {model}/{source} on {target}")
    checked = finite_scores(scored, f"probe {model}/{source} on {target}")
    missing = unavailable_rows(configs, scored, checked.frame, f"probe_predictions {model}/{source} on {target}",
                               trained.skipped)
    part = finish(checked.frame, dataset=target, model=model, interface=spec.interface, method=PROBE_METHOD,
                  **lineage, run_id=context.run_id)
    return ([part] if len(part) else []), [{**row, **lineage} for row in missing]


def _no_scores() -> pd.DataFrame:
    from focus_dagster.evaluation.probes import PROBE_COLUMNS

    return pd.DataFrame({c: pd.Series(dtype=float if c in ("score", "threshold") else object) for c in PROBE_COLUMNS})


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
