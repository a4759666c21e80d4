"""predictions: one dataset's per-sample table, read from every model output the selection implies."""

from functools import partial

import dagster as dg

from assets.automation import GATED_EAGER
from assets.backfill import SINGLE_RUN, Materialised, each_dataset
from assets.evaluation.shared import EVALUATION_GROUP
from assets.partitions import BY_DATASET, DUAL_ENCODERS, ENCODERS, MLLMS, fan_out
from focus_dagster import lineage
from focus_dagster.evaluation.assembly import (
    ModelOutput,
    PredictionsTable,
    configurations_count,
    predictions_table,
    unavailable_summary,
)
from focus_dagster.evaluation.configurations import (
    LORA_METHOD,
    adapted_configurations,
    in_domain_configurations,
    methods_of,
)
from focus_dagster.evaluation.inputs import not_materialised, unusable_output
from focus_dagster.evaluation.predictions import train_youden, with_labels
from focus_dagster.evaluation.probes import PROBE_METHOD
from resources import FocusStorage, layout

PREDICTIONS_DESCRIPTION = (
    f"One per-sample table for every interface and method on one dataset (DuckDB `{layout.SAMPLES}`): linear "
    "probe, zero-shot and yes/no rows with score, reference-form score, Youden threshold, label, split, and the "
    "lineage of each row (dataset release, labels version, model revision and weights hash, the run that produced "
    "the model output, code version). Rows with non-finite scores are rejected and counted. Every configuration the "
    "selection implies (model x method of its interface x task the labels define) has test-split rows here or a "
    f"row with the reason in `{layout.UNAVAILABLE}`: upstream not materialised or blocked, probe not fit (the "
    "training split lacks a class), no scores for the task, every score rejected."
)


def predictions_asset(datasets: dg.StaticPartitionsDefinition, specs: dict, scored: list):
    deps = [dg.AssetDep(layout.HARMONISED_LABELS)]
    interfaces = {s.interface for s in specs.values()}
    if interfaces & set(ENCODERS):
        deps.append(dg.AssetDep(layout.PROBE_PREDICTIONS, partition_mapping=BY_DATASET))
    if interfaces & set(DUAL_ENCODERS):
        deps.append(dg.AssetDep(layout.ZERO_SHOT_SCORES, partition_mapping=BY_DATASET))
    if interfaces & set(MLLMS):
        deps.append(dg.AssetDep(layout.TOKEN_PROBABILITIES_ASSET, partition_mapping=BY_DATASET))
    if scored:  # adapted scores `adapter@dataset` feed the dataset's table
        deps.append(dg.AssetDep(layout.ADAPTED_TOKEN_PROBABILITIES_ASSET, partition_mapping=fan_out((e.key, e.dataset)
                                                                                          for e in scored)))

    @dg.asset(
        partitions_def=datasets,
        deps=deps,
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        backfill_policy=SINGLE_RUN,
        description=PREDICTIONS_DESCRIPTION,
    )
    def predictions(context: dg.AssetExecutionContext, storage: FocusStorage):
        yield from each_dataset(context, lambda dataset: _assemble_predictions(context, dataset, storage,
                                                                               specs, scored))

    return predictions


def _assemble_predictions(context, dataset: str, storage: FocusStorage, specs: dict, scored: list) -> Materialised:
    """One dataset's predictions table: every configuration's test rows from the model outputs it reads."""
    labels, labels_stamp = storage.read_stamped_labels(dataset)
    adapted = [e for e in scored if e.dataset == dataset]
    expected = in_domain_configurations(dataset, labels, {model: spec.interface for model, spec in specs.items()})
    expected += adapted_configurations(dataset, labels, [(e.adapter.model, e.adapter.task, e.adapter.dataset)
                                                         for e in adapted])
    table = predictions_table(dataset, context.run_id, labels_stamp, expected,
                              _outputs(storage, dataset, labels, labels_stamp, specs, adapted))
    tables = [(layout.SAMPLES, dataset, table.frame), (layout.UNAVAILABLE, dataset, table.unavailable)]
    storage.replace_partitions(tables, stamp=table.stamp, stamps=table.stamps)
    return Materialised({layout.PREDICTIONS: _predictions_metadata(table, len(expected), labels_stamp)},
                        stamps={layout.PREDICTIONS: table.stamp})


def _predictions_metadata(table: PredictionsTable, expected: int, labels_stamp: dict | None) -> dict:
    frame = table.frame
    return {
        "dagster/row_count": len(frame),
        "configurations": configurations_count(frame),
        "expected_configurations": expected,
        "rows_by_method": dg.MetadataValue.json(frame["method"].value_counts().to_dict()),
        "rejected_rows": dg.MetadataValue.json(table.rejected),
        "rejected_examples": dg.MetadataValue.json(table.examples[:10]),
        "unavailable": dg.MetadataValue.json(unavailable_summary(table.gaps)),
        "predictions_version": table.version,
        "labels_version": labels_stamp["version"] if labels_stamp else "",
    }


