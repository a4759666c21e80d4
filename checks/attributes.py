"""The checks of the group attributes: coverage per attribute (a warning) and the gate (blocking).

Both are evaluated with their asset, `group_attributes`, from the coverage the step measured: see
assets/groups.py for why there are two checks and not one with two severities.
"""

import dagster as dg

from checks.conditions import WITH_ITS_ASSET
from focus_dagster.labels.coverage import COVERAGE_CHECK, COVERAGE_FLOOR, USABLE_CHECK
from resources import layout

def attribute_check_specs(datasets: dg.PartitionsDefinition) -> list[dg.AssetCheckSpec]:
    """attribute_coverage and attributes_usable, partitioned like their asset: each dataset has its own verdicts,
    and one dataset's pass cannot stand for another's failure at the gates downstream."""
    return [dg.AssetCheckSpec(
        COVERAGE_CHECK, asset=layout.GROUP_ATTRIBUTES, automation_condition=WITH_ITS_ASSET, partitions_def=datasets,
        description=f"Each attribute the dataset's publisher provides is set on at least {COVERAGE_FLOOR:.0%} of "
        "the test images (Great Expectations), judged one by one; attributes it does not publish pass as not "
        "applicable. A failure (WARN) names each attribute below the floor with its coverage; the fairness and "
        "quality rows grouped by it are kept without a value and with that reason, the others flow.",
    ), dg.AssetCheckSpec(
        USABLE_CHECK, asset=layout.GROUP_ATTRIBUTES, blocking=True, automation_condition=WITH_ITS_ASSET,
        partitions_def=datasets,
        description=f"At least one attribute the dataset publishes reaches the {COVERAGE_FLOOR:.0%} floor (a "
        "dataset that publishes none passes: its rows say 'not applicable'). A failure means the label mapping "
        "lost the metadata as a whole: it blocks fairness_metrics and quality_metrics of the dataset, in the run "
        "and across refresh ticks, not metrics.",
    )]


def coverage_verdict(coverage, summary: dict) -> dg.AssetCheckResult:
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


def usable_verdict(coverage) -> dg.AssetCheckResult:
    """attributes_usable: an error, blocking, only when no published attribute reaches the floor."""
    fault = coverage.fault
    return dg.AssetCheckResult(
        check_name=USABLE_CHECK, passed=fault is None, severity=dg.AssetCheckSeverity.ERROR, description=fault,
        metadata={"withheld": dg.MetadataValue.json(coverage.withheld()), **({"reason": fault} if fault else {})},
    )
