"""The code location loads as Dagster loads it, and `focus demo` runs end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb

REPO = Path(__file__).resolve().parents[1]


def test_definitions_validate_from_the_repo_root(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "FOCUS_CONFIG")}
    env.update(FOCUS_HOME=str(tmp_path / "home"), DAGSTER_DISABLE_TELEMETRY="1")
    done = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
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


def test_demo_runs_end_to_end_and_says_where_results_are(monkeypatch, tmp_path, capsys):
    """The whole graph on two look-alikes with the default models, one LoRA adapter trained on IDRiD included:
    scored in-domain and on RFMiD 2.0, and compared with its base."""
    config = tmp_path / "focus.yaml"
    config.write_text("datasets: {rfmid_2: synthetic, idrid: synthetic}\nsynthetic: {per_dataset: 30, scale: 0.04}\n"
                      "lora: {train_datasets: [idrid], tasks: [referable_dr]}\n")
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FOCUS_CONFIG", str(config))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    from focus_dagster.cli import main

    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "rfmid_2     read    30 = kept    29 + quarantined   1 | labelled    29 (native split)" in out
    assert "FAILED" not in out and out.count("warn: ") == 2 and "make ui" in out and "focus.duckdb" in out
    assert re.search(r"lora adapter +tiny_llava\.idrid\.referable_dr +\d+ examples, \d+ steps, loss", out), out
    assert re.search(r"adapted scores +tiny_llava\.idrid\.referable_dr \(pipeline-check\) +\d+ rows over 2 datasets",
                     out), out
    assert re.search(r"lora effects .* \d+ rows, 2 comparisons with deltas", out), out
    assert (tmp_path / "home" / "dagster" / "dagster.yaml").is_file()
    assert (tmp_path / "home" / "artifacts" / "adapters" / "tiny_llava.idrid.referable_dr" / "manifest.json").is_file()
    with duckdb.connect(str(tmp_path / "home" / "focus.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM records.idrid").fetchone()[0] == 30
        assert con.execute("SELECT reason_code FROM records.quarantine").fetchall() == [("image_missing",)]
        assert con.execute("SELECT stage, reason_code FROM labels.rejects").fetchall() == [("records", "image_missing")]
        assert con.execute("SELECT count(*) FROM labels.harmonised WHERE dataset = 'idrid'").fetchone()[0] == 30
        adapted = con.execute("SELECT DISTINCT dataset, train_dataset FROM predictions.samples "
                              "WHERE method = 'yes_no_lora' ORDER BY dataset").fetchall()
        domains = con.execute("SELECT domain, count(*) FROM metrics.lora_effects WHERE metric = 'brier' "
                              "AND delta IS NOT NULL GROUP BY domain ORDER BY domain").fetchall()
    assert adapted == [("idrid", "idrid"), ("rfmid_2", "idrid")]
    assert domains == [("in_domain", 1), ("out_of_domain", 1)]


def test_the_demo_gives_the_caller_its_dagster_home_back(monkeypatch, tmp_path, capsys):
    config = tmp_path / "focus.yaml"
    config.write_text("datasets: {idrid: synthetic}\nmodels: [tiny_vit]\nsynthetic: {per_dataset: 12, scale: 0.04}\n")
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FOCUS_CONFIG", str(config))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    from focus_dagster.cli import main

    assert main(["demo"]) == 0
    assert f"instance:  {tmp_path / 'home' / 'dagster'}" in capsys.readouterr().out
    assert "DAGSTER_HOME" not in os.environ  # none before, none after: a later `focus ui` opens its own instance
