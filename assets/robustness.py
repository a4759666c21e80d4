"""Image-quality robustness for every dataset: encoders' embeddings of degraded test images, and each probe's metrics
on them against its clean ones.

Why a `degradation` column and not a partition dimension: Dagster's multi-partitions take two dimensions, and
model x dataset already are the two every model output shares; a third, folded into one of them, would multiply
the partitions the UI lists by the number of degradations and severities (dozens) for every model and dataset.
One step per model x dataset computes every degradation and severity `degradations:` of focus.yaml asks for, each
resumable on its own (its shards and its cached pixels are keyed by the degradation, the severity and the
registry version).
"""

import dagster as dg
import pandas as pd

from assets.automation import GATED_EAGER, data_version
from assets.evaluation.shared import EVALUATION_GROUP
from assets.gpu import gpu_asset
from assets.models import MODEL_GROUP, image_files, labelled_hashes, model_output_stamp, model_run_metadata
from assets.partitions import BY_DATASET, ENCODERS, SAME_MODEL_AND_DATASET, Registered, model_and_dataset
from checks.models import checkpoint_audit_result
from focus_dagster import lineage
from focus_dagster.degradations import Degrading, degradation
from focus_dagster.degradations.plan import DegradationPlan
from focus_dagster.version import code_version
from resources import DatasetRoots, FocusStorage, ModelHub, layout

ROBUSTNESS_JOB = "focus_robustness"
ROBUSTNESS_SUMMARY_JOB = "focus_robustness_summary"

DEGRADED_DESCRIPTION = (
    "Embeddings of the test images under graded fundus degradations (focus_dagster/degradations, versioned "
    "registry): each degradation of `degradations:` in focus.yaml at each of its severities, applied to the decoded "
    "photograph inside the fundus disc before the model's own preprocessing, seeded per image (the same image and "
    "severity give the same bytes in every run). One Parquet file (image_id, degradation, severity, embedding); "
    "degraded pixels are kept in the pixel cache under their own key, so the next model with the same input size "
    "reads them. Metadata: images per degradation, images/s, every degradation's parameters and where they come "
    "from."
)
ROBUSTNESS_DESCRIPTION = (
    "Each linear probe (fit on clean training images) scored on the degraded test embeddings against its clean "
    "test scores: AUROC, accuracy at the probe's Youden threshold and ECE per degradation and severity, each with "
    "its 95% interval, the change from clean with a paired interval and p-value (the same resamples for both), and "
    "AUROC's relative drop (focus_dagster/evaluation/robustness.py). Table "
    f"`{layout.ROBUSTNESS}`; every row names the registry version and the degradation's parameters."
)
SUMMARY_DESCRIPTION = (
    "One row per configuration over its degradations and severities (focus_dagster/evaluation/robustness.py, "
    "`robustness_summary`): the mean relative AUROC drop and the quality axis (1 - that mean), the worst degradation, "
    "and ImageNet-C's mean corruption error with 1 - AUROC as the error, normalised per degradation by the baseline "
    f"model's configuration on the same dataset, task and method (below 1: more robust). Table `{layout.ROBUSTNESS_SUMMARY}`."
)


def definitions(registered: Registered) -> dg.Definitions:
    """degraded_embeddings and robustness_metrics for every encoder x dataset, unless no degradation is asked for."""
    plan: DegradationPlan = registered.degradations
    if plan.is_off or not registered.models(ENCODERS):
        return dg.Definitions()
    partitions = registered.model_partitions(ENCODERS)
    job = dg.define_asset_job(
        ROBUSTNESS_JOB, selection=dg.AssetSelection.assets(layout.DEGRADED_EMBEDDINGS_ASSET, layout.ROBUSTNESS_METRICS),
        partitions_def=partitions, description="Degraded embeddings and robustness metrics of one encoder on one "
                                               "dataset, in one run.")
    summary_job = dg.define_asset_job(ROBUSTNESS_SUMMARY_JOB, selection=dg.AssetSelection.assets(
        layout.ROBUSTNESS_SUMMARY_ASSET), description="The robustness summary over every configuration.")
    return dg.Definitions(assets=[_degraded_asset(partitions, registered, plan), _robustness_asset(partitions, plan),
                                  _summary_asset(baseline_model(registered))], jobs=[job, summary_job])


