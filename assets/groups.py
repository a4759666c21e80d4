"""The group attributes of the test images, which the fairness and quality metric tables group by
(assets/evaluation/metrics.py), and the two checks of their coverage (checks/attributes.py).

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
from assets.evaluation import EVALUATION_GROUP
from checks.attributes import attribute_check_specs, coverage_verdict, usable_verdict
from focus_dagster import lineage
from focus_dagster.labels.coverage import (
    ATTRIBUTES,
    COVERAGE_CHECK,
    COVERAGE_FLOOR,
    PUBLISHED,
    USABLE_CHECK,
    check_attribute_coverage,
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


def definitions(datasets: dg.StaticPartitionsDefinition) -> dg.Definitions:
    """group_attributes per dataset, with its coverage check and its blocking gate."""
    return dg.Definitions(assets=[_attributes_asset(datasets)])


def _attributes_asset(datasets: dg.StaticPartitionsDefinition):
    @dg.asset(
        partitions_def=datasets,
        deps=[layout.HARMONISED_LABELS],
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        backfill_policy=SINGLE_RUN,
        description=ATTRIBUTES_DESCRIPTION,
        check_specs=attribute_check_specs(datasets),
    )
    def group_attributes(context: dg.AssetExecutionContext, storage: FocusStorage):
        yield from each_dataset(context, lambda dataset: _attributes(context, dataset, storage))

    return group_attributes


def _attributes(context, dataset: str, storage: FocusStorage) -> Materialised:
    """One dataset's test images with their group attributes, and the verdicts of its two checks."""
    labels, labels_stamp = storage.read_stamped_labels(dataset)
    coverage = check_attribute_coverage(dataset, labels)
    frame = labels.loc[labels["split"] == "test", ["image_id", "split", *ATTRIBUTES]].assign(dataset=dataset)
    stamp = lineage.stamp(layout.GROUP_ATTRIBUTES, dataset, context.run_id, lineage.frame_version(frame),
                          code_version=code_version(), inputs={"labels": labels_stamp}, usable=coverage.usable(),
                          withheld=coverage.withheld(), fault=coverage.fault)
    storage.replace_partition(layout.ATTRIBUTES, dataset, frame, stamp=stamp)
    summary = coverage.summary()
    return Materialised({layout.GROUP_ATTRIBUTES: {"dagster/row_count": len(frame),
                                              "coverage": dg.MetadataValue.json(summary["attributes"])}},
                        (coverage_verdict(coverage, summary), usable_verdict(coverage)),
                        stamps={layout.GROUP_ATTRIBUTES: stamp})
