"""The PostgreSQL instance profile (deploy/postgres/), on a real PostgreSQL server.

A throwaway cluster is started for this module (Debian's `postgresql` server binaries, which .ci/run installs;
without them the tests are skipped on a workstation, fail under CI, and `make test` ends by saying so). The
platform is pointed at it as a user would point it at theirs: FOCUS_INSTANCE=postgres and the FOCUS_PG_*
variables, password included (the cluster checks it: scram-sha-256 over TCP). Then, on that one instance:

- `focus demo` builds the graph (two small look-alikes, the seeded tiny ViT), its runs executing in process;
- the automation daemon ticks the `focus_refresh` sensor;
- two runs launched from the command line with `executor: multiprocess` execute at once, each step in its own
  process, sharing the `gpu` pool through the instance;

and every verdict is read back from PostgreSQL itself (SQL on Dagster's tables), with the instance folder
checked to hold no SQLite database: nothing went to the local default by mistake.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from focus_dagster.platform.instance import REPO_ROOT
from tests.support.environment import require_postgres
from tests.support.daemon import running_daemon
from tests.support.postgres_server import running_postgres
from tests.support.waiting import (file_size, folder_bytes, last_lines, run_while_progressing, started, wait_for_exit,
                           wait_while_progressing)

pytestmark = pytest.mark.heavy(120)  # seconds on a quiet 2-core machine: started first

PROFILE = REPO_ROOT / "deploy" / "postgres" / "dagster.yaml"
BIN = Path(sys.executable).parent
DATASETS = ("idrid", "messidor_2")
FOCUS_YAML = """\
datasets: {idrid: synthetic, messidor_2: synthetic}
models: [tiny_vit]
synthetic: {per_dataset: 24, seed: 3, scale: 0.04}
release: {refresh_seconds: 2}
degradations: false
"""
# The same configuration with a process per step, for the runs of the command line. The demo runs in process: a
# process per step would start Python with Dagster and torch for each of its ~26 steps (over two minutes on two
# cores), and what it would add is proven by those runs (many processes writing runs, events and pool slots to
# PostgreSQL at once) and, for the demo's own runner, on the local instance by tests/ops/test_demo_multiprocess.py.
MULTIPROCESS_YAML = FOCUS_YAML + "executor: multiprocess\n"
# The demo as this module needs it: the graph on both datasets with the one vision model; no LoRA stage (none of
# the tests reads it).
DEMO_COMMAND = ["demo", "--datasets", *DATASETS, "--models", "tiny_vit", "--no-lora"]
# focus_refresh ticks that may fail (an evaluation that timed out on a busy machine) before one that succeeds.
FAILED_TICKS_ALLOWED = 5
# What the demo materialises on two datasets with one vision model, and the data layer's checks.
DEMO_ASSETS = {"dataset_records", "harmonised_labels", "label_rejects", "image_embeddings", "probe_predictions",
               "predictions", "metrics", "cross_dataset_metrics", "leaderboard", "arena_report"}
LABEL_CHECKS = {"quarantine_rate", "label_values", "rule_consistency", "split_leakage", "row_accounting"}
SQLITE = b"SQLite format 3\x00"


# --- the server ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server():
    """A PostgreSQL cluster of our own (tests/support/postgres_server.py), stopped and removed at the end."""
    binaries = require_postgres()
    with running_postgres(binaries, lambda message: pytest.fail(message, pytrace=False)) as found:
        yield found


def sql(server, query: str, *args) -> list[tuple]:
    """Rows of a query on the instance's database, straight from PostgreSQL."""
    import psycopg2

    connection = psycopg2.connect(host=server.host, port=server.port, user=server.user, password=server.password,
                                  dbname=server.db)
    try:
        with connection.cursor() as cursor:
            cursor.execute(query, args)
            return cursor.fetchall()
    finally:
        connection.close()


def newest_event(server) -> int:
    """The id of the newest event in the instance's event log: it grows with every step, log line and verdict."""
    return sql(server, "SELECT coalesce(max(id), 0) FROM event_logs")[0][0]


def ticks_so_far(server) -> int:
    """How many ticks (of any instigator, in any state) the instance holds."""
    return sql(server, "SELECT count(*) FROM job_ticks")[0][0]


