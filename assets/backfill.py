"""Backfills of many datasets as one run, for the assets that compute on CPU one dataset at a time.

A backfill of N dataset partitions launched from the UI (the asset graph or the asset's page) would otherwise
start N runs, each paying a run's start, its resources and its bookkeeping (about 0.75 s here, far more as a
Kubernetes pod). With `BackfillPolicy.single_run()` Dagster launches one run per contiguous range of
partitions, and the step computes its partitions one after another. The automation sensor still asks for one
partition per run (it emits no backfills), and the GPU assets keep one model x dataset partition per step so
that a cluster can spread them over its GPU nodes.

`each_dataset` runs an asset's body once per partition of its run. A run on one partition is reported exactly
as before. In a run on a range, every partition still gets its own metadata (row counts, versions) and its
own verdict of each check computed in the step; a partition that fails does not stop the others: the others
are recorded, and the step then fails naming the partitions that did not make it and why.

Each partition reports its data version (assets/automation.py), so that the refresh follows changed data only.
A run on one partition, as the refresh sensor launches, and the partitions recorded before a range fails carry
their own; the partitions of a range that succeeds share the one data version Dagster gives the step's output
(new with every run: it counts as a change downstream), since an output records one data version, not one per
partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import dagster as dg

from assets.automation import data_version
from checks.partitions import latest_materialisation, on_partition

SINGLE_RUN = dg.BackfillPolicy.single_run()
# Where Dagster reads a materialisation's data version from, for those logged by hand (_recorded_before_failing).
DATA_VERSION_TAG = "dagster/data_version"


@dataclass(frozen=True)
class Materialised:
    """What one partition's computation reports: metadata per asset it wrote, its checks' verdicts, and the lineage
    stamp of each asset it wrote (from which its data version comes)."""

    metadata: dict[str, dict]
    checks: tuple[dg.AssetCheckResult, ...] = field(default=())
    stamps: dict[str, dict] = field(default_factory=dict)

    def data_version(self, asset: str) -> dg.DataVersion | None:
        return data_version(self.stamps.get(asset))


def each_dataset(context: dg.AssetExecutionContext, materialise: Callable[[str], Materialised]) -> Iterator:
    """The events of `materialise(dataset)` for every dataset partition of the run."""
    if context.has_partition_key:
        yield from _one_partition(materialise(context.partition_key))
        return
    done, failed = {}, {}
    for dataset in context.partition_keys:
        try:
            done[dataset] = materialise(dataset)
        except Exception as error:  # noqa: BLE001 - the other datasets still run; the step fails below
            context.log.error(f"{dataset}: not materialised: {error}")
            failed[dataset] = error
    context.log.info(f"{len(done)} of {len(context.partition_keys)} datasets materialised in one run"
                     + (f"; failed: {', '.join(failed)}" if failed else ""))
    if failed:
        yield from _recorded_before_failing(context, done)
        raise dg.Failure(description=_failure_summary(failed), metadata={"failed": list(failed), "done": list(done)})
    yield from _range(context, done)


def _one_partition(result: Materialised) -> Iterator:
    for asset, metadata in result.metadata.items():
        yield dg.MaterializeResult(asset_key=asset, metadata=metadata, data_version=result.data_version(asset))
    yield from result.checks


def _range(context: dg.AssetExecutionContext, done: dict[str, Materialised]) -> Iterator:
    """Each partition's metadata on its own materialisation, then each check's verdict on its own partition."""
    for dataset, result in done.items():
        for asset, metadata in result.metadata.items():
            context.add_asset_metadata(metadata, asset_key=asset, partition_key=dataset)
    for asset in _assets(done):
        yield dg.MaterializeResult(asset_key=asset)
    yield from _verdicts(context, done)
    # A check computed in the step is one of its outputs; the verdicts above are its per-partition evaluations.
    for key in context.selected_asset_check_keys:
        yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(key))


def _recorded_before_failing(context: dg.AssetExecutionContext, done: dict[str, Materialised]) -> Iterator:
    """The datasets that did make it, recorded as materialised (with their verdicts) although the step fails."""
    for dataset, result in done.items():
        for asset, metadata in result.metadata.items():
            # Without a stamp, new with the run, as the version Dagster gives an output: it counts as a change.
            version = result.data_version(asset) or dg.DataVersion(context.run_id)
            context.log_event(dg.AssetMaterialization(asset_key=asset, partition=dataset, metadata=metadata,
                                                      tags={DATA_VERSION_TAG: version.value}))
    yield from _verdicts(context, done)


def _verdicts(context: dg.AssetExecutionContext, done: dict[str, Materialised]) -> Iterator:
    specs = {spec.key.name: spec for spec in context.assets_def.check_specs}
    for dataset, result in done.items():
        for check in result.checks:
            spec = specs[check.check_name]
            target = latest_materialisation(context.instance, spec.asset_key, dataset)
            yield on_partition(check, spec.asset_key, spec.name, spec.blocking, dataset, target)


def _assets(done: dict[str, Materialised]) -> list[str]:
    return list(dict.fromkeys(asset for result in done.values() for asset in result.metadata))


def _failure_summary(failed: dict[str, Exception]) -> str:
    lines = [f"- {dataset}: {error}" for dataset, error in failed.items()]
    return (f"{len(failed)} dataset(s) of this run were not materialised (the others were, and are recorded):\n"
            + "\n".join(lines) + "\nFix the cause, then materialise these partitions again.")
