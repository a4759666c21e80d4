"""RFMiD reader: three nested split folders, IDs restarting per split, rare CME, bad input, the published split file."""

from __future__ import annotations

import os
import shutil

import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.datasets.rfmid import DISEASE_COLUMNS, PUBLISHED_COLUMNS
from focus_dagster.errors import DatasetLayoutError
from tests.support.environment import SHARED_REFERENCE, copy_tree, needs_reference

REFERENCE_SPLIT = SHARED_REFERENCE / "published_splits" / "labels_splits_rfmid.csv"
TRAIN_CSV = "Training_Set/Training_Set/RFMiD_Training_Labels.csv"
VAL_CSV = "Evaluation_Set/Evaluation_Set/RFMiD_Validation_Labels.csv"
TEST_CSV = "Test_Set/Test_Set/RFMiD_Testing_Labels.csv"
FOLDERS = {"train": "Training_Set/Training_Set/Training", "val": "Evaluation_Set/Evaluation_Set/Validation",
           "test": "Test_Set/Test_Set/Test"}


@pytest.fixture
def rfmid(synth_all, tmp_path):
    out, manifests = synth_all
    return copy_tree(out / "rfmid", tmp_path / "rfmid"), manifests["rfmid"]


def labels(root, rel):
    return pd.read_csv(root / rel, dtype=str, keep_default_na=False)


def test_label_files_are_the_three_doubly_nested_split_files(rfmid):
    root, _ = rfmid
    assert read_dataset("rfmid", root).label_files == [TRAIN_CSV, VAL_CSV, TEST_CSV]


def test_ids_restart_per_split_and_records_keep_their_own_split(rfmid):
    root, _ = rfmid
    records = read_dataset("rfmid", root).records
    assert records["image_id"].is_unique
    for split, rel in (("train", TRAIN_CSV), ("val", VAL_CSV), ("test", TEST_CSV)):
        raw = labels(root, rel)
        assert raw["ID"].tolist() == [str(i) for i in range(1, len(raw) + 1)]  # the quirk is present
        mine = records[records["native_split"] == split].reset_index(drop=True)
        assert mine["image_id"].tolist() == [f"{split}/{i}" for i in raw["ID"]]
        assert mine["image_path"].tolist() == [f"{FOLDERS[split]}/{i}.png" for i in raw["ID"]]
        assert mine["DR"].astype(str).tolist() == raw["DR"].tolist()
    assert records["patient_id"].isna().all()


def test_all_published_columns_are_typed_flags(rfmid):
    root, _ = rfmid
    assert list(labels(root, TRAIN_CSV).columns) == PUBLISHED_COLUMNS
    assert len(DISEASE_COLUMNS) == 45 and len(PUBLISHED_COLUMNS) == 47
    records = read_dataset("rfmid", root).records
    for column in ["Disease_Risk", *DISEASE_COLUMNS]:
        assert str(records[column].dtype) == "Int64" and set(records[column]) <= {0, 1}
    at_risk = records[DISEASE_COLUMNS].sum(axis=1) > 0
    assert (records["Disease_Risk"] == at_risk.astype(int)).all()


def test_cme_stays_rare_and_dr_has_both_classes_in_test(rfmid):
    root, manifest = rfmid
    records = read_dataset("rfmid", root).records
    assert 1 <= int(records["CME"].sum()) <= 2
    test = records[records["native_split"] == "test"]
    assert 0 < int(test["DR"].sum()) < len(test)
    assert any("CME positives" in note for note in manifest.notes)


def test_split_folder_nested_once_is_tolerated(rfmid):
    root, manifest = rfmid
    outer = root / "Training_Set"
    for item in list((outer / "Training_Set").iterdir()):
        shutil.move(item, outer / item.name)
    (outer / "Training_Set").rmdir()
    result = read_dataset("rfmid", root)
    assert len(result.records) == manifest.label_rows
    train = result.records[result.records["native_split"] == "train"]
    assert train["image_path"].str.startswith("Training_Set/Training/").all()


def test_image_extension_case_follows_the_file_on_disk(rfmid):
    root, manifest = rfmid
    (root / FOLDERS["val"] / "1.png").rename(root / FOLDERS["val"] / "1.PNG")
    result = read_dataset("rfmid", root)
    assert len(result.records) == manifest.label_rows and result.unlisted_images == []
    assert result.records.set_index("image_id").at["val/1", "image_path"] == f"{FOLDERS['val']}/1.PNG"


def test_missing_split_label_file_names_both_places_looked(rfmid):
    root, _ = rfmid
    (root / VAL_CSV).unlink()
    looked = r"val label file.*'Evaluation_Set/Evaluation_Set/RFMiD_Validation_Labels\.csv', 'Evaluation_Set/RFMiD_Val"
    with pytest.raises(DatasetLayoutError, match=looked):
        read_dataset("rfmid", root)


def test_missing_cme_column_names_expected_and_found(rfmid):
    root, _ = rfmid
    labels(root, TEST_CSV).rename(columns={"CME": "CME_"}).to_csv(root / TEST_CSV, index=False)
    with pytest.raises(DatasetLayoutError) as err:
        read_dataset("rfmid", root)
    assert "['CME']" in str(err.value) and "CME_" in str(err.value) and "RFMiD_Testing_Labels.csv" in str(err.value)


def test_unknown_flag_and_id_values_are_quarantined(rfmid):
    root, manifest = rfmid
    frame = labels(root, TRAIN_CSV)
    frame.loc[0, "DR"] = "2"
    frame.loc[1, "ID"] = "../2"
    frame.to_csv(root / TRAIN_CSV, index=False)
    result = read_dataset("rfmid", root)
    reasons = dict(zip(result.quarantine["source_row"], result.quarantine["reason_code"]))
    assert reasons == {1: "unknown_code:DR", 2: "unknown_code:ID"}
    assert len(result.records) == manifest.label_rows - 2
    assert result.unlisted_images == [f"{FOLDERS['train']}/2.png"]


@needs_reference(REFERENCE_SPLIT)
def test_paths_match_the_published_split_file_and_ids_no_longer_collide(tmp_path):
    """Label files listing the published IDs give the published path tails; bare IDs repeat, ours do not."""
    reference = pd.read_csv(REFERENCE_SPLIT, dtype=str, keep_default_na=False)
    tails = reference["image_path"].str.split("/RFMiD/", n=1).str[1]
    root = tmp_path / "rfmid"
    csv_of = {"train": TRAIN_CSV, "val": VAL_CSV, "test": TEST_CSV}
    for split, group in reference.groupby("split"):
        frame = pd.DataFrame(0, index=range(len(group)), columns=PUBLISHED_COLUMNS)
        frame["ID"] = group["image_id"].to_numpy()
        frame["DR"] = group["Task_DR_Binary"].to_numpy()
        (root / csv_of[split]).parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(root / csv_of[split], index=False)
        (root / FOLDERS[split]).mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (4, 4)).save(root / "tiny.png")
    for tail in tails:
        os.link(root / "tiny.png", root / tail)
    records = read_dataset("rfmid", root).records
    assert len(records) == 3200 and reference["image_id"].duplicated().sum() == 1280
    assert records["image_id"].is_unique
    ours = dict(zip(records["image_path"], records["image_id"]))
    assert [ours[t] for t in tails] == (reference["split"] + "/" + reference["image_id"]).tolist()
    by_path = records.set_index("image_path")["DR"].astype(str)
    assert by_path.loc[tails].tolist() == reference["Task_DR_Binary"].tolist()
    assert records.groupby("native_split")["DR"].sum().to_dict() == {"test": 124, "train": 376, "val": 132}
