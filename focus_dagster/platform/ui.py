"""`focus ui`: `dagster dev` on the instance under FOCUS_HOME, stopped whole within ten seconds of Ctrl-C,
SIGTERM or SIGHUP, its runs in flight marked CANCELED (README, "When a run is killed").

`dagster dev` alone did not stop while a run was in flight. Its code server waits for its runs before it exits,
and a run whose step waits for a pool (in-process executor) holds Ctrl-C and SIGTERM back for ever: `dagster dev`
shut its webserver and daemon down, gave up on the code server after 30 seconds and exited, leaving the code
server, the run worker and its log tails running, the run STARTED and its place in the pool's queue taken. Started
by a non-interactive shell's `focus ui &` it ignored SIGTERM altogether: such a shell starts the job with SIGINT
ignored, and `dagster dev` answers SIGTERM as it answers SIGINT.

So `focus ui` runs `dagster dev` as a child in a session of its own (its own process group, which every process
of the UI joins: webserver, daemon, code servers, run workers, step processes) and stops it itself, on the first
SIGINT, SIGTERM or SIGHUP:

1. the runs that processes of that group execute are marked CANCELING, as a termination from the UI marks them:
   a run that Dagster itself interrupts then ends CANCELED, not failed;
2. SIGINT goes to `dagster dev` (Dagster's own shutdown of its webserver, daemon and code servers) and to those
   runs' processes, as a terminal's Ctrl-C did: a step that can be interrupted ends there;
3. after GRACE_SECONDS what is left is killed (a code server waiting for its runs, a run worker waiting for a
   pool), `dagster dev` last, after a moment to remove its temporary workspace;
4. every run of step 1 (and any run that started a process in the group meanwhile) that is not finished is marked
   CANCELED, and the pool slots of those runs are freed.

A run that has no process yet (STARTING when the signal came) is left to run monitoring: the daemon fails it
after its start timeout when the UI runs again. A second signal kills what is left at once. The exit code is
128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM).

The ten seconds run from the signal to `focus ui` gone. On a loaded 2-core machine (load average 8) the grace
ended 5.1-5.2 s after the signal, the group was killed and the runs marked within another 0.2-1.4 s, and Python's
own teardown of the interpreter (Dagster, gRPC and SQLAlchemy loaded) took 0.8-2.6 s more: so the grace counts
from the signal itself, and once everything is stopped and marked `focus ui` exits without that teardown.

Wiring, not science: the CLI imports this module inside `focus ui` only.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from focus_dagster.platform.instance import REPO_ROOT, UI_HOST

GRACE_SECONDS = 5.0  # for Dagster's own shutdown: about 3 s with nothing in flight (2-core machine)
CLEANUP_SECONDS = 1.0  # for `dagster dev` alone, once the rest is killed: it removes its temporary workspace
POLL_SECONDS = 0.1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # Linux prctl: the signal a process gets when its parent dies


def serve(port: int, dagster_home: Path) -> int:
    """Run `dagster dev` on `port` until a stop signal, or until it exits by itself; then stop what is left of it."""
    received: list[int] = []
    received_at: list[float] = []  # time.monotonic() of each stop signal
    _answer_stop_signals(received, received_at)
    env = dict(os.environ, DAGSTER_HOME=str(dagster_home), DAGSTER_DISABLE_TELEMETRY="1")
    command = [sys.executable, "-m", "dagster", "dev", "-h", UI_HOST, "-p", str(port),
               "-w", str(REPO_ROOT / "workspace.yaml")]
    say(f"Dagster UI on http://{UI_HOST}:{port}  (instance {dagster_home}; Ctrl-C stops it)", prefix="")
    dev = subprocess.Popen(command, cwd=REPO_ROOT, env=env, start_new_session=True, preexec_fn=_as_dev_child)
    instance = None
    try:
        instance = _open_instance(dagster_home)  # now, while the UI starts: on a signal there is no time to import
        while dev.poll() is None and not received:
            time.sleep(POLL_SECONDS)
        reason = (f"{signal.Signals(received[0]).name} received" if received
                  else f"dagster dev exited with code {dev.returncode}")  # a port in use, a crash: the rest goes too
        _Stopper(dev, instance, received, reason, received_at[0] if received_at else time.monotonic()).stop()
    except BaseException:
        if dev.returncode is None or group_processes(dev.pid):
            _kill_group(dev.pid)  # whatever went wrong, nothing of the UI outlives this command
        raise
    finally:
        dev.wait()
        if instance is not None:
            instance.dispose()
    if received:
        _exit_at_once(128 + received[0])
    return dev.returncode if dev.returncode >= 0 else 128 - dev.returncode  # killed by a signal: as a shell says


def _answer_stop_signals(received: list[int], received_at: list[float]) -> None:
    """Record the stop signals and when they came; a second one while stopping kills the UI's process group at
    once. SIGINT stays ignored where the shell ignores it (a background job of a script, not its to stop on the
    script's Ctrl-C)."""

    def handler(signum, _frame):
        received_at.append(time.monotonic())
        received.append(signum)

    for signum in STOP_SIGNALS:
        if signum == signal.SIGINT and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        signal.signal(signum, handler)


def _as_dev_child() -> None:
    """In `dagster dev`, before it starts: SIGINT is its shutdown signal (focus ui sends it), so never ignored,
    even where focus ui's own is; and on Linux it gets SIGTERM should focus ui die without stopping it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _exit_at_once(code: int) -> NoReturn:
    """Exit with `code` now that the UI is stopped, its runs marked and the instance closed: what Python would still
    do at exit is free the memory of the modules it loaded, seconds on a loaded machine, within the ten."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the terminal is gone (SIGHUP)
            pass
    os._exit(code)


def _open_instance(dagster_home: Path):
    import dagster as dg

    return dg.DagsterInstance.from_config(str(dagster_home))


@dataclass(frozen=True)
class InFlight:
    """An unfinished run executed by processes of the UI's group."""

    run: object  # DagsterRun
    pids: tuple[int, ...]  # its own process and step processes, among the group's


@dataclass
class _Stopper:
    """Stops `dagster dev` (`dev`, leader of its process group) and everything in its group, and marks its runs."""

    dev: subprocess.Popen
    instance: object  # DagsterInstance
    received: list[int]
    reason: str
    began: float  # time.monotonic() of the signal, or of noticing `dagster dev` exit: the promise counts from it

    def stop(self) -> None:
        began = self.began
        group = group_processes(self.dev.pid)
        in_flight = self._in_flight(group)
        if group:
            say(f"{self.reason}: stopping the webserver, the daemon and the code server"
                + (f"; canceling {len(in_flight)} run(s) in flight" if in_flight else ""))
        self._mark_canceling(in_flight)
        # Dagster's own shutdown, and an interrupt for every step of those runs that can take one. Not the whole
        # group: its log tails and orphan watchers would only print tracebacks, and they end with their run.
        running_dev = [self.dev.pid] if self.dev.returncode is None else []  # a reaped pid may be another's now
        for pid in [*running_dev, *(pid for flight in in_flight for pid in flight.pids)]:
            _interrupt(pid)
        if not self._ended_within(began + GRACE_SECONDS):
            group.update(group_processes(self.dev.pid))
            killed = self._kill_all_but_dev()
            if killed:
                say(f"killed {killed} process(es) still running {GRACE_SECONDS:.0f}s after the signal (a code server "
                    "waiting for its runs, a run waiting for a pool)")
            if not self._dev_ended_within(time.monotonic() + CLEANUP_SECONDS):
                _kill_group(self.dev.pid)
        self.dev.wait()
        runs = {flight.run.run_id: flight.run for flight in [*in_flight, *self._in_flight(group)]}
        for line in self._canceled(runs):
            say(line)
        if group:
            say(f"stopped in {time.monotonic() - began:.1f}s")

    def _in_flight(self, group: dict[int, float]) -> list[InFlight]:
        try:
            return runs_in_flight(self.instance, group)
        except Exception as exc:  # the storage busy or gone: the processes must stop all the same
            say(f"could not read the runs in flight ({exc}); `focus recover` fails those left STARTED")
            return []

    def _mark_canceling(self, in_flight: list[InFlight]) -> None:
        """CANCELING, as a termination from the UI marks a run: a run that Dagster interrupts then ends CANCELED."""
        for flight in in_flight:
            try:
                self.instance.report_run_canceling(flight.run, f"focus ui: {self.reason}, the UI stops and cancels "
                                                               "this run")
            except Exception as exc:
                say(f"could not mark run {flight.run.run_id} CANCELING ({exc}); it is canceled once stopped")

    def _ended_within(self, deadline: float) -> bool:
        """Whether every process of the group ended before `deadline` (a second signal gives up at once)."""
        while time.monotonic() < deadline and len(self.received) < 2:
            if not group_processes(self.dev.pid, include_zombies=False):
                return True
            time.sleep(POLL_SECONDS)
        return False

    def _dev_ended_within(self, deadline: float) -> bool:
        while time.monotonic() < deadline and len(self.received) < 2:
            if self.dev.poll() is not None:
                return True
            time.sleep(POLL_SECONDS)
        return self.dev.poll() is not None

    def _kill_all_but_dev(self) -> int:
        """Kill every process of the group but `dagster dev`, which then ends by itself, its workspace removed."""
        import psutil

        killed = 0
        for pid, started in group_processes(self.dev.pid, include_zombies=False).items():
            if pid == self.dev.pid:
                continue
            try:
                process = psutil.Process(pid)
                if process.create_time() == started:
                    process.kill()
                    killed += 1
            except psutil.Error:
                continue
        return killed

    def _canceled(self, runs: dict) -> list[str]:
        """Mark CANCELED those of `runs` that did not end by themselves and free every one's pool slots; a line each."""
        lines = []
        storage = self.instance.event_log_storage
        for run_id in runs:
            try:
                run = self.instance.get_run_by_id(run_id)
                if run is None:
                    continue
                if not run.is_finished:
                    self.instance.report_run_canceled(run, f"focus ui: {self.reason}; the run's processes were stopped")
                    run = self.instance.get_run_by_id(run_id)
                if storage.supports_global_concurrency_limits:
                    storage.free_concurrency_slots_for_run(run_id)
            except Exception as exc:  # left to run monitoring and `focus recover`, which judge it by its processes
                lines.append(f"run {run_id}: could not be marked ({exc}); `focus recover` fails it and frees its slots")
                continue
            lines.append(f"run {run_id} ({run.job_name}) {run.status.value}, its pool slots freed")
        return lines


def say(line: str, prefix: str = "focus ui: ") -> None:
    try:
        print(f"{prefix}{line}", flush=True)
    except OSError:  # the terminal is gone (SIGHUP): stopping matters, not the words
        pass


def group_processes(pgid: int, include_zombies: bool = True) -> dict[int, float]:
    """The processes of process group `pgid`, as pid -> start time (a pid reused later is another process)."""
    import psutil

    found = {}
    for process in psutil.process_iter(["create_time", "status"]):
        try:
            if os.getpgid(process.pid) != pgid:
                continue
        except OSError:
            continue
        if include_zombies or process.info["status"] != psutil.STATUS_ZOMBIE:
            found[process.pid] = process.info["create_time"]
    return found


def runs_in_flight(instance, processes: dict[int, float]) -> list[InFlight]:
    """The unfinished runs that some of `processes` (pid -> start time) execute: the run's own process or its step
    processes, as the run recorded them after they started (a pid recorded earlier was another process's)."""
    import dagster as dg

    from focus_dagster.platform.recovery import PID_REUSE_TOLERANCE_SECONDS, run_processes

    def ours(process) -> bool:
        started = processes.get(process.pid)
        return started is not None and started <= process.recorded_at + PID_REUSE_TOLERANCE_SECONDS

    statuses = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
    found = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=statuses)):
        worker, steps = run_processes(instance, run.run_id)
        pids = tuple(p.pid for p in [worker, *steps] if p is not None and ours(p))
        if pids:
            found.append(InFlight(run, pids))
    return found


def _interrupt(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        pass


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:  # the group is empty already
        pass


def _kill_group(pgid: int) -> None:
    _signal_group(pgid, signal.SIGKILL)
