"""The real thing: `dagster-daemon` running the `focus_refresh` sensor on an instance under FOCUS_HOME.

The demo builds the graph; the daemon starts; a label of one image changes and the release is observed; the
test then waits, touching nothing, until the daemon has launched every run it wants and its ticks request
nothing more. Every affected asset must have been refreshed by those runs, each run with the checks of its
assets, the leaderboard after the metrics it summarises, and nothing may be left unsynced.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import dagster as dg
import pytest
from tests.support.automation_driver import unsynced
from tests.support.environment import copy_tree
from tests.support.daemon import instance_progress, running_daemon
from tests.support.waiting import file_size, last_lines, wait_while_progressing

pytestmark = pytest.mark.heavy(130)  # seconds on a quiet 2-core machine: started first

SETTLE_TICKS = 3  # consecutive ticks that request nothing, with no run waiting or running
LABELS_FILE = Path("B. Disease Grading") / "2. Groundtruths" / "a. IDRiD_Disease Grading_Training Labels.csv"
REFRESHED = {"dataset_records", "harmonised_labels", "label_rejects", "image_embeddings", "probe_predictions",
             "predictions", "metrics", "group_attributes", "fairness_metrics", "quality_metrics",
             "cross_dataset_metrics", "leaderboard", "arena_report"}
# (downstream, upstream): what the refresh leaves of the first was computed after the last run of the second
# had ended (the first's last run started after the second's last run ended).
ORDER = [("leaderboard", "metrics"), ("leaderboard", "cross_dataset_metrics"), ("arena_report", "metrics"),
         ("arena_report", "fairness_metrics"), ("predictions", "probe_predictions"),
         ("probe_predictions", "image_embeddings")]
# Dagster's run queue, as the daemon of this test looks at it: every second rather than Dagster's default 5 s. Each
# step of the refresh (a tick requests a run, the queue launches it, the next tick sees it end) waited up to those
# 5 s for nothing the test proves: what runs, and in which order, is the sensor's doing.
FAST_QUEUE = """
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config: {dequeue_interval_seconds: 1}
"""
LABEL_CHECKS = {"quarantine_rate", "label_values", "rule_consistency", "split_leakage", "row_accounting",
                "referable_implies_any_dr", "metadata_coverage", "patient_ids", "degenerate_tasks", "split_has_test"}


@pytest.fixture
def home(synth_all, tmp_path, monkeypatch):
    """IDRiD and PAPILA with the seeded tiny ViT, built by `focus demo`; the sensor ticks every 2 seconds. Without
    the robustness assets: each run the daemon launches loads the code location in a process of its own, and their
    three runs per refresh doubled this test for nothing it proves (tests/graph/test_refresh.py follows them)."""
    out, _ = synth_all
    roots = {key: copy_tree(out / key, tmp_path / key) for key in ("idrid", "papila")}
    config = tmp_path / "focus.yaml"
    config.write_text("datasets: {%s}\nmodels: [tiny_vit]\nrelease: {refresh_seconds: 2}\ndegradations: false\n"
                      % ", ".join(f"{k}: {v}" for k, v in roots.items()))
    env = {"FOCUS_HOME": str(tmp_path / "home"), "FOCUS_CONFIG": str(config), "DAGSTER_DISABLE_TELEMETRY": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    from focus_dagster.platform.cli import main

    assert main(["demo"]) == 0
    with open(tmp_path / "home" / "dagster" / "dagster.yaml", "a") as instance_yaml:
        instance_yaml.write(FAST_QUEUE)
    return tmp_path, roots, dict(os.environ, **env, DAGSTER_HOME=str(tmp_path / "home" / "dagster"))


@pytest.fixture
def daemon(home):
    tmp_path, _, env = home
    with running_daemon(env, tmp_path / "daemon.log"):
        yield tmp_path / "daemon.log"


def ticks(log: Path) -> list[int]:
    """Runs produced by each sensor tick so far, from the daemon's log."""
    return [int(n) for n in re.findall(r"Tick produced (\d+) runs? and .* for focus_refresh", log.read_text())]


