"""`focus ui` stops, whole, within ten seconds of Ctrl-C or SIGTERM, while a run is in flight.

The setting is the one where it hung: a run launched from the UI, executing in a run worker of the UI's code
server, whose step waits for the `gpu` pool (Dagster's in-process executor holds Ctrl-C and SIGTERM back while a
step waits for a pool, and the code server waits for its runs before it exits). The pool is held by a run of
another host, which nothing here may touch. The instance is the repository's dagster.yaml with one run let past
the queue beyond the pool's limit (`op_granularity_run_buffer: 1`), so that the run leaves the queue and waits
inside its step, as a run does that the queue let through just before the pool filled.

Each case starts `focus ui` in a process group of its own, launches the run through the UI's GraphQL API, and
signals the group as a terminal's Ctrl-C or a `kill -- -PGID` does; every process of the UI (webserver, daemon,
code servers, the run worker, its log tails) must be gone within ten seconds, the run CANCELED and its place in
the pool's queue freed. `SIGTERM-background` starts it as a non-interactive shell's `focus ui &` does (SIGINT
ignored, which `dagster dev` alone turned into ignoring SIGTERM too).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import psutil
import pytest

from focus_dagster.platform.instance import REPO_ROOT, prepare_dagster_home
from focus_dagster.platform.recovery import HOST_TAG
from tests.support.pool_location import defs as pool_location
from tests.support.ports import free_port
from tests.support.waiting import wait_while_progressing

pytestmark = pytest.mark.heavy(70)  # seconds on a quiet 2-core machine: started first

STOP_SECONDS = 10  # the promise: every process of the UI gone this long after the signal
LOOK_SECONDS = 0.25  # between two looks at the UI's port or the run's pool wait: each is one cheap request
LOCATION = "focus_dagster.definitions"  # workspace.yaml's code location
JOB, PARTITION, STEP = "focus_image_embeddings", "idrid|tiny_vit", "image_embeddings"
CASES = {"SIGTERM": (signal.SIGTERM, False), "SIGINT": (signal.SIGINT, False),
         "SIGTERM-background": (signal.SIGTERM, True)}


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """One tiny dataset and the tiny ViT; the instance under FOCUS_HOME with `gpu` held by another host's run."""
    from focus_dagster.synthetic import synthesize

    tmp = tmp_path_factory.mktemp("ui_stop")
    synthesize(tmp / "data", ["idrid"], per_dataset=8, seed=0, scale=0.05, workers=1)
    # refresh_seconds: long, so that the UI's sensor launches nothing of its own meanwhile.
    (tmp / "focus.yaml").write_text(f"datasets: {{idrid: {tmp / 'data' / 'idrid'}}}\nmodels: [tiny_vit]\n"
                                    "release: {refresh_seconds: 3600}\n")
    profile = (REPO_ROOT / "dagster.yaml").read_text()
    buffered = profile.replace("    default_limit: 1\n", "    default_limit: 1\n    op_granularity_run_buffer: 1\n")
    assert buffered != profile, "dagster.yaml's pools section changed: update this test's instance"
    (tmp / "dagster.yaml").write_text(buffered)
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    env.update(FOCUS_HOME=str(tmp / "home"), FOCUS_CONFIG=str(tmp / "focus.yaml"),
               FOCUS_INSTANCE=str(tmp / "dagster.yaml"), DAGSTER_DISABLE_TELEMETRY="1")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("DAGSTER_HOME", raising=False)
        patch.setenv("FOCUS_INSTANCE", env["FOCUS_INSTANCE"])
        home = prepare_dagster_home(SimpleNamespace(dagster_home=tmp / "home" / "dagster"))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        holder = hold_pool_elsewhere(instance, "gpu")
        yield SimpleNamespace(tmp=tmp, env=env, instance=instance, holder=holder)


def hold_pool_elsewhere(instance, pool: str) -> str:
    """A STARTED run of another host holding `pool`'s one slot: this host's run monitoring never judges it."""
    run = instance.create_run_for_job(pool_location.resolve_job_def(f"hold_{pool}_job"),
                                      status=dg.DagsterRunStatus.STARTED, tags={HOST_TAG: "another-host"})
    storage = instance.event_log_storage
    storage.initialize_concurrency_limit_to_default(pool)
    claim = storage.claim_concurrency_slot(pool, run.run_id, f"hold_{pool}")
    assert claim.is_claimed, claim
    return run.run_id


def start_ui(setting, name: str, background: bool):
    """`focus ui` on a free port in a process group of its own, its output in <name>.log."""
    port, log = free_port(), setting.tmp / f"{name}.log"
    # A non-interactive shell's `cmd &` starts the job with SIGINT ignored; a terminal's foreground job has it at
    # its default, whatever the test run's own is (a test run started as a script's background job ignores it,
    # and a `focus ui` that inherited that would rightly stay deaf to the SIGINT case's signal).
    sigint = signal.SIG_IGN if background else signal.SIG_DFL
    set_sigint = lambda: signal.signal(signal.SIGINT, sigint)  # noqa: E731 - run in the child, before exec
    process = subprocess.Popen([str(Path(sys.executable).parent / "focus"), "ui", "--port", str(port)],
                               cwd=REPO_ROOT, env=setting.env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True, preexec_fn=set_sigint)
    return process, port, log


