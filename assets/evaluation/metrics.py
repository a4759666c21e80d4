"""The metric tables of one dataset: performance and calibration (`metrics`), and the fairness and quality
axes, which also need the group attributes and wait for their blocking coverage check."""

import dagster as dg
import pandas as pd

from assets.automation import GATED_EAGER
from assets.backfill import SINGLE_RUN, Materialised, each_dataset
from assets.evaluation.shared import EVALUATION_GROUP, VALUE_COLUMNS, MetricsConfig
from focus_dagster import lineage
from focus_dagster.evaluation.inputs import attributes_refusal, mixed_labels, recorded_attributes
from focus_dagster.evaluation.leaderboard import leaderboard_markdown
from focus_dagster.evaluation.predictions import with_lineage
from focus_dagster.labels.coverage import ATTRIBUTES, COVERAGE_CHECK, USABLE_CHECK, not_applicable_reason, published
from focus_dagster.version import code_version
from resources import FocusStorage, layout

METRICS_DESCRIPTION = (
    f"Performance and calibration of one dataset (DuckDB `{layout.METRICS}`, partition `<dataset>`, one row per "
    "number), each with a 95% stratified bootstrap interval, n, n_pos, a reason where undefined, the lineage of its "
    "predictions, and a stable `metric_id` that `focus trace` resolves. A configuration without predictions has one "
    f"row: its AUROC (axis performance, group empty), null, with the reason recorded in `{layout.UNAVAILABLE}`. "
    "Fairness and quality are `fairness_metrics` and `quality_metrics`, which wait for the attribute coverage check."
)
AXIS_DESCRIPTION = (
    "The {axis} rows of one dataset (DuckDB `" + str(layout.METRICS) + "`, partition `<dataset>|{axis}`): {what}, "
    "each with a 95% stratified bootstrap interval, n, n_pos, a reason where undefined (an attribute the dataset "
    "does not publish: 'not applicable'; one below its coverage floor: '" + COVERAGE_CHECK + ": age is set on "
    "82.8% of the test images (floor 90%)', on every row grouped by it), the lineage of the predictions and a "
    "stable `metric_id`. Waits for `" + USABLE_CHECK + "` of `group_attributes` (blocking; it fails only when no "
    "published attribute reaches its floor)."
)
FAIRNESS_WHAT = ("per sex, age (median split and bands) and camera group: positive rate, accuracy, TPR, FPR, AUROC, "
                 "ECE, then the gaps, the equalized-odds gap and the worst-group AUROC")
QUALITY_WHAT = "the same group metrics on adequate vs inadequate images and their gap adequate - inadequate"


# ------------------------------------------------------------------------------ performance and calibration


def metrics_asset(datasets: dg.StaticPartitionsDefinition, checks: frozenset[str]):
    @dg.asset(
        partitions_def=datasets,
        deps=[layout.PREDICTIONS, layout.HARMONISED_LABELS],
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        backfill_policy=SINGLE_RUN,
        description=METRICS_DESCRIPTION,
    )
    def metrics(context: dg.AssetExecutionContext, config: MetricsConfig, storage: FocusStorage):
        yield from each_dataset(context, lambda dataset: _dataset_metrics(context, dataset, config, storage, checks))

    return metrics


def _dataset_metrics(context, dataset: str, config: MetricsConfig, storage: FocusStorage,
                     checks: frozenset[str] = frozenset()) -> Materialised:
    """One dataset's performance and calibration rows, from its predictions and labels of one snapshot."""
    from focus_dagster.evaluation.tables import Settings, metric_rows, with_unavailable

    labels, labels_stamp = storage.read_stamped_labels(dataset)
    (samples, unavailable), predictions_stamp = storage.read_stamped(
        [(layout.SAMPLES, dataset), (layout.UNAVAILABLE, dataset)], layout.PREDICTIONS, dataset)
    _refuse(mixed_labels(predictions_stamp, labels_stamp, dataset))
    rows = metric_rows(samples, labels[["image_id"]], {}, Settings(config.n_resamples, config.seed),
                       axes=("performance", "calibration"), say=context.log.info, what=f"metrics {dataset}")
    table = with_unavailable(with_lineage(rows, samples, context.run_id), unavailable, context.run_id)
    table = table.assign(partition=dataset)
    stamp = lineage.stamp(layout.METRICS_ASSET, dataset, context.run_id, lineage.frame_version(table, VALUE_COLUMNS),
                          code_version=code_version(), inputs={"predictions": predictions_stamp})
    storage.replace_partition(layout.METRICS, dataset, table, stamp=stamp)
    return Materialised({layout.METRICS_ASSET: metrics_metadata(table, len(unavailable), checks)},
                        stamps={layout.METRICS_ASSET: stamp})


