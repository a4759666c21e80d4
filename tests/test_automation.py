"""Refresh on dataset change, evaluated with Dagster's automation-condition evaluation."""

from __future__ import annotations

import dagster as dg
import pytest

from focus_dagster.config import FocusConfig
from focus_dagster.definitions import DATA_LAYER_JOB, OBSERVE_JOB, build_definitions
from tests.conftest import copy_tree

RECORDS = dg.AssetKey("dataset_records")
LABELS = dg.AssetKey("harmonised_labels")


@pytest.fixture
def world(synth_all, tmp_path):
    """brset and g1020 observed and fully materialised, and one automation tick taken."""
    out, _ = synth_all
    roots = {key: copy_tree(out / key, tmp_path / key) for key in ("brset", "g1020")}
    config = FocusConfig(home=tmp_path / "home", roots=roots)
    defs = build_definitions(config)
    instance = dg.DagsterInstance.ephemeral()
    observe(defs, instance)
    for key in roots:
        assert defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key=key, instance=instance).success
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    return config, defs, instance, first.cursor


def observe(defs, instance):
    assert defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success


def test_an_unchanged_release_refreshes_nothing(world):
    _, defs, instance, cursor = world
    observe(defs, instance)  # the daily observation: same versions
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    assert result.total_requested == 0


def test_a_changed_label_file_refreshes_only_its_own_partition(world):
    config, defs, instance, cursor = world
    label = config.root_of("brset") / "labels.csv"
    label.write_bytes(label.read_bytes().replace(b"Brazil", b"Brasil", 1))
    observe(defs, instance)
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    assert result.get_requested_partitions(RECORDS) == {"brset"}
    # Labels ride in the same run, behind the records' blocking check (which gates within a run).
    assert result.get_requested_partitions(LABELS) == {"brset"}


def test_a_failing_blocking_check_stops_the_refresh_there(world):
    config, defs, instance, cursor = world
    images = sorted((config.root_of("g1020") / "G1020" / "Images").glob("*.jpg"))
    for image in images[: len(images) * 2 // 3]:
        image.unlink()  # a broken copy: most images gone
    observe(defs, instance)
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    assert result.get_requested_partitions(RECORDS) == {"g1020"}
    # The requested run: the records' blocking check fails, so the labels step does not run.
    run = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(
        partition_key="g1020", instance=instance, raise_on_error=False)
    [check] = [e.event_specific_data for e in run.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert check.check_name == "quarantine_rate" and not check.passed
    materialized = {e.asset_key for e in run.all_events if e.event_type_value == "ASSET_MATERIALIZATION"}
    assert materialized == {RECORDS}
