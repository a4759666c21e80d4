"""The label rules checked against an independent transcription (SQL written from datasets.md).

The old rule_consistency check recomputed the labels with the same `RULES` functions that produced them, so a
wrong rule confirmed itself. These tests plant a wrong rule and show that the check now fails, in the core
function and as the Dagster asset check of a real run, while the old comparison alone still passes.
"""

from __future__ import annotations

import dataclasses

import dagster as dg
import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.labels import expectations as checks
from focus_dagster.labels.rule_sql import RULE_SQL, independent_labels
from focus_dagster.labels.rules import RULES, TASKS, defined_where, num
from tests.conftest import copy_tree


def brset_records() -> pd.DataFrame:
    """BRSET native columns (datasets.md): DR_ICDR 0-4 or blank, macular_edema and increased_cup_disc 0/1."""
    return pd.DataFrame({
        "image_id": ["img00001", "img00002", "img00003", "img00004", "img00005", "img00006", "img00007"],
        "DR_ICDR": pd.array([0, 1, 2, 4, 0, None, 1], dtype="Int64"),
        "macular_edema": pd.array([0, 0, 0, 1, 1, 1, None], dtype="Int64"),
        "increased_cup_disc": pd.array([0, 1, 0, 0, 1, 0, None], dtype="Int64"),
    })


# Worked by hand from datasets.md: any_dr = ICDR >= 1; referable_dr = ICDR >= 2 or edema; gon = cup/disc flag.
BRSET_EXPECTED = {
    "any_dr": [0, 1, 1, 1, 0, None, 1],
    "referable_dr": [0, 0, 1, 1, 1, None, 0],  # img00005: ICDR 0 with edema is referable; blank grade is null
    "gon": [0, 1, 0, 0, 1, 0, None],
}


def as_list(series: pd.Series) -> list:
    return [None if pd.isna(v) else int(v) for v in series]


def pipeline_labels(dataset: str, records: pd.DataFrame) -> pd.DataFrame:
    """The labels the pipeline's own rule functions give (what harmonisation stores)."""
    labels = RULES[dataset].task_labels(records.reset_index(drop=True))
    labels.insert(0, "image_id", records["image_id"].astype(str).to_numpy())
    return labels


def wrong_brset_rule():
    """BRSET with an off-by-one threshold: any_dr = DR_ICDR >= 0, so every graded image is 'diseased'."""
    rule = RULES["brset"]
    tasks = dict(rule.tasks, any_dr=lambda r: defined_where(num(r, "DR_ICDR") >= 0, num(r, "DR_ICDR").notna()))
    return dataclasses.replace(rule, tasks=tasks)


# ------------------------------------------------------------------------------------------ the SQL itself


def test_brset_sql_gives_the_hand_computed_labels():
    out = independent_labels("brset", brset_records())
    assert out["image_id"].tolist() == brset_records()["image_id"].tolist()
    for task, expected in BRSET_EXPECTED.items():
        assert as_list(out[task]) == expected, task


def test_sql_reads_records_as_stored_floats_with_nan_and_as_text():
    floats = brset_records().astype({c: "float64" for c in ("DR_ICDR", "macular_edema", "increased_cup_disc")})
    text = brset_records().astype({c: "string" for c in ("DR_ICDR", "macular_edema", "increased_cup_disc")})
    for frame in (floats, text):
        out = independent_labels("brset", frame)
        for task, expected in BRSET_EXPECTED.items():
            assert as_list(out[task]) == expected, task


def test_every_rule_has_sql_for_exactly_the_tasks_it_defines():
    assert set(RULE_SQL) == set(RULES)
    for dataset, rule in RULES.items():
        assert set(RULE_SQL[dataset]) == set(rule.tasks), dataset
        assert set(RULE_SQL[dataset]) <= set(TASKS)


def test_messidor_sql_accepts_the_original_grade_file_column():
    records = pd.DataFrame({"image_id": ["a", "b", "c"], "adjudicated_dr_grade": [0, 1, 2],
                            "adjudicated_dme": [1, 0, 0]})
    out = independent_labels("messidor_2", records)
    assert as_list(out["any_dr"]) == [0, 1, 1] and as_list(out["referable_dr"]) == [1, 0, 1]
    assert as_list(out["gon"]) == [None, None, None]


