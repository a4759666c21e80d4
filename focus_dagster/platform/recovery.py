"""Recovery from killed runs: which process executes a run, whether it is still alive, and the run launcher
that tells the instance's run monitoring.

Dagster's `DefaultRunLauncher` cannot check a run worker's health (only the container launchers can), so on
the local default, run monitoring never sees a run whose process died without a word (SIGKILL, the OOM
killer, a closed terminal): the run stays STARTED and keeps its pool slots, and every later step that needs
the pool waits for ever. The code server notices when a run process it started dies, but nothing notices
when the code server died with it, nor when the process was `focus demo` (whose runs execute in its own
process).

Every run already names its processes in its own event log: Dagster's engine events "Started process for run
(pid: N)" and "Executing steps in process (pid: N)" carry the pid, and so does "Executing step in
subprocess" for each step process of the multiprocess executor. `LocalRunLauncher` launches exactly like the
default launcher and answers run monitoring's health check from those pids: a STARTED run of which nothing
runs any more (its process gone, and no step process of it left running) is FAILED, so the monitoring daemon
marks the run failed, and frees its slots after `free_slots_after_run_end_seconds` (dagster.yaml).
`recover_dead_runs` is the same pass once, by hand (`focus recover`), for when no daemon runs.

A pid names a process on one machine only: the launcher and `focus demo` tag their runs with the host that
executes them, and a run tagged with another host is never judged from here (a live run marked failed would
have its slots freed under it). Runs without the tag (a test's or a CLI's execute_in_process) are judged:
the instance is local, SQLite under FOCUS_HOME.

Wiring, not science: the instance loads this module (dagster.yaml names the launcher), and the CLI imports it
inside its commands only, so `focus --help` stays instant.
"""

from __future__ import annotations

import os
import socket
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from focus_dagster.platform.dagster_private import CheckRunHealthResult, LaunchRunContext, WorkerStatus

HOST_TAG = "focus/host"
# A process that started this long after its run recorded the pid is another process that reused the pid.
PID_REUSE_TOLERANCE_SECONDS = 2.0


def this_host() -> str:
    return socket.gethostname()


@dataclass(frozen=True)
class Process:
    """A process of a run, as the run's event log names it."""

    pid: int
    recorded_at: float  # when the run recorded it (epoch seconds): a later process with that pid is another
    step_key: str | None = None  # None: the run's own process; else a step's (multiprocess executor)

    def alive(self) -> bool:
        return process_alive(self.pid, self.recorded_at)


def run_processes(instance: dg.DagsterInstance, run_id: str) -> tuple[Process | None, list[Process]]:
    """The process executing the run (its latest run-level engine event naming a pid: "Started process for run",
    "Executing steps in process"), or None before it named one; and the step processes it started (multiprocess
    executor: "Executing step in subprocess"), the latest per step."""
    worker, steps = None, {}
    types = {dg.DagsterEventType.ENGINE_EVENT, dg.DagsterEventType.STEP_WORKER_STARTED}
    for entry in instance.all_logs(run_id, of_type=types):
        event = entry.dagster_event
        data = event.event_specific_data if event is not None else None
        pid = (getattr(data, "metadata", None) or {}).get("pid")
        if pid is None or not str(pid.value).isdigit():
            continue
        if event.event_type == dg.DagsterEventType.STEP_WORKER_STARTED and event.step_key:
            steps[event.step_key] = Process(int(pid.value), entry.timestamp, event.step_key)
        elif event.step_key is None:
            worker = Process(int(pid.value), entry.timestamp)
    return worker, list(steps.values())


def process_alive(pid: int, recorded_at: float | None = None) -> bool:
    """Whether the process `pid` runs (not a zombie) and is the one that was running at `recorded_at`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process took the pid
        return False
    stat = _proc_stat(pid)
    if stat is None:  # no /proc (macOS): the signal test is all there is
        return True
    state, started = stat
    if state in ("Z", "X"):  # killed, not yet reaped by its parent
        return False
    return recorded_at is None or started is None or started <= recorded_at + PID_REUSE_TOLERANCE_SECONDS


def _proc_stat(pid: int) -> tuple[str, float | None] | None:
    """(state, start time in epoch seconds) of a process, from /proc; None where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, IndexError):
        started = None
    return fields[0], started


