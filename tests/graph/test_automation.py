"""Refresh on dataset change, evaluated with Dagster's automation-condition evaluation."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.datasets import OBSERVE_JOB
from assets.labels import DATA_LAYER_JOB
from focus_dagster.degradations.plan import DegradationPlan
from tests.support.events import check_evaluations, materialised
from tests.support.world import build_world

pytestmark = pytest.mark.heavy(45)  # seconds on a quiet 2-core machine: started first

NO_DEGRADATIONS = DegradationPlan(types=())  # the label gates are under test here, not the robustness assets

RECORDS = dg.AssetKey("dataset_records")
LABELS = dg.AssetKey("harmonised_labels")


@pytest.fixture
def world(synth_all, tmp_path):
    """brset and g1020 observed and fully materialised, and one automation tick taken."""
    config, defs, instance = build_world(synth_all, tmp_path, datasets=("brset", "g1020"),
                                         degradations=NO_DEGRADATIONS)
    observe(defs, instance)
    for key in config.roots:
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
    [check] = check_evaluations(run)
    assert check.check_name == "quarantine_rate" and not check.passed
    assert {asset for asset, _ in materialised(run)} == {RECORDS.to_user_string()}


def refresh_records_by_hand(defs, instance, key):
    """Records re-materialised outside automation (say, from the UI), with their checks."""
    job = dg.define_asset_job(
        "records_by_hand",
        selection=dg.AssetSelection.assets(RECORDS) | dg.AssetSelection.checks_for_assets(RECORDS),
        partitions_def=defs.resolve_job_def(DATA_LAYER_JOB).partitions_def,
    )
    merged = dg.Definitions.merge(defs, dg.Definitions(jobs=[job]))
    return merged.resolve_job_def("records_by_hand").execute_in_process(
        partition_key=key, instance=instance, raise_on_error=False)


def test_records_read_again_by_hand_on_unchanged_data_refresh_nothing(world):
    """A new materialisation with the data version the records had is no change: nothing below them is requested."""
    _, defs, instance, cursor = world
    assert refresh_records_by_hand(defs, instance, "brset").success
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    assert result.total_requested == 0


@pytest.mark.parametrize("broken", [False, True])
def test_across_ticks_labels_follow_records_only_when_their_blocking_checks_passed(world, broken):
    """Records changed and re-read by hand: the labels follow them on the next tick if their blocking check passed
    (a changed value), and not if it failed (most images gone)."""
    config, defs, instance, cursor = world
    if broken:
        images = sorted((config.root_of("brset") / "fundus_photos").glob("*.jpg"))
        for image in images[: len(images) * 2 // 3]:
            image.unlink()
    else:
        label = config.root_of("brset") / "labels.csv"
        label.write_bytes(label.read_bytes().replace(b"Brazil", b"Brasil", 1))
    run = refresh_records_by_hand(defs, instance, "brset")
    [check] = check_evaluations(run)
    assert check.passed is not broken
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    assert result.get_requested_partitions(LABELS) == (set() if broken else {"brset"})


def test_a_bad_label_mapping_stops_everything_downstream(monkeypatch, synth_all, tmp_path):
    """Missing labels written as -1 (defect 7), planted in the rule: label_values fails, and an asset
    downstream of the labels under the platform's GATED_EAGER condition is not requested; with the sound
    rule it is."""
    from assets.automation import GATED_EAGER
    from focus_dagster.labels import rules

    def downstream_requested(rule_table) -> set:
        monkeypatch.setattr(rules, "RULES", rule_table)
        _, defs, instance = build_world(synth_all, tmp_path / f"world{len(list(tmp_path.iterdir()))}",
                                        degradations=NO_DEGRADATIONS)

        @dg.asset(deps=[LABELS], partitions_def=defs.resolve_job_def(DATA_LAYER_JOB).partitions_def,
                  automation_condition=GATED_EAGER)
        def downstream():
            return None

        defs = dg.Definitions.merge(defs, dg.Definitions(assets=[downstream]))
        observe(defs, instance)
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance,
                                                                raise_on_error=False)
        result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        return result.get_requested_partitions(dg.AssetKey("downstream"))

    sound = rules.RULES
    brset = sound["brset"]
    bad_gon = dict(brset.tasks, gon=lambda r: rules.num(r, "increased_cup_disc").where(lambda v: v == 1, -1))
    bad = dict(sound, brset=rules.LabelRule(brset.id, "brset", brset.description, bad_gon, brset.subset, brset.metadata))
    assert downstream_requested(bad) == set()
    assert downstream_requested(sound) == {"brset"}
