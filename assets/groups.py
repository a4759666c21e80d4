"""Fairness and quality: the group attributes of the test images, the checks of their coverage, and the
fairness and quality metric tables that follow them.

Performance and calibration (`metrics`) need only the predictions and the labels; fairness and quality also
need the attributes they group by. A label mapping that loses an attribute (a sex code read the wrong way)
would not fail any label check, but it would shrink or empty the groups. Two checks watch for it:

- `attribute_coverage` judges each published attribute on its own and fails (WARN) naming every one below
  its floor, with its coverage. It does not block: the fairness and quality rows grouped by such an attribute
  are kept without a value, with the reason ("attribute_coverage: age is set on 82.8% of the test images
  (floor 90%)"), and the other attributes' rows are computed as usual.
- `attributes_usable` is the gate: it fails (ERROR, blocking) only when the dataset publishes attributes and
  none reaches its floor, so that the attribute table cannot serve any number. It keeps `fairness_metrics`
  and `quality_metrics` of that dataset from materialising, in the run and across refresh ticks, while
  `metrics` goes on.

Why two checks and not one blocking check with two severities: a WARN failure lets the rest of its run go
on, but the automation's gate (`all_deps_blocking_checks_passed`) asks whether each blocking check passed,
and Dagster records a failure as failed whatever its severity, so a per-attribute verdict on a blocking check
would still stop the refresh of every number of the dataset.
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
    COVERAGE_CHECK,
    COVERAGE_FLOOR,
    PUBLISHED,
    USABLE_CHECK,
    check_attribute_coverage,
    not_applicable_reason,
    published,
)
from focus_dagster.version import code_version
from resources import FocusStorage, layout

ATTRIBUTES_DESCRIPTION = (
    "The group attributes of one dataset's test images, as the fairness and quality axes use them: image_id, "
    f"split, {', '.join(ATTRIBUTES)} (DuckDB `{layout.ATTRIBUTES}`). Which attributes a dataset's publisher "
    f"provides: {'; '.join(a + ': ' + ', '.join(d) for a, d in PUBLISHED.items())}. The check "
    f"`{COVERAGE_CHECK}` requires each published attribute on at least {COVERAGE_FLOOR:.0%} of the test images and "
    "names every one below it: the rows grouped by that attribute are kept without a value, with the reason, and "
    f"the other attributes' rows flow. The blocking check `{USABLE_CHECK}` fails only when no published attribute "
    "reaches the floor. An attribute the dataset does not publish is 'not applicable' there."
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


def definitions(datasets: dg.StaticPartitionsDefinition) -> dg.Definitions:
    """group_attributes (with its coverage check and its blocking gate), fairness_metrics and quality_metrics, per
    dataset."""
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
        # Partitioned like their asset: each dataset has its own verdicts, and one dataset's pass cannot stand
        # for another's failure at the gates downstream.
        check_specs=[dg.AssetCheckSpec(
            COVERAGE_CHECK, asset="group_attributes", automation_condition=WITH_ITS_ASSET, partitions_def=datasets,
            description=f"Each attribute the dataset's publisher provides is set on at least {COVERAGE_FLOOR:.0%} of "
            "the test images (Great Expectations), judged one by one; attributes it does not publish pass as not "
            "applicable. A failure (WARN) names each attribute below the floor with its coverage; the fairness and "
            "quality rows grouped by it are kept without a value and with that reason, the others flow.",
        ), dg.AssetCheckSpec(
            USABLE_CHECK, asset="group_attributes", blocking=True, automation_condition=WITH_ITS_ASSET,
            partitions_def=datasets,
            description=f"At least one attribute the dataset publishes reaches the {COVERAGE_FLOOR:.0%} floor (a "
            "dataset that publishes none passes: its rows say 'not applicable'). A failure means the label mapping "
            "lost the metadata as a whole: it blocks fairness_metrics and quality_metrics of the dataset, in the run "
            "and across refresh ticks, not metrics.",
        )],
    )
    def group_attributes(context: dg.AssetExecutionContext, storage: FocusStorage):
        yield from each_dataset(context, lambda dataset: _attributes(context, dataset, storage))

    return group_attributes


def _attributes(context, dataset: str, storage: FocusStorage) -> Materialised:
    """One dataset's test images with their group attributes, and the verdicts of its two checks."""
    labels, labels_stamp = storage.read_stamped_labels(dataset)
    coverage = check_attribute_coverage(dataset, labels)
    frame = labels.loc[labels["split"] == "test", ["image_id", "split", *ATTRIBUTES]].assign(dataset=dataset)
    stamp = lineage.stamp("group_attributes", dataset, context.run_id, lineage.frame_version(frame),
                          code_version=code_version(), inputs={"labels": labels_stamp}, usable=coverage.usable(),
                          withheld=coverage.withheld(), fault=coverage.fault)
    storage.replace_partition(layout.ATTRIBUTES, dataset, frame, stamp=stamp)
    summary = coverage.summary()
    return Materialised({"group_attributes": {"dagster/row_count": len(frame),
                                              "coverage": dg.MetadataValue.json(summary["attributes"])}},
                        (_coverage_verdict(coverage, summary), _usable_verdict(coverage)),
                        stamps={"group_attributes": stamp})


