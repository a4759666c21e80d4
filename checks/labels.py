"""Great Expectations checks on the harmonised labels, one Dagster asset check per property.

Blocking checks (label values, rule consistency, split leakage, row accounting) stop everything
downstream of a dataset whose labels cannot be trusted; the others warn about what limits the analysis
(missing metadata, no patient ids, tasks with too few positives, referable DR without any DR).
"""

from dataclasses import dataclass
from typing import Callable

import dagster as dg

from checks.conditions import WITH_ITS_ASSET
from focus_dagster.labels import RULES
from focus_dagster.labels import expectations as gx_checks
from resources import FocusStorage, layout

LABELS = dg.AssetKey("harmonised_labels")


@dataclass(frozen=True)
class LabelCheck:
    name: str
    blocking: bool
    run: Callable  # (storage, dataset key) -> CheckOutcome
    description: str


def _labels(storage: FocusStorage, key: str):
    return storage.read_partition(layout.LABELS, key)


def _rule_consistency(storage: FocusStorage, key: str):
    labels = _labels(storage, key)
    records = storage.read_records(key)
    recomputed = RULES[key].task_labels(records)
    recomputed.insert(0, "image_id", records["image_id"].astype(str))
    recomputed = recomputed[recomputed["image_id"].isin(set(labels["image_id"]))]
    return gx_checks.check_rule_consistency(labels, recomputed.reset_index(drop=True))


def _row_accounting(storage: FocusStorage, key: str):
    records_in = len(storage.read_records(key)) + len(storage.read_partition(layout.QUARANTINE, key))
    rejects = storage.read_partition(layout.LABEL_REJECTS, key)
    return gx_checks.check_row_accounting(records_in, len(_labels(storage, key)), len(rejects))


LABEL_CHECKS = [
    LabelCheck("label_values", True, lambda s, k: gx_checks.check_label_values(_labels(s, k)),
               gx_checks.check_label_values.__doc__),
    LabelCheck("rule_consistency", True, _rule_consistency, gx_checks.check_rule_consistency.__doc__),
    LabelCheck("split_leakage", True, lambda s, k: gx_checks.check_split_leakage(_labels(s, k)),
               gx_checks.check_split_leakage.__doc__),
    LabelCheck("row_accounting", True, _row_accounting, gx_checks.check_row_accounting.__doc__),
    # Warnings: the reference rules themselves give referable DR without any DR (edema at ICDR 0), and
    # metadata, patient ids and positives are properties of the dataset, not defects of the pipeline.
    LabelCheck("referable_implies_any_dr", False, lambda s, k: gx_checks.check_referable_implies_any(_labels(s, k)),
               gx_checks.check_referable_implies_any.__doc__),
    LabelCheck("metadata_coverage", False, lambda s, k: gx_checks.check_metadata_coverage(_labels(s, k)),
               gx_checks.check_metadata_coverage.__doc__),
    LabelCheck("patient_ids", False, lambda s, k: gx_checks.check_patient_ids(_labels(s, k)),
               gx_checks.check_patient_ids.__doc__),
    LabelCheck("degenerate_tasks", False, lambda s, k: gx_checks.check_degenerate_tasks(_labels(s, k)),
               gx_checks.check_degenerate_tasks.__doc__),
]


def build_label_checks(partitions: dg.PartitionsDefinition) -> list:
    return [_asset_check(check, partitions) for check in LABEL_CHECKS]


def _asset_check(check: LabelCheck, partitions: dg.PartitionsDefinition):
    @dg.asset_check(
        asset=LABELS,
        name=check.name,
        partitions_def=partitions,
        blocking=check.blocking,
        pool="duckdb",
        automation_condition=WITH_ITS_ASSET,
        description=_first_paragraph(check.description),
    )
    def _run(context: dg.AssetCheckExecutionContext, storage: FocusStorage) -> dg.AssetCheckResult:
        outcome = check.run(storage, context.partition_key)
        return outcome_result(outcome, check.blocking)

    return _run


def outcome_result(outcome, blocking: bool) -> dg.AssetCheckResult:
    """A GX outcome as a Dagster check result: counts, examples and the expectations that ran."""
    summary = outcome.summary()
    return dg.AssetCheckResult(
        passed=outcome.success,
        severity=dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN,
        metadata={
            "unexpected_count": summary["unexpected_count"],
            "checked_count": summary["checked_count"],
            "examples": dg.MetadataValue.json(summary["examples"]),
            "expectations": dg.MetadataValue.json(summary["expectations"]),
            "info": dg.MetadataValue.json(summary["info"]),
        },
    )


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())
