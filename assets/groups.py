"""Fairness and quality: the group attributes of the test images, the blocking check of their coverage, and the
fairness and quality metric tables that wait for it.

Performance and calibration (`metrics`) need only the predictions and the labels; fairness and quality also
need the attributes they group by. A label mapping that loses an attribute (a sex code read the wrong way)
would not fail any label check, but it would shrink or empty the groups: `attribute_coverage` fails then,
and, being blocking, keeps `fairness_metrics` and `quality_metrics` of that dataset from materialising, in
the run and across refresh ticks, while `metrics` goes on.
"""

import dagster as dg

from assets.automation import GATED_EAGER
from assets.backfill import SINGLE_RUN, Materialised, each_dataset
from assets.evaluation import EVALUATION_GROUP, VALUE_COLUMNS, MetricsConfig
from checks.conditions import WITH_ITS_ASSET
from focus_dagster import lineage
from focus_dagster.evaluation.predictions import with_lineage
from focus_dagster.labels.coverage import (
    ATTRIBUTES,
    COVERAGE_FLOOR,
    PUBLISHED,
    check_attribute_coverage,
    not_applicable_reason,
    published,
)
from focus_dagster.version import code_version
from resources import FocusStorage, layout

ATTRIBUTES_DESCRIPTION = (
    "The group attributes of one dataset's test images, as the fairness and quality axes use them: image_id, "
    f"split, {', '.join(ATTRIBUTES)} (DuckDB `{layout.ATTRIBUTES}`). Which attributes a dataset's publisher "
    f"provides: {'; '.join(a + ': ' + ', '.join(d) for a, d in PUBLISHED.items())}. The blocking check "
    f"`attribute_coverage` requires each published attribute on at least {COVERAGE_FLOOR:.0%} of the test images; "
    "an attribute the dataset does not publish is 'not applicable' there."
)
AXIS_DESCRIPTION = (
    "The {axis} rows of one dataset (DuckDB `" + str(layout.METRICS) + "`, partition `<dataset>|{axis}`): {what}, "
    "each with a 95% stratified bootstrap interval, n, n_pos, a reason where undefined (an attribute the dataset "
    "does not publish: 'not applicable'), the lineage of the predictions and a stable `metric_id`. Waits for "
    "`attribute_coverage` of `group_attributes` (blocking)."
)
FAIRNESS_WHAT = ("per sex, age (median split and bands) and camera group: positive rate, accuracy, TPR, FPR, AUROC, "
                 "ECE, then the gaps, the equalized-odds gap and the worst-group AUROC")
QUALITY_WHAT = "the same group metrics on adequate vs inadequate images and their gap adequate - inadequate"


def definitions(datasets: dg.StaticPartitionsDefinition) -> dg.Definitions:
    """group_attributes (with its blocking coverage check), fairness_metrics and quality_metrics, per dataset."""
    return dg.Definitions(assets=[_attributes_asset(datasets), _axis_asset(datasets, "fairness", FAIRNESS_WHAT),
                                  _axis_asset(datasets, "quality", QUALITY_WHAT)])


def _attributes_asset(datasets: dg.StaticPartitionsDefinition):
    @dg.asset(
        partitions_def=datasets,
        deps=["harmonised_labels"],
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        backfill_policy=SINGLE_RUN,
        description=ATTRIBUTES_DESCRIPTION,
        check_specs=[dg.AssetCheckSpec(
            "attribute_coverage", asset="group_attributes", blocking=True, automation_condition=WITH_ITS_ASSET,
            # Partitioned like its asset: each dataset has its own verdict, and one dataset's pass cannot
            # stand for another's failure at the gates downstream.
            partitions_def=datasets,
            description=f"Every attribute the dataset's publisher provides is set on at least {COVERAGE_FLOOR:.0%} of "
            "the test images (Great Expectations); attributes it does not publish pass as not applicable. A failure "
            "blocks fairness_metrics and quality_metrics of the dataset, not metrics.",
        )],
    )
    def group_attributes(context: dg.AssetExecutionContext, storage: FocusStorage):
        yield from each_dataset(context, lambda dataset: _attributes(context, dataset, storage))

    return group_attributes


