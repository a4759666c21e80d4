"""`focus demo` under `executor: multiprocess`: every step of its runs in a process of its own, as focus.yaml asks,
and a signal that stops the demo also ends the step process at work, its run marked CANCELED and its pool freed.

One tiny dataset and the seeded tiny ViT, narrowed to by the demo's options (focus.yaml configures a second dataset
and model, which the step processes must leave alone too); each verdict is read from the instance (the step's pid
from its STEP_WORKER_STARTED event), from the process table and from what the demo printed (the progress lines of
steps in other processes, read from the run's event log).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import psutil
import pytest

from focus_dagster.platform.instance import REPO_ROOT, prepare_dagster_home
from tests.ops.test_demo_signals import PROMPT
from tests.support.daemon import wait_advancing
from tests.support.pool_location import holder_of
from tests.support.waiting import exits_within

pytestmark = pytest.mark.heavy(50)  # seconds on a quiet 2-core machine: started first


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    from focus_dagster.synthetic import synthesize

    tmp = tmp_path_factory.mktemp("demo_multiprocess")
    synthesize(tmp / "data", ["idrid"], per_dataset=8, seed=0, scale=0.05, workers=1)
    (tmp / "focus.yaml").write_text(f"datasets: {{idrid: {tmp / 'data' / 'idrid'}, papila: synthetic}}\n"
                                    "models: [tiny_vit, tiny_clip]\nexecutor: multiprocess\nlora: {models: []}\n"
                                    "degradations: false\n")
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    env.update(FOCUS_HOME=str(tmp / "home"), FOCUS_CONFIG=str(tmp / "focus.yaml"), DAGSTER_DISABLE_TELEMETRY="1",
               PYTHONPATH=str(REPO_ROOT))
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("DAGSTER_HOME", raising=False)
        home = prepare_dagster_home(SimpleNamespace(dagster_home=tmp / "home" / "dagster"))
    demos: list[subprocess.Popen] = []
    # The instance's storage is created here first: the demo and this test creating it at once can stamp its
    # schema twice.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs(limit=1)
        yield SimpleNamespace(tmp=tmp, env=env, demos=demos, instance=instance)
    for demo in demos:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()


DEMO_OPTIONS = ("--datasets", "idrid", "--models", "tiny_vit")


def start_demo(setting, name: str) -> tuple[subprocess.Popen, Path]:
    out = setting.tmp / f"{name}.out"
    process = subprocess.Popen([str(Path(sys.executable).parent / "focus"), "demo", *DEMO_OPTIONS], cwd=REPO_ROOT,
                               env=setting.env, stdout=out.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    setting.demos.append(process)
    return process, out


def step_workers(instance, run_id: str) -> dict[str, int]:
    """step key -> the pid of the process that executed it, from the run's STEP_WORKER_STARTED events."""
    return {event.step_key: int(event.dagster_event.event_specific_data.metadata["pid"].value)
            for event in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_WORKER_STARTED)}


def test_a_signal_ends_the_step_process_at_work_with_its_run(setting):
    process, out = start_demo(setting, "sigterm")
    instance = setting.instance

    def embedding_step():
        assert process.poll() is None, out.read_text()
        for record in instance.get_run_records(dg.RunsFilter(job_name="focus_encoder_outputs")):
            pid = step_workers(instance, record.dagster_run.run_id).get("image_embeddings")
            if pid:
                return record.dagster_run.run_id, pid
        return None

    run_id, pid = wait_advancing(embedding_step, "the embeddings step in a process of its own", instance, out)
    worker = psutil.Process(pid)  # is_running() below tells it from a later process given the same pid
    os.kill(process.pid, signal.SIGTERM)
    exits_within(process, PROMPT)
    text = out.read_text()
    assert process.returncode == 128 + signal.SIGTERM, text
    assert f"interrupted by SIGTERM; run {run_id} (focus_encoder_outputs) stopped, now CANCELED" in text, text
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE  # ended before the demo exited
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED
    succeeded = {e.step_key for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)}
    assert "image_embeddings" not in succeeded  # stopped at work, not after it
    assert not holder_of(instance, "gpu")
    # The runs before it executed each step in a process of its own.
    [data_layer] = instance.get_run_records(dg.RunsFilter(job_name="focus_data_layer"))
    workers = step_workers(instance, data_layer.dagster_run.run_id)
    assert {"dataset_records", "harmonise_labels"} <= set(workers)  # harmonise_labels: labels + rejects
    assert len(set(workers.values())) == len(workers) and os.getpid() not in workers.values()
    # The options reached the step processes: none observed PAPILA (its look-alike would be written on first use).
    assert not (setting.tmp / "home" / "synthetic" / "papila").exists()
    assert "idrid image checks (header): 8/8 images in" in text, text  # logged in a step process, printed here