def baseline_model(registered: Registered) -> str | None:
    """The model every mCE is normalised by: the first selected encoder that is not a pipeline check (the order of
    focus.yaml), else the first encoder. Stated in every summary row (`ce_baseline`) and the asset's metadata."""
    encoders = registered.models(ENCODERS)
    real = [model for model in encoders if not registered.specs[model].is_pipeline_check]
    return (real or encoders or [None])[0]


def described(plan: DegradationPlan) -> list[dict]:
    """Every (degradation, severity) of the plan with its parameters, as lineage and metadata record them."""
    return [degradation(name).describe(severity) for name, severity in plan.variants()]


def _degraded_asset(partitions: dg.MultiPartitionsDefinition, registered: Registered, plan: DegradationPlan):
    @gpu_asset(
        registered,
        partitions_def=partitions,
        kinds={"parquet"},
        deps=[dg.AssetDep(layout.HARMONISED_LABELS, partition_mapping=BY_DATASET)],
        group_name=MODEL_GROUP,
        automation_condition=GATED_EAGER,
        description=DEGRADED_DESCRIPTION,
    )
    def degraded_embeddings(
        context: dg.AssetExecutionContext, datasets: DatasetRoots, models: ModelHub, storage: FocusStorage
    ):
        from focus_dagster.inference.engine import pick_device, run_fingerprint, run_on_images

        model_id, dataset = model_and_dataset(context)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        test = labels[labels["split"] == "test"]
        device = pick_device()
        encoder = models.load(model_id, device, ENCODERS)
        items = image_files(datasets, dataset, test)
        hashes = labelled_hashes(items, test, storage.artifact_path(layout.labels_file(dataset)))
        parts, runs = [], {}
        for name, severity in plan.variants():
            run = run_on_images(
                encoder.embed, items, encoder.spec.preprocess,
                work_dir=storage.artifact_path(f"{layout.DEGRADED_EMBEDDINGS.shards(model_id, dataset)}/{name}-{severity}"),
                fingerprint=run_fingerprint(_fingerprint_parts(encoder)), device=device, progress=context.log.info,
                what=f"degraded embeddings {model_id}@{dataset} {name} {severity}",
                pixel_cache=storage.artifact_path(layout.pixels_dir(dataset)), known_hashes=hashes,
                alteration=Degrading(name, severity))
            runs[f"{name}@{severity}"] = run
            parts.append(pd.DataFrame({"image_id": run.image_ids, "degradation": name, "severity": severity,
                                       "embedding": list(run.outputs)}))
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
            columns=["image_id", "degradation", "severity", "embedding"])
        stamp = model_output_stamp(layout.DEGRADED_EMBEDDINGS_ASSET, model_id, dataset, context.run_id,
                                   frame, encoder, labels=labels_stamp, degradations=described(plan))
        path, sha = storage.write_parquet(layout.DEGRADED_EMBEDDINGS.file(model_id, dataset), frame, stamp)
        last = next(reversed(runs.values()), None)
        yield dg.MaterializeResult(metadata={
            "dagster/row_count": len(frame), "path": dg.MetadataValue.path(str(path)), "sha256": sha,
            "test_images": len(items),
            "images_per_degradation": dg.MetadataValue.json({key: len(run.image_ids) for key, run in runs.items()}),
            "images_per_second": _overall_rate(runs.values()),
            "images_per_second_by_degradation": dg.MetadataValue.json({key: round(run.images_per_second, 2)
                                                                       for key, run in runs.items()}),
            "degradations": dg.MetadataValue.json(described(plan)),
            "lineage_version": stamp["version"],
            **({} if last is None else {k: v for k, v in model_run_metadata(encoder, last, dataset).items()
                                        if k not in ("images_per_second",)}),
        }, data_version=data_version(stamp))
        yield checkpoint_audit_result(encoder.report)

    return degraded_embeddings


def _overall_rate(runs) -> float:
    """Images degraded and embedded per second over every degradation and severity the step computed."""
    runs = list(runs)
    seconds = sum(run.seconds for run in runs)
    return round(sum(run.images_computed for run in runs) / seconds, 2) if seconds > 0 else 0.0


