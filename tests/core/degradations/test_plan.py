"""The `degradations:` block of focus.yaml (focus_dagster/degradations/plan.py): the small default, off in both
spellings, `all` without the controls, every mistake named with its key path, and the plan reaching the graph."""

from __future__ import annotations

import pytest

from focus_dagster import config_schema
from focus_dagster.config import load_config, parse_config
from focus_dagster.degradations import DEGRADATIONS, SEVERITIES
from focus_dagster.degradations.plan import (
    DEFAULT_SEVERITIES,
    DEFAULT_TYPES,
    DegradationPlan,
    degradation_plan,
)
from focus_dagster.errors import ConfigError

WHERE = "/site/focus.yaml"
# `types: all`, written out: the registry's degradations in registry order, the control surround_noise left out.
ALL = ("defocus_blur", "underexposure", "uneven_illumination", "haze", "contrast_loss", "jpeg_compression",
       "sensor_noise", "edge_shadow")


def _refused(raw) -> str:
    with pytest.raises(ConfigError) as raised:
        degradation_plan(raw, WHERE)
    return str(raised.value)


# ------------------------------------------------------------------------------------------- the plan


def test_the_default_is_two_degradations_of_two_families_at_the_middle_severity():
    plan = degradation_plan(None, WHERE)
    assert plan == DegradationPlan() == DegradationPlan(DEFAULT_TYPES, DEFAULT_SEVERITIES)
    assert plan.types == ("defocus_blur", "uneven_illumination")
    assert plan.severities == (3,)
    assert not plan.is_off
    assert plan.variants() == [("defocus_blur", 3), ("uneven_illumination", 3)]


@pytest.mark.parametrize("raw", [False, {"types": []}], ids=["false", "types-empty"])
def test_false_and_no_types_mean_no_robustness_work(raw):
    plan = degradation_plan(raw, WHERE)
    assert plan.is_off and plan.variants() == []
    assert plan == DegradationPlan(types=())


def test_a_key_left_out_keeps_its_default():
    assert degradation_plan({"types": ["haze"]}, WHERE) == DegradationPlan(("haze",), DEFAULT_SEVERITIES)
    assert degradation_plan({"severities": [2]}, WHERE) == DegradationPlan(DEFAULT_TYPES, (2,))
    assert degradation_plan({}, WHERE) == DegradationPlan()


def test_all_is_every_registered_degradation_but_the_controls():
    plan = degradation_plan({"types": "all", "severities": [5, 1]}, WHERE)
    assert plan.types == ALL
    assert "surround_noise" in DEGRADATIONS and DEGRADATIONS["surround_noise"].control
    assert plan.variants()[:3] == [("defocus_blur", 5), ("defocus_blur", 1), ("underexposure", 5)]


def test_the_order_given_is_kept_and_a_control_runs_when_named():
    plan = degradation_plan({"types": ["surround_noise", "haze", "defocus_blur"], "severities": [4, 2]}, WHERE)
    assert plan.types == ("surround_noise", "haze", "defocus_blur")
    assert plan.variants() == [("surround_noise", 4), ("surround_noise", 2), ("haze", 4), ("haze", 2),
                               ("defocus_blur", 4), ("defocus_blur", 2)]


# ----------------------------------------------------------------------------------------- mistakes


def test_an_unknown_degradation_names_its_key_path_and_the_registered_ones():
    message = _refused({"types": ["haze", "blurr"]})
    assert message.startswith(f"{WHERE}: degradations.types.1: unknown degradation 'blurr'")
    assert all(name in message for name in DEGRADATIONS)
    assert "surround_noise (a control)" in message and "types: all" in message


@pytest.mark.parametrize("severity", [0, 6, -1])
def test_a_severity_outside_one_to_five_is_refused(severity):
    message = _refused({"severities": [1, severity]})
    assert message.startswith(f"{WHERE}: degradations.severities.1: severity {severity} is not one of 1, 2, 3, 4, 5")
    assert SEVERITIES == (1, 2, 3, 4, 5)


def test_a_type_or_severity_listed_twice_is_refused_not_dropped():
    assert _refused({"types": ["haze", "defocus_blur", "haze"]}) == (
        f"{WHERE}: degradations.types.2: 'haze' is listed twice (first as degradations.types.0); list each "
        "degradation once")
    assert _refused({"severities": [3, 3]}) == (
        f"{WHERE}: degradations.severities.1: severity 3 is listed twice (first as degradations.severities.0); "
        "list each severity once")


