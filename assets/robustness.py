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
from assets.mllm import yes_no_inputs
from assets.models import MODEL_GROUP, image_files, labelled_hashes, model_output_stamp, model_run_metadata
from assets.partitions import (BY_DATASET, DUAL_ENCODERS, ENCODERS, MLLMS, SAME_MODEL_AND_DATASET, Registered,
                               model_and_dataset)
from checks.models import checkpoint_audit_result
from focus_dagster import lineage
from focus_dagster import degradations
from focus_dagster.degradations import degradation
from focus_dagster.degradations.plan import DegradationPlan
from focus_dagster.version import code_version
from resources import DatasetRoots, FocusStorage, ModelHub, layout

ROBUSTNESS_JOB = "focus_robustness"
ZERO_SHOT_ROBUSTNESS_JOB = "focus_zero_shot_robustness"
YES_NO_ROBUSTNESS_JOB = "focus_yes_no_robustness"
ROBUSTNESS_SUMMARY_JOB = "focus_robustness_summary"

DEGRADED_DESCRIPTION = (
    "Embeddings of the test images under graded fundus degradations (focus_dagster/degradations, versioned "
    "registry): each degradation of `degradations:` in focus.yaml at each of its severities, applied inside the "
    "fundus disc to each test image's clean pixels on the model's grid (after its library's resize, before "
    "normalisation: where the published severities are defined), seeded per image (the same image and severity "
    "give the same bytes in every run). One Parquet file (image_id, degradation, severity, embedding); clean and "
    "degraded pixels are kept in the pixel cache, so an image is decoded once for every degradation and the next "
    "model with the same input size reads them. Metadata: images per degradation, images/s, every degradation's parameters and where they come "
    "from."
)
ROBUSTNESS_DESCRIPTION = (
    "Each linear probe (fit on clean training images) scored on the degraded test embeddings against its clean "
    "test scores: AUROC, accuracy at the probe's Youden threshold and ECE per degradation and severity, each with "
    "its 95% interval, the change from clean with a paired interval and p-value (the same resamples for both), and "
    "AUROC's relative drop (focus_dagster/evaluation/robustness.py). Table "
    f"`{layout.ROBUSTNESS}`; every row names the registry version and the degradation's parameters, and carries "
    "its metric_id (`focus trace ID`)."
)
ZERO_SHOT_ROBUSTNESS_DESCRIPTION = (
    "Each dual encoder's zero-shot prompts scored on its degraded test embeddings (the same prompt pair and "
    "two-prompt softmax as zero_shot_scores) against its clean zero-shot scores: AUROC and ECE per degradation and "
    "severity with their intervals, the change from clean with a paired interval, AUROC's relative drop; accuracy "
    "at a Youden threshold is undefined (zero-shot fits no threshold), with that reason. Rows in "
    f"`{layout.ROBUSTNESS}` (partition `<model>|<dataset>|zero_shot`), each with its metric_id."
)
DEGRADED_YES_NO_DESCRIPTION = (
    "Each multimodal LLM's yes/no first-token probabilities on the test images under the degradations of "
    "`degradations:` (the same questions, answer tokens and batched path as token_probabilities; each test "
    "image's clean pixels on the model's grid, read back from the pixel cache, degraded inside its fundus disc, "
    "seeded per image). One "
    "Parquet file: token_probabilities' columns with `degradation` and `severity`."
)
YES_NO_ROBUSTNESS_DESCRIPTION = (
    "Each multimodal LLM's yes/no scores on the degraded test images against its clean yes/no scores: AUROC and "
    "ECE per degradation and severity with their intervals, the change from clean with a paired interval, AUROC's "
    "relative drop; accuracy at a Youden threshold is undefined (no threshold is fit), with that reason. Rows in "
    f"`{layout.ROBUSTNESS}` (partition `<model>|<dataset>|yes_no`), each with its metric_id."
)
SUMMARY_DESCRIPTION = (
    "One row per configuration over its degradations and severities (focus_dagster/evaluation/robustness.py, "
    "`robustness_summary`): the mean relative AUROC drop and the quality axis (1 - that mean), the worst degradation, "
    "and ImageNet-C's mean corruption error with 1 - AUROC as the error, normalised per degradation by the baseline "
    f"model's configuration on the same dataset, task and method (below 1: more robust). Table "
    f"`{layout.ROBUSTNESS_SUMMARY}`; each row's metric_id is its quality axis' (`focus trace ID`)."
)


