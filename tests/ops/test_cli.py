"""The headless CLI: synth then records round-trips for every dataset, with the same code as the assets."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from focus_dagster.platform.cli import main
from focus_dagster.datasets import DATASET_KEYS


@pytest.fixture(scope="module")
def synth_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli-synth")
    assert main(["synth", "--out", str(out), "--per-dataset", "20", "--seed", "11", "--scale", "0.04", "--workers", "1"]) == 0
    return out


@pytest.mark.parametrize("key", DATASET_KEYS)
def test_synth_then_records_round_trips(synth_out, tmp_path, capsys, key):
    from focus_dagster.synthetic import read_manifest

    manifest = read_manifest(synth_out / key)
    out = tmp_path / f"{key}.parquet"
    quarantine = tmp_path / f"{key}-q.csv"
    assert main(["records", key, "--root", str(synth_out / key), "--out", str(out), "--quarantine", str(quarantine)]) == 0
    records = pd.read_parquet(out)
    assert len(records) == manifest["expected_kept"]
    assert len(pd.read_csv(quarantine)) == sum(manifest["expected_quarantine"].values())
    line = capsys.readouterr().out
    assert f"{key}: {manifest['label_rows']} rows read = {manifest['expected_kept']} kept" in line


def test_records_errors_are_one_clear_line(tmp_path, capsys):
    assert main(["records", "brset", "--root", str(tmp_path / "missing"), "--out", str(tmp_path / "x.csv")]) == 2
    assert capsys.readouterr().err == (f"error: --root {tmp_path / 'missing'} does not exist or is not a folder: give "
                                       "the folder that holds brset's files as its publisher distributes them.\n")
    assert main(["records", "nosuch", "--root", str(tmp_path), "--out", str(tmp_path / "x.csv")]) == 2
    assert "unknown dataset 'nosuch'" in capsys.readouterr().err


def test_records_rejects_unknown_output_format(synth_out, tmp_path, capsys):
    assert main(["records", "g1020", "--root", str(synth_out / "g1020"), "--out", str(tmp_path / "x.xlsx")]) == 2
    assert "use a .csv or .parquet" in capsys.readouterr().err


def test_release_prints_the_version(synth_out, capsys):
    assert main(["release", "idrid", "--root", str(synth_out / "idrid")]) == 0
    assert "idrid release " in capsys.readouterr().out


def test_console_script_help_lists_commands_without_heavy_imports():
    code = (
        "import sys; from focus_dagster.platform.cli import main\n"
        "try: main(['--help'])\nexcept SystemExit: pass\n"
        "heavy = [m for m in ('dagster', 'torch', 'pandas', 'great_expectations', 'transformers') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for command in ("demo", "synth", "records", "labels", "release", "models", "datasets", "ui"):
        assert command in out
    assert "HEAVY []" in out


def test_models_lists_the_catalog_with_availability(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path))
    monkeypatch.delenv("FOCUS_CONFIG", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "MISSING" in lines["medgemma_27b"] and "models--google--medgemma-27b-it" in lines["medgemma_27b"]
    assert "yes" in lines["efficientnet_lite0"] and "here" in lines["efficientnet_lite0"]
    assert "built on first use" in lines["tiny_clip"]
    # The hub id as users search for it (shared/protocol.md), in a column of its own, then the revision.
    header = out.splitlines()[0].split()
    assert header[4:7] == ["hub", "id", "revision"]
    assert lines["vit_large"].split()[4:6] == ["google/vit-large-patch16-224", "-"]
    assert lines["medgemma_27b"].split()[4] == "google/medgemma-27b-it"
    assert main(["models", "--selected"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()[1:] if not line.startswith(" ")]
    assert [row.split()[0] for row in rows] == ["efficientnet_lite0", "tiny_clip", "tiny_llava"]  # the defaults


def test_demo_options_parse_and_narrow_the_configuration():
    from focus_dagster.platform.cli import build_parser
    from focus_dagster.config import load_config
    from focus_dagster.platform.runner import DemoOptions, demo_config

    args = build_parser().parse_args(["demo", "--datasets", "idrid", "papila", "--models", "tiny_clip", "--no-lora",
                                      "--per-dataset", "12"])
    assert (args.datasets, args.models, args.lora, args.per_dataset) == (["idrid", "papila"], ["tiny_clip"], False, 12)
    assert build_parser().parse_args(["demo"]).lora is True
    options = DemoOptions(datasets=("papila", "idrid"), models=("tiny_clip",), lora=False, per_dataset=12)
    assert DemoOptions.from_json(options.to_json()) == options  # as the step processes receive it
    config = demo_config(load_config({"FOCUS_HOME": "/tmp/focus-demo-options"}), options)
    # The registry's order, whatever the command line's.
    assert list(config.roots) == [k for k in DATASET_KEYS if k in ("idrid", "papila")] and config.models == ("tiny_clip",)
    assert config.synthetic.per_dataset == 12 and config.synthetic.scale == 0.125


@pytest.mark.parametrize("argv, error", [
    (["--datasets", "idrid", "nosuch"], "focus demo --datasets: 'nosuch' not configured in the default configuration "
                                        "(no FOCUS_CONFIG); configured datasets: brset, mbrset, "),
    (["--models", "vit_large"], "focus demo --models: 'vit_large' not configured in the default configuration (no "
                                "FOCUS_CONFIG); configured models: efficientnet_lite0, tiny_clip, tiny_llava."),
])
def test_demo_refuses_a_dataset_or_model_it_does_not_configure_before_writing_anything(monkeypatch, tmp_path, capsys,
                                                                                      argv, error):
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FOCUS_CONFIG", raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main(["demo", *argv]) == 2
    assert f"error: {error}" in capsys.readouterr().err
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("value", ["0", "-3", "ten"])
def test_demo_per_dataset_must_be_a_positive_count(capsys, value):
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--per-dataset", value])
    assert stop.value.code == 2
    assert f"--per-dataset: {value!r} is not a whole number of at least 1" in capsys.readouterr().err
