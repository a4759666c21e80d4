"""Drive declarative automation as the `focus_refresh` sensor does, in this process.

Each tick evaluates the automation conditions with Dagster's own evaluator, turns what it requests into run
requests with Dagster's own `build_run_requests` (the function the automation daemon calls), and executes
every run request with exactly the assets and checks it names, as the daemon's launched run would. A run
request that names no checks runs only the checks that cannot be separated from its assets' steps: that is
what a daemon-launched run executes, and the reason checks carry automation conditions of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dagster as dg
from dagster._core.definitions.automation_tick_evaluation_context import build_run_requests
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContextForTest

from tests.support.events import check_verdicts


@dataclass
class Refresh:
    """What the ticks requested and what the runs did, tick by tick."""

    ticks: list[list[dg.RunRequest]] = field(default_factory=list)
    results: list = field(default_factory=list)
    cursor: object = None

    def requested(self) -> dict[str, set[str]]:
        """Asset (or `asset:check`) -> the partitions requested over all ticks ('' when unpartitioned)."""
        found: dict[str, set[str]] = {}
        for request in (r for tick in self.ticks for r in tick):
            names = [k.to_user_string() for k in request.asset_selection or []]
            names += [f"{k.asset_key.to_user_string()}:{k.name}" for k in request.asset_check_keys or []]
            for name in names:
                found.setdefault(name, set()).add(str(request.partition_key or ""))
        return found

    def tick_of(self, asset: str) -> list[int]:
        """The ticks in which `asset` was requested."""
        return [i for i, tick in enumerate(self.ticks)
                if any(asset in {k.to_user_string() for k in r.asset_selection or []} for r in tick)]

    def check_verdicts(self) -> dict[tuple[str, str, str], bool]:
        """(asset, check, partition) -> passed, for every check the runs evaluated."""
        return {(asset, check, str(partition or "")): passed
                for (asset, check, partition), passed in check_verdicts(self.results).items()}


def drive(defs: dg.Definitions, instance: dg.DagsterInstance, cursor=None, max_ticks: int = 20,
          run_config=lambda request: {}) -> Refresh:
    """Tick until a tick requests nothing (or fail after `max_ticks`)."""
    refresh = Refresh(cursor=cursor)
    graph = defs.resolve_asset_graph()
    job = defs.resolve_implicit_global_asset_job_def()
    for _ in range(max_ticks):
        result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=refresh.cursor)
        refresh.cursor = result.cursor
        requests = build_run_requests(entity_subsets=result._requested_subsets, asset_graph=graph, run_tags={},
                                      emit_backfills=False)
        if not requests:
            return refresh
        refresh.ticks.append(list(requests))
        for request in requests:
            refresh.results.append(_launch(job, graph, request, instance, run_config(request)))
    raise AssertionError(f"automation still requesting after {max_ticks} ticks: {refresh.requested()}")


def _launch(job, graph, request: dg.RunRequest, instance, run_config):
    assets = set(request.asset_selection or [])
    checks = set(request.asset_check_keys) if request.asset_check_keys else _inseparable_checks(graph, assets)
    subset = job.get_subset(asset_selection=assets, asset_check_selection=checks)
    # A run of checks alone (after a materialisation made without them) has no asset to check a partition key
    # against; its partition travels in the request's tags, as on the run the daemon launches.
    partition_key = request.partition_key if assets else None
    return subset.execute_in_process(instance=instance, partition_key=partition_key, run_config=run_config,
                                     tags=dict(request.tags or {}), raise_on_error=False)


def _inseparable_checks(graph, assets) -> set:
    """Checks computed by the same step as one of `assets` (a step cannot be split)."""
    return {check for asset in assets for check in graph.assets_def_for_key(asset).check_keys}


def unsynced(defs: dg.Definitions, instance: dg.DagsterInstance) -> set[tuple[str, str]]:
    """(asset, partition) the UI shows as unsynced (older than something upstream of it) or never built."""
    graph = defs.resolve_asset_graph()
    resolver = CachingStaleStatusResolver(instance, graph, LoadingContextForTest(instance))
    found = set()
    for key in graph.materializable_asset_keys:
        partitions = graph.get(key).partitions_def
        for partition in partitions.get_partition_keys() if partitions else [None]:
            if resolver.get_status(key, partition) != StaleStatus.FRESH:
                found.add((key.to_user_string(), str(partition or "")))
    return found