def _refuse(reason: str | None) -> None:
    """Fail the step with the rule's reason (a Failure shows the sentence in the UI, without a traceback)."""
    if reason:
        raise dg.Failure(reason)


def metrics_metadata(table: pd.DataFrame, unavailable: int, checks: frozenset[str] = frozenset()) -> dict:
    defined = table["value"].notna()
    return {
        "dagster/row_count": len(table),
        "rows_by_axis": dg.MetadataValue.json(table["axis"].value_counts().to_dict()),
        "undefined_rows": int((~defined).sum()),
        "unavailable_configurations": unavailable,
        "leaderboard": dg.MetadataValue.md(leaderboard_markdown(table, pipeline_checks=checks)),
    }


# ------------------------------------------------------------------------------------- fairness and quality


def axis_asset(datasets: dg.StaticPartitionsDefinition, axis: str, what: str):
    @dg.asset(
        name=layout.AXIS_ASSETS[axis],
        partitions_def=datasets,
        deps=[layout.PREDICTIONS, layout.GROUP_ATTRIBUTES],
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        backfill_policy=SINGLE_RUN,
        description=AXIS_DESCRIPTION.format(axis=axis, what=what),
    )
    def axis_metrics(context: dg.AssetExecutionContext, config: MetricsConfig, storage: FocusStorage):
        yield from each_dataset(context, lambda dataset: _axis_metrics(context, dataset, axis, config, storage))

    return axis_metrics


def _axis_metrics(context, dataset: str, axis: str, config: MetricsConfig, storage: FocusStorage) -> Materialised:
    """One dataset's metric rows on one axis (fairness or quality), written as its own metrics partition."""
    from focus_dagster.evaluation.tables import Settings, metric_rows

    (samples,), predictions_stamp = storage.read_stamped([(layout.SAMPLES, dataset)], layout.PREDICTIONS, dataset)
    (attributes,), attributes_stamp = storage.read_stamped([(layout.ATTRIBUTES, dataset)], layout.GROUP_ATTRIBUTES,
                                                           dataset)
    _refuse(attributes_refusal(dataset, predictions_stamp, attributes_stamp))
    usable, withheld = recorded_attributes(attributes_stamp)
    reasons = {a: not_applicable_reason(dataset, a) for a in ATTRIBUTES if a not in published(dataset)}
    # A withheld attribute is grouped like a usable one, so that its rows exist; they carry the reason, no value.
    grouped = {a: usable.get(a, False) or a in withheld for a in ATTRIBUTES}
    rows = metric_rows(samples, attributes[["image_id", *ATTRIBUTES]], grouped,
                       Settings(config.n_resamples, config.seed), axes=(axis,), reasons=reasons,
                       say=context.log.info, what=f"{axis} metrics {dataset}", withheld=withheld)
    partition = layout.axis_partition(dataset, axis)
    table = with_lineage(rows, samples, context.run_id).assign(partition=partition)
    stamp = lineage.stamp(layout.AXIS_ASSETS[axis], dataset, context.run_id,
                          lineage.frame_version(table, VALUE_COLUMNS),
                          code_version=code_version(),
                          inputs={"predictions": predictions_stamp, "attributes": attributes_stamp})
    storage.replace_partition(layout.METRICS, partition, table, stamp=stamp)
    defined = table["value"].notna()
    return Materialised({layout.AXIS_ASSETS[axis]: {
        "dagster/row_count": len(table), "defined_rows": int(defined.sum()),
        "attributes": dg.MetadataValue.json({a: "grouped" if usable.get(a) else withheld.get(a) or reasons.get(
            a, "no value") for a in ATTRIBUTES}),
    }}, stamps={layout.AXIS_ASSETS[axis]: stamp})