def definitions(registered: Registered) -> dg.Definitions:
    """The robustness assets of every selected interface (encoders' probes, dual encoders' zero-shot prompts,
    multimodal LLMs' yes/no questions) and the summary, unless no degradation is asked for.

    Each interface's job runs its clean model output and its robustness in one run per model x dataset (as the
    demo runs them): one model load and one run's overhead instead of two; the sensor still runs each asset as its
    own inputs change."""
    plan: DegradationPlan = registered.degradations
    if not scores_robustness(registered):
        return dg.Definitions()
    partitions = registered.model_partitions(ENCODERS)
    assets = [_degraded_asset(partitions, registered, plan), _robustness_asset(partitions, plan)]
    jobs = [_job(ROBUSTNESS_JOB, partitions, [layout.IMAGE_EMBEDDINGS, layout.PROBE_PREDICTIONS,
                                              layout.DEGRADED_EMBEDDINGS_ASSET, layout.ROBUSTNESS_METRICS],
                 "Embeddings, probes, degraded embeddings and robustness metrics of one encoder on one dataset."),
            dg.define_asset_job(ROBUSTNESS_SUMMARY_JOB, selection=dg.AssetSelection.assets(
                layout.ROBUSTNESS_SUMMARY_ASSET), description="The robustness summary over every configuration.")]
    if registered.models(DUAL_ENCODERS):
        dual = registered.model_partitions(DUAL_ENCODERS)
        assets.append(_zero_shot_robustness_asset(dual, plan))
        jobs.append(_job(ZERO_SHOT_ROBUSTNESS_JOB, dual, [layout.ZERO_SHOT_SCORES, layout.ZERO_SHOT_ROBUSTNESS],
                         "A dual encoder's zero-shot scores and their robustness on one dataset."))
    if registered.models(MLLMS):
        mllms = registered.model_partitions(MLLMS)
        assets += [_degraded_yes_no_asset(mllms, registered, plan), _yes_no_robustness_asset(mllms, plan)]
        jobs.append(_job(YES_NO_ROBUSTNESS_JOB, mllms, [layout.TOKEN_PROBABILITIES_ASSET,
                                                        layout.DEGRADED_TOKEN_PROBABILITIES_ASSET,
                                                        layout.YES_NO_ROBUSTNESS],
                         "A multimodal LLM's yes/no scores on clean and degraded test images and their robustness "
                         "rows, on one dataset."))
    summary_deps = sorted(set(layout.ROBUSTNESS_ROW_ASSETS.values()) & {a.key.to_user_string() for a in assets})
    assets.append(_summary_asset(baseline_model(registered), summary_deps))
    return dg.Definitions(assets=assets, jobs=jobs)


def _job(name: str, partitions: dg.MultiPartitionsDefinition, selected: list[str], description: str):
    return dg.define_asset_job(name, selection=dg.AssetSelection.assets(*selected), partitions_def=partitions,
                               description=description + " In one run.")


def scores_robustness(registered: Registered) -> bool:
    """Whether the graph has the robustness assets: a degradation is asked for and an encoder is selected."""
    return not registered.degradations.is_off and bool(registered.models(ENCODERS))


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
                alteration=degradations.Degrading(name, severity))
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
        return _commit_rows(context, storage, layout.ROBUSTNESS_METRICS, layout.model_dataset_row_key(model, dataset),
                            frame, {"degraded_embeddings": degraded_stamp, "probe_scores": clean_stamp,
                                    "probes": probes_stamp, "labels": labels_stamp})

    return robustness_metrics


