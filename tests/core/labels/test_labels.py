"""Harmonised labels: every rule, null versus negative, per-dataset codes, splits and accounting."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from focus_dagster.datasets import DATASET_KEYS, read_dataset
from focus_dagster.labels import LABEL_COLUMNS, RULES, harmonise
from focus_dagster.labels.rule_sql import independent_labels
from focus_dagster.labels.rules import defined_tasks
from focus_dagster.labels.splits import path_tail
from tests.support.environment import SHARED_REFERENCE, copy_tree, link_stand_in_images, needs_reference

# Which tasks each dataset defines under the reference grid (datasets.md).
TASK_GRID = {
    "brset": {"any_dr", "referable_dr", "gon"}, "mbrset": {"any_dr", "referable_dr"}, "papila": {"gon"},
    "rfmid": {"any_dr", "referable_dr"}, "rfmid_2": {"any_dr", "referable_dr"}, "idrid": {"any_dr", "referable_dr"},
    "messidor_2": {"any_dr", "referable_dr"}, "refuge": {"gon"}, "g1020": {"gon"}, "jsiec1000": {"any_dr", "referable_dr"},
}


@pytest.fixture(scope="module")
def harmonised(synth_all):
    out, _ = synth_all
    results = {}
    for key in DATASET_KEYS:
        read = read_dataset(key, out / key)
        results[key] = (read, harmonise(key, read.records, read.quarantine, root=read.root, seed=5))
    return results


@pytest.mark.parametrize("key", DATASET_KEYS)
def test_every_record_is_labelled_or_rejected_and_tasks_follow_the_grid(harmonised, key):
    read, result = harmonised[key]
    assert result.records_in == read.rows_read == len(result.labels) + len(result.rejects)
    assert list(result.labels.columns) == LABEL_COLUMNS
    assert (result.labels["label_rule"] == RULES[key].id).all()
    assert result.labels["image_id"].is_unique and result.labels["split"].isin(["train", "val", "test"]).all()
    for task in ("any_dr", "referable_dr", "gon"):
        values = result.labels[task]
        if task in TASK_GRID[key]:
            assert values.notna().all() and set(values.astype(int)) <= {0, 1}, task
        else:
            assert values.isna().all(), f"{key}.{task} must be null (not defined), never 0"
    assert result.labels["content_hash"].str.fullmatch(r"[0-9a-f]{32}").all()


@pytest.mark.parametrize("key", DATASET_KEYS)
def test_labels_match_the_published_rule(harmonised, key):
    read, result = harmonised[key]
    """The stored labels against the rules as datasets.md states them, in their SQL transcription
    (focus_dagster/labels/rule_sql.py, written from datasets.md and not from rules.py): one reference, kept once."""
    records = read.records.set_index("image_id").loc[result.labels["image_id"]].reset_index()
    expected = independent_labels(key, records)
    for task in TASK_GRID[key]:
        assert result.labels[task].astype(int).tolist() == expected[task].astype(int).tolist(), task


def test_subsets_and_blank_labels_are_rejected_with_reasons(harmonised):
    _, brset = harmonised["brset"]
    assert set(brset.rejects["reason_code"]) == {"subset:not_diabetic"}
    _, mbrset = harmonised["mbrset"]
    read, _ = harmonised["mbrset"]
    views = read.records.set_index("image_id")["file"].str.extract(r"\.(\d)\.jpg$", expand=False)
    assert set(views.loc[mbrset.labels["image_id"]]) <= {"1", "3"}
    assert (mbrset.rejects["reason_code"] == "subset:not_macula_centred").sum() == views.isin(["2", "4"]).sum()
    _, refuge = harmonised["refuge"]
    assert set(refuge.rejects["reason_code"]) == {"label:unlabelled"}
    assert set(refuge.labels["split"]) == {"train", "test"}  # official val is the benchmark's test
    _, rfmid_2 = harmonised["rfmid_2"]
    assert rfmid_2.rejects[["stage", "reason_code"]].drop_duplicates().values.tolist() == [["records", "image_missing"]]


def test_sex_quality_and_eye_use_each_datasets_own_codes(harmonised):
    read, brset = harmonised["brset"]
    native = read.records.set_index("image_id").loc[brset.labels["image_id"]]
    assert (brset.labels["sex"].to_numpy() == np.where(native["patient_sex"] == 1, "M", "F")).all()
    assert (brset.labels["quality"].to_numpy() == native["quality"].str.lower().to_numpy()).all()
    read, mbrset = harmonised["mbrset"]
    native = read.records.set_index("image_id").loc[mbrset.labels["image_id"]]
    assert (mbrset.labels["sex"].to_numpy() == np.where(native["sex"] == 1, "M", "F")).all()
    assert set(mbrset.labels["camera"]) == {"Phelcom Eyer"}
    read, papila = harmonised["papila"]
    native = read.records.set_index("image_id").loc[papila.labels["image_id"]]
    assert (papila.labels["sex"].to_numpy() == np.where(native["Gender"] == 0, "M", "F")).all()
    assert (papila.labels["eye"].to_numpy() == np.where(native["eye"] == "OD", "R", "L")).all()
    _, g1020 = harmonised["g1020"]
    assert g1020.labels[["age", "sex", "quality", "camera", "patient_id"]].isna().all().all()


@pytest.mark.parametrize(("key", "column"), [("brset", "patient_age"), ("mbrset", "age"), ("papila", "Age")])
def test_age_is_each_datasets_own_age_column(harmonised, key, column):
    """The age axis groups by the published age column of each dataset that has one (datasets.md)."""
    read, result = harmonised[key]
    native = read.records.set_index("image_id").loc[result.labels["image_id"]]
    expected = pd.to_numeric(native[column], errors="coerce").to_numpy(dtype=float)
    assert result.labels["age"].notna().any()
    np.testing.assert_array_equal(result.labels["age"].to_numpy(dtype=float), expected)


def test_idrid_collision_stays_two_images(harmonised):
    _, idrid = harmonised["idrid"]
    labels = idrid.labels.set_index("image_id")
    assert labels.loc["train/IDRiD_001", "split"] == "train" and labels.loc["test/IDRiD_001", "split"] == "test"
    assert labels.loc["train/IDRiD_001", "content_hash"] != labels.loc["test/IDRiD_001", "content_hash"]


@pytest.mark.parametrize("key", ["brset", "papila", "g1020", "jsiec1000", "messidor_2", "mbrset"])
def test_seeded_split_is_grouped_deterministic_and_reports_its_label_mix(harmonised, key):
    read, result = harmonised[key]
    again = harmonise(key, read.records, read.quarantine, seed=5)
    other = harmonise(key, read.records, read.quarantine, seed=6)
    assert result.split_method == "seeded"
    assert again.labels["split"].tolist() == result.labels["split"].tolist()
    assert other.labels["split"].tolist() != result.labels["split"].tolist()
    with_patient = result.labels.dropna(subset=["patient_id"])
    assert (with_patient.groupby("patient_id")["split"].nunique() == 1).all()
    assert set(result.labels["split"]) <= {"train", "test"}
    # The report's label mix, counted here from the labels themselves.
    classes = result.split_report["stratification"]["classes"]
    assert set(classes) == TASK_GRID[key]
    for task, by_class in classes.items():
        for name, value in (("positive", 1), ("negative", 0)):
            member = result.labels[result.labels[task] == value]
            assert by_class[name]["images"] == len(member), (task, name)
            assert by_class[name]["in_test"] == int((member["split"] == "test").sum()), (task, name)


def test_published_split_file_is_joined_and_disagreements_reported(harmonised, tmp_path):
    read, result = harmonised["jsiec1000"]
    labels = result.labels
    published = pd.DataFrame({
        "dataset": "jsiec1000", "image_id": labels["image_id"],
        "split": np.where(np.arange(len(labels)) % 3 == 0, "test", "train"),
        "image_path": "/cluster/data/JSIEC1000/" + labels["image_path"],
        "Task_DR_Binary": "", "Task_Referable": "", "Task_Glaucoma": "",
    })
    conflicting = published.iloc[[1]].assign(split="test")
    unknown = published.iloc[[2]].assign(image_path="/x/1000images/0.0.Normal/nosuch..JPG")
    published = pd.concat([published.iloc[3:], conflicting, published.iloc[[1]], unknown], ignore_index=True)
    published.to_csv(tmp_path / "labels_splits_jsiec1000.csv", index=False)
    joined = harmonise("jsiec1000", read.records, read.quarantine, splits_dir=tmp_path)
    assert joined.split_method == "published"
    codes = joined.rejects.set_index("image_id")["reason_code"]
    assert codes.loc[labels["image_id"][1]] == "split:conflicting"
    assert codes.loc[labels["image_id"][0]] == codes.loc[labels["image_id"][2]] == "split:absent_from_split_file"
    assert joined.split_report["split_file_images_the_dataset_lacks"] == 1
    expected = dict(zip(published["image_path"].map(path_tail), published["split"]))
    assert all(expected[path_tail(p)] == s for p, s in zip(joined.labels["image_path"], joined.labels["split"]))
    assert joined.records_in == len(joined.labels) + len(joined.rejects)


@needs_reference(SHARED_REFERENCE / "brset_labels.csv")
def test_real_brset_with_the_published_split(tmp_path):
    root = tmp_path / "brset"
    root.mkdir()
    shutil.copy(SHARED_REFERENCE / "brset_labels.csv", root / "labels.csv")
    link_stand_in_images(root, "fundus_photos/" + pd.read_csv(root / "labels.csv", encoding="utf-8-sig")["image_id"] + ".jpg")
    read = read_dataset("brset", root)
    result = harmonise("brset", read.records, read.quarantine, splits_dir=SHARED_REFERENCE / "published_splits")
    labels = result.labels
    assert len(labels) == 2579 and len(result.rejects) == 16266 - 2579
    assert labels["split"].value_counts().to_dict() == {"train": 1417, "test": 768, "val": 394}
    test = labels[labels["split"] == "test"]
    assert [int(test[t].sum()) for t in ("any_dr", "referable_dr", "gon")] == [195, 174, 138]
    assert int(labels["referable_dr"].sum()) == 588 and (labels["sex"] == "M").sum() == 1011
    assert (labels["quality"] == "inadequate").sum() == 201
    assert result.split_report["images_absent_from_split_file"] == 0


@needs_reference(SHARED_REFERENCE / "mbrset_labels.csv")
def test_real_mbrset_with_the_published_split(tmp_path):
    root = tmp_path / "mbrset"
    root.mkdir()
    shutil.copy(SHARED_REFERENCE / "mbrset_labels.csv", root / "labels_mbrset.csv")
    link_stand_in_images(root, "images/" + pd.read_csv(root / "labels_mbrset.csv")["file"])
    read = read_dataset("mbrset", root)
    result = harmonise("mbrset", read.records, read.quarantine, splits_dir=SHARED_REFERENCE / "published_splits")
    test = result.labels[result.labels["split"] == "test"]
    assert [int(test[t].sum()) for t in ("any_dr", "referable_dr")] == [174, 141]
    assert result.labels["gon"].isna().all()
    codes = result.rejects["reason_code"].value_counts().to_dict()
    assert codes == {"subset:not_macula_centred": 2582, "label:blank_grade": 145}
    # The published file lists the 145 blank-grade images too: told apart from images the dataset lacks.
    assert result.split_report["split_file_images_rejected_before_splitting"] == 145
    assert result.split_report["split_file_images_the_dataset_lacks"] == 0


def test_unknown_codes_reach_the_rejects_with_the_readers_reason(synth_all, tmp_path):
    out, _ = synth_all
    root = copy_tree(out / "idrid", tmp_path / "idrid")
    label = root / "B. Disease Grading" / "2. Groundtruths" / "a. IDRiD_Disease Grading_Training Labels.csv"
    lines = label.read_text().splitlines()
    cells = lines[1].split(",")
    cells[1] = "9"  # a retinopathy grade outside 0..4
    label.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    read = read_dataset("idrid", root)
    result = harmonise("idrid", read.records, read.quarantine)
    [reject] = result.rejects.to_dict("records")
    assert (reject["stage"], reject["reason_code"]) == ("records", "unknown_code:Retinopathy grade")
    assert "'9'" in reject["reason"] and reject["image_id"] == "train/" + cells[0]
    assert result.records_in == len(result.labels) + 1


@needs_reference(SHARED_REFERENCE / "published_splits")
def test_the_idrid_split_file_defect_is_detected_not_reproduced(tmp_path):
    """The reference split file lists the 103 test images under both splits and omits 103 training images (their
    rows carry the path of the test image with the same name): the conflicts are reported and take the native
    split, so IDRiD keeps its published 413 train / 103 test instead of ending with no test side."""
    from focus_dagster.synthetic import synthesize

    synthesize(tmp_path, ["idrid"], per_dataset=516, seed=0, scale=0.015, workers=1)
    read = read_dataset("idrid", tmp_path / "idrid")
    result = harmonise("idrid", read.records, read.quarantine, splits_dir=SHARED_REFERENCE / "published_splits")
    assert result.split_report["images_with_conflicting_splits"] == 103
    assert result.split_report["conflicts_given_the_native_split"] == 103
    assert result.split_report["images_displaced_by_a_namesake"] == 103
    assert result.split_report["images_absent_from_split_file"] == 0
    assert result.labels["split"].value_counts().to_dict() == {"train": 413, "test": 103}
    native = harmonise("idrid", read.records, read.quarantine)  # without the file: the native split
    assert native.labels["split"].value_counts().to_dict() == {"train": 413, "test": 103}


def test_defined_tasks_are_those_with_a_label_in_task_order():
    """A task counts as defined when at least one image has a non-null label; absent or all-null columns do not."""
    labels = pd.DataFrame({"gon": pd.array([pd.NA, 0], dtype="Int8"),
                           "any_dr": pd.array([pd.NA, pd.NA], dtype="Int8"),
                           "referable_dr": pd.array([1, pd.NA], dtype="Int8")})
    assert defined_tasks(labels) == ["referable_dr", "gon"]
    assert defined_tasks(labels.drop(columns=["gon"])) == ["referable_dr"]
    assert defined_tasks(pd.DataFrame({"image_id": ["a"]})) == []
