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
        ({"datasets": {"brst": "/x"}}, r"unknown dataset key\(s\) \['brst'\]"),
        ({"dataset": {}}, r"unknown key\(s\) \['dataset'\]"),
        ({"datasets": {"brset": 3}}, r"datasets.brset must be a folder path"),
        ({"datasets": {}}, "`datasets` is empty"),
        ({"synthetic": {"per_dataset": 0}}, "per_dataset must be >= 1"),
        ({"image_check": "thorough"}, "image_check must be one of"),
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