# --- the platform on it ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def home(server, tmp_path_factory):
    """FOCUS_HOME with the PostgreSQL profile selected, and the environment of every process of the platform."""
    import dagster as dg

    from focus_dagster.platform.instance import prepare_dagster_home

    tmp = tmp_path_factory.mktemp("postgres")
    (tmp / "focus.yaml").write_text(FOCUS_YAML)
    (tmp / "focus-multiprocess.yaml").write_text(MULTIPROCESS_YAML)
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env.update(FOCUS_HOME=str(tmp / "home"), FOCUS_CONFIG=str(tmp / "focus.yaml"), FOCUS_INSTANCE="postgres",
               FOCUS_PG_HOST=server.host, FOCUS_PG_PORT=str(server.port), FOCUS_PG_DB=server.db,
               FOCUS_PG_USER=server.user, FOCUS_PG_PASSWORD=server.password, DAGSTER_DISABLE_TELEMETRY="1")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        patch.delenv("DAGSTER_HOME", raising=False)
        from focus_dagster.config import load_config

        dagster_home = prepare_dagster_home(load_config())
        # Dagster's tables, created once here: processes creating them at once could collide.
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
            storages = {type(instance.run_storage).__name__, type(instance.event_log_storage).__name__,
                        type(instance.schedule_storage).__name__}
    daemon_env = dict(env, DAGSTER_HOME=str(dagster_home))
    return SimpleNamespace(tmp=tmp, dagster_home=dagster_home, env=env, storages=storages, daemon_env=daemon_env,
                           multiprocess_env=dict(daemon_env, FOCUS_CONFIG=str(tmp / "focus-multiprocess.yaml")))


@pytest.fixture(scope="module")
def demo(home, server):
    """`focus demo` on the PostgreSQL instance, as a user runs it (its own process, FOCUS_INSTANCE=postgres). It
    may take as long as it needs while it advances: its output, the files under FOCUS_HOME or the instance's event
    log growing."""
    done = run_while_progressing([str(BIN / "focus"), *DEMO_COMMAND], "`focus demo` on the PostgreSQL instance",
                                 home.tmp / "demo.log", cwd=REPO_ROOT, env=home.env,
                                 progress=[lambda: folder_bytes(Path(home.env["FOCUS_HOME"])),
                                           lambda: newest_event(server)])
    return SimpleNamespace(done=done, output=done.output)


@contextmanager
def opened(home):
    """The instance, opened in this process as the platform's processes open it (the connection from FOCUS_PG_*)."""
    import dagster as dg

    with pytest.MonkeyPatch.context() as patch:
        for key, value in home.env.items():
            if key.startswith("FOCUS_PG_"):
                patch.setenv(key, value)
        with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
            yield instance


def sqlite_files(folder: Path) -> list[str]:
    """Every SQLite database under `folder` (runs.db, index.db, schedules.db, ... of the local default)."""
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and path.stat().st_size >= len(SQLITE):
            with open(path, "rb") as handle:
                if handle.read(len(SQLITE)) == SQLITE:
                    found.append(str(path.relative_to(folder)))
    return sorted(found)


def test_the_profile_is_the_repositorys_instance_on_postgres():
    """The profile differs from dagster.yaml by its storage only: pools, launcher and run monitoring stay."""
    import yaml

    local, profile = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text()), yaml.safe_load(PROFILE.read_text())
    storage = profile.pop("storage")
    assert profile == local
    assert set(storage) == {"postgres"}
    db = dict(storage["postgres"]["postgres_db"])
    assert db.pop("scheme") == "postgresql+psycopg2"  # the installed driver (SQLAlchemy 2.1 defaults to psycopg 3)
    assert all(isinstance(value, dict) and set(value) == {"env"} for value in db.values()), db  # never literal
    assert {value["env"] for value in db.values()} == {"FOCUS_PG_HOST", "FOCUS_PG_PORT", "FOCUS_PG_DB",
                                                      "FOCUS_PG_USER", "FOCUS_PG_PASSWORD"}


def test_focus_instance_selects_the_profile(tmp_path, monkeypatch):
    from focus_dagster.errors import ConfigError
    from focus_dagster.platform.instance import instance_profile, prepare_dagster_home

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("FOCUS_INSTANCE", raising=False)
    assert instance_profile() == REPO_ROOT / "dagster.yaml"
    monkeypatch.setenv("FOCUS_INSTANCE", "postgres")
    assert instance_profile() == PROFILE
    home = prepare_dagster_home(SimpleNamespace(dagster_home=tmp_path / "dagster"))
    assert (home / "dagster.yaml").read_text() == PROFILE.read_text()
    own = tmp_path / "site" / "dagster.yaml"
    own.parent.mkdir()
    own.write_text("telemetry: {enabled: false}\n")
    for value in (str(own), str(own.parent)):  # a dagster.yaml of one's own, or its folder
        monkeypatch.setenv("FOCUS_INSTANCE", value)
        assert instance_profile() == own
    monkeypatch.setenv("FOCUS_INSTANCE", "postgresql")
    with pytest.raises(ConfigError, match="postgres"):  # a typo: the error names the profiles there are
        prepare_dagster_home(SimpleNamespace(dagster_home=tmp_path / "other"))
    assert not (tmp_path / "other").exists()


