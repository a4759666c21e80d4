"""The code location loads as Dagster loads it, and `focus demo` gives its caller's DAGSTER_HOME back (the demo
end to end, with its report: tests/ops/test_demo_report.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dagster as dg

from tests.support.waiting import run_apart

REPO = Path(__file__).resolve().parents[2]


def test_definitions_validate_from_the_repo_root(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "FOCUS_CONFIG")}
    env.update(FOCUS_HOME=str(tmp_path / "home"), DAGSTER_DISABLE_TELEMETRY="1")
    # As long as it advances: its output growing, or its CPU time (loading the location can print nothing a while).
    done = run_apart([sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
                     "`dagster definitions validate`", tmp_path / "validate.out", tmp_path / "validate.err",
                     cwd=REPO, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All code locations passed validation" in done.stdout + done.stderr


def test_default_definitions_have_the_data_layer(monkeypatch, tmp_path):
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path))
    monkeypatch.delenv("FOCUS_CONFIG", raising=False)
    from focus_dagster.definitions import build_definitions

    defs = build_definitions()
    keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"dataset_release", "dataset_records"} <= keys
    assert defs.resolve_job_def("focus_data_layer").partitions_def.get_partition_keys()[0] == "brset"
    assert len(defs.resolve_job_def("focus_data_layer").partitions_def.get_partition_keys()) == 10
    assert [s.name for s in defs.schedules] == ["observe_dataset_releases_schedule"]
    [sensor] = defs.sensors
    assert sensor.name == "focus_refresh" and sensor.default_status.value == "RUNNING"
    graph = defs.resolve_asset_graph()
    assert all(graph.get(dg.AssetKey(k)).automation_condition is not None
               for k in ("dataset_records", "harmonised_labels", "label_rejects"))


def test_the_demo_gives_the_caller_its_dagster_home_back(monkeypatch, tmp_path, capsys):
    config = tmp_path / "focus.yaml"
    config.write_text("datasets: {idrid: synthetic}\nmodels: [tiny_vit]\nsynthetic: {per_dataset: 12, scale: 0.04}\n")
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FOCUS_CONFIG", str(config))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    from focus_dagster.platform.cli import main

    assert main(["demo"]) == 0
    assert f"instance:  {tmp_path / 'home' / 'dagster'}" in capsys.readouterr().out
    assert "DAGSTER_HOME" not in os.environ  # none before, none after: a later `focus ui` opens its own instance
