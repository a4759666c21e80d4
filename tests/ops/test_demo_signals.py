"""`focus demo` stops on Ctrl-C and SIGTERM at once, and never waits for ever on a held pool.

The setting is the one that hung it for twelve minutes: a run killed (SIGKILL) while it held a pool (then
`duckdb`; since the tables are files per partition, `gpu` is the one pool), and no daemon to notice. The demo's
embeddings wait for that pool; it says so at INFO in its run, naming the
holder; a signal stops it within seconds, its run marked CANCELED and its slots freed; left alone, it stops by
itself after FOCUS_POOL_WAIT_SECONDS, naming the holder and `focus recover`, which releases the pool. Each
verdict is read from the instance. One small dataset: the demo reaches the wait in a few seconds.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from focus_dagster.platform.instance import REPO_ROOT, prepare_dagster_home
from tests.support.daemon import wait_advancing
from tests.support.pool_location import HOLD_IN_PROCESS, holder_of, waiting_lines
from tests.support.waiting import exits_within

pytestmark = pytest.mark.heavy(50)  # seconds on a quiet 2-core machine: started first

PROMPT = 5  # seconds from the signal to the demo's exit


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """One tiny dataset, and the instance under FOCUS_HOME with a dead run holding `gpu`."""
    from focus_dagster.synthetic import synthesize

    tmp = tmp_path_factory.mktemp("demo_signals")
    synthesize(tmp / "data", ["idrid"], per_dataset=8, seed=0, scale=0.05, workers=1)
    (tmp / "focus.yaml").write_text(f"datasets: {{idrid: {tmp / 'data' / 'idrid'}}}\nmodels: [tiny_vit]\n"
                                    "degradations: false\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("DAGSTER_HOME", raising=False)
        home = prepare_dagster_home(SimpleNamespace(dagster_home=tmp / "home" / "dagster"))
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    env.update(FOCUS_HOME=str(tmp / "home"), FOCUS_CONFIG=str(tmp / "focus.yaml"), DAGSTER_DISABLE_TELEMETRY="1",
               FOCUS_TEST_DIR=str(tmp), PYTHONPATH=str(REPO_ROOT))
    # The instance's storage is created here first: processes creating it at once can stamp its schema twice.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        holder = subprocess.Popen([sys.executable, "-c", HOLD_IN_PROCESS, "hold_gpu_job"], cwd=REPO_ROOT,
                                  env=dict(env, DAGSTER_HOME=str(home)), start_new_session=True)
        try:
            held = wait_advancing(lambda: next(iter(holder_of(instance, "gpu")), None), "the gpu pool held", instance)
        finally:
            holder.kill()
            holder.wait()
        assert instance.get_run_by_id(held).status == dg.DagsterRunStatus.STARTED
        setting = SimpleNamespace(tmp=tmp, env=env, instance=instance, held_by=held, demos=[])
        yield setting
        for demo in setting.demos:  # a demo a failed test left behind
            if demo.poll() is None:
                os.killpg(demo.pid, signal.SIGKILL)
                demo.wait()


def _sigint_as_at_a_terminal() -> None:
    """In the child, before exec: the SIGINT case is Ctrl-C at a terminal, where the signal is not ignored. A test
    run started in the background of a script (`cmd &`, nohup) would otherwise pass its ignored SIGINT on."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_demo(setting, name: str, **env) -> tuple[subprocess.Popen, Path]:
    out = setting.tmp / f"{name}.out"
    process = subprocess.Popen([str(Path(sys.executable).parent / "focus"), "demo"], cwd=REPO_ROOT,
                               env=dict(setting.env, **env), stdout=out.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True, preexec_fn=_sigint_as_at_a_terminal)
    setting.demos.append(process)
    return process, out


def waiting_run(setting, process, out: Path) -> str:
    """The demo's run whose step waits for `gpu` (behind the dead holder), from the instance."""
    def pending():
        assert process.poll() is None, out.read_text()
        steps = setting.instance.event_log_storage.get_concurrency_info("gpu").pending_steps
        return next((s.run_id for s in steps if s.run_id != setting.held_by and s.assigned_timestamp is None), None)

    return wait_advancing(pending, "the demo to wait for the gpu pool", setting.instance, out)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_stops_the_demo_waiting_on_a_held_pool_at_once(setting, signum):
    process, out = start_demo(setting, signum.name, FOCUS_POOL_WAIT_SECONDS="600")
    run_id = waiting_run(setting, process, out)
    # The wait is said at INFO in the demo's run, naming the dead holder.
    lines = wait_advancing(lambda: waiting_lines(setting.instance, run_id, "gpu"), "the waiting line", setting.instance,
                           out)
    assert lines[0].level == logging.INFO and setting.held_by in lines[0].dagster_event.message
    assert "gone" in lines[0].dagster_event.message
    if signum == signal.SIGINT:
        os.killpg(process.pid, signum)  # Ctrl-C reaches the terminal's whole process group
    else:
        os.kill(process.pid, signum)
    took = exits_within(process, PROMPT)
    text = out.read_text()
    print(f"{signum.name}: exited {took:.2f}s after the signal, code {process.returncode}")
    assert process.returncode == 128 + signum
    assert f"interrupted by {signum.name}; run {run_id} (focus_encoder_outputs) stopped, now CANCELED" in text, text
    assert setting.instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED
    assert run_id not in setting.instance.event_log_storage.get_concurrency_run_ids()
    assert holder_of(setting.instance, "gpu") == {setting.held_by}  # the dead holder is not the demo's to touch


def test_the_demo_stops_after_a_bounded_wait_and_recover_releases_the_pool(setting, monkeypatch, capsys):
    process, out = start_demo(setting, "bounded", FOCUS_POOL_WAIT_SECONDS="2")
    run_id = waiting_run(setting, process, out)
    took = exits_within(process, 2 + 10)
    text = out.read_text()
    assert process.returncode == 1, text
    assert "waited" in text and "pool gpu" in text and setting.held_by in text and "focus recover" in text, text
    assert setting.instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
    assert run_id not in setting.instance.event_log_storage.get_concurrency_run_ids()

    from focus_dagster.platform.cli import main

    for key in ("FOCUS_HOME", "FOCUS_CONFIG"):
        monkeypatch.setenv(key, setting.env[key])
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main(["recover"]) == 0
    recovered = capsys.readouterr().out
    assert f"run {setting.held_by} (hold_gpu_job): process" in recovered, recovered
    print(f"bounded wait: the demo exited {took:.2f}s after its wait was seen; focus recover:\n{recovered}")
    assert setting.instance.get_run_by_id(setting.held_by).status == dg.DagsterRunStatus.FAILURE
    assert not holder_of(setting.instance, "gpu")
