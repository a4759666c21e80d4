"""`dagster-daemon run` on the code location of this repository, for the tests that need the real daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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