def _commit_rows(context, storage: FocusStorage, asset: str, row_key: str, frame: pd.DataFrame,
                 inputs: dict) -> dg.MaterializeResult:
    """One step's robustness rows under `row_key` of the robustness table, with the lineage stamp of what it read
    (`inputs`) in the same commit; each row names that stamp, so `focus trace` of a robustness number (or of a
    summary formed from these rows) walks from it to the degraded outputs and their degradations' parameters."""
    model, dataset = model_and_dataset(context)
    stamp = lineage.stamp(asset, layout.model_dataset_row_key(model, dataset), context.run_id,
                          lineage.frame_version(frame), code_version=code_version(), inputs=inputs)
    frame = frame.assign(partition=row_key, lineage_id=lineage.stamp_id(stamp))
    storage.replace_partition(layout.ROBUSTNESS, row_key, frame, stamp=stamp)
    auroc = frame[frame["metric"] == "auroc"]
    return dg.MaterializeResult(metadata={
        "dagster/row_count": len(frame),
        "tasks": sorted(frame["task"].unique().tolist()) if len(frame) else [],
        "degradations": sorted(frame["degradation"].unique().tolist()) if len(frame) else [],
        "mean_relative_auroc_drop": (float(auroc["relative_drop"].mean())
                                     if auroc["relative_drop"].notna().any() else None),
        "lineage_version": stamp["version"],
    }, data_version=data_version(stamp))


def _zero_shot_robustness_asset(partitions: dg.MultiPartitionsDefinition, plan: DegradationPlan):
    @dg.asset(
        partitions_def=partitions,
        deps=[dg.AssetDep(layout.DEGRADED_EMBEDDINGS_ASSET, partition_mapping=SAME_MODEL_AND_DATASET),
              dg.AssetDep(layout.ZERO_SHOT_SCORES, partition_mapping=SAME_MODEL_AND_DATASET)],
        group_name=EVALUATION_GROUP,
        kinds={"pytorch", "parquet"},
        automation_condition=GATED_EAGER,
        description=ZERO_SHOT_ROBUSTNESS_DESCRIPTION,
    )
    def zero_shot_robustness(context: dg.AssetExecutionContext, models: ModelHub,
                             storage: FocusStorage) -> dg.MaterializeResult:
        from focus_dagster.evaluation.robustness import prompt_robustness
        from focus_dagster.inference.zero_shot import zero_shot_frame

        model, dataset = model_and_dataset(context)
        key = layout.model_dataset_row_key(model, dataset)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        degraded, degraded_stamp = storage.read_stamped_parquet(layout.DEGRADED_EMBEDDINGS.file(model, dataset))
        [clean], clean_stamp = storage.read_stamped([(layout.ZERO_SHOT, key)], layout.ZERO_SHOT_SCORES, key)
        encoder = models.load(model, "cpu", ENCODERS)  # the text tower scores the prompts
        tasks = sorted(set(clean["task"]))
        scored = {(name, int(severity)): zero_shot_frame(encoder, variant[["image_id", "embedding"]], tasks, dataset)
                  for (name, severity), variant in degraded.groupby(["degradation", "severity"], sort=False)}
        frame = prompt_robustness(model, dataset, "zero_shot", clean, scored, labels, described(plan))
        return _commit_rows(context, storage, layout.ZERO_SHOT_ROBUSTNESS,
                            layout.method_robustness_key(model, dataset, "zero_shot"), frame,
                            {"degraded_embeddings": degraded_stamp, "zero_shot_scores": clean_stamp,
                             "labels": labels_stamp})

    return zero_shot_robustness