def _attributes(context, dataset: str, storage: FocusStorage) -> Materialised:
    """One dataset's test images with their group attributes, and the verdict of the coverage check."""
    labels, labels_stamp = storage.read_stamped_labels(dataset)
    coverage = check_attribute_coverage(dataset, labels)
    frame = labels.loc[labels["split"] == "test", ["image_id", "split", *ATTRIBUTES]].assign(dataset=dataset)
    stamp = lineage.stamp("group_attributes", dataset, context.run_id, lineage.frame_version(frame),
                          code_version=code_version(), inputs={"labels": labels_stamp}, usable=coverage.usable(),
                          coverage_passed=coverage.passed, failing=coverage.failing)
    storage.replace_partition(layout.ATTRIBUTES, dataset, frame, stamp=stamp)
    summary = coverage.summary()
    verdict = dg.AssetCheckResult(
        check_name="attribute_coverage", passed=coverage.passed,
        description=None if coverage.passed else coverage.failure_message(),
        metadata={"coverage": dg.MetadataValue.json(summary), "expectations": dg.MetadataValue.json(
            coverage.expectations), **({} if coverage.passed else {"reason": coverage.failure_message()})},
    )
    return Materialised({"group_attributes": {"dagster/row_count": len(frame),
                                              "coverage": dg.MetadataValue.json(summary["attributes"])}}, (verdict,))


def _axis_asset(datasets: dg.StaticPartitionsDefinition, axis: str, what: str):
    @dg.asset(
        name=f"{axis}_metrics",
        partitions_def=datasets,
        deps=["predictions", "group_attributes"],
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

    (samples,), predictions_stamp = storage.read_stamped([(layout.SAMPLES, dataset)], "predictions", dataset)
    (attributes,), attributes_stamp = storage.read_stamped([(layout.ATTRIBUTES, dataset)], "group_attributes",
                                                           dataset)
    usable = _usable_attributes(dataset, predictions_stamp, attributes_stamp)
    reasons = {a: not_applicable_reason(dataset, a) for a in ATTRIBUTES if a not in published(dataset)}
    rows = metric_rows(samples, attributes[["image_id", *ATTRIBUTES]], usable,
                       Settings(config.n_resamples, config.seed), axes=(axis,), reasons=reasons)
    partition = layout.axis_partition(dataset, axis)
    table = with_lineage(rows, samples, context.run_id).assign(partition=partition)
    stamp = lineage.stamp(f"{axis}_metrics", dataset, context.run_id,
                          lineage.frame_version(table, VALUE_COLUMNS),
                          code_version=code_version(),
                          inputs={"predictions": predictions_stamp, "attributes": attributes_stamp})
    storage.replace_partition(layout.METRICS, partition, table, stamp=stamp)
    defined = table["value"].notna()
    return Materialised({f"{axis}_metrics": {
        "dagster/row_count": len(table), "defined_rows": int(defined.sum()),
        "attributes": dg.MetadataValue.json({a: "grouped" if usable.get(a) else reasons.get(a, "no value")
                                             for a in ATTRIBUTES}),
    }})


def _usable_attributes(dataset: str, predictions: dict | None, attributes: dict | None) -> dict[str, bool]:
    """The attributes to group by, as `attribute_coverage` found them; refuses attributes whose coverage failed
    (a hand-launched run past the blocking check) and attributes of other labels than the predictions'."""
    if attributes is None:
        raise dg.Failure(f"group_attributes[{dataset}] is not materialised: materialise it (with its check) first.")
    if not lineage.fact(attributes, "facts", "coverage_passed"):
        raise dg.Failure(f"attribute_coverage failed for {dataset} ({lineage.fact(attributes, 'facts', 'failing')}): "
                         "the fairness and quality numbers wait until the label mapping is fixed and group_attributes "
                         "passes its check.")
    used = lineage.fact(predictions, "inputs", "labels", "version")
    grouped = lineage.fact(attributes, "inputs", "labels", "version")
    if used != grouped:
        raise dg.Failure(f"the predictions of {dataset} rest on labels version {used}, group_attributes on {grouped}: "
                         "materialise the older of the two (the refresh sensor does so on its own).")
    return {a: bool(v) for a, v in (lineage.fact(attributes, "facts", "usable") or {}).items()}

