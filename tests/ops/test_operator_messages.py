"""Faults an operator meets, each answered by one line that names the thing and the fix.

A truncated weights file, an unreachable PostgreSQL instance, a label CSV with another delimiter, a dataset root
that does not exist, a key given twice in focus.yaml, the demo's summary after a failed check, and the demo's hint
to open the UI on the instance it used. Every expected message is written out here, with the figures worked out
by hand or from the test's own files, never taken from the code under test.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from focus_dagster.platform.cli import main
from focus_dagster.platform.instance import REPO_ROOT
from tests.support.ports import free_port
from tests.support.waiting import run_apart

BIN = Path(sys.executable).parent
ADVICE = ("it is truncated or damaged, as an interrupted download or copy leaves it. Download or copy it again from "
          "its source and compare its size and sha256 with the source's.")


# --------------------------------------------------------------------------- a. a truncated safetensors file


def truncated_safetensors(path: Path) -> int:
    """A real safetensors file cut in half (an interrupted copy); its size in bytes."""
    import torch
    from safetensors.torch import save_file

    save_file({"head.weight": torch.zeros(64, 64)}, str(path))
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    return len(whole) // 2


def test_a_truncated_safetensors_checkpoint_names_the_model_the_file_and_what_to_do(tmp_path):
    from focus_dagster.models.audit import read_weights
    from focus_dagster.models.spec import CheckpointError

    path = tmp_path / "retina_vit.safetensors"
    size = truncated_safetensors(path)
    with pytest.raises(CheckpointError) as caught:
        read_weights(path, "retina_vit")
    # safetensors' own reason, then ours; before, a bare SafetensorError said neither the model nor the file.
    assert str(caught.value) == (
        f"model 'retina_vit': weights file {path} ({size} bytes) cannot be read as safetensors (Error while "
        f"deserializing header: incomplete metadata, file not fully covered): {ADVICE}")


def test_a_truncated_safetensors_file_in_a_hub_folder_is_named_too(tmp_path):
    from dataclasses import replace

    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.models.loaders.hub_family import load_tiny_clip
    from focus_dagster.models.spec import CheckpointError

    spec = replace(CATALOG["tiny_clip"], path=str(tmp_path / "tiny_clip"))
    load_tiny_clip(spec)  # builds the folder, as on first use
    [weights] = sorted((tmp_path / "tiny_clip").glob("*.safetensors"))
    size = weights.stat().st_size // 2
    weights.write_bytes(weights.read_bytes()[:size])
    with pytest.raises(CheckpointError) as caught:
        load_tiny_clip(spec)
    assert str(caught.value) == (
        f"model 'tiny_clip': weights file {weights} ({size} bytes) cannot be read as safetensors (Error while "
        f"deserializing header: incomplete metadata, file not fully covered): {ADVICE}")


# --------------------------------------------------------------------------- b. PostgreSQL unreachable


def test_an_unreachable_postgresql_instance_is_one_line_naming_where_and_what_to_check(tmp_path):
    """`focus recover` on the PostgreSQL profile with nothing listening: before, 178 lines (24 of retry warnings,
    then three chained tracebacks); now one line, without the password."""
    import os

    port = free_port()  # nothing listens there
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    env.update(FOCUS_HOME=str(tmp_path / "home"), FOCUS_INSTANCE="postgres", FOCUS_PG_HOST="127.0.0.1",
               FOCUS_PG_PORT=str(port), FOCUS_PG_DB="focus_runs", FOCUS_PG_USER="focus",
               FOCUS_PG_PASSWORD="not-this-secret", DAGSTER_DISABLE_TELEMETRY="1")
    env.pop("FOCUS_CONFIG", None)
    done = run_apart([str(BIN / "focus"), "recover"], "`focus recover` on an unreachable PostgreSQL instance",
                     tmp_path / "recover.out", tmp_path / "recover.err", env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    profile = REPO_ROOT / "deploy" / "postgres" / "dagster.yaml"
    assert done.stderr.splitlines() == [
        f"error: the Dagster instance's PostgreSQL database 'focus_runs' at 127.0.0.1:{port} (user 'focus') cannot be "
        "opened: Connection refused. Check that the server runs and accepts connections there, and the settings "
        f"FOCUS_PG_HOST, FOCUS_PG_PORT, FOCUS_PG_DB, FOCUS_PG_USER, FOCUS_PG_PASSWORD that {profile} reads."]
    assert "not-this-secret" not in done.stderr


def test_other_errors_are_not_taken_for_an_unreachable_database():
    """An SQLite instance's busy database, or any other error, keeps its own message and traceback."""
    import sqlite3

    from focus_dagster.platform.instance import unreachable_database

    assert unreachable_database(sqlite3.OperationalError("database is locked")) is None
    assert unreachable_database(ValueError("connection to server at x failed")) is None


# --------------------------------------------------------------------------- c. a label CSV with another delimiter


