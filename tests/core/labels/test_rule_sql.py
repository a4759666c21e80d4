"""The label rules checked against an independent transcription (SQL written from datasets.md).

The old rule_consistency check recomputed the labels with the same `RULES` functions that produced them, so a
wrong rule confirmed itself. These tests plant a wrong rule and show that the check now fails, in the core
function and as the Dagster asset check of a real run, while the old comparison alone still passes. The
benchmark subset is checked the same way: the SQL subset (SUBSET_SQL) against hand-worked records, and
planted wrong subset filters (non-diabetic BRSET patients kept, mBRSET .3 views dropped) failing the check.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.labels import expectations as checks
from focus_dagster.labels.harmonise import harmonise
from focus_dagster.labels.rule_sql import RULE_SQL, SUBSET_SQL, independent_labels
from focus_dagster.labels.rules import RULES, TASKS, SubsetFilter, defined_where, num


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
    monkeypatch.setitem(RULES, "brset", wrong_brset_rule())
    verdict = rule_consistency_of_a_brset_run(synth_all, tmp_path)
    assert not verdict.passed and verdict.severity.value == "ERROR"
    assert verdict.metadata["unexpected_count"].value > 0
    assert "DR_ICDR" in verdict.metadata["info"].value["independent_rules_sql"]["any_dr"]


# ------------------------------------------------------------------------------------ the benchmark subset


def subset_of(dataset: str, records: pd.DataFrame) -> list[bool]:
    return independent_labels(dataset, records, subset=True)["in_subset"].tolist()


def test_every_rule_with_a_subset_filter_has_subset_sql():
    assert set(SUBSET_SQL) == {dataset for dataset, rule in RULES.items() if rule.subset}


def test_brset_subset_sql_keeps_diabetic_patients_only():
    # datasets.md: "diabetic patients only (`diabetes == yes`)"; a blank diabetes field is not "yes".
    records = brset_records().iloc[:4].assign(diabetes=["yes", "no", None, "yes"])
    assert subset_of("brset", records) == [True, False, False, True]


def test_mbrset_subset_sql_keeps_graded_macula_centred_views():
    # datasets.md: macula-centred files only (*.1.jpg, *.3.jpg); rows with blank final_icdr dropped.
    records = pd.DataFrame({
        "image_id": ["7.1", "7.2", "7.3", "7.4", "8.1", "8.3", "18.1"],
        "file": ["7.1.jpg", "7.2.jpg", "7.3.jpg", "7.4.jpg", "8.1.jpg", "8.3.jpg", "18.1.jpg"],
        "final_icdr": ["2", "2", "0", "0", None, "", "4"],
        "final_edema": ["no", "no", None, "yes", "no", "no", "yes"],
    })
    assert subset_of("mbrset", records) == [True, False, True, False, False, False, True]
    floats = records.assign(final_icdr=[2.0, 2.0, 0.0, 0.0, float("nan"), float("nan"), 4.0])
    assert subset_of("mbrset", floats) == [True, False, True, False, False, False, True]


def test_messidor_subset_sql_keeps_gradable_graded_images_in_both_schemas():
    # datasets.md: not gradable -> reject; the gradable images carry an adjudicated grade.
    mirror = pd.DataFrame({"image_id": ["IM1", "IM2", "IM3", "IM4"], "diagnosis": [0, 3, None, None],
                           "adjudicated_dme": [0, 1, None, None], "adjudicated_gradable": [1, 1, 0, 1]})
    assert subset_of("messidor_2", mirror) == [True, True, False, False]
    original = mirror.rename(columns={"diagnosis": "adjudicated_dr_grade"})
    assert subset_of("messidor_2", original) == [True, True, False, False]


def test_refuge_subset_sql_keeps_labelled_records():
    # datasets.md: the mirror's test split is unlabelled; train (g/n names) and val are labelled.
    records = pd.DataFrame({"image_id": ["g0001", "n0001", "V0001", "T0001"], "Label": ["1", "0", "0", ""]})
    assert subset_of("refuge", records) == [True, True, True, False]


def test_a_dataset_without_a_subset_rule_keeps_every_record():
    records = pd.DataFrame({"image_id": ["RET002OD", "RET002OS", "RET003OD"], "Diagnosis": [0, 2, None]})
    out = independent_labels("papila", records, subset=True)
    assert out["in_subset"].tolist() == [True, True, True]
    assert as_list(out["gon"]) == [0, 1, None]


def test_the_subset_column_is_only_added_on_request():
    assert "in_subset" not in independent_labels("brset", brset_records()).columns
    with pytest.raises(ValueError, match="brset records lack a native column"):
        independent_labels("brset", brset_records(), subset=True)  # no `diabetes` column


def harmonised_check(dataset: str, records: pd.DataFrame):
    """Harmonise with the current RULES, then run the consistency check as the asset check does."""
    result = harmonise(dataset, records)
    kept = set(result.labels["image_id"])
    recomputed = pipeline_labels(dataset, records)
    recomputed = recomputed[recomputed["image_id"].isin(kept)].reset_index(drop=True)
    independent = independent_labels(dataset, records, subset=True)
    return result, checks.check_rule_consistency(result.labels, recomputed, independent, rejects=result.rejects)


def keep_non_diabetic_brset_rule():
    """BRSET with the subset filter gone: non-diabetic patients are kept."""
    return dataclasses.replace(RULES["brset"], subset=())


def drop_view_3_mbrset_rule():
    """mBRSET keeping only the .1 views: the macula-centred .3 views are rejected as not macula-centred."""
    rule = RULES["mbrset"]
    wrong = SubsetFilter("subset:not_macula_centred", "not macula-centred",
                         lambda r: ~r["file"].astype(str).str.contains(r"\.1\.[^.]+$"))
    return dataclasses.replace(rule, subset=(wrong, *rule.subset[1:]))


def test_the_right_subset_filters_pass_on_every_look_alike(synth_all):
    out, _ = synth_all
    for dataset in RULES:
        records = read_dataset(dataset, out / dataset).records
        _, outcome = harmonised_check(dataset, records)
        assert outcome.success, (dataset, outcome.examples)
        counts = outcome.info["subset_membership"]
        assert counts["kept_outside_subset"] == 0 and counts["inside_subset_not_kept"] == 0
        assert counts["records"] == len(records)


def test_keeping_non_diabetic_brset_patients_fails_the_check(synth_all, monkeypatch):
    out, _ = synth_all
    records = read_dataset("brset", out / "brset").records
    non_diabetic = set(records.loc[records["diabetes"].astype(str) != "yes", "image_id"].astype(str))
    assert non_diabetic  # the look-alike has non-diabetic patients to keep wrongly

    monkeypatch.setitem(RULES, "brset", keep_non_diabetic_brset_rule())
    result, outcome = harmonised_check("brset", records)
    assert not outcome.success
    counts = outcome.info["subset_membership"]
    wrongly_kept = non_diabetic & set(result.labels["image_id"])
    assert wrongly_kept and counts["kept_outside_subset"] == len(wrongly_kept)
    assert counts["inside_subset_not_kept"] == 0
    flagged = {e["image_id"] for e in outcome.examples if "outside the benchmark subset" in e.get("problem", "")}
    assert flagged and flagged <= wrongly_kept
    # The labels themselves follow the right task rules: only the subset is wrong.
    assert outcome.unexpected_count == len(wrongly_kept)


def test_dropping_the_mbrset_view_3_fails_the_check(synth_all, monkeypatch):
    out, _ = synth_all
    records = read_dataset("mbrset", out / "mbrset").records
    views_3 = records["file"].astype(str).str.contains(r"\.3\.jpg$") & pd.to_numeric(
        records["final_icdr"], errors="coerce").notna()
    assert views_3.any()

    monkeypatch.setitem(RULES, "mbrset", drop_view_3_mbrset_rule())
    _, outcome = harmonised_check("mbrset", records)
    assert not outcome.success
    counts = outcome.info["subset_membership"]
    assert counts["inside_subset_not_kept"] == int(views_3.sum()) and counts["kept_outside_subset"] == 0
    dropped = [e for e in outcome.examples if e.get("problem", "").startswith("inside the benchmark subset")]
    assert dropped and all(e["reason_code"] == "subset:not_macula_centred" for e in dropped)
    assert {e["image_id"] for e in dropped} <= set(records.loc[views_3, "image_id"].astype(str))


def test_an_in_subset_image_rejected_for_its_split_passes_but_one_dropped_silently_fails():
    records = brset_records().fillna({"macular_edema": 0}).assign(diabetes=["yes"] * 6 + ["no"])
    independent = independent_labels("brset", records, subset=True)
    labels = pipeline_labels("brset", records)
    kept = labels[~labels["image_id"].isin(["img00002", "img00003", "img00007"])].reset_index(drop=True)
    rejects = pd.DataFrame({"image_id": ["img00002", "img00007"],
                            "reason_code": ["split:absent_from_split_file", "subset:not_diabetic"]})
    outcome = checks.check_rule_consistency(kept, kept, independent, rejects=rejects)
    # img00002 (split reject) and img00007 (outside the subset) are fine; img00003 vanished.
    assert not outcome.success and outcome.unexpected_count == 1
    assert outcome.examples == [{"image_id": "img00003", "problem": "inside the benchmark subset (independent SQL) "
                                 "but not kept", "fate": "dropped without a reject", "reason_code": None}]
    rejects.loc[2] = ["img00003", "split:patient_disagrees"]
    assert checks.check_rule_consistency(kept, kept, independent, rejects=rejects).success
    # Rejected by a subset filter although the SQL puts it inside: a wrong filter.
    rejects.loc[2] = ["img00003", "subset:not_diabetic"]
    outcome = checks.check_rule_consistency(kept, kept, independent, rejects=rejects)
    assert not outcome.success and outcome.examples[0]["fate"] == "rejected (subset:not_diabetic)"


def test_keeping_non_diabetic_patients_fails_the_rule_consistency_asset_check_of_a_run(
        synth_all, tmp_path, monkeypatch):
    monkeypatch.setitem(RULES, "brset", keep_non_diabetic_brset_rule())
    verdict = rule_consistency_of_a_brset_run(synth_all, tmp_path)
    assert not verdict.passed and verdict.severity.value == "ERROR"
    info = verdict.metadata["info"].value
    assert info["subset_membership"]["kept_outside_subset"] > 0
    assert "diabetes" in info["independent_subset_sql"]
    assert any("outside the benchmark subset" in e.get("problem", "")
               for e in verdict.metadata["examples"].value)


def rule_consistency_of_a_brset_run(synth_all, tmp_path):
    """The rule_consistency verdict of a real data-layer run on a BRSET look-alike (with RULES as patched)."""
    from assets.labels import DATA_LAYER_JOB
    from tests.support.events import check_verdict
    from tests.support.world import build_world

    _, defs, instance = build_world(synth_all, tmp_path)
    result = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(
        partition_key="brset", instance=instance, raise_on_error=False)
    return check_verdict(result, "rule_consistency")
