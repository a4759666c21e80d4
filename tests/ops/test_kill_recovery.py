"""Recovery from killed runs, through the real `dagster-daemon` on an instance configured by the repository's
dagster.yaml: a run SIGKILLed while it holds the `duckdb` or the `gpu` pool is marked FAILURE and its slot
freed within a minute, and a run waiting for that pool then completes, with no manual step. Meanwhile the
waiting step says at INFO which run holds the pool.

Two kinds of holder die: a run launched by the daemon (its process is a child of the daemon's code server,
which notices the death), and a run executing in its own process like `focus demo` does (nobody but run
monitoring can notice: the health check of focus_dagster/platform/recovery.py). The location is tests/support/pool_location.py,
a few seconds per run, so that the minute is spent on recovery. Every verdict is read from the instance.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest
from dagster._core.events import EngineEventData
from dagster._core.launcher import WorkerStatus

from focus_dagster.platform.instance import REPO_ROOT, prepare_dagster_home
from focus_dagster.platform.recovery import HOST_TAG, this_host
from tests.support.daemon import wait_advancing
from tests.support.pool_location import HOLD_IN_PROCESS, POOLS, holder_of, waiting_lines
from tests.support.pool_location import defs as location

pytestmark = pytest.mark.heavy(60)  # seconds on a quiet 2-core machine: started first

PROMISE = 60  # seconds: detected, marked failed and its slots freed within a minute
LOCATION = "pools"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """DAGSTER_HOME prepared as `focus demo` and `focus ui` prepare it, and the environment of every process."""
    tmp = tmp_path_factory.mktemp("kill")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("DAGSTER_HOME", raising=False)
        home = prepare_dagster_home(SimpleNamespace(dagster_home=tmp / "dagster"))
    (tmp / "workspace.yaml").write_text(
        f"load_from:\n  - python_module:\n      module_name: tests.support.pool_location\n"
        f"      working_directory: {REPO_ROOT}\n      location_name: {LOCATION}\n")
    return SimpleNamespace(tmp=tmp, home=home, vars=dict(
        os.environ, DAGSTER_HOME=str(home), FOCUS_TEST_DIR=str(tmp), DAGSTER_DISABLE_TELEMETRY="1",
        PYTHONPATH=str(REPO_ROOT)))


@pytest.fixture(scope="module")
def instance(env):
    with dg.DagsterInstance.from_config(str(env.home)) as instance:
        yield instance


@pytest.fixture(scope="module")
def daemon(env, instance):  # the instance first: processes creating its storage at once can stamp it twice
    log = open(env.tmp / "daemon.log", "w")
    process = subprocess.Popen([str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w",
                                str(env.tmp / "workspace.yaml")], cwd=REPO_ROOT, env=env.vars, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    yield env.tmp / "daemon.log"
    _kill_group(process)
    log.close()


@pytest.fixture(scope="module")
def submit(env, instance, daemon):
    """Submit a job of the location to the run queue, as the UI does; the daemon launches it."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    with WorkspaceProcessContext(instance, WorkspaceFileTarget([str(env.tmp / "workspace.yaml")])) as context:
        def _submit(job_name: str) -> str:
            request = context.create_request_context()
            remote = request.get_code_location(LOCATION).get_repository("__repository__").get_full_job(job_name)
            run = instance.create_run_for_job(location.resolve_job_def(job_name),
                                              remote_job_origin=remote.get_remote_origin(),
                                              job_code_origin=remote.get_python_origin())
            instance.submit_run(run.run_id, request)
            return run.run_id

        yield _submit


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def wait_for(condition, what: str, timeout: float = 90, daemon_log: Path | None = None):
    """`condition()`'s first truthy value within `timeout` seconds: a deadline, for what the product promises to do
    within a time (PROMISE). To wait for anything else, wait_advancing."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            tail = daemon_log.read_text()[-3000:] if daemon_log else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tail}")
        time.sleep(0.25)


def status(instance, run_id: str) -> dg.DagsterRunStatus:
    return instance.get_run_by_id(run_id).status


def held_pid(env, pool: str, old: str | None = None) -> int:
    marker = env.tmp / f"hold_{pool}.pid"
    text = marker.read_text() if marker.exists() else ""
    return int(text) if text and text != old else 0


def recover(instance, holders: dict[str, tuple[str, int]], waiters: dict[str, str], daemon_log: Path):
    """SIGKILL each holder's process; time its run to FAILURE and its slot's release; the waiters complete."""
    killed = time.monotonic()
    for _, pid in holders.values():
        os.kill(pid, signal.SIGKILL)
    seen: dict[tuple[str, str], float] = {}

    def progress() -> bool:
        for pool, (run_id, _) in holders.items():
            if (pool, "failed") not in seen and status(instance, run_id) == dg.DagsterRunStatus.FAILURE:
                seen[pool, "failed"] = time.monotonic() - killed
            if (pool, "freed") not in seen and run_id not in holder_of(instance, pool):
                seen[pool, "freed"] = time.monotonic() - killed
        return len(seen) == 2 * len(holders)

    wait_for(progress, f"the killed holders to be failed and their slots freed (so far {seen})", PROMISE, daemon_log)
    for pool, run_id in waiters.items():
        wait_advancing(lambda: instance.get_run_by_id(run_id).is_finished, f"{pool} waiter to finish", instance,
                       daemon_log)
        assert status(instance, run_id) == dg.DagsterRunStatus.SUCCESS
        assert not holder_of(instance, pool)
    return {key: round(value, 1) for key, value in sorted(seen.items())}


def test_the_instance_is_the_repositorys_dagster_yaml(env, instance):
    assert (env.home / "dagster.yaml").read_text() == (REPO_ROOT / "dagster.yaml").read_text()
    assert type(instance.run_launcher).__name__ == "LocalRunLauncher"
    assert instance.run_launcher.supports_check_run_worker_health
    assert instance.run_monitoring_enabled
    settings = instance.run_monitoring_settings
    # Detected at one poll, freed a grace and a poll later: the minute, with room.
    assert 2 * settings["poll_interval_seconds"] + settings["free_slots_after_run_end_seconds"] < PROMISE / 2
    pools = instance.event_log_storage.get_pool_config()
    assert pools.default_pool_limit == 1 and pools.pool_granularity.value == "op"


def test_the_code_locations_executors_are_the_reporting_ones():
    """The location here uses the executor of focus_dagster/platform/pools.py; so does the repository's, either way."""
    from focus_dagster.definitions import EXECUTORS

    for name, executor_def in EXECUTORS.items():
        assert executor_def.name == name
        assert executor_def.executor_creation_fn.__qualname__.startswith("reporting_pool_waits.")
    assert location.resolve_job_def("use_duckdb_job").executor_def.executor_creation_fn.__qualname__.startswith(
        "reporting_pool_waits.")