BRSET_COLUMNS = ["image_id", "patient_id", "camera", "patient_age", "patient_sex", "exam_eye", "diabetes", "DR_ICDR",
                 "macular_edema", "increased_cup_disc", "focus", "iluminaton", "image_field", "artifacts", "quality"]


def semicolon_brset(tmp_path, camera: str) -> Path:
    """A BRSET-shaped root whose labels.csv was re-saved with ';' between its 15 fields (a spreadsheet set to a
    locale with decimal commas does this); `camera` is the second row's camera value."""
    rows = [";".join(BRSET_COLUMNS),
            ";".join(["img01", "p1", "Canon CR", "45", "1", "1", "no", "0", "0", "0", "1", "1", "1", "1", "Adequate"]),
            ";".join(["img02", "p2", camera, "52", "2", "2", "no", "0", "0", "0", "1", "1", "1", "1", "Adequate"])]
    root = tmp_path / "brset"
    (root / "fundus_photos").mkdir(parents=True)
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return root


@pytest.mark.parametrize("camera", [
    "Canon, CR2",  # a comma in a value: pandas said "Expected 1 fields in line 3, saw 2"
    "Canon CR",    # no comma at all: the one column 'image_id;patient_id;...' lacked every required column
])
def test_a_label_csv_with_another_delimiter_names_the_file_and_both_delimiters(tmp_path, camera):
    from focus_dagster.datasets import read_dataset
    from focus_dagster.errors import LabelFileError

    root = semicolon_brset(tmp_path, camera)
    with pytest.raises(LabelFileError) as caught:
        read_dataset("brset", root)
    assert str(caught.value) == (
        f"[brset] {root / 'labels.csv'} is not delimited by ',' as its publisher's file is: its header line splits "
        "into 15 columns on ';' and into 1 on ','. Save it with ',' between the fields, or restore the publisher's "
        "original file.")


def test_a_split_file_with_another_delimiter_is_named_the_same_way(tmp_path):
    from focus_dagster.errors import LabelFileError
    from focus_dagster.labels.splits import read_split_file

    path = tmp_path / "labels_splits_brset.csv"
    path.write_text("patient_id;image_id;split\np1;img01;train\np2;img02;test\n")
    with pytest.raises(LabelFileError) as caught:
        read_split_file(path, "brset")
    assert str(caught.value) == (
        f"[brset] {path} is not delimited by ',' as its publisher's file is: its header line splits into 3 columns "
        "on ';' and into 1 on ','. Save it with ',' between the fields, or restore the publisher's original file.")


# --------------------------------------------------------------------------- d. a dataset root that does not exist


def test_focus_datasets_refuses_a_configured_root_that_does_not_exist(tmp_path, monkeypatch, capsys):
    absent = tmp_path / "data" / "brset"
    config = tmp_path / "focus.yaml"
    config.write_text(f"datasets:\n  brset: {absent}\n  idrid: synthetic\n")
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FOCUS_CONFIG", str(config))
    assert main(["datasets"]) == 2
    out, err = capsys.readouterr()
    assert f"  brset       BRSET       {absent}   (MISSING)" in out.splitlines()
    assert err.splitlines() == [
        f"error: [brset] dataset root {absent} does not exist or is not a folder: correct its path under datasets: "
        f"in {config}, or set it to synthetic."]