def test_the_demo_lands_in_postgres(home, demo, server):
    assert demo.done.returncode == 0, demo.output[-4000:]
    assert home.storages == {"PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage"}
    assert (home.dagster_home / "dagster.yaml").read_text() == PROFILE.read_text()
    assert f"instance:  {home.dagster_home}" in demo.output

    runs = sql(server, "SELECT run_id, pipeline_name, status FROM runs")
    assert runs and {status for _, _, status in runs} == {"SUCCESS"}, runs
    jobs = {job for _, job, _ in runs}
    assert {"observe_dataset_releases", "focus_data_layer", "focus_encoder_outputs", "focus_evaluation",
            "focus_cross_dataset_and_leaderboard", "focus_arena_report"} <= jobs, jobs
    partitions = sql(server, "SELECT t.value FROM run_tags t JOIN runs r ON r.run_id = t.run_id "
                             "WHERE t.key = 'dagster/partition' AND r.pipeline_name = 'focus_data_layer'")
    assert sorted(value for (value,) in partitions) == sorted(DATASETS)

    materialised = sql(server, "SELECT asset_key, partition, count(*) FROM event_logs "
                               "WHERE dagster_event_type = 'ASSET_MATERIALIZATION' GROUP BY asset_key, partition")
    assets = {json.loads(key)[-1] for key, _, _ in materialised}  # asset keys are stored as JSON lists
    assert DEMO_ASSETS <= assets, sorted(assets)
    records = {partition for key, partition, _ in materialised if json.loads(key) == ["dataset_records"]}
    assert records == set(DATASETS)

    # Every check evaluation is an event and an execution row, with its verdict, per dataset.
    evaluations = sql(server, "SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_CHECK_EVALUATION'")
    executions = sql(server, "SELECT asset_key, check_name, partition, execution_status FROM asset_check_executions")
    assert evaluations[0][0] >= len(executions) > 0
    checked = {(name, partition) for _, name, partition, status in executions if status in ("SUCCEEDED", "FAILED")}
    assert {(name, key) for name in LABEL_CHECKS for key in DATASETS} <= checked, sorted(checked)

    # Dagster reads back what SQL sees.
    from dagster import AssetKey

    with opened(home) as instance:
        assert {run.run_id for run in instance.get_runs()} == {run_id for run_id, _, _ in runs}
        record = instance.get_latest_materialization_event(AssetKey("leaderboard"))
        assert record is not None and record.run_id in {run_id for run_id, _, _ in runs}

    assert sqlite_files(home.dagster_home) == []


def test_automation_ticks_land_in_postgres(home, demo, server):
    """The daemon, on the PostgreSQL instance, ticks the `focus_refresh` sensor; the ticks are in PostgreSQL."""
    from dagster._serdes import deserialize_value

    since, log = time.time(), home.tmp / "daemon.log"
    with running_daemon(home.daemon_env, log) as daemon:

        def finished_ticks():
            assert daemon.poll() is None, last_lines(log, 60)
            rows = sql(server, "SELECT id, job_origin_id, selector_id, status, tick_body FROM job_ticks "
                               "WHERE type = 'SENSOR' AND status IN ('SUCCESS', 'SKIPPED', 'FAILURE') ORDER BY id")
            ticks = [(tick_id, origin, selector, status, deserialize_value(body))
                     for tick_id, origin, selector, status, body in rows]
            ticks = [tick for tick in ticks if tick[-1].instigator_name == "focus_refresh"]
            failed = [tick[-1] for tick in ticks if tick[3] == "FAILURE"]
            assert len(failed) <= FAILED_TICKS_ALLOWED, f"{len(failed)} focus_refresh ticks failed: {failed[-1].error}"
            return [tick for tick in ticks if tick[3] != "FAILURE"]

        # The daemon loads the code location, then ticks: its log and the ticks it records are its progress.
        ticks = wait_while_progressing(finished_ticks, "a finished focus_refresh tick in PostgreSQL",
                                       lambda: (file_size(log), ticks_so_far(server)),
                                       describe=lambda: last_lines(log, 60))
        heartbeats = {kind for (kind,) in sql(server, "SELECT daemon_type FROM daemon_heartbeats")}

    tick_id, origin, selector, status, tick = ticks[0]
    assert tick.timestamp >= since
    # What the tick evaluated, asset by asset (the UI's automation history), is there too: its evaluation id is
    # the tick's own id unless the tick was retried.
    evaluations = sql(server, "SELECT count(*) FROM asset_daemon_asset_evaluations WHERE evaluation_id = %s",
                      tick.auto_materialize_evaluation_id or tick_id)
    assert evaluations[0][0] > 0, tick
    assert "ASSET" in heartbeats, heartbeats  # the daemon that evaluates automation conditions, alive in PostgreSQL
    with opened(home) as instance:
        read_back = instance.get_ticks(origin, selector)
        assert {t.status.value for t in read_back} >= {status}
        assert {t.instigator_name for t in read_back} == {"focus_refresh"}
    assert sqlite_files(home.dagster_home) == []