def test_the_health_check_fails_a_run_only_when_nothing_of_it_runs_on_this_host(tmp_path):
    """Unit, on the launcher itself: a STARTED run whose recorded process is gone is FAILED, unless it executes
    on another host, or a step process it started (multiprocess executor) still runs."""
    gone = subprocess.Popen(["sleep", "60"])
    gone.kill()
    gone.wait()
    (tmp_path / "dagster.yaml").write_text((REPO_ROOT / "dagster.yaml").read_text())
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        launcher, job = instance.run_launcher, location.resolve_job_def("use_gpu_job")

        def started(pid: int, host: str | None = None) -> dg.DagsterRun:
            run = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED,
                                              tags={HOST_TAG: host} if host else None)
            assert launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING  # no pid yet: not judged
            instance.report_engine_event("Executing steps in process", run, EngineEventData.in_process(pid))
            return run

        verdicts = {host: launcher.check_run_worker_health(started(gone.pid, host)).status
                    for host in (None, this_host(), "elsewhere")}
        assert verdicts == {None: WorkerStatus.FAILED, this_host(): WorkerStatus.FAILED,
                            "elsewhere": WorkerStatus.RUNNING}
        assert launcher.check_run_worker_health(started(os.getpid())).status == WorkerStatus.RUNNING

        orphaned, step = started(gone.pid), subprocess.Popen(["sleep", "60"])
        instance.report_dagster_event(dg.DagsterEvent(
            event_type_value="STEP_WORKER_STARTED", job_name=orphaned.job_name, step_key="use_gpu",
            event_specific_data=EngineEventData(metadata={"pid": dg.MetadataValue.text(str(step.pid))})),
            orphaned.run_id)
        health = launcher.check_run_worker_health(orphaned)
        assert health.status == WorkerStatus.RUNNING and f"still running in process {step.pid}" in health.msg
        step.kill()
        step.wait()
        assert launcher.check_run_worker_health(orphaned).status == WorkerStatus.FAILED


