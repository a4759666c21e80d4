"""Checks on the native records: a dataset copy that lost its images must not flow downstream."""

import dagster as dg

from checks.conditions import WITH_ITS_ASSET
from checks.partitions import evaluate_partitions
from resources import FocusStorage, layout

# Above WARN_RATE quarantined rows the copy deserves a look; above ERROR_RATE it is broken (an image folder
# missing, the wrong release) and the check blocks everything downstream of the partition.
WARN_RATE = 0.05
ERROR_RATE = 0.5


def build_record_checks(dataset_records: dg.AssetsDefinition, partitions: dg.PartitionsDefinition) -> list:
    # A multi-asset check of one spec: its output may stay unset, which a run without a partition needs
    # (its verdicts are reported on each dataset's partition instead, see checks/partitions.py).
    @dg.multi_asset_check(
        name="dataset_records_quarantine_rate",
        specs=[dg.AssetCheckSpec(
            "quarantine_rate",
            asset=dataset_records.key,
            partitions_def=partitions,
            blocking=True,
            automation_condition=WITH_ITS_ASSET,
            description=(
                f"Share of label rows quarantined while reading the dataset. Up to {WARN_RATE:.0%}: passed. From "
                f"{WARN_RATE:.0%} to {ERROR_RATE:.0%}: passed with a warning (`warning` in the metadata; the copy "
                f"deserves a look, and the rows flow on). Above {ERROR_RATE:.0%}: failed with severity ERROR, and, "
                "being blocking, it stops everything downstream of the partition, because such a copy is broken "
                "(an image folder missing, files truncated, a different release) rather than merely imperfect."
            ),
        )],
        can_subset=True,
        description="The share of one dataset's label rows quarantined while reading it.",
    )
    def quarantine_rate(context: dg.AssetCheckExecutionContext, storage: FocusStorage):
        def verdict(dataset: str):
            kept = int(storage.read_records(dataset).shape[0])
            quarantine = storage.read_partition(layout.QUARANTINE, dataset)
            yield "quarantine_rate", True, quarantine_result(kept, quarantine["reason_code"].value_counts().to_dict())

        # Without a partition (the UI's "Execute"), every materialised dataset is checked.
        yield from evaluate_partitions(context, dataset_records.key, verdict)

    return [quarantine_rate]


def quarantine_result(kept: int, reasons: dict[str, int]) -> dg.AssetCheckResult:
    """The check's verdict from the kept count and the quarantined counts by reason: passed up to ERROR_RATE
    (with a warning above WARN_RATE), a blocking failure above it."""
    quarantined = sum(reasons.values())
    rate = quarantined / max(1, kept + quarantined)
    metadata = {
        "rows_kept": kept,
        "rows_quarantined": quarantined,
        "quarantine_rate": round(rate, 4),
        "reasons": dg.MetadataValue.json({str(k): int(v) for k, v in reasons.items()}),
    }
    if rate > ERROR_RATE:
        verdict = (f"{rate:.0%} of the label rows are quarantined (above {ERROR_RATE:.0%}): this copy is broken; "
                   "downstream assets wait until a readable release is observed (see records.quarantine)")
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR, description=verdict,
                                   metadata={**metadata, "reason": verdict})
    if rate > WARN_RATE:
        warning = (f"{rate:.0%} of the label rows are quarantined (above {WARN_RATE:.0%}): the rows kept flow on; "
                   "look at the reasons in records.quarantine")
        return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.WARN, description=warning,
                                   metadata={**metadata, "warning": warning})
    return dg.AssetCheckResult(passed=True, metadata=metadata)
