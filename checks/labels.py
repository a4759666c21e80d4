"""Great Expectations checks on the harmonised labels, one Dagster asset check per property.

Blocking checks (label values, rule consistency, split leakage, row accounting, a test side) stop everything
downstream of a dataset whose labels cannot be trusted; the others warn about what limits the analysis
(missing metadata, no patient ids, tasks with too few positives, referable DR without any DR).

The label checks are evaluated in one step (a subsettable multi-asset check): each table is read once
(four reads, where one step per check made twelve) and a step's start, resources and bookkeeping are paid
once. Each check keeps its own key, severity, blocking flag and automation condition, and any
subset of them can still be run on its own. A check that raises gets no verdict; the others still report
theirs, then the step fails with its error.
"""

from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import dagster as dg
import pandas as pd

from checks.conditions import WITH_ITS_ASSET
from checks.partitions import evaluate_partitions
from focus_dagster.labels.rule_lookup import rule_for
from focus_dagster.labels import expectations as gx_checks
from focus_dagster.labels import rule_sql
from resources import FocusStorage, layout

LABELS = dg.AssetKey(layout.HARMONISED_LABELS)
STEP_NAME = "harmonised_labels_checks"


class LabelTables:
    """The tables of one dataset the checks read, each read from storage on first use and then shared."""

    def __init__(self, storage: FocusStorage, key: str):
        self.storage = storage
        self.key = key

    @cached_property
    def labels(self) -> pd.DataFrame:
        return self.storage.read_partition(layout.LABELS, self.key)

    @cached_property
    def records(self) -> pd.DataFrame:
        return self.storage.read_records(self.key)

    @cached_property
    def quarantine(self) -> pd.DataFrame:
        return self.storage.read_partition(layout.QUARANTINE, self.key)

    @cached_property
    def rejects(self) -> pd.DataFrame:
        return self.storage.read_partition(layout.LABEL_REJECTS, self.key)


@dataclass(frozen=True)
class LabelCheck:
    name: str
    blocking: bool
    evaluate: Callable[[LabelTables], gx_checks.CheckOutcome]
    description: str

    def run(self, storage: FocusStorage, key: str) -> gx_checks.CheckOutcome:
        """The check on its own, reading what it needs from storage."""
        return self.evaluate(LabelTables(storage, key))


def _rule_consistency(tables: LabelTables):
    """Stored labels and the pipeline's rule functions, both against the independent SQL rules (datasets.md),
    and the images kept against the independent SQL subset (with the rejects, for split reasons)."""
    labels, records = tables.labels, tables.records
    kept = set(labels["image_id"].astype(str))
    recomputed = rule_for(tables.key).task_labels(records)
    recomputed.insert(0, "image_id", records["image_id"].astype(str))
    recomputed = recomputed[recomputed["image_id"].isin(kept)]
    # Every record, with its subset verdict: the check compares labels on the kept ones only.
    independent = rule_sql.independent_labels(tables.key, records, subset=True)
    outcome = gx_checks.check_rule_consistency(labels, recomputed.reset_index(drop=True),
                                               independent.reset_index(drop=True), rejects=tables.rejects)
    outcome.info["independent_rules_sql"] = dict(rule_sql.rules_for(tables.key))
    outcome.info["independent_subset_sql"] = rule_sql.SUBSET_SQL.get(tables.key, "TRUE (no subset rule)")
    return outcome


def _row_accounting(tables: LabelTables):
    records_in = len(tables.records) + len(tables.quarantine)
    return gx_checks.check_row_accounting(records_in, len(tables.labels), len(tables.rejects))


LABEL_CHECKS = [
    LabelCheck("label_values", True, lambda t: gx_checks.check_label_values(t.labels),
               gx_checks.check_label_values.__doc__),
    LabelCheck("rule_consistency", True, _rule_consistency, gx_checks.check_rule_consistency.__doc__),
    LabelCheck("split_leakage", True, lambda t: gx_checks.check_split_leakage(t.labels),
               gx_checks.check_split_leakage.__doc__),
    LabelCheck("row_accounting", True, _row_accounting, gx_checks.check_row_accounting.__doc__),
    LabelCheck("split_has_test", True, lambda t: gx_checks.check_split_has_test(t.labels),
               gx_checks.check_split_has_test.__doc__),
    # Warnings: the reference rules themselves give referable DR without any DR (edema at ICDR 0), and
    # metadata, patient ids and positives are properties of the dataset, not defects of the pipeline.
    LabelCheck("referable_implies_any_dr", False, lambda t: gx_checks.check_referable_implies_any(t.labels),
               gx_checks.check_referable_implies_any.__doc__),
    LabelCheck("metadata_coverage", False, lambda t: gx_checks.check_metadata_coverage(t.labels),
               gx_checks.check_metadata_coverage.__doc__),
    LabelCheck("patient_ids", False, lambda t: gx_checks.check_patient_ids(t.labels),
               gx_checks.check_patient_ids.__doc__),
    LabelCheck("degenerate_tasks", False, lambda t: gx_checks.check_degenerate_tasks(t.labels),
               gx_checks.check_degenerate_tasks.__doc__),
]


def build_label_checks(partitions: dg.PartitionsDefinition) -> list:
    """The label checks as one subsettable multi-asset check: one step evaluates whichever were selected."""
    specs = [
        dg.AssetCheckSpec(
            check.name,
            asset=LABELS,
            description=_first_paragraph(check.description),
            blocking=check.blocking,
            automation_condition=WITH_ITS_ASSET,
            partitions_def=partitions,
        )
        for check in LABEL_CHECKS
    ]

    @dg.multi_asset_check(
        name=STEP_NAME,
        specs=specs,
        can_subset=True,
        description="The Great Expectations checks of one dataset's harmonised labels, evaluated together.",
    )
    def harmonised_labels_checks(context: dg.AssetCheckExecutionContext, storage: FocusStorage):
        selected = {key.name for key in context.selected_asset_check_keys}
        # Without a partition (the UI's "Execute all"), every materialised dataset is checked.
        yield from evaluate_partitions(context, LABELS, lambda dataset: evaluate_label_checks(
            LabelTables(storage, dataset), selected, context.log))

    return [harmonised_labels_checks]


def evaluate_label_checks(tables: LabelTables, selected: set[str], log=None):
    """The result of every selected check, in LABEL_CHECKS order.

    A check that raises gets no verdict, as when each check was its own step; the others are still
    evaluated and reported, and the first error is raised at the end so that the step fails with it.
    """
    errors = []
    for check in LABEL_CHECKS:
        if check.name not in selected:
            continue
        try:
            outcome = check.evaluate(tables)
        except Exception as error:  # noqa: BLE001 - re-raised below, after the other checks ran
            if log is not None:
                log.error(f"label check {check.name} could not be evaluated: {error!r}")
            errors.append(error)
            continue
        yield check.name, check.blocking, outcome_result(outcome, check.blocking, check_name=check.name)
    if errors:
        raise errors[0]


def outcome_result(outcome, blocking: bool, check_name: str | None = None) -> dg.AssetCheckResult:
    """A GX outcome as a Dagster check result: counts, examples and the expectations that ran."""
    summary = outcome.summary()
    return dg.AssetCheckResult(
        asset_key=LABELS if check_name else None,
        check_name=check_name,
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