def test_a_root_on_the_command_line_that_does_not_exist_is_refused_as_such(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FOCUS_CONFIG", raising=False)
    absent = tmp_path / "absent"
    assert main(["release", "idrid", "--root", str(absent)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --root {absent} does not exist or is not a folder: give the folder that holds idrid's files as "
        "its publisher distributes them."]


# --------------------------------------------------------------------------- e. a key given twice in focus.yaml


@pytest.mark.parametrize("text, key, lines", [
    ("datasets:\n  brset: synthetic\n  idrid: synthetic\n  brset: /data/brset\n", "datasets.brset", (2, 4)),
    ("synthetic: {per_dataset: 20}\nexecutor: in_process\nsynthetic: {per_dataset: 80}\n", "synthetic", (1, 3)),
    ("models:\n  - id: tiny_vit\n    path: /a\n    path: /b\n", "models.0.path", (3, 4)),
])
def test_a_key_given_twice_in_focus_yaml_is_refused_with_its_lines(tmp_path, text, key, lines):
    from focus_dagster.config import load_config
    from focus_dagster.errors import ConfigError

    path = tmp_path / "focus.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config({"FOCUS_HOME": str(tmp_path / "home"), "FOCUS_CONFIG": str(path)})
    assert str(caught.value) == (f"{path}: key {key} is given twice, on lines {lines[0]} and {lines[1]}; YAML would "
                                 "keep the last one silently. Keep one of them.")


def test_the_same_key_in_two_mappings_is_no_duplicate(tmp_path):
    from focus_dagster.config import load_config

    path = tmp_path / "focus.yaml"
    path.write_text("models:\n  - {id: tiny_vit, path: /a}\n  - {id: tiny_clip, path: /b}\n")
    config = load_config({"FOCUS_HOME": str(tmp_path / "home"), "FOCUS_CONFIG": str(path)})
    assert [entry["id"] for entry in config.models] == ["tiny_vit", "tiny_clip"]


# --------------------------------------------------------------------------- f. the demo's evaluation summary


def check_failed(check: str, description: str):
    """The event of a blocking check that failed at ERROR severity, as a run's `all_events` holds it."""
    import dagster as dg

    evaluation = dg.AssetCheckEvaluation(asset_key=dg.AssetKey("group_attributes"), check_name=check, passed=False,
                                         severity=dg.AssetCheckSeverity.ERROR, blocking=True, description=description)
    return SimpleNamespace(event_type_value="ASSET_CHECK_EVALUATION", event_specific_data=evaluation)


def commit_metric_rows(storage, partition: str, asset: str, dataset: str, run_id: str, rows: int) -> None:
    """`rows` rows of metrics.values in `partition`, committed by `run_id` as `asset`[`dataset`] commits them."""
    import pandas as pd

    from focus_dagster import lineage
    from resources import layout

    frame = pd.DataFrame({"metric_id": [f"{partition}-{i}" for i in range(rows)], "value": 0.5,
                          "partition": partition})
    storage.replace_partition(layout.METRICS, partition, frame,
                              stamp=lineage.stamp(asset, dataset, run_id, f"v-{run_id}", code_version="test"))


def test_the_evaluation_summary_counts_the_rows_committed_and_names_the_failed_check(tmp_path, capsys):
    """idrid's run committed 171 metric rows, then attributes_usable failed and no fairness or quality rows were
    written (the fairness rows there are an older run's); messidor_2's run committed 30 + 12 + 8. The summary
    used to say `0 rows over 0 datasets`, the successful run's rows uncounted too."""
    from focus_dagster.config import FocusConfig
    from focus_dagster.platform.demo import _run_evaluation
    from resources import FocusStorage

    storage = FocusStorage.from_config(FocusConfig(home=tmp_path / "home", roots={}))
    commit_metric_rows(storage, "idrid", "metrics", "idrid", "run-idrid", 171)
    commit_metric_rows(storage, "idrid|fairness", "fairness_metrics", "idrid", "an-older-run", 40)
    commit_metric_rows(storage, "messidor_2", "metrics", "messidor_2", "run-messidor", 30)
    commit_metric_rows(storage, "messidor_2|fairness", "fairness_metrics", "messidor_2", "run-messidor", 12)
    commit_metric_rows(storage, "messidor_2|quality", "quality_metrics", "messidor_2", "run-messidor", 8)
    reason = "no attribute idrid publishes reaches the 70% floor: the label mapping lost the metadata"
    results = {
        "idrid": SimpleNamespace(success=False, run_id="run-idrid", all_events=[check_failed("attributes_usable",
                                                                                                reason)]),
        "messidor_2": SimpleNamespace(success=True, run_id="run-messidor", all_events=[]),
    }
    runner = SimpleNamespace(execute=lambda job, partition_key: results[partition_key])
    defs = SimpleNamespace(resolve_job_def=lambda name: name, resources={"storage": storage})

    failures = _run_evaluation(defs, ["idrid", "messidor_2"], runner)

    assert failures == [f"evaluation/idrid: blocked by attributes_usable: {reason}"]
    [line] = [re.sub(r"^ *\d+s  ", "", line) for line in capsys.readouterr().out.splitlines()]
    assert line == (f"metrics          all models and methods           221 rows over 2 datasets | FAILED: idrid: "
                    f"blocked by attributes_usable: {reason}")


# --------------------------------------------------------------------------- g. the demo's hint to open the UI


def test_the_closing_hint_opens_the_ui_on_the_instance_the_demo_used(tmp_path, monkeypatch):
    from focus_dagster.config import FocusConfig
    from focus_dagster.platform.demo import ui_hint

    monkeypatch.delenv("FOCUS_INSTANCE", raising=False)
    home, source = tmp_path / "my home", tmp_path / "focus.yaml"
    assert ui_hint(FocusConfig(home=home, roots={})) == f"FOCUS_HOME='{home}' .venv/bin/focus ui"
    assert ui_hint(FocusConfig(home=home, roots={}, source=source)) == (
        f"FOCUS_HOME='{home}' FOCUS_CONFIG={source} .venv/bin/focus ui")
    # The instance profile too: without it `focus ui` would copy the local dagster.yaml over the PostgreSQL one.
    monkeypatch.setenv("FOCUS_INSTANCE", "postgres")
    assert ui_hint(FocusConfig(home=home, roots={}, source=source)) == (
        f"FOCUS_HOME='{home}' FOCUS_CONFIG={source} FOCUS_INSTANCE=postgres .venv/bin/focus ui")