def test_a_killed_launched_run_frees_its_pool_and_the_waiting_run_completes(env, instance, daemon, submit):
    holders = {pool: submit(f"hold_{pool}_job") for pool in POOLS}
    for pool, run_id in holders.items():
        wait_advancing(lambda: holder_of(instance, pool) == {run_id}, f"{pool} held by its holder", instance, daemon)
    pids = {pool: wait_advancing(lambda: held_pid(env, pool), f"{pool} holder pid", instance, daemon) for pool in POOLS}
    assert all(instance.get_run_by_id(run_id).tags.get(HOST_TAG) == this_host() for run_id in holders.values())
    waiters = {pool: submit(f"use_{pool}_job") for pool in POOLS}
    for pool, run_id in waiters.items():
        # The waiting step says so at INFO, naming the run that holds the pool (read from the instance).
        lines = wait_advancing(lambda: waiting_lines(instance, run_id, pool), f"{pool} waiting line", instance, daemon)
        assert lines[0].level == logging.INFO
        assert holders[pool] in lines[0].dagster_event.message, lines[0].dagster_event.message
        assert status(instance, run_id) == dg.DagsterRunStatus.STARTED and run_id not in holder_of(instance, pool)
    print(f"waiting line: {lines[0].dagster_event.message}")
    times = recover(instance, {p: (holders[p], pids[p]) for p in POOLS}, waiters, daemon)
    print(f"launched holders, seconds after SIGKILL: {times}")


def test_a_killed_in_process_run_is_failed_by_run_monitoring(env, instance, daemon, submit):
    """Like `focus demo` killed during embeddings or the data layer: no code server watches that process."""
    old = {pool: (env.tmp / f"hold_{pool}.pid").read_text() if (env.tmp / f"hold_{pool}.pid").exists() else None
           for pool in POOLS}
    procs = {pool: subprocess.Popen([sys.executable, "-c", HOLD_IN_PROCESS, f"hold_{pool}_job"], cwd=REPO_ROOT,
                                    env=env.vars, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True) for pool in POOLS}
    try:
        pids = {pool: wait_advancing(lambda: held_pid(env, pool, old[pool]), f"{pool} holder pid", instance, daemon)
                for pool in POOLS}
        assert pids == {pool: procs[pool].pid for pool in POOLS}
        holders = {pool: wait_advancing(lambda: next(iter(holder_of(instance, pool)), None), f"{pool} held", instance,
                                       daemon)
                   for pool in POOLS}
        waiters = {pool: submit(f"use_{pool}_job") for pool in POOLS}
        times = recover(instance, {p: (holders[p], pids[p]) for p in POOLS}, waiters, daemon)
        print(f"in-process holders, seconds after SIGKILL: {times}")
        for pool in POOLS:
            failure = instance.all_logs(holders[pool], of_type=dg.DagsterEventType.RUN_FAILURE)
            assert f"process {pids[pool]} is gone" in failure[-1].dagster_event.message
    finally:
        for process in procs.values():
            _kill_group(process)