def serving(base: str, process, log: Path) -> bool:
    assert process.poll() is None, f"focus ui exited with {process.returncode}:\n{log.read_text()[-3000:]}"
    try:
        with urllib.request.urlopen(f"{base}/server_info", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def launch(port: int) -> str | None:
    """The embeddings run of one partition, submitted through the UI's GraphQL API (None until the location loads)."""
    from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

    client = DagsterGraphQLClient("127.0.0.1", port_number=port, timeout=30)
    try:
        return client.submit_job_execution(JOB, repository_location_name=LOCATION, repository_name="__repository__",
                                           tags={"dagster/partition": PARTITION})
    except DagsterGraphQLClientError as exc:
        if "not found" in str(exc).lower() or "Unreachable" in str(exc):
            return None
        raise


def waiting_for_pool(instance, run_id: str, pool: str) -> bool:
    run = instance.get_run_by_id(run_id)
    assert not run.is_finished, f"run {run_id} ended {run.status.value} before the signal"
    pending = instance.event_log_storage.get_concurrency_info(pool).pending_steps
    return run.status == dg.DagsterRunStatus.STARTED and any(
        s.run_id == run_id and s.assigned_timestamp is None for s in pending)


def group_members(pgid: int) -> list[psutil.Process]:
    """The running processes of process group `pgid` (zombies are gone: only their parent's wait is left)."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return found


def the_ui_and_below(process) -> list[psutil.Process]:
    """Every process of the UI: `focus ui`, what it started, and any process left in its group or `dagster dev`'s."""
    try:
        root = psutil.Process(process.pid)
        found = {p.pid: p for p in [root, *root.children(recursive=True)]}
    except psutil.NoSuchProcess:
        found = {}
    for member in group_members(process.pid) + [m for p in list(found.values()) for m in group_members(p.pid)]:
        found.setdefault(member.pid, member)
    return list(found.values())


def still_running(processes: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
        except psutil.NoSuchProcess:
            continue
    return left


def describe(processes: list[psutil.Process]) -> str:
    lines = []
    for process in processes:
        try:
            lines.append(f"{process.pid}: {' '.join(process.cmdline())[:160]}")
        except psutil.Error:
            lines.append(f"{process.pid}: (gone)")
    return "\n".join(lines)


def kill_all(processes: list[psutil.Process]) -> None:
    """What a failed case left running (is_running checks the start time: a reused pid is left alone)."""
    for process in still_running(processes):
        try:
            process.kill()
        except psutil.Error:
            continue


@pytest.mark.parametrize("case", list(CASES))
def test_a_signal_stops_the_ui_with_a_run_in_flight_within_ten_seconds(setting, case):
    signum, background = CASES[case]
    process, port, log = start_ui(setting, case, background)
    seen: list[psutil.Process] = []
    try:
        base = f"http://127.0.0.1:{port}"
        grows = lambda: log.stat().st_size  # noqa: E731 - the UI logs as it starts and as its daemon ticks
        wait_while_progressing(lambda: serving(base, process, log), "the UI to serve", grows, poll=LOOK_SECONDS)
        run_id = wait_while_progressing(lambda: launch(port), "the code location to load", grows)
        wait_while_progressing(lambda: waiting_for_pool(setting.instance, run_id, "gpu"),
                               f"run {run_id} to wait for the gpu pool", grows, poll=LOOK_SECONDS)
        seen = the_ui_and_below(process)
        assert any("api" in " ".join(p.cmdline()) and "grpc" in " ".join(p.cmdline()) for p in still_running(seen)), \
            describe(seen)  # the code server that waits for the run is among them

        signalled = time.monotonic()
        os.killpg(process.pid, signum)
        while still_running(seen) and time.monotonic() - signalled < STOP_SECONDS:
            time.sleep(0.1)
        took, left = time.monotonic() - signalled, still_running(seen)
        process.poll()
        output = log.read_text()
        print(f"{case}: {len(seen)} processes, {len(left)} left {took:.1f}s after the signal; "
              f"exit code {process.returncode}\n{output[output.find('focus ui:'):][:2000]}")
        assert not left, f"still running {STOP_SECONDS}s after {signum.name}:\n{describe(left)}\n{output[-3000:]}"
        assert process.returncode == 128 + signum, output[-3000:]

        run = setting.instance.get_run_by_id(run_id)
        assert run.status == dg.DagsterRunStatus.CANCELED, (run.status, output[-3000:])
        assert f"run {run_id} ({JOB}) CANCELED" in output, output[-3000:]
        storage = setting.instance.event_log_storage
        assert run_id not in storage.get_concurrency_run_ids()
        assert not [s for s in storage.get_concurrency_info("gpu").pending_steps if s.run_id == run_id]
        # The other host's run is not this UI's: it still holds the pool, still STARTED.
        assert setting.instance.get_run_by_id(setting.holder).status == dg.DagsterRunStatus.STARTED
        assert {s.run_id for s in storage.get_concurrency_info("gpu").claimed_slots} == {setting.holder}
    finally:
        kill_all(seen or the_ui_and_below(process))
        process.wait()
