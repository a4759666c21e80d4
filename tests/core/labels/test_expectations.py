"""The label-table checks: each passes on a clean table and catches one planted defect, counted and shown."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from focus_dagster.labels import expectations as checks
from focus_dagster.labels import gx

PER_SPLIT = 40  # enough positives and negatives per split for the default min_positives=10


def clean_labels() -> pd.DataFrame:
    """120 images in three splits, two per patient, every code valid and every task well populated."""
    rows = []
    for s, split in enumerate(("train", "val", "test")):
        for j in range(PER_SPLIT):
            i = s * PER_SPLIT + j
            any_dr = j % 2
            rows.append({
                "dataset": "brset",
                "image_id": f"img{i:03d}",
                "image_path": f"fundus_photos/img{i:03d}.jpg",
                "patient_id": f"p{i // 2}",  # pairs never straddle a split: PER_SPLIT is even
                "split": split,
                "any_dr": any_dr,
                "referable_dr": int(any_dr and j % 4 == 1),  # 10 positives, 30 negatives per split
                "gon": int(j % 4 in (0, 3)),
                "age": 40.0 + j,
                "sex": "FM"[j % 2],
                "quality": "adequate" if j % 5 else "inadequate",
                "camera": "Canon CR",
                "eye": "RL"[j % 2],
                "label_rule": "brset.icdr",
                "content_hash": f"hash{i:03d}",
            })
    frame = pd.DataFrame(rows)
    for task in ("any_dr", "referable_dr", "gon"):
        frame[task] = frame[task].astype("Int8")
    frame["age"] = frame["age"].astype("Float64")
    return frame


def recomputed_from(labels: pd.DataFrame) -> pd.DataFrame:
    return labels[["image_id", "any_dr", "referable_dr", "gon"]].copy()


def row_of(labels: pd.DataFrame, image_id: str) -> int:
    return labels.index[labels["image_id"] == image_id][0]


@pytest.fixture
def labels() -> pd.DataFrame:
    return clean_labels()


# ---------------------------------------------------------------------------------------- the clean table


def all_outcomes(labels: pd.DataFrame) -> list[checks.CheckOutcome]:
    return [
        checks.check_label_values(labels),
        checks.check_rule_consistency(labels, recomputed_from(labels)),
        checks.check_referable_implies_any(labels),
        checks.check_split_leakage(labels),
        checks.check_row_accounting(130, len(labels), 10),
        checks.check_metadata_coverage(labels),
        checks.check_patient_ids(labels),
        checks.check_degenerate_tasks(labels),
    ]


def test_every_check_passes_on_a_clean_table(labels):
    outcomes = all_outcomes(labels)
    assert [o.name for o in outcomes] == [
        "label_values", "rule_consistency", "referable_implies_any", "split_leakage", "row_accounting",
        "metadata_coverage", "patient_ids", "degenerate_tasks",
    ]
    for outcome in outcomes:
        assert outcome.success, outcome.summary()
        assert outcome.unexpected_count == 0
        assert outcome.examples == []
        assert outcome.expectations and all(e["success"] for e in outcome.expectations)


def test_summaries_are_plain_json_with_one_entry_per_expectation(labels):
    labels.loc[0, "gon"] = -1
    labels.loc[1, "patient_id"] = None
    for outcome in all_outcomes(labels):
        summary = outcome.summary()
        assert json.loads(json.dumps(summary, allow_nan=False)) == summary
        assert set(summary) == {"name", "success", "unexpected_count", "checked_count", "examples",
                                "expectations", "info"}
        for entry in summary["expectations"]:
            assert {"expectation", "column(s)", "success", "unexpected_count", "partial_unexpected_list"} <= set(entry)
            assert entry["expectation"].startswith("Expect")
            assert len(entry["partial_unexpected_list"]) <= 10


# ------------------------------------------------------------------------------------------- label values


@pytest.mark.parametrize(
    "column, bad",
    [("gon", -1), ("any_dr", 2), ("sex", "1"), ("split", "dev"), ("quality", "good"), ("eye", "OD")],
)
def test_label_values_catches_an_unknown_code(labels, column, bad):
    labels.loc[row_of(labels, "img007"), column] = bad

    outcome = checks.check_label_values(labels)

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert outcome.checked_count == len(labels)
    assert outcome.examples == [{"image_id": "img007", "column": column, "value": bad}]
    failed = [e for e in outcome.expectations if not e["success"]]
    assert failed == [{"expectation": "ExpectColumnValuesToBeInSet", "column(s)": column, "success": False,
                       "unexpected_count": 1, "partial_unexpected_list": [bad]}]


def test_label_values_accepts_empty_labels_and_metadata(labels):
    for column in ("any_dr", "referable_dr", "gon"):
        labels.loc[3, column] = pd.NA
    labels.loc[3, ["sex", "quality", "eye"]] = None
    assert checks.check_label_values(labels).success


def test_the_allowed_codes_are_those_of_the_canonical_record():
    # datasets.md, "Canonical harmonised record"; the order is the order the expectations are reported in.
    assert list(checks.ALLOWED_VALUES.items()) == [
        ("any_dr", [0, 1]), ("referable_dr", [0, 1]), ("gon", [0, 1]), ("split", ["train", "val", "test"]),
        ("sex", ["F", "M"]), ("quality", ["adequate", "inadequate"]), ("eye", ["R", "L"]),
    ]
    assert checks.COVERAGE_COLUMNS == ("age", "sex", "quality", "camera", "eye", "patient_id")


def test_label_values_catches_a_duplicate_image_id(labels):
    labels.loc[row_of(labels, "img005"), "image_id"] = "img004"

    outcome = checks.check_label_values(labels)

    assert not outcome.success
    assert outcome.unexpected_count == 2  # both rows that share the id
    assert outcome.examples == [{"image_id": "img004", "column": "image_id", "value": "img004"}] * 2


@pytest.mark.parametrize("column", ["split", "image_id", "label_rule"])
def test_label_values_requires_split_image_id_and_rule(labels, column):
    labels.loc[row_of(labels, "img010"), column] = None

    outcome = checks.check_label_values(labels)

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert [e["column(s)"] for e in outcome.expectations if not e["success"]] == [column]
    assert outcome.examples[0]["column"] == column and outcome.examples[0]["value"] is None


def test_label_values_reports_a_missing_column(labels):
    outcome = checks.check_label_values(labels.drop(columns=["eye"]))

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert outcome.examples == [{"column": "eye", "problem": "column missing from the table"}]


def test_label_values_examples_stop_at_ten_and_cover_every_failing_column(labels):
    labels["sex"] = "x"  # 120 bad values
    labels.loc[0, "gon"] = -1

    outcome = checks.check_label_values(labels)

    assert outcome.unexpected_count == len(labels) + 1
    assert len(outcome.examples) == 10
    assert {e["column"] for e in outcome.examples} == {"sex", "gon"}


# --------------------------------------------------------------------------------------- rule consistency


def test_rule_consistency_catches_a_flipped_label(labels):
    recomputed = recomputed_from(labels)
    i = row_of(recomputed, "img012")
    recomputed.loc[i, "gon"] = 1 - recomputed.loc[i, "gon"]

    outcome = checks.check_rule_consistency(labels, recomputed)

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert outcome.checked_count == len(labels)
    stored = int(labels.loc[row_of(labels, "img012"), "gon"])
    assert outcome.examples == [{"image_id": "img012", "column": "gon", "stored": stored, "recomputed": 1 - stored}]


@pytest.mark.parametrize("stored, recomputed", [(None, 0), (0, None), (None, 1)])
def test_rule_consistency_never_lets_empty_and_a_value_pass_as_equal(labels, stored, recomputed):
    i = row_of(labels, "img020")
    labels.loc[i, "referable_dr"] = pd.NA if stored is None else stored
    other = recomputed_from(labels)
    other.loc[i, "referable_dr"] = pd.NA if recomputed is None else recomputed

    outcome = checks.check_rule_consistency(labels, other)

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert outcome.examples == [
        {"image_id": "img020", "column": "referable_dr", "stored": stored, "recomputed": recomputed}
    ]


def test_rule_consistency_accepts_a_task_empty_on_both_sides(labels):
    labels["gon"] = pd.array([pd.NA] * len(labels), dtype="Int8")
    assert checks.check_rule_consistency(labels, recomputed_from(labels)).success


def test_rule_consistency_counts_an_image_missing_on_one_side_once(labels):
    recomputed = recomputed_from(labels)
    recomputed = recomputed[recomputed["image_id"] != "img030"]

    outcome = checks.check_rule_consistency(labels, recomputed)

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert outcome.examples == [{"image_id": "img030", "problem": "missing from the recomputed labels"}]

    outcome = checks.check_rule_consistency(labels[labels["image_id"] != "img031"], recomputed_from(labels))
    assert outcome.examples == [{"image_id": "img031", "problem": "missing from the stored labels"}]


def test_rule_consistency_names_missing_columns_of_the_recomputed_frame(labels):
    with pytest.raises(ValueError, match=r"recomputed labels lack column.*gon"):
        checks.check_rule_consistency(labels, recomputed_from(labels).drop(columns=["gon"]))


# ------------------------------------------------------------------------------------ referable implies any


def test_referable_without_any_dr_is_reported(labels):
    i = row_of(labels, "img040")
    labels.loc[i, ["any_dr", "referable_dr"]] = [0, 1]

    outcome = checks.check_referable_implies_any(labels)

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert outcome.examples == [{"image_id": "img040", "referable_dr": 1, "any_dr": 0}]


def test_referable_check_skips_rows_with_an_empty_label(labels):
    i = row_of(labels, "img040")
    labels.loc[i, "any_dr"] = pd.NA
    labels.loc[i, "referable_dr"] = 1

    outcome = checks.check_referable_implies_any(labels)

    assert outcome.success
    assert outcome.checked_count == len(labels) - 1


# -------------------------------------------------------------------------------------------- split leakage


def test_a_patient_in_train_and_test_is_leakage(labels):
    labels.loc[row_of(labels, "img100"), "patient_id"] = "p1"  # img100 is in test, p1 in train

    outcome = checks.check_split_leakage(labels)

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert outcome.examples == [{"patient_id": "p1", "splits": ["test", "train"]}]
    assert outcome.info["patients"] == len(labels) // 2
    assert outcome.info["rows_without_patient_id"] == 0


def test_the_same_image_in_two_splits_is_leakage(labels):
    labels.loc[row_of(labels, "img050"), "content_hash"] = "hash001"  # img050 is in val, img001 in train

    outcome = checks.check_split_leakage(labels)

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert outcome.examples == [{"content_hash": "hash001", "splits": ["train", "val"]}]


def test_a_repeat_within_one_split_is_not_leakage(labels):
    labels.loc[row_of(labels, "img002"), "content_hash"] = "hash001"
    labels.loc[row_of(labels, "img002"), "patient_id"] = "p0"
    assert checks.check_split_leakage(labels).success


def test_rows_without_patient_id_are_counted_not_grouped(labels):
    labels.loc[[0, 1], "patient_id"] = None

    outcome = checks.check_split_leakage(labels)

    assert outcome.success
    assert outcome.info["rows_without_patient_id"] == 2
    assert outcome.info["patients"] == len(labels) // 2 - 1


# ------------------------------------------------------------------------------------------- row accounting


def test_row_accounting_off_by_one_fails():
    outcome = checks.check_row_accounting(records_in=100, labels=90, rejects=9)

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert outcome.examples == [{"records_in": 100, "labels": 90, "rejects": 9, "unaccounted": 1}]
    assert outcome.expectations[0]["expectation"] == "ExpectColumnPairValuesToBeEqual"


def test_row_accounting_that_adds_up_passes():
    outcome = checks.check_row_accounting(records_in=100, labels=90, rejects=10)
    assert outcome.success and outcome.info["unaccounted"] == 0


# ----------------------------------------------------------------------------------------- metadata coverage


def test_a_dataset_without_age_and_sex_fails_coverage(labels):
    labels["age"] = pd.array([pd.NA] * len(labels), dtype="Float64")
    labels["sex"] = None

    outcome = checks.check_metadata_coverage(labels)

    assert not outcome.success
    assert outcome.unexpected_count == 2
    assert [e["column"] for e in outcome.examples] == ["age", "sex"]
    assert outcome.info["age"] == 0.0 and outcome.info["sex"] == 0.0 and outcome.info["camera"] == 1.0


def test_partial_coverage_passes_and_is_measured(labels):
    labels.loc[labels.index[:30], "age"] = pd.NA
    labels["eye"] = None  # no laterality: measured, not a failure

    outcome = checks.check_metadata_coverage(labels)

    assert outcome.success
    assert outcome.info["age"] == 0.75
    assert outcome.info["eye"] == 0.0


def test_an_absent_axis_column_counts_as_empty(labels):
    outcome = checks.check_metadata_coverage(labels.drop(columns=["camera"]))

    assert not outcome.success
    assert outcome.examples[0]["column"] == "camera"


# --------------------------------------------------------------------------------------------- patient ids


def test_a_null_patient_id_fails(labels):
    labels.loc[row_of(labels, "img077"), "patient_id"] = None

    outcome = checks.check_patient_ids(labels)

    assert not outcome.success
    assert outcome.unexpected_count == 1
    assert outcome.info == {"rows_without_patient_id": 1}
    assert outcome.examples == [{"image_id": "img077", "column": "patient_id", "value": None}]


# ----------------------------------------------------------------------------------------- degenerate tasks


def test_a_task_with_three_positives_in_test_is_degenerate(labels):
    test = labels.index[labels["split"] == "test"]
    labels.loc[test, "any_dr"] = 0
    labels.loc[test, "referable_dr"] = 0  # keeps referable <= any; referable is then degenerate as well
    labels.loc[test[:3], "any_dr"] = 1

    outcome = checks.check_degenerate_tasks(labels)

    assert not outcome.success
    assert outcome.unexpected_count == 2
    assert outcome.checked_count == 9
    assert {"task": "any_dr", "split": "test", "positives": 3, "negatives": PER_SPLIT - 3} in outcome.examples
    assert {"task": "referable_dr", "split": "test", "positives": 0, "negatives": PER_SPLIT} in outcome.examples
    assert outcome.info["any_dr"]["test"] == {"positives": 3, "negatives": PER_SPLIT - 3}
    assert outcome.info["any_dr"]["train"] == {"positives": PER_SPLIT // 2, "negatives": PER_SPLIT // 2}


def test_too_few_negatives_is_degenerate_too(labels):
    labels.loc[labels["split"] == "val", "gon"] = 1

    outcome = checks.check_degenerate_tasks(labels)

    assert outcome.unexpected_count == 1
    assert outcome.examples == [{"task": "gon", "split": "val", "positives": PER_SPLIT, "negatives": 0}]


def test_tasks_the_dataset_does_not_carry_are_left_out(labels):
    labels["gon"] = pd.array([pd.NA] * len(labels), dtype="Int8")

    outcome = checks.check_degenerate_tasks(labels, min_positives=5)

    assert outcome.success
    assert set(outcome.info) == {"any_dr", "referable_dr"}
    assert outcome.checked_count == 6


def test_min_positives_is_the_threshold(labels):
    assert checks.check_degenerate_tasks(labels, min_positives=10).success
    outcome = checks.check_degenerate_tasks(labels, min_positives=11)
    assert outcome.unexpected_count == 3  # referable_dr has exactly 10 positives in each split


# --------------------------------------------------------------------------------------- GX, quietly


def test_importing_the_module_does_not_import_great_expectations():
    code = ("import sys, focus_dagster.labels.expectations\n"
            "assert 'great_expectations' not in sys.modules, 'imported eagerly'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_validation_draws_no_progress_bars(labels, capfd):
    checks.check_label_values(labels)
    assert "Calculating Metrics" not in capfd.readouterr().err


def test_the_context_is_ephemeral_quiet_and_shared(labels):
    checks.check_patient_ids(labels)
    context = gx.context()

    assert context is gx.context()
    assert type(context).__name__ == "EphemeralDataContext"
    assert context.progress_bars.globally is False and context.progress_bars.metric_calculations is False
    assert context.config.analytics_enabled is False
    assert context.config.data_docs_sites == {}  # the stock ephemeral context points docs at a temp folder


# ------------------------------------------------------------------------------------------ the GX adapter


def test_validate_counts_unexpected_values_and_samples_the_offending_rows():
    frame = pd.DataFrame({"image_id": ["a", "b", "c", "d", "e"], "grade": [0, 3, 1, 7, 3]})
    expect = gx.expect()

    in_set, not_null = gx.validate("adapter_test", frame, [
        expect.ExpectColumnValuesToBeInSet(column="grade", value_set=[0, 1]),
        expect.ExpectColumnValuesToNotBeNull(column="grade"),
    ], key=["image_id"])

    assert in_set.entry == {"expectation": "ExpectColumnValuesToBeInSet", "column(s)": "grade", "success": False,
                            "unexpected_count": 3, "partial_unexpected_list": [3, 7, 3]}
    assert not in_set.success and in_set.unexpected_count == 3
    assert in_set.rows == [{"image_id": "b", "grade": 3}, {"image_id": "d", "grade": 7},
                           {"image_id": "e", "grade": 3}]
    assert not_null.entry == {"expectation": "ExpectColumnValuesToNotBeNull", "column(s)": "grade", "success": True,
                              "unexpected_count": 0, "partial_unexpected_list": []}
    assert not_null.rows == []


def test_validate_keeps_at_most_ten_examples_and_no_rows_without_a_key():
    frame = pd.DataFrame({"grade": [9] * 25})

    (verdict,) = gx.validate("adapter_test", frame, [gx.expect().ExpectColumnValuesToBeInSet(
        column="grade", value_set=[0, 1])])

    assert verdict.unexpected_count == 25
    assert verdict.entry["partial_unexpected_list"] == [9] * 10
    assert verdict.rows == []


def test_an_expectation_that_cannot_be_evaluated_fails_with_its_error():
    frame = pd.DataFrame({"grade": [0, 1]})

    (verdict,) = gx.validate("adapter_test", frame, [gx.expect().ExpectColumnValuesToBeInSet(
        column="no_such_column", value_set=[0, 1])])

    assert verdict.success is False
    assert "no_such_column" in verdict.entry["error"]


def test_jsonable_unwraps_numpy_and_empties_nan():
    import numpy as np

    value = {1: [np.int64(3), np.float64("nan"), pd.NA, (True, "x")], "t": pd.Timestamp("2024-01-02")}

    assert gx.jsonable(value) == {"1": [3, None, None, [True, "x"]], "t": "2024-01-02T00:00:00"}
