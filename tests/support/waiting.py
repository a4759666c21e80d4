"""Waits that scale with the machine: a wait lasts as long as what it waits on keeps advancing, and gives up only
after a stretch with no sign of progress at all. That stretch, the patience, is itself stretched by the machine's
load, so a busy machine that is slow but advancing never fails a test, while a hang still ends it.

A sign of progress is anything the caller can observe growing: a process's output, a log file, the newest event
id in the instance. The failure names what was awaited, for how long nothing moved, and the last lines seen.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterable

PATIENCE = float(os.environ.get("FOCUS_TEST_PATIENCE", 120))  # seconds without progress, on a quiet machine
POLL = 1.0  # seconds between two looks


class Stalled(AssertionError):
    """A wait saw no progress for its whole patience."""


def load_factor() -> float:
    """How many times more runnable work than cores the machine had over the last minute (at least 1)."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this system
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def patience_now(patience: float | None = None) -> float:
    """The patience (default PATIENCE, or FOCUS_TEST_PATIENCE), stretched by the machine's current load."""
    return (PATIENCE if patience is None else patience) * load_factor()


def file_size(path: Path) -> int:
    """The size of `path`, 0 while it does not exist."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under `folder` (tables, artifacts, logs grow as a run does its work); files that come
    and go meanwhile are passed over."""
    return sum(file_size(Path(root) / name) for root, _, names in os.walk(folder) for name in names)


def last_lines(path: Path, lines: int = 40) -> str:
    """The end of a text file, for a failure message ('' while it does not exist)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_while_progressing(condition: Callable, what: str, progress: Callable, patience: float | None = None,
                           describe: Callable[[], str] = lambda: "", poll: float = POLL):
    """`condition()`'s first truthy value. The wait goes on while `progress()` keeps changing and raises Stalled
    once it has not changed for the patience (stretched by the load at that moment); `describe()` adds the last
    output to the message."""
    seen, changed, started = progress(), time.monotonic(), time.monotonic()
    while True:
        value = condition()
        if value:
            return value
        now = progress()
        if now != seen:
            seen, changed = now, time.monotonic()
        idle, allowed = time.monotonic() - changed, patience_now(patience)
        if idle > allowed:
            raise Stalled(f"no progress for {idle:.0f}s (patience {allowed:.0f}s at load factor {load_factor():.1f}) "
                          f"waiting for {what}, {time.monotonic() - started:.0f}s in all; last seen:\n{describe()}")
        time.sleep(poll)


@contextmanager
def started(command: list[str], log: Path, **popen):
    """`command` in a process group of its own, stdout and stderr into `log`; the whole group is killed on the
    way out if it is still there (a process that stalled leaves nothing behind)."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen)
        try:
            yield process
        finally:
            if process.poll() is None:
                _kill_group(process)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def exits_within(process: subprocess.Popen, seconds: float) -> float:
    """Seconds `process` took to exit, for a promise the product makes (e.g. the demo stops within 5 s of a signal):
    a deadline, not a progress wait. Past it, the process group is killed and the test fails."""
    started_at = time.monotonic()
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"{process.args} did not exit within {seconds}s")
    return time.monotonic() - started_at


def wait_for_exit(processes: dict[str, tuple[subprocess.Popen, Path]], what: str,
                  progress: Iterable[Callable] = (), patience: float | None = None) -> dict[str, SimpleNamespace]:
    """Every process of `processes` (name -> (process, its log)) ended: their return codes and outputs. Progress
    is any log growing or any of `progress` changing."""
    signs = list(progress)

    def everything() -> tuple:
        return tuple(file_size(log) for _, log in processes.values()) + tuple(sign() for sign in signs)

    def describe() -> str:
        return "\n".join(f"--- {name} ({'running' if process.poll() is None else process.returncode}):\n"
                         f"{last_lines(log)}" for name, (process, log) in processes.items())

    wait_while_progressing(lambda: all(process.poll() is not None for process, _ in processes.values()), what,
                           everything, patience, describe)
    return {name: SimpleNamespace(returncode=process.returncode, output=Path(log).read_text(errors="replace"))
            for name, (process, log) in processes.items()}


def run_while_progressing(command: list[str], what: str, log: Path, progress: Iterable[Callable] = (),
                          patience: float | None = None, **popen) -> SimpleNamespace:
    """`command` run to its end (returncode, output), its output in `log`, for as long as it keeps advancing: its
    output growing or any of `progress` changing. A run that stops advancing is killed with its process group."""
    with started(command, log, **popen) as process:
        return wait_for_exit({what: (process, log)}, what, progress, patience)[what]


def cpu_seconds(process: subprocess.Popen) -> int:
    """Whole seconds of CPU that `process` and every process below it have used so far (0 once it is gone): a
    process that computes advances even while it prints nothing, one that waits on a lock or a socket does not."""
    import psutil

    try:
        root = psutil.Process(process.pid)
        family = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0.0
    for member in family:
        try:
            times = member.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return int(total)


def run_apart(command: list[str], what: str, out: Path, err: Path, progress: Iterable[Callable] = (),
              patience: float | None = None, **popen) -> SimpleNamespace:
    """`command` run to its end like run_while_progressing, with its stdout in `out` and its stderr in `err` kept
    apart: returncode, stdout, stderr. Progress is either file growing, the process's CPU time, or `progress`."""
    with open(out, "w") as stdout, open(err, "w") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, start_new_session=True, **popen)
        try:
            ended = wait_for_exit({"stdout": (process, out), "stderr": (process, err)}, what,
                                  [lambda: cpu_seconds(process), *progress], patience)
        finally:
            if process.poll() is None:
                _kill_group(process)
    return SimpleNamespace(returncode=process.returncode, stdout=ended["stdout"].output,
                           stderr=ended["stderr"].output)