@dataclass(frozen=True)
class Worker:
    """What this machine can tell of the processes of a run."""

    process: Process | None  # the run's own process; None: not named yet
    alive: bool | None  # whether anything of the run still runs; None: unknown (not named, or another host)
    host: str | None = None  # the run's host tag, when it is another host
    left: Process | None = None  # a step process still running although the run's own process is gone

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def describe(self) -> str:
        if self.process is None:
            return "process not recorded yet"
        if self.host:
            return f"process {self.pid} on host {self.host}"
        if self.left:
            return f"process {self.pid} gone, its step {self.left.step_key} still running in process {self.left.pid}"
        return f"process {self.pid} {'alive' if self.alive else 'gone'}"


def worker_of(instance: dg.DagsterInstance, run: dg.DagsterRun, known: Process | None = None) -> Worker:
    """Whether anything of `run` still runs on this machine. A run whose own process died while one of its step
    processes (multiprocess executor) still runs is alive until that step ends: its slot is not released under
    a step that still writes."""
    host = run.tags.get(HOST_TAG)
    process = known or run_processes(instance, run.run_id)[0]
    if host and host != this_host():
        return Worker(process, None, host=host)
    if process is None:
        return Worker(None, None)
    if process.alive():
        return Worker(process, True)
    left = next((step for step in run_processes(instance, run.run_id)[1] if step.alive()), None)
    return Worker(process, left is not None, left=left)


class LocalRunLauncher(dg.DefaultRunLauncher):
    """The default launcher (a process per run, started by the code server), plus the health check that
    run monitoring needs to fail a run whose process is gone. Configured in dagster.yaml."""

    _CACHE = 512  # runs whose pid is remembered (the daemon asks every poll_interval_seconds)

    def __init__(self, inst_data=None):
        super().__init__(inst_data=inst_data)
        self._processes: OrderedDict[str, Process] = OrderedDict()

    def launch_run(self, context: LaunchRunContext) -> None:
        # The code servers of the local workspace run on this host, and so do the runs they start.
        self._instance.add_run_tags(context.dagster_run.run_id, {HOST_TAG: this_host()})
        super().launch_run(context)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        worker = worker_of(self._instance, run, self._processes.get(run.run_id))
        if worker.process is not None:
            self._processes[run.run_id] = worker.process
            self._processes.move_to_end(run.run_id)
            while len(self._processes) > self._CACHE:
                self._processes.popitem(last=False)
        if worker.alive is False:
            return CheckRunHealthResult(
                WorkerStatus.FAILED,
                f"the run's process {worker.pid} is gone (killed or crashed without reporting); its pool slots are "
                "freed after free_slots_after_run_end_seconds",
                run_worker_id=str(worker.pid),
            )
        # Unknown is not dead: run monitoring fails every status but RUNNING and SUCCESS.
        return CheckRunHealthResult(WorkerStatus.RUNNING, worker.describe(),
                                    run_worker_id=str(worker.pid) if worker.pid else None)


def recover_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Run monitoring's pass, once and at once: fail every STARTED run whose process is gone and free the pool
    slots of finished runs. For `focus recover`, when no daemon runs. One line per run acted on."""
    lines: dict[str, str] = {}
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        worker = worker_of(instance, run)
        if worker.alive is not False:
            continue
        instance.report_run_failed(run, f"focus recover: the run's process {worker.pid} is gone (killed or crashed)")
        lines[run.run_id] = f"run {run.run_id} ({run.job_name}): process {worker.pid} is gone, marked FAILURE"
    storage = instance.event_log_storage
    holding = storage.get_concurrency_run_ids() if storage.supports_global_concurrency_limits else set()
    for record in instance.get_run_records(filters=dg.RunsFilter(run_ids=sorted(holding))) if holding else []:
        run = record.dagster_run
        if run.is_finished:
            storage.free_concurrency_slots_for_run(run.run_id)
            line = lines.get(run.run_id, f"run {run.run_id} ({run.job_name}, {run.status.value})")
            lines[run.run_id] = line + ", its pool slots freed"
    return list(lines.values())
