"""focus.yaml parsing: the default, real roots, and every mistake named with its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from focus_dagster.config import load_config, parse_config
from focus_dagster.datasets import DATASET_KEYS
from focus_dagster.errors import ConfigError


def test_no_configuration_means_all_ten_synthetic(tmp_path):
    config = load_config({"FOCUS_HOME": str(tmp_path)})
    assert config.dataset_keys == list(DATASET_KEYS)
    assert all(config.is_synthetic(k) for k in DATASET_KEYS)
    assert config.root_of("idrid") == tmp_path / "synthetic" / "idrid"
    assert config.database == tmp_path / "focus.duckdb"


def test_default_home_is_dot_focus_in_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert load_config({}).home == tmp_path / ".focus"


def test_focus_yaml_maps_roots_relative_to_the_file_in_registry_order(tmp_path):
    (tmp_path / "cfg").mkdir()
    path = tmp_path / "cfg" / "focus.yaml"
    path.write_text("datasets:\n  papila: data/papila\n  brset: {root: /abs/brset}\n  idrid: synthetic\n"
                    "synthetic: {per_dataset: 30, seed: 4}\nrelease: {observe_cron: '0 * * * *', content_hash: true}\n")
    config = load_config({"FOCUS_HOME": str(tmp_path / "home"), "FOCUS_CONFIG": str(path)})
    assert config.dataset_keys == ["brset", "papila", "idrid"]
    assert config.root_of("papila") == tmp_path / "cfg" / "data" / "papila"
    assert config.root_of("brset") == Path("/abs/brset")
    assert config.is_synthetic("idrid") and not config.is_synthetic("brset")
    assert (config.synthetic.per_dataset, config.synthetic.seed) == (30, 4)
    assert config.observe_cron == "0 * * * *" and config.content_hash


@pytest.mark.parametrize(
    "document, message",
    [
        ({"datasets": {"brst": "/x"}}, r"datasets.brst is not a published dataset .* \(did you mean the published 'brset'\?\)"),
        ({"dataset": {}}, r"dataset: unknown key; allowed: datasets, "),
        ({"datasets": {"brset": 3}}, r"datasets.brset must be a folder path"),
        ({"datasets": {}}, "`datasets` is empty"),
        ({"synthetic": {"per_dataset": 0}}, r"synthetic.per_dataset: must be a whole number of images, at least 1, got 0"),
        ({"image_check": "thorough"}, "image_check: must be one of"),
        ([1, 2], "the top level must be a mapping"),
    ],
)
def test_mistakes_are_named(tmp_path, document, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(document, tmp_path, tmp_path / "focus.yaml")


def test_missing_config_file_and_unregistered_dataset(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config({"FOCUS_CONFIG": str(tmp_path / "nope.yaml")})
    config = parse_config({"datasets": {"brset": "/x"}}, tmp_path)
    with pytest.raises(ConfigError, match="'idrid' is not registered"):
        config.root_of("idrid")


def test_a_configuration_survives_its_own_document(tmp_path):
    """What the resources carry (the document) gives back the very configuration it came from."""
    import dataclasses
    import json

    (tmp_path / "splits").mkdir()
    path = tmp_path / "focus.yaml"
    path.write_text(
        "datasets: {papila: data/papila, idrid: synthetic}\n"
        "synthetic: {per_dataset: 33, seed: 4, scale: 0.05}\n"
        "release: {observe_cron: '0 5 * * 1', content_hash: true}\n"
        "splits: {dir: splits, seed: 9}\n"
        "image_check: full\n"
        "models: [efficientnet_lite0, {id: tiny_clip, path: /w/clip}]\n"
        "questions: {version: site-1, tasks: {gon: 'Glaucoma? Answer with yes or no only.'}}\n"
    )
    config = load_config({"FOCUS_HOME": str(tmp_path / "home"), "FOCUS_CONFIG": str(path)})
    document = json.loads(json.dumps(config.to_document()))  # as a resource stores it
    again = parse_config(document, tmp_path / "home")
    assert again == dataclasses.replace(config, source=None)
    assert again.roots["papila"] == tmp_path / "data" / "papila" and again.splits_dir == tmp_path / "splits"
    assert again.synthetic.per_dataset == 33 and again.image_check == "full" and again.content_hash


def test_look_alikes_take_their_size_per_dataset(tmp_path):
    """`synthetic.per_dataset` as a mapping: each named look-alike has its own number of images, the others the
    `default`; the document gives the mapping back; one number is still every look-alike's size."""
    import csv
    import json

    from focus_dagster.config import ensure_dataset_root

    document = {"datasets": {"brset": "synthetic", "idrid": "synthetic"},
                "synthetic": {"per_dataset": {"default": 9, "brset": 14}, "scale": 0.03}}
    config = parse_config(document, tmp_path / "home")
    assert parse_config(json.loads(json.dumps(config.to_document())), tmp_path / "home") == config
    with open(ensure_dataset_root(config, "brset") / "labels.csv", encoding="utf-8-sig") as handle:
        assert len(list(csv.DictReader(handle))) == 14
    idrid = ensure_dataset_root(config, "idrid") / "B. Disease Grading"
    assert len(list(idrid.rglob("*.jpg"))) == 9
    uniform = parse_config({**document, "synthetic": {"per_dataset": 9, "scale": 0.03}}, tmp_path / "home")
    with open(ensure_dataset_root(uniform, "brset") / "labels.csv", encoding="utf-8-sig") as handle:
        assert len(list(csv.DictReader(handle))) == 9  # the look-alike of the other size is written anew


def test_the_resources_read_the_settings_of_the_configuration(tmp_path):
    """DatasetRoots holds the configuration itself, so every setting has one default: the configuration's."""
    from resources import DatasetRoots

    config = parse_config({"datasets": {"brset": "synthetic"}}, tmp_path / "home")
    roots = DatasetRoots.from_config(config)
    assert roots.config == config
    assert roots.config.synthetic.per_dataset == load_config({"FOCUS_HOME": str(tmp_path)}).synthetic.per_dataset
    assert roots.is_synthetic("brset") and not roots.config.splits_dir


def test_the_executor_is_one_of_two_and_in_process_by_default(tmp_path):
    assert parse_config({}, tmp_path).executor == "in_process"
    assert parse_config({"executor": "multiprocess"}, tmp_path).executor == "multiprocess"
    with pytest.raises(ConfigError, match="executor: must be one of"):
        parse_config({"executor": "threads"}, tmp_path)
    with pytest.raises(ConfigError, match="refresh_seconds"):
        parse_config({"release": {"refresh_seconds": 0}}, tmp_path)
