"""`focus demo`'s watch of a running run (its pool waits, its progress lines) waits until the instance is ready.

While a job runs in the demo's worker thread, the main thread looks at the run in the instance every second. One
demo under load crashed in that look: the main thread's query met `sqlalchemy.orm` half imported by the run's
thread ("partially initialized module"). Now the looks' code is loaded by the main thread before the first run's
thread starts, and the watch makes its first look only once the run has stored its first event.

The first test slows a run's start as a loaded machine does (its thread sleeps before executing the job) and sees
no look while that thread has not started the run. The second runs a whole small demo while CPU-burning processes
(one per core, each bounded in time, ended after the test) load the machine, and sees it complete, with no import
error in what it printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from focus_dagster.platform import runner as demo_runner
from focus_dagster.platform.instance import REPO_ROOT, prepare_dagster_home
from tests.support.waiting import folder_bytes, run_apart

pytestmark = pytest.mark.heavy(60)  # seconds on a quiet 2-core machine: started first

SLOW_START = 2.5  # seconds the run's thread spends before the run starts: more than the watch's period
BURN_SECONDS = 600  # the longest a CPU burner lives, should the test's own cleanup never run


@dg.op
def step() -> None:
    time.sleep(1.5)  # a run long enough to be watched after its start


@dg.job
def short_job():
    step()


class SlowStart:
    """`job` whose in-process execution starts SLOW_START seconds late, as when its thread is still importing."""

    def __init__(self, job):
        self.job, self.name = job, job.name
        self.starts_at: float | None = None

    def execute_in_process(self, **kwargs):
        time.sleep(SLOW_START)
        self.starts_at = time.monotonic()
        return self.job.execute_in_process(**kwargs)


def test_the_watch_looks_at_the_run_only_once_it_has_started(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = prepare_dagster_home(SimpleNamespace(dagster_home=tmp_path / "dagster"))
    looks: list[tuple[float, bool]] = []  # (when, whether the run's thread was running)

    def recorded(look):
        def watched(runner):
            looks.append((time.monotonic(), runner.worker is not None and runner.worker.is_alive()))
            return look(runner)

        return watched

    for name in ("_watch_pools", "_watch_progress"):
        monkeypatch.setattr(demo_runner.Runner, name, recorded(getattr(demo_runner.Runner, name)))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runner, job = demo_runner.Runner(instance, home), SlowStart(short_job)
        begun = time.monotonic()
        result = runner.execute(job)
        assert result.success
    during = [when for when, running in looks if running]
    print(f"looks while the run's thread ran, seconds after execute(): {[round(w - begun, 2) for w in during]}; "
          f"the run started at {job.starts_at - begun:.2f}s")
    assert during, "the watch never looked at the running job"
    assert min(during) >= job.starts_at, "the watch looked at the instance before the run's thread started the run"


def burn_cpu(count: int, seconds: int) -> list[subprocess.Popen]:
    """`count` processes that each spin one core for at most `seconds`."""
    spin = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]


def test_a_small_demo_completes_on_a_loaded_machine(tmp_path):
    from focus_dagster.synthetic import synthesize

    synthesize(tmp_path / "data", ["idrid"], per_dataset=8, seed=0, scale=0.05, workers=1)
    (tmp_path / "focus.yaml").write_text(f"datasets: {{idrid: {tmp_path / 'data' / 'idrid'}}}\nmodels: [tiny_vit]\n"
                                         "degradations: false\n")
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    env.update(FOCUS_HOME=str(tmp_path / "home"), FOCUS_CONFIG=str(tmp_path / "focus.yaml"),
               DAGSTER_DISABLE_TELEMETRY="1")
    burners = burn_cpu(os.cpu_count() or 2, BURN_SECONDS)
    try:
        began = time.monotonic()
        # As long as it advances (its output, its CPU time, the files under FOCUS_HOME): the burners slow it down
        # by design, and how much depends on what else the machine runs.
        finished = run_apart([str(Path(sys.executable).parent / "focus"), "demo", "--no-lora"],
                             "`focus demo` among CPU burners", tmp_path / "demo.out", tmp_path / "demo.err",
                             progress=[lambda: folder_bytes(tmp_path / "home")], cwd=REPO_ROOT, env=env)
        took = time.monotonic() - began
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    output = finished.stdout + finished.stderr
    print(f"the demo under {len(burners)} CPU burners: exit code {finished.returncode} after {took:.0f}s\n"
          f"{output[-1500:]}")
    assert "partially initialized" not in output, output[-5000:]
    assert finished.returncode == 0, output[-5000:]
