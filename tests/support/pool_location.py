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
