"""IDRiD reader: names colliding across splits, header quirks, nested roots, bad input, the published split file."""

from __future__ import annotations

import os
import shutil

import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.errors import DatasetLayoutError
from tests.support.environment import SHARED_REFERENCE, copy_tree, needs_reference

REFERENCE_SPLIT = SHARED_REFERENCE / "published_splits" / "labels_splits_idrid.csv"
PART = "B. Disease Grading"
TRUTHS = f"{PART}/2. Groundtruths"
CSV = {"train": f"{TRUTHS}/a. IDRiD_Disease Grading_Training Labels.csv",
       "test": f"{TRUTHS}/b. IDRiD_Disease Grading_Testing Labels.csv"}
FOLDERS = {"train": f"{PART}/1. Original Images/a. Training Set", "test": f"{PART}/1. Original Images/b. Testing Set"}
LABELS = ["Retinopathy grade", "Risk of macular edema"]


@pytest.fixture
def idrid(synth_all, tmp_path):
    out, manifests = synth_all
    return copy_tree(out / "idrid", tmp_path / "idrid"), manifests["idrid"]


def labels(root, split):
    frame = pd.read_csv(root / CSV[split], dtype=str, keep_default_na=False)
    return frame.rename(columns=str.strip)[["Image name", *LABELS]]


def test_label_files_are_the_two_published_grade_files(idrid):
    root, _ = idrid
    assert read_dataset("idrid", root).label_files == [CSV["train"], CSV["test"]]


def test_a_name_in_both_splits_gives_two_records_with_their_own_labels_and_images(idrid):
    root, _ = idrid
    records = read_dataset("idrid", root).records.set_index("image_id")
    train, test = labels(root, "train").set_index("Image name"), labels(root, "test").set_index("Image name")
    shared = sorted(set(train.index) & set(test.index))
    assert "IDRiD_001" in shared and records.index.is_unique
    differing = 0
    for name in shared:
        mine_train, mine_test = records.loc[f"train/{name}"], records.loc[f"test/{name}"]
        assert (mine_train["native_split"], mine_test["native_split"]) == ("train", "test")
        assert mine_train["image_path"] == f"{FOLDERS['train']}/{name}.jpg"
        assert mine_test["image_path"] == f"{FOLDERS['test']}/{name}.jpg"
        assert [str(mine_train[c]) for c in LABELS] == train.loc[name, LABELS].tolist()
        assert [str(mine_test[c]) for c in LABELS] == test.loc[name, LABELS].tolist()
        differing += train.loc[name, LABELS].tolist() != test.loc[name, LABELS].tolist()
    assert differing >= 1
    train_image, test_image = (root / FOLDERS[s] / "IDRiD_001.jpg" for s in ("train", "test"))
    assert train_image.read_bytes() != test_image.read_bytes()


def test_header_trailing_space_and_unnamed_columns_are_tolerated(idrid):
    root, _ = idrid
    header = (root / CSV["train"]).read_text().splitlines()[0]
    assert header.startswith("Image name,Retinopathy grade,Risk of macular edema ,,")
    assert all(line.endswith(",,") for line in (root / CSV["test"]).read_text().splitlines())
    records = read_dataset("idrid", root).records
    assert list(records.columns[6:]) == ["Image name", *LABELS]
    assert str(records["Retinopathy grade"].dtype) == "Int64" and set(records["Risk of macular edema"]) <= {0, 1, 2}


@pytest.mark.parametrize("layout", ["nested twice", "part folder as root"])
def test_nested_and_part_folder_roots_are_tolerated(idrid, layout):
    root, manifest = idrid
    before = read_dataset("idrid", root).records
    if layout == "nested twice":
        inner = root / PART / PART
        inner.mkdir()
        for name in ("1. Original Images", "2. Groundtruths"):
            shutil.move(root / PART / name, inner / name)
        new_root, expected = root, f"{PART}/" + before["image_path"]
    else:
        new_root, expected = root / PART, before["image_path"].str.removeprefix(f"{PART}/")
    after = read_dataset("idrid", new_root).records
    assert len(after) == manifest.label_rows
    assert after["image_path"].tolist() == expected.tolist()
    assert after["image_id"].tolist() == before["image_id"].tolist()