def test_several_runs_at_once_with_the_multiprocess_executor(home, demo, server):
    """Two runs launched together from the command line (the embeddings of each dataset, whose steps both need the
    `gpu` pool) both succeed on the one PostgreSQL instance, overlapping in time, each step in a process of its own
    (the multiprocess executor, as their focus.yaml asks); their events and check verdicts are there, and the pool's one
    slot, kept in PostgreSQL, let one step at a time hold it."""
    before = {run_id for (run_id,) in sql(server, "SELECT run_id FROM runs")}
    partitions = [f"{key}|tiny_vit" for key in DATASETS]  # dataset x model
    commands = {partition: ["asset", "materialize", "-m", "focus_dagster.definitions", "--select", "image_embeddings",
                            "--partition", partition] for partition in partitions}
    with ExitStack() as stack:  # each in a process group of its own: one that stalls goes with its step processes
        launched = {}
        for name, args in commands.items():
            log = home.tmp / f"materialize-{name.replace('|', '-')}.log"
            launched[name] = (stack.enter_context(started([str(BIN / "dagster"), *args], log, cwd=REPO_ROOT,
                                                      env=home.multiprocess_env)), log)
        ended = wait_for_exit(launched, "two embeddings runs launched at once", progress=[lambda: newest_event(server)])
    for name, done in ended.items():
        assert done.returncode == 0, f"{name}: {done.output[-3000:]}"

    runs = [run for run in sql(server, "SELECT r.run_id, r.status, r.start_time, r.end_time, p.value FROM runs r "
                                       "JOIN run_tags p ON p.run_id = r.run_id AND p.key = 'dagster/partition'")
            if run[0] not in before]
    assert sorted(run[-1] for run in runs) == sorted(partitions), runs
    assert {status for _, status, _, _, _ in runs} == {"SUCCESS"}, runs
    assert max(start for _, _, start, _, _ in runs) < min(end for _, _, _, end, _ in runs), "the runs did not overlap"

    found, held = {}, []
    for run_id, _, _, _, partition in runs:
        events = dict(sql(server, "SELECT dagster_event_type, count(*) FROM event_logs WHERE run_id = %s "
                                  "GROUP BY dagster_event_type", run_id))
        assert events.get("PIPELINE_SUCCESS") == 1, events  # RUN_SUCCESS, under its stored name
        # One process per step: the multiprocess executor.
        steps = events.get("STEP_SUCCESS", 0)
        assert steps >= 1 and events.get("STEP_WORKER_STARTED") == steps, events
        for (key,) in sql(server, "SELECT asset_key FROM event_logs WHERE run_id = %s AND partition = %s "
                                  "AND dagster_event_type = 'ASSET_MATERIALIZATION'", run_id, partition):
            found.setdefault("materialised", set()).add((json.loads(key)[-1], partition))
        for (name,) in sql(server, "SELECT check_name FROM asset_check_executions WHERE run_id = %s AND partition = %s "
                                   "AND execution_status = 'SUCCEEDED'", run_id, partition):
            found.setdefault("check", set()).add((name, partition))
        held.append(sql(server, "SELECT min(timestamp), max(timestamp) FROM event_logs WHERE run_id = %s "
                                "AND step_key = 'image_embeddings' "
                                "AND dagster_event_type IN ('STEP_START', 'STEP_SUCCESS')", run_id)[0])
    assert found == {"materialised": {("image_embeddings", partition) for partition in partitions},
                     "check": {("checkpoint_audit", partition) for partition in partitions}}, found

    # The `gpu` pool: one slot, in PostgreSQL; the two steps held it one after the other, and it is free again.
    first, second = sorted(held)
    assert first[1] <= second[0], f"both runs computed embeddings at once: {held}"
    assert sql(server, "SELECT concurrency_key, \"limit\" FROM concurrency_limits") == [("gpu", 1)]
    assert sql(server, "SELECT run_id FROM concurrency_slots WHERE concurrency_key = 'gpu'") == [(None,)]
    assert sqlite_files(home.dagster_home) == []
