"""`dagster-daemon run` on the code location of this repository, for the tests that need the real daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from tests.support.waiting import file_size, folder_bytes, last_lines, wait_while_progressing

REPO = Path(__file__).resolve().parents[2]


def instance_progress(instance) -> tuple:
    """What moves while an instance's runs advance, for the waits of tests/support/waiting.py: its newest indexed event,
    its newest runs and their statuses, and the bytes of its storage (SQLite's per-run event logs grow with every
    event a step or the daemon reports, engine events included)."""
    runs = tuple((run.run_id, run.status.value) for run in instance.get_runs(limit=100))
    return instance.event_log_storage.get_maximum_record_id(), runs, folder_bytes(Path(instance.root_directory))


def wait_advancing(condition, what: str, instance, *logs: Path):
    """`condition()`'s first truthy value, waited for as long as something advances: the instance's events, runs
    and their statuses, or any of `logs` (the daemon's, a process's output) growing. Fails once nothing has moved
    for the patience of tests/support/waiting.py, stretched by the machine's load, with the end of each log."""
    return wait_while_progressing(condition, what, lambda: (instance_progress(instance), *map(file_size, logs)),
                                  describe=lambda: "\n".join(f"--- {log}:\n{last_lines(log)}" for log in logs))


@contextmanager
def running_daemon(env: dict, log: Path):
    """The daemon started with `env` (its DAGSTER_HOME, FOCUS_*), its output in `log`; yields the process, and
    stops its whole process group after (SIGTERM, then SIGKILL if it lingers)."""
    with open(log, "w") as out:
        process = subprocess.Popen([str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                                   cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield process
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
