"""Per-dataset checks run without a partition, or on a range of them: each dataset gets its own verdict.

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

from focus_dagster.platform.dagster_private import AssetCheckEvaluationTargetMaterializationData

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
    # A backfill run over a range of datasets (assets/backfill.py) checks each of them; a run without a
    # partition checks every materialised one.
    partitions = context.partition_keys if context.has_partition_key_range else _materialised_partitions(context, asset)
    errors = []
    for partition in partitions:
        target = latest_materialisation(context.instance, asset, partition)
        try:
            for name, blocking, result in verdicts(partition):
                yield on_partition(result, asset, name, blocking, partition, target)
        except Exception as error:  # noqa: BLE001 - the other partitions are still checked; re-raised below
            context.log.error(f"checks of partition {partition} could not all be evaluated: {error!r}")
            errors.append(error)
    if errors:
        raise errors[0]
    if context.has_partition_key_range:
        # The check's outputs, so that the steps downstream in the run wait for these verdicts (a failed blocking
        # one has failed this step already, which stops them for every dataset of the range).
        assets_def = context.op_execution_context.assets_def
        for key in context.selected_asset_check_keys:
            yield dg.Output(None, output_name=assets_def.get_output_name_for_asset_check_key(key))


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


def latest_materialisation(instance: dg.DagsterInstance, asset: dg.AssetKey,
                            partition: str) -> AssetCheckEvaluationTargetMaterializationData | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[partition]), limit=1).records
    if not records:
        return None
    latest = records[0]
    return AssetCheckEvaluationTargetMaterializationData(
        run_id=latest.event_log_entry.run_id, storage_id=latest.storage_id, timestamp=latest.timestamp)