def _outputs(storage: FocusStorage, dataset: str, labels, labels_stamp, specs: dict, adapted: list):
    """((model, method, adapter key), interface, reader) of every model output the predictions of a dataset read:
    each model's methods (adapter key ""), then each adapter scored on it (one output per adapter). Each is read
    only when the table comes to it, so one output at a time is held beside the rows already assembled."""
    for model, spec in specs.items():
        for method in methods_of(spec.interface):
            yield ((model, method, ""), spec.interface,
                   partial(_READERS[method], storage, model, dataset, labels, labels_stamp))
    for evaluation in adapted:
        adapter = evaluation.adapter
        yield ((adapter.model, LORA_METHOD, adapter.key), specs[adapter.model].interface,
               partial(_adapted_source, storage, adapter, dataset, labels, labels_stamp))


def _probe_source(storage, model, dataset, labels, labels_stamp) -> ModelOutput:
    scores, stamp, reason = _stamped_output(storage, layout.PROBE_PREDICTIONS, layout.PROBE_SCORES, model, dataset,
                                            labels_stamp)
    if reason:
        return ModelOutput(stamp, reason=reason)
    return ModelOutput(stamp, with_labels(scores, labels, f"probe_predictions {model}/{dataset}"),
                       skipped=lineage.fact(stamp, "facts", "skipped") or {})


def _stamped_output(storage, asset: str, files, model: str, dataset: str, labels_stamp):
    """A model output file and its stamp, or why it cannot be used with the labels read now."""
    path = files.file(model, dataset)
    if not storage.artifact_path(path).exists():
        return None, None, not_materialised(asset, model, dataset)
    scores, stamp = storage.read_stamped_parquet(path)
    return scores, stamp, unusable_output(stamp, labels_stamp, asset, model, dataset)


def _zero_shot_source(storage, model, dataset, labels, labels_stamp) -> ModelOutput:
    key = layout.model_dataset_row_key(model, dataset)
    (scores,), stamp = storage.read_stamped([(layout.ZERO_SHOT, key)], layout.ZERO_SHOT_SCORES, key)
    if stamp is None and scores.empty:
        return ModelOutput(reason=not_materialised(layout.ZERO_SHOT_SCORES, model, dataset))
    reason = unusable_output(stamp, labels_stamp, layout.ZERO_SHOT_SCORES, model, dataset)
    if reason:
        return ModelOutput(stamp, reason=reason)
    frame = train_youden(with_labels(scores[["image_id", "task", "score"]], labels,
                                     f"zero_shot_scores {model}/{dataset}"))
    return ModelOutput(stamp, frame.assign(train_dataset=None))


def _yes_no_source(storage, model, dataset, labels, labels_stamp) -> ModelOutput:
    scores, stamp, reason = _stamped_output(storage, layout.TOKEN_PROBABILITIES_ASSET, layout.TOKEN_PROBABILITIES,
                                            model, dataset, labels_stamp)
    if reason:
        return ModelOutput(stamp, reason=reason)
    frame = train_youden(with_labels(_yes_no_scores(scores), labels, f"token_probabilities {model}/{dataset}"))
    return ModelOutput(stamp, frame.assign(train_dataset=None))


def _adapted_source(storage, adapter, dataset, labels, labels_stamp) -> ModelOutput:
    """The scores of `adapter` on `dataset` (adapted_token_probabilities), or why there are none: no adapter was
    trained (the reason recorded by lora_adapters), not materialised, or computed from other labels."""
    skipped = storage.adapter_skipped_reason(adapter.key)
    if skipped:
        return ModelOutput(reason=f"no LoRA adapter {adapter.key}: {skipped}")
    scores, stamp, reason = _stamped_output(storage, layout.ADAPTED_TOKEN_PROBABILITIES_ASSET,
                                            layout.ADAPTED_TOKEN_PROBABILITIES, adapter.key, dataset, labels_stamp)
    if reason:
        return ModelOutput(stamp, reason=reason)
    frame = train_youden(with_labels(_yes_no_scores(scores), labels,
                                     f"adapted_token_probabilities {adapter.key}@{dataset}"))
    return ModelOutput(stamp, frame.assign(train_dataset=adapter.dataset))


def _yes_no_scores(scores):
    """The columns of a yes/no output the table keeps, the reference benchmark's p_yes as the reference score."""
    return scores.rename(columns={"p_yes_reference": "score_reference"})[["image_id", "task", "score",
                                                                           "score_reference"]]


# The reader of each method's model output (the methods of an interface: configurations.METHODS).
_READERS = {PROBE_METHOD: _probe_source, "zero_shot": _zero_shot_source, "yes_no": _yes_no_source}