def _fingerprint_parts(encoder) -> dict:
    """What decides a degraded embedding besides the degradation (which keys its own shards): the model, its
    weights and preprocessing, the code."""
    from focus_dagster import __version__
    from focus_dagster.models.preprocessing import preprocess_fingerprint

    spec = encoder.spec
    return {"model": spec.id, "revision": spec.revision, "weights": encoder.report.weights_sha256,
            "preprocess": preprocess_fingerprint(spec.preprocess), "pooling": spec.pooling, "code": __version__}


def _robustness_asset(partitions: dg.MultiPartitionsDefinition, plan: DegradationPlan):
    @dg.asset(
        partitions_def=partitions,
        deps=[dg.AssetDep(layout.DEGRADED_EMBEDDINGS_ASSET, partition_mapping=SAME_MODEL_AND_DATASET),
              dg.AssetDep(layout.PROBE_PREDICTIONS, partition_mapping=SAME_MODEL_AND_DATASET)],
        group_name=EVALUATION_GROUP,
        kinds={"scikitlearn", "parquet"},
        automation_condition=GATED_EAGER,
        description=ROBUSTNESS_DESCRIPTION,
    )
    def robustness_metrics(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        from focus_dagster.evaluation.probes import load_stamped_probes
        from focus_dagster.evaluation.robustness import probe_robustness

        model, dataset = model_and_dataset(context)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        degraded, degraded_stamp = storage.read_stamped_parquet(layout.DEGRADED_EMBEDDINGS.file(model, dataset))
        clean, clean_stamp = storage.read_stamped_parquet(layout.PROBE_SCORES.file(model, dataset))
        probes, probes_stamp = load_stamped_probes(storage.artifact_path(layout.PROBES.file(model, dataset)))
        frame = probe_robustness(model, dataset, probes, clean, degraded, labels, described(plan))
        key = layout.model_dataset_row_key(model, dataset)
        stamp = lineage.stamp(layout.ROBUSTNESS_METRICS, key, context.run_id, lineage.frame_version(frame),
                              code_version=code_version(),
                              inputs={"degraded_embeddings": degraded_stamp, "probe_scores": clean_stamp,
                                      "probes": probes_stamp, "labels": labels_stamp})
        storage.replace_partition(layout.ROBUSTNESS, key, frame.assign(partition=key), stamp=stamp)
        auroc = frame[frame["metric"] == "auroc"]
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(frame),
            "tasks": sorted(frame["task"].unique().tolist()) if len(frame) else [],
            "degradations": sorted(frame["degradation"].unique().tolist()) if len(frame) else [],
            "mean_relative_auroc_drop": (float(auroc["relative_drop"].mean())
                                         if auroc["relative_drop"].notna().any() else None),
            "lineage_version": stamp["version"],
        }, data_version=data_version(stamp))

    return robustness_metrics


def _summary_asset(baseline: str | None):
    @dg.asset(
        deps=[layout.ROBUSTNESS_METRICS],
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        description=SUMMARY_DESCRIPTION,
    )
    def robustness_summary(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        from focus_dagster.evaluation.robustness import robustness_summary as summarise

        [rows], current = storage.read_tables_with_lineage([layout.ROBUSTNESS])
        if rows is None:
            raise dg.Failure(f"no robustness rows yet ({layout.ROBUSTNESS}): materialise `robustness_metrics` for at "
                             "least one encoder and dataset first (the demo does, or select it in the UI).")
        summary = summarise(rows, baseline)
        # What was read, as the stamp ids of every robustness partition in the snapshot the rows came from.
        read = {key: stamp_id for key, stamp_id in current.items() if key.startswith(f"{layout.ROBUSTNESS_METRICS}[")}
        stamp = lineage.stamp(layout.ROBUSTNESS_SUMMARY_ASSET, None, context.run_id, lineage.frame_version(summary),
                              code_version=code_version(), robustness_stamps=read, baseline=baseline)
        storage.replace_table(layout.ROBUSTNESS_SUMMARY, summary, stamp=stamp)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(summary), "ce_baseline": baseline or "none",
            "configurations_with_mce": int(summary["mce"].notna().sum()) if len(summary) else 0,
            "lineage_version": stamp["version"],
        }, data_version=data_version(stamp))

    return robustness_summary