def _coverage_verdict(coverage, summary: dict) -> dg.AssetCheckResult:
    """attribute_coverage: each attribute below the floor named with its coverage; a warning, since the rows of
    the other attributes flow."""
    message = None if coverage.passed else coverage.failure_message()
    below = {a: {"coverage": coverage.shares[a], "floor": COVERAGE_FLOOR} for a in coverage.failing}
    return dg.AssetCheckResult(
        check_name=COVERAGE_CHECK, passed=coverage.passed, severity=dg.AssetCheckSeverity.WARN, description=message,
        metadata={"coverage": dg.MetadataValue.json(summary), "expectations": dg.MetadataValue.json(
            coverage.expectations), **({"below_floor": dg.MetadataValue.json(below), "reason": message}
                                       if message else {})},
    )


def _usable_verdict(coverage) -> dg.AssetCheckResult:
    """attributes_usable: an error, blocking, only when no published attribute reaches the floor."""
    fault = coverage.fault
    return dg.AssetCheckResult(
        check_name=USABLE_CHECK, passed=fault is None, severity=dg.AssetCheckSeverity.ERROR, description=fault,
        metadata={"withheld": dg.MetadataValue.json(coverage.withheld()), **({"reason": fault} if fault else {})},
    )


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
    usable, withheld = _usable_attributes(dataset, predictions_stamp, attributes_stamp)
    reasons = {a: not_applicable_reason(dataset, a) for a in ATTRIBUTES if a not in published(dataset)}
    # A withheld attribute is grouped like a usable one, so that its rows exist; they carry the reason, no value.
    grouped = {a: usable.get(a, False) or a in withheld for a in ATTRIBUTES}
    rows = metric_rows(samples, attributes[["image_id", *ATTRIBUTES]], grouped,
                       Settings(config.n_resamples, config.seed), axes=(axis,), reasons=reasons,
                       say=context.log.info, what=f"{axis} metrics {dataset}", withheld=withheld)
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
        "attributes": dg.MetadataValue.json({a: "grouped" if usable.get(a) else withheld.get(a) or reasons.get(
            a, "no value") for a in ATTRIBUTES}),
    }}, stamps={f"{axis}_metrics": stamp})


def _usable_attributes(dataset: str, predictions: dict | None, attributes: dict | None
                       ) -> tuple[dict[str, bool], dict[str, str]]:
    """The attributes to group by and those withheld (attribute -> reason), as the coverage checks found them;
    refuses an attribute table the blocking check failed (a hand-launched run past it) and attributes of other
    labels than the predictions'."""
    if attributes is None:
        raise dg.Failure(f"group_attributes[{dataset}] is not materialised: materialise it (with its checks) first.")
    fault = lineage.fact(attributes, "facts", "fault")
    if fault:
        raise dg.Failure(f"{USABLE_CHECK} failed for {dataset}: {fault}")
    used = lineage.fact(predictions, "inputs", "labels", "version")
    grouped = lineage.fact(attributes, "inputs", "labels", "version")
    if used != grouped:
        raise dg.Failure(f"the predictions of {dataset} rest on labels version {used}, group_attributes on {grouped}: "
                         "materialise the older of the two (the refresh sensor does so on its own).")
    usable = {a: bool(v) for a, v in (lineage.fact(attributes, "facts", "usable") or {}).items()}
    return usable, dict(lineage.fact(attributes, "facts", "withheld") or {})