def test_missing_testing_labels_is_a_layout_error(idrid):
    root, _ = idrid
    (root / CSV["test"]).unlink()
    with pytest.raises(DatasetLayoutError, match="test label file.*b. IDRiD_Disease Grading_Testing Labels.csv"):
        read_dataset("idrid", root)


def test_unrecognised_root_lists_every_place_looked(tmp_path):
    (tmp_path / "IDRiD" / "A. Segmentation").mkdir(parents=True)
    with pytest.raises(DatasetLayoutError) as err:
        read_dataset("idrid", tmp_path / "IDRiD")
    assert f"{PART}/{PART}/2. Groundtruths" in str(err.value) and "'2. Groundtruths/a. IDRiD" in str(err.value)


def test_missing_grade_column_names_expected_and_found(idrid):
    root, _ = idrid
    text = (root / CSV["train"]).read_text()
    (root / CSV["train"]).write_text(text.replace("Retinopathy grade", "DR grade", 1))
    with pytest.raises(DatasetLayoutError) as err:
        read_dataset("idrid", root)
    assert "['Retinopathy grade']" in str(err.value) and "'DR grade'" in str(err.value)


def test_unknown_grade_and_escaping_name_are_quarantined(idrid):
    root, manifest = idrid
    frame = labels(root, "test")
    frame.loc[0, "Retinopathy grade"] = "5"
    frame.loc[1, "Image name"] = "../../../../outside"
    frame.to_csv(root / CSV["test"], index=False)
    result = read_dataset("idrid", root)
    codes = dict(zip(result.quarantine["source_row"], result.quarantine["reason_code"]))
    assert codes == {1: "unknown_code:Retinopathy grade", 2: "path_escapes_root"}
    assert result.rows_read == manifest.label_rows
    assert result.unlisted_images == [f"{FOLDERS['test']}/IDRiD_002.jpg"]


@needs_reference(REFERENCE_SPLIT)
def test_published_split_file_collision_defect_is_not_reproduced(tmp_path):
    """The published file puts every test image in train too; keyed by (split, name) they stay apart."""
    reference = pd.read_csv(REFERENCE_SPLIT, dtype=str, keep_default_na=False)
    tails = reference["image_path"].str.split("/IDRiD/", n=1).str[1]
    assert tails.str.startswith(f"{PART}/{PART}/").all()  # the reference copy is nested twice
    in_test_folder = tails.str.contains("/b. Testing Set/")
    assert int((in_test_folder & (reference["split"] == "train")).sum()) == 103  # the defect
    root = tmp_path / "IDRiD"
    nested = root / PART
    for split, size in (("train", 413), ("test", 103)):
        names = [f"IDRiD_{i:03d}" for i in range(1, size + 1)]
        frame = pd.DataFrame({"Image name": names, "Retinopathy grade": 0, "Risk of macular edema ": 0})
        (nested / CSV[split]).parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(nested / CSV[split], index=False)
        (nested / FOLDERS[split]).mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (4, 4)).save(root / "tiny.jpg")
    for split, size in (("train", 413), ("test", 103)):
        for i in range(1, size + 1):
            os.link(root / "tiny.jpg", nested / FOLDERS[split] / f"IDRiD_{i:03d}.jpg")
    records = read_dataset("idrid", root).records
    assert len(records) == 516 and records["image_id"].is_unique
    assert records["native_split"].value_counts().to_dict() == {"train": 413, "test": 103}
    split_of = dict(zip(records["image_path"], records["native_split"]))
    ids = dict(zip(records["image_path"], records["image_id"]))
    # Every published path is one of ours; the test-folder images are test here, whatever the file says.
    assert [split_of[t] for t in tails] == ["test" if t else "train" for t in in_test_folder]
    assert [ids[t].split("/", 1)[1] for t in tails] == reference["image_id"].tolist()
