"""The label checks as Dagster asset checks: pass on sound labels, fail on each planted defect."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.labels import DATA_LAYER_JOB
from tests.support.events import check_verdict
from tests.support.tables import sql_edit
from tests.support.world import build_world

LABELS = dg.AssetKey("harmonised_labels")
BLOCKING = {"label_values", "rule_consistency", "split_leakage", "row_accounting"}


@pytest.fixture
def built(synth_all, tmp_path):
    config, defs, instance = build_world(synth_all, tmp_path)
    result = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance)
    return config, defs, instance, result


def run_check(config, name):
    """The check body on the stored tables, as the asset check runs it (the wiring is tested above)."""
    from checks.labels import LABEL_CHECKS, outcome_result
    from resources import FocusStorage

    storage = FocusStorage.from_config(config)
    [check] = [c for c in LABEL_CHECKS if c.name == name]
    return outcome_result(check.run(storage, "brset"), check.blocking)


def execute(config, table: str, sql: str):
    """Plant a defect in BRSET's rows of `table` (the checks run on BRSET)."""
    sql_edit(config, table, "brset", sql)


def test_sound_labels_pass_every_blocking_check_with_gx_metadata(built):
    _, _, _, result = built
    for name in BLOCKING:
        verdict = check_verdict(result, name)
        assert verdict.passed and verdict.severity.value == "ERROR", name
    assert check_verdict(result, "metadata_coverage").passed  # BRSET has age, sex, quality and camera
    expectations = check_verdict(result, "label_values").metadata["expectations"].value
    assert expectations and all("expectation" in e for e in expectations)


def test_a_label_contradicting_its_source_columns_fails_rule_consistency(built):
    config, _, _, _ = built
    execute(config, "labels.harmonised", "UPDATE labels.harmonised SET any_dr = 1 - any_dr WHERE image_id = "
                    "(SELECT min(image_id) FROM labels.harmonised WHERE dataset = 'brset')")
    verdict = run_check(config, "rule_consistency")
    assert not verdict.passed and verdict.metadata["unexpected_count"].value == 1


def test_a_patient_in_two_splits_fails_split_leakage(built):
    config, _, _, _ = built
    execute(config, "labels.harmonised", """UPDATE labels.harmonised SET split = CASE split WHEN 'test' THEN 'train' ELSE 'test' END
                       WHERE image_id = (SELECT min(image_id) FROM labels.harmonised
                                         WHERE patient_id IN (SELECT patient_id FROM labels.harmonised
                                                              GROUP BY patient_id HAVING count(*) > 1))""")
    verdict = run_check(config, "split_leakage")
    assert not verdict.passed and verdict.metadata["unexpected_count"].value >= 1


def test_a_lost_reject_fails_row_accounting(built):
    config, _, _, _ = built
    execute(config, "labels.rejects", "DELETE FROM labels.rejects WHERE image_id = (SELECT min(image_id) FROM labels.rejects)")
    assert not run_check(config, "row_accounting").passed


def test_missing_labels_written_as_minus_one_fail_label_values_and_block(monkeypatch, synth_all, tmp_path):
    """Defect 7 of the reference implementation, planted in the rule: the blocking check stops it."""
    from focus_dagster.labels import rules

    brset = rules.RULES["brset"]
    bad_tasks = dict(brset.tasks, gon=lambda r: rules.num(r, "increased_cup_disc").where(lambda v: v == 1, -1))
    monkeypatch.setitem(rules.RULES, "brset", rules.LabelRule(brset.id, "brset", brset.description, bad_tasks,
                                                             brset.subset, brset.metadata))
    _, defs, instance = build_world(synth_all, tmp_path)
    result = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(
        partition_key="brset", instance=instance, raise_on_error=False)
    verdict = check_verdict(result, "label_values")
    assert not verdict.passed and verdict.severity.value == "ERROR"
    assert any(e.get("value") == -1 for e in verdict.metadata["examples"].value)