def _degraded_yes_no_asset(partitions: dg.MultiPartitionsDefinition, registered: Registered, plan: DegradationPlan):
    book = registered.questions

    @gpu_asset(
        registered,
        partitions_def=partitions,
        kinds={"parquet"},
        deps=yes_no_inputs(),
        group_name=MODEL_GROUP,
        automation_condition=GATED_EAGER,
        description=DEGRADED_YES_NO_DESCRIPTION,
    )
    def degraded_token_probabilities(context: dg.AssetExecutionContext, datasets: DatasetRoots, models: ModelHub,
                                     storage: FocusStorage):
        from assets.mllm import checked_tasks, yes_no_run
        from focus_dagster.inference.engine import pick_device

        model_id, dataset = model_and_dataset(context)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        asked, questions_stamp = storage.read_stamped_parquet(layout.questions_file(dataset))
        tasks = checked_tasks(asked, dataset, book)
        device = pick_device()
        mllm = models.load(model_id, device, MLLMS)
        test = labels[labels["split"] == "test"]
        parts, runs = [], {}
        for name, severity in plan.variants():
            shards = f"{layout.DEGRADED_TOKEN_PROBABILITIES.shards(model_id, dataset)}/{name}-{severity}"
            # answer_tokens 0: the first-token probabilities alone (the scores); no answer is generated
            frame, run = yes_no_run(context, mllm, datasets, book, test, asked, tasks, device, 0,
                                    storage.artifact_path(shards), dataset,
                                    what=f"degraded yes/no {model_id}@{dataset} {name} {severity}",
                                    alteration=degradations.Degrading(name, severity),
                                    pixel_cache=storage.artifact_path(layout.pixels_dir(dataset)))
            runs[f"{name}@{severity}"] = run
            parts.append(frame.assign(degradation=name, severity=severity))
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        stamp = model_output_stamp(layout.DEGRADED_TOKEN_PROBABILITIES_ASSET, model_id, dataset, context.run_id,
                                   frame, mllm, labels=labels_stamp, questions=questions_stamp,
                                   degradations=described(plan))
        path, sha = storage.write_parquet(layout.DEGRADED_TOKEN_PROBABILITIES.file(model_id, dataset), frame, stamp)
        yield dg.MaterializeResult(metadata={
            "dagster/row_count": len(frame), "path": dg.MetadataValue.path(str(path)), "sha256": sha,
            "test_images": len(test), "tasks": tasks,
            "images_per_degradation": dg.MetadataValue.json({key: len(run.image_ids) for key, run in runs.items()}),
            "images_per_second": _overall_rate(runs.values()),
            "degradations": dg.MetadataValue.json(described(plan)),
            "lineage_version": stamp["version"],
        }, data_version=data_version(stamp))
        yield checkpoint_audit_result(mllm.report)

    return degraded_token_probabilities


def _yes_no_robustness_asset(partitions: dg.MultiPartitionsDefinition, plan: DegradationPlan):
    @dg.asset(
        partitions_def=partitions,
        deps=[dg.AssetDep(layout.DEGRADED_TOKEN_PROBABILITIES_ASSET, partition_mapping=SAME_MODEL_AND_DATASET),
              dg.AssetDep(layout.TOKEN_PROBABILITIES_ASSET, partition_mapping=SAME_MODEL_AND_DATASET)],
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        description=YES_NO_ROBUSTNESS_DESCRIPTION,
    )
    def yes_no_robustness(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        from focus_dagster.evaluation.robustness import prompt_robustness

        model, dataset = model_and_dataset(context)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        degraded, degraded_stamp = storage.read_stamped_parquet(
            layout.DEGRADED_TOKEN_PROBABILITIES.file(model, dataset))
        clean, clean_stamp = storage.read_stamped_parquet(layout.TOKEN_PROBABILITIES.file(model, dataset))
        variants = {(name, int(severity)): variant[["image_id", "task", "score"]]
                    for (name, severity), variant in degraded.groupby(["degradation", "severity"], sort=False)}
        frame = prompt_robustness(model, dataset, "yes_no", clean[["image_id", "task", "score"]], variants, labels,
                                  described(plan))
        return _commit_rows(context, storage, layout.YES_NO_ROBUSTNESS,
                            layout.method_robustness_key(model, dataset, "yes_no"), frame,
                            {"degraded_token_probabilities": degraded_stamp, "token_probabilities": clean_stamp,
                             "labels": labels_stamp})

    return yes_no_robustness


def _summary_asset(baseline: str | None, deps: list[str]):
    @dg.asset(
        deps=deps,
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
        read = {key: stamp_id for key, stamp_id in current.items()
                if key.split("[")[0] in layout.ROBUSTNESS_ROW_ASSETS.values()}
        stamp = lineage.stamp(layout.ROBUSTNESS_SUMMARY_ASSET, None, context.run_id, lineage.frame_version(summary),
                              code_version=code_version(), robustness_stamps=read, baseline=baseline)
        storage.replace_table(layout.ROBUSTNESS_SUMMARY, summary, stamp=stamp)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(summary), "ce_baseline": baseline or "none",
            "configurations_with_mce": int(summary["mce"].notna().sum()) if len(summary) else 0,
            "lineage_version": stamp["version"],
        }, data_version=data_version(stamp))

    return robustness_summary
