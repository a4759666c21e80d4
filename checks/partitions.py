"""Per-dataset checks run without a partition: evaluated on every materialised dataset instead of failing.

The UI's "Execute all" (and "Execute") on an asset's Checks tab launches a run with no partition. A
partitioned check that reads `context.partition_key` then fails in every step ("Cannot access partition_key
for a non-partitioned run"), and the asset shows failed checks that say nothing about its data until the next
real run. Here a step without a partition evaluates its checks on each dataset whose asset is materialised and
reports each verdict on that dataset's partition, against that partition's latest materialisation, as a run
on one partition would. The run-level entry (partition "—") gets no verdict of its own.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

# The verdicts of one partition: (check name, blocking, result).
Verdicts = Callable[[str], Iterable[tuple[str, bool, dg.AssetCheckResult]]]


def _materialised_partitions(context: dg.AssetCheckExecutionContext, asset: dg.AssetKey) -> list[str]:
    """Every partition of `asset` that has been materialised (for a run without a partition), logged."""
    materialised = sorted(context.instance.get_materialized_partitions(asset))
    context.log.info(
        f"No partition chosen: evaluating on every materialised partition of {asset.to_user_string()}: "
        f"{', '.join(materialised) or 'none'}. Each verdict is reported on its own partition."
    )
    return materialised


def evaluate_partitions(context: dg.AssetCheckExecutionContext, asset: dg.AssetKey,
                        verdicts: Verdicts) -> Iterator[dg.AssetCheckResult | dg.AssetCheckEvaluation]:
    """The checks' results on the run's partition, or, without one, on every materialised partition."""
    if context.has_partition_key:
        for _, _, result in verdicts(context.partition_key):
            yield result
        return
    errors = []
    for partition in _materialised_partitions(context, asset):
        target = _latest_materialisation(context.instance, asset, partition)
        try:
            for name, blocking, result in verdicts(partition):
                yield on_partition(result, asset, name, blocking, partition, target)
        except Exception as error:  # noqa: BLE001 - the other partitions are still checked; re-raised below
            context.log.error(f"checks of partition {partition} could not all be evaluated: {error!r}")
            errors.append(error)
    if errors:
        raise errors[0]


def on_partition(result: dg.AssetCheckResult, asset: dg.AssetKey, name: str, blocking: bool, partition: str,
                 target: AssetCheckEvaluationTargetMaterializationData | None) -> dg.AssetCheckEvaluation:
    """A check result as the evaluation of one partition, as Dagster records it from a run on that partition."""
    return dg.AssetCheckEvaluation(
        asset_key=asset,
        check_name=name,
        passed=result.passed,
        metadata=result.metadata,
        target_materialization_data=target,
        severity=result.severity,
        description=result.description,
        blocking=blocking,
        partition=partition,
    )


def _latest_materialisation(instance: dg.DagsterInstance, asset: dg.AssetKey,
                            partition: str) -> AssetCheckEvaluationTargetMaterializationData | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[partition]), limit=1).records
    if not records:
        return None
    latest = records[0]
    return AssetCheckEvaluationTargetMaterializationData(
        run_id=latest.event_log_entry.run_id, storage_id=latest.storage_id, timestamp=latest.timestamp)