def test_every_mistake_of_the_block_is_one_line_of_one_error():
    lines = _refused({"types": ["blurr", "haze", "haze"], "severities": [9]}).splitlines()
    assert lines[0] == f"{WHERE}:"
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "degradations.types.0", "degradations.types.2", "degradations.severities.0"]


@pytest.mark.parametrize("raw, message", [
    ({"types": "haze"}, "degradations.types: must be `all` or a list of registered degradations such as "
                        "[defocus_blur, haze] (got 'haze')"),
    ({"severities": []}, "degradations.severities: must not be empty (got [])"),
    ({"severities": [True]}, "degradations.severities.0: must be a whole number (got True)"),
    ({"kinds": ["haze"]}, "degradations.kinds: unknown key; allowed: types, severities"),
    ("haze", "degradations: must be a mapping (got 'haze')"),
], ids=["single-name", "no-severities", "bool-severity", "unknown-key", "not-a-mapping"])
def test_the_shape_is_checked_by_the_schema(raw, message):
    assert _refused(raw) == f"{WHERE}: {message}"


# ---------------------------------------------------------------------------------- focus.yaml and the graph


def test_focus_yaml_refuses_anything_but_a_mapping_or_false(tmp_path):
    with pytest.raises(ConfigError) as raised:
        parse_config({"degradations": True}, tmp_path)
    assert str(raised.value) == ("focus.yaml: degradations: must be a mapping such as {types: [haze], severities: "
                                 "[1, 3]}, or false for none; got True")


@pytest.mark.parametrize("raw", [None, False, {"types": "all"}, {"types": ["surround_noise"], "severities": [2]}],
                         ids=["default", "off", "all", "control"])
def test_the_configuration_round_trips_through_its_document(tmp_path, raw):
    config = parse_config({} if raw is None else {"degradations": raw}, tmp_path)
    document = config.to_document()
    assert ("degradations" in document) == (raw is not None)  # the default is not written out
    assert parse_config(document, tmp_path) == config


def test_an_unquoted_yaml_off_means_no_degradations(tmp_path):
    """YAML 1.1 reads `degradations: off` as false, as it does `no`."""
    import yaml

    assert parse_config(yaml.safe_load("degradations: off"), tmp_path).degradations.is_off


def test_the_plan_of_a_focus_yaml_reaches_the_graph(tmp_path, monkeypatch):
    from assets.partitions import Registered
    from focus_dagster.datasets.registry import register_declared

    path = tmp_path / "focus.yaml"
    path.write_text("datasets: {idrid: synthetic}\n"
                    "degradations:\n  types: [haze, surround_noise]\n  severities: [5, 2]\n")
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FOCUS_CONFIG", str(path))
    try:
        config = load_config()
        registered = Registered.from_config(config)
    finally:
        register_declared({})
    expected = DegradationPlan(("haze", "surround_noise"), (5, 2))
    assert config.degradations == registered.degradations == expected
    # A Registered built by hand (as graph tests do) has the default plan.
    assert Registered(registered.datasets, registered.specs, registered.questions).degradations == DegradationPlan()


def test_the_schema_describes_the_block_and_its_defaults():
    """`focus config --schema` shows the block (false included), and its descriptions name the plan's defaults."""
    schema = config_schema.focus_yaml_schema()
    assert {"const": False, "type": "boolean"} in schema["properties"]["degradations"]["anyOf"]
    block = schema["$defs"]["DegradationsSection"]
    assert block["additionalProperties"] is False
    assert f"default: {', '.join(DEFAULT_TYPES)}" in block["properties"]["types"]["description"]
    assert f"default: {', '.join(map(str, DEFAULT_SEVERITIES))}" in block["properties"]["severities"]["description"]


def test_reading_the_configuration_does_not_import_torch():
    """The plan is validated against the registry when focus.yaml is read (`focus config --check`, every command):
    the registry is plain data, and only applying a degradation loads torch."""
    import subprocess
    import sys

    script = ("import sys; import focus_dagster.config, focus_dagster.degradations.plan; "
              "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