def wait_for(condition, what: str, log: Path, instance) -> None:
    """Until `condition()`, for as long as the daemon advances: its log growing (it loads the location, then
    logs each tick), its ticks, or the instance's events, runs and their statuses changing."""
    wait_while_progressing(condition, what, lambda: (file_size(log), len(ticks(log)), instance_progress(instance)),
                           describe=lambda: last_lines(log))


class Settling:
    """True once no run is queued or running and SETTLE_TICKS ticks have requested nothing since that was
    first seen (ticks logged while a run was still going do not count: they could not see its result)."""

    def __init__(self, log: Path, instance):
        self.log, self.instance, self.idle_since = log, instance, None

    def __call__(self) -> bool:
        seen = ticks(self.log)
        if self._active() or (self.idle_since is not None and any(seen[self.idle_since:])):
            self.idle_since = None
            return False
        if self.idle_since is None:
            self.idle_since = len(seen)
        return len(seen) - self.idle_since >= SETTLE_TICKS and not self._active()

    def _active(self) -> bool:
        return bool(self.instance.get_runs(filters=dg.RunsFilter(statuses=[
            dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
            dg.DagsterRunStatus.STARTED])))


def test_the_running_sensor_refreshes_a_changed_dataset_completely(home, daemon):
    tmp_path, roots, env = home
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        # Its cursor starts at its first ticks.
        wait_for(lambda: len(ticks(daemon)) >= 2, "the sensor's first ticks", daemon, instance)
        label = roots["idrid"] / LABELS_FILE
        lines = label.read_bytes().split(b"\r\n")
        name, grade, rest = lines[1].split(b",", 2)
        lines[1] = b",".join([name, b"0" if grade != b"0" else b"2", rest])
        label.write_bytes(b"\r\n".join(lines))
        started = time.time()
        from assets.datasets import OBSERVE_JOB
        from focus_dagster.definitions import build_definitions

        defs = build_definitions()
        assert defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success
        wait_for(lambda: any(ticks(daemon)), "a run", daemon, instance)
        wait_for(Settling(daemon, instance), "the refresh to settle", daemon, instance)

        runs = [r for r in instance.get_runs() if r.tags.get("dagster/sensor_name") == "focus_refresh"]
        assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), [r.status for r in runs]
        refreshed = {k.to_user_string() for r in runs for k in r.asset_selection or []}
        assert refreshed == REFRESHED
        partitions = {r.tags.get("dagster/partition") for r in runs} - {None}
        assert all("idrid" in p for p in partitions), partitions  # papila untouched
        data_layer = [r for r in runs if dg.AssetKey("dataset_records") in (r.asset_selection or [])]
        assert LABEL_CHECKS <= {k.name for r in data_layer for k in r.asset_check_selection or []}
        evaluated = {e.event_specific_data.check_name for e in _check_events(instance, data_layer)}
        assert LABEL_CHECKS <= evaluated
        timeline = _timeline(instance, runs)
        for downstream, upstream in ORDER:  # each waits for its inputs: no run of it before the last of theirs ended
            first_start = min(start for start, _, assets, _ in timeline if downstream in assets)
            last_end = max(end for _, end, assets, _ in timeline if upstream in assets)
            assert first_start >= last_end, (f"a run of {downstream} started before {upstream}'s last run ended",
                                             _show(timeline))
        assert unsynced(defs, instance) == set()
        print(f"refresh by the running sensor: {len(runs)} runs, {time.time() - started:.0f}s\n{_show(timeline)}")


def _timeline(instance, runs) -> list[tuple[float, float, set[str], str]]:
    """(start, end, assets, partition) of each run, oldest first."""
    rows = []
    for run in runs:
        stats = instance.get_run_stats(run.run_id)
        assets = {k.to_user_string() for k in run.asset_selection or []}
        rows.append((stats.start_time, stats.end_time, assets, run.tags.get("dagster/partition", "")))
    return sorted(rows, key=lambda row: row[0])


def _show(timeline) -> str:
    t0 = timeline[0][0]
    return "\n".join(f"{start - t0:7.1f} {end - t0:7.1f} {partition:24} {sorted(assets)}"
                     for start, end, assets, partition in timeline)


def _check_events(instance, runs):
    for run in runs:
        for record in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
            yield record.dagster_event