def test_jsiec_sql_reads_the_class_folder():
    folders = ["0.0.Normal", "0.3.DR1", "1.0.DR2", "1.1.DR3", "29.1.Blur fundus with suspected PDR",
               "10.0.Possible glaucoma"]
    records = pd.DataFrame({"image_id": [f"u{i}." for i in range(len(folders))], "class_folder": folders})
    out = independent_labels("jsiec1000", records)
    assert as_list(out["any_dr"]) == [0, 1, 1, 1, 1, 0]
    assert as_list(out["referable_dr"]) == [0, 0, 1, 1, 1, 0]


def test_records_without_a_native_column_are_named_in_the_error():
    with pytest.raises(ValueError, match="brset records lack a native column"):
        independent_labels("brset", brset_records().drop(columns=["DR_ICDR"]))
    with pytest.raises(ValueError, match="No independent SQL label rules"):
        independent_labels("nope", brset_records())


def test_sql_and_rule_functions_agree_on_every_look_alike(synth_all):
    out, _ = synth_all
    for dataset in RULES:
        records = read_dataset(dataset, out / dataset).records
        labels = pipeline_labels(dataset, records)
        outcome = checks.check_rule_consistency(labels, labels, independent_labels(dataset, records))
        assert outcome.success, (dataset, outcome.examples)


# ------------------------------------------------------------------------------------ a planted wrong rule


def test_a_wrong_rule_fails_the_independent_check_but_passed_the_old_one(monkeypatch):
    monkeypatch.setitem(RULES, "brset", wrong_brset_rule())
    records = brset_records().fillna({"macular_edema": 0})
    stored = pipeline_labels("brset", records)  # harmonised with the wrong rule
    recomputed = pipeline_labels("brset", records)  # recomputed with the same wrong rule

    assert checks.check_rule_consistency(stored, recomputed).success  # the old check confirms the wrong rule

    outcome = checks.check_rule_consistency(stored, recomputed, independent_labels("brset", records))
    assert not outcome.success
    # img00001 and img00005 (ICDR 0) are wrong on both sides: stored and recomputed disagree with the SQL.
    wrong = {e["image_id"] for e in outcome.examples if e.get("column") == "any_dr"}
    assert wrong == {"img00001", "img00005"}
    assert outcome.unexpected_count == 4
    assert {"stored", "independent"} <= set(outcome.examples[0])


def test_rule_functions_treat_a_blank_edema_flag_as_no_edema_on_records_as_read():
    records = brset_records()  # img00007: ICDR 1, macular_edema blank
    assert as_list(pipeline_labels("brset", records)["referable_dr"]) == BRSET_EXPECTED["referable_dr"]


def test_a_flipped_stored_label_is_counted_once_with_the_independent_reference():
    records = brset_records().fillna({"macular_edema": 0})
    stored = pipeline_labels("brset", records)
    stored.loc[0, "gon"] = 1
    outcome = checks.check_rule_consistency(stored, pipeline_labels("brset", records),
                                            independent_labels("brset", records))
    assert not outcome.success and outcome.unexpected_count == 1
    assert outcome.examples == [{"image_id": "img00001", "column": "gon", "stored": 1, "independent": 0}]


def test_an_image_missing_from_the_independent_labels_is_reported():
    records = brset_records().fillna({"macular_edema": 0})
    labels = pipeline_labels("brset", records)
    outcome = checks.check_rule_consistency(labels, labels, independent_labels("brset", records).iloc[1:])
    assert not outcome.success
    assert {"image_id": "img00001", "problem": "missing from the independent labels"} in outcome.examples


def test_a_wrong_rule_fails_the_rule_consistency_asset_check_of_a_run(synth_all, tmp_path, monkeypatch):
    from assets.labels import DATA_LAYER_JOB
    from focus_dagster.config import FocusConfig
    from focus_dagster.definitions import build_definitions

    monkeypatch.setitem(RULES, "brset", wrong_brset_rule())
    out, _ = synth_all
    config = FocusConfig(home=tmp_path / "home", roots={"brset": copy_tree(out / "brset", tmp_path / "brset")})
    defs = build_definitions(config)
    result = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(
        partition_key="brset", instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    found = {e.event_specific_data.check_name: e.event_specific_data
             for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    verdict = found["rule_consistency"]
    assert not verdict.passed and verdict.severity.value == "ERROR"
    assert verdict.metadata["unexpected_count"].value > 0
    assert "DR_ICDR" in verdict.metadata["info"].value["independent_rules_sql"]["any_dr"]
