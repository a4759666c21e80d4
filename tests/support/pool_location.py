"""A tiny code location for the recovery tests: one asset holds each pool until its process is killed, and one
asset uses each pool after an unpooled root step (so that its run leaves the queue and waits at the step).

Steps run in their run's process with the repository's executor (in process, wrapped to say who holds a pool).
A holding step writes its pid to $FOCUS_TEST_DIR/<asset>.pid, then waits to be killed.
"""

import os
import time
from pathlib import Path

import dagster as dg

from focus_dagster.platform.pools import reporting_pool_waits

POOLS = ("duckdb", "gpu")


def _holder(pool: str) -> dg.AssetsDefinition:
    @dg.asset(name=f"hold_{pool}", pool=pool)
    def hold(context: dg.AssetExecutionContext) -> None:
        marker = Path(os.environ["FOCUS_TEST_DIR"]) / f"hold_{pool}.pid"
        marker.write_text(str(os.getpid()))
        context.log.info(f"holding pool {pool} in process {os.getpid()}")
        time.sleep(300)  # until SIGKILL

    return hold


@dg.asset
def warm_up() -> None:
    """Unpooled root: the run is dequeued and its pooled step waits in the run."""


def _user(pool: str) -> dg.AssetsDefinition:
    @dg.asset(name=f"use_{pool}", pool=pool, deps=[warm_up])
    def use(context: dg.AssetExecutionContext) -> None:
        context.log.info(f"got pool {pool}")

    return use


ASSETS = [warm_up, *(_holder(p) for p in POOLS), *(_user(p) for p in POOLS)]
JOBS = [dg.define_asset_job(f"hold_{p}_job", selection=[f"hold_{p}"]) for p in POOLS]
JOBS += [dg.define_asset_job(f"use_{p}_job", selection=["warm_up", f"use_{p}"]) for p in POOLS]

defs = dg.Definitions(assets=ASSETS, jobs=JOBS, executor=reporting_pool_waits(dg.in_process_executor))


# How a test starts a holder in a process of its own, as `focus demo` runs: `python -c HOLD_IN_PROCESS hold_<pool>_job`.
HOLD_IN_PROCESS = """
import sys
import dagster as dg
from tests.support.pool_location import defs
with dg.DagsterInstance.get() as instance:
    defs.resolve_job_def(sys.argv[1]).execute_in_process(instance=instance)
"""


def holder_of(instance, pool: str) -> set[str]:
    """The runs holding a slot of `pool` now, from the instance's concurrency table."""
    return {slot.run_id for slot in instance.event_log_storage.get_concurrency_info(pool).claimed_slots}


def waiting_lines(instance, run_id: str, pool: str) -> list:
    """The engine events in which a step of `run_id` says it waits for `pool` (and who holds it)."""
    return [e for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
            if (e.dagster_event.message or "").startswith(f"waiting for pool {pool}:")]
