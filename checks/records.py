"""Checks on the native records: a dataset copy that lost its images must not flow downstream."""

import dagster as dg

from checks.conditions import WITH_ITS_ASSET
from resources import FocusStorage, layout

# Above WARN_RATE quarantined rows the copy deserves a look; above ERROR_RATE it is broken (an image folder
# missing, the wrong release) and the check blocks everything downstream of the partition.
WARN_RATE = 0.05
ERROR_RATE = 0.5


def build_record_checks(dataset_records: dg.AssetsDefinition, partitions: dg.PartitionsDefinition) -> list:
    @dg.asset_check(
        asset=dataset_records,
        partitions_def=partitions,
        blocking=True,
        pool="duckdb",
        automation_condition=WITH_ITS_ASSET,
        description=(
            f"Share of label rows quarantined while reading the dataset. Above {WARN_RATE:.0%} it warns; above "
            f"{ERROR_RATE:.0%} it fails and blocks downstream assets, because such a copy is broken (an image "
            "folder missing, files truncated, a different release) rather than merely imperfect."
        ),
    )
    def quarantine_rate(context: dg.AssetCheckExecutionContext, storage: FocusStorage) -> dg.AssetCheckResult:
        key = context.partition_key
        kept = int(storage.read_records(key).shape[0])
        quarantine = storage.read_partition(layout.QUARANTINE, key)
        return quarantine_result(kept, quarantine["reason_code"].value_counts().to_dict())

    return [quarantine_rate]


def quarantine_result(kept: int, reasons: dict[str, int]) -> dg.AssetCheckResult:
    """The check's verdict from the kept count and the quarantined counts by reason."""
    quarantined = sum(reasons.values())
    rate = quarantined / max(1, kept + quarantined)
    severity = dg.AssetCheckSeverity.ERROR if rate > ERROR_RATE else dg.AssetCheckSeverity.WARN
    return dg.AssetCheckResult(
        passed=rate <= WARN_RATE,
        severity=severity,
        metadata={
            "rows_kept": kept,
            "rows_quarantined": quarantined,
            "quarantine_rate": round(rate, 4),
            "reasons": dg.MetadataValue.json({str(k): int(v) for k, v in reasons.items()}),
        },
    )
