"""JSIEC1000 reader: class folders as labels, `..JPG` names, unknown folders and stray files, bad input."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.datasets.jsiec1000 import CLASS_FOLDERS, image_id_of
from focus_dagster.errors import DatasetLayoutError
from focus_dagster.synthetic import jsiec1000 as writer
from tests.support.environment import SHARED_REFERENCE, copy_tree, require_reference

IMAGES = "1000images"
DR_CLASSES = ("0.0.Normal", "0.3.DR1", "1.0.DR2", "1.1.DR3", "29.1.Blur fundus with suspected PDR")
REFERENCE_SPLIT = SHARED_REFERENCE / "published_splits" / "labels_splits_jsiec1000.csv"


@pytest.fixture
def jsiec(synth_all, tmp_path):
    out, manifests = synth_all
    return copy_tree(out / "jsiec1000", tmp_path / "jsiec1000"), manifests["jsiec1000"]


def any_image(root):
    return next((root / IMAGES).glob("*/*..JPG"))


def test_no_patient_ids_and_no_native_split(jsiec):
    root, _ = jsiec
    records = read_dataset("jsiec1000", root).records
    assert records["patient_id"].isna().all() and records["native_split"].isna().all()


def test_folder_is_the_label_and_double_dot_names_keep_their_dot(jsiec):
    root, _ = jsiec
    records = read_dataset("jsiec1000", root).records
    assert set(records["class_folder"]) <= set(CLASS_FOLDERS)
    # The any-DR / referable-DR classes a look-alike of this size must carry.
    assert set(DR_CLASSES) <= set(records["class_folder"])
    uuid_named = records["image_path"].str.endswith("..JPG")
    assert uuid_named.any() and records.loc[uuid_named, "image_id"].str.fullmatch(r"[0-9a-f-]{36}\.").all()
    assert (records["image_path"] == IMAGES + "/" + records["class_folder"] + "/" + records["image_id"]
            + "." + records["image_path"].str.rsplit(".", n=1).str[1]).all()
    assert (records["class_code"] + "." + records["class_name"] == records["class_folder"]).all()
    dr2 = records[records["class_folder"] == "1.0.DR2"].iloc[0]
    assert (dr2["class_code"], dr2["class_name"]) == ("1.0", "DR2")


def test_source_is_the_folder_and_its_sorted_listing(jsiec):
    root, _ = jsiec
    records = read_dataset("jsiec1000", root).records
    assert (records["source_file"] == IMAGES + "/" + records["class_folder"]).all()
    for folder, group in records.groupby("class_folder"):
        listing = sorted(os.listdir(root / IMAGES / folder))
        names = group["image_path"].str.rsplit("/", n=1).str[1]
        assert [listing[i - 1] for i in group["source_row"]] == names.tolist()


def test_unknown_folder_stray_file_and_loose_image_are_all_counted(jsiec):
    root, manifest = jsiec
    image = any_image(root)
    (root / IMAGES / "40.Unlisted class").mkdir()
    shutil.copy(image, root / IMAGES / "40.Unlisted class" / "other..JPG")
    (root / IMAGES / "0.0.Normal" / "Thumbs.db").write_bytes(b"\x00" * 8)
    shutil.copy(image, root / IMAGES / "loose..JPG")
    (root / IMAGES / "0.0.Normal" / "nested").mkdir()
    shutil.copy(image, root / IMAGES / "0.0.Normal" / "nested" / "deeper..JPG")
    result = read_dataset("jsiec1000", root)
    quarantine = result.quarantine.set_index("image_path")["reason_code"].to_dict()
    assert quarantine == {
        f"{IMAGES}/40.Unlisted class/other..JPG": "unknown_code:class_folder",
        f"{IMAGES}/0.0.Normal/Thumbs.db": "not_an_image",
    }
    assert result.unlisted_images == [f"{IMAGES}/0.0.Normal/nested/deeper..JPG", f"{IMAGES}/loose..JPG"]
    assert result.rows_read == manifest.label_rows + 2


def test_same_file_in_two_class_folders_is_a_conflict(jsiec):
    root, _ = jsiec
    image = next((root / IMAGES / "0.0.Normal").iterdir())
    shutil.copy(image, root / IMAGES / "1.0.DR2" / image.name)
    result = read_dataset("jsiec1000", root)
    conflict = result.quarantine[result.quarantine["image_id"] == image_id_of(image.name)]
    assert conflict["reason_code"].tolist() == ["conflicting_duplicate_id"] * 2
    assert image_id_of(image.name) not in set(result.records["image_id"])


def test_broken_image_is_quarantined(jsiec):
    root, _ = jsiec
    image = any_image(root)
    image.write_bytes(image.read_bytes()[:200])
    quarantine = read_dataset("jsiec1000", root).quarantine
    assert quarantine[["image_id", "reason_code"]].values.tolist() == [[image_id_of(image.name), "image_unreadable"]]


def test_root_may_be_the_image_folder_itself(jsiec):
    root, manifest = jsiec
    records = read_dataset("jsiec1000", root / IMAGES).records
    assert len(records) == manifest.expected_kept
    assert (records["image_path"].str.split("/").str[0] == records["class_folder"]).all()


def test_missing_image_folder_is_a_layout_error(jsiec):
    root, _ = jsiec
    (root / IMAGES).rename(root / "images")
    with pytest.raises(DatasetLayoutError, match=r"no 1000images/ folder .* none of the 39 class folders"):
        read_dataset("jsiec1000", root)


def test_writer_is_deterministic_and_follows_class_counts(tmp_path):
    a = writer.plan(tmp_path / "a", 1000, np.random.default_rng(11), 0.05)
    b = writer.plan(tmp_path / "b", 1000, np.random.default_rng(11), 0.05)
    assert a.jobs == b.jobs
    folders = pd.Series([job.rel_path.split("/")[1] for job in a.jobs]).value_counts().to_dict()
    assert folders == CLASS_FOLDERS
    grade = {job.rel_path.split("/")[1]: job.spec.dr_grade for job in a.jobs}
    assert [grade[f] for f in DR_CLASSES] == [0, 1, 2, 3, 4]
    laser = [job for job in a.jobs if "/27.Laser Spots/" in job.rel_path]
    assert all(job.spec.extra == ("laser_spots",) for job in laser)
    small = writer.class_counts(24)
    assert small.sum() == 24 and small[writer.FOLDERS.index("0.3.DR1")] >= 2


def test_class_folders_and_image_ids_match_the_published_split_file(tmp_path):
    require_reference(REFERENCE_SPLIT)
    split = pd.read_csv(REFERENCE_SPLIT, dtype=str, keep_default_na=False)
    tails = split["image_path"].str.split("/JSIEC1000/", n=1).str[1]
    folders = tails.str.split("/").str[1]
    assert folders.value_counts().to_dict() == CLASS_FOLDERS
    root = tmp_path / "root"
    for folder in CLASS_FOLDERS:
        (root / IMAGES / folder).mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (4, 4)).save(tmp_path / "tiny.jpg")
    for tail in tails:
        os.link(tmp_path / "tiny.jpg", root / tail)
    records = read_dataset("jsiec1000", root, image_check="none").records
    by_path = records.set_index("image_path")["image_id"]
    assert by_path.loc[tails.tolist()].tolist() == split["image_id"].tolist()
    # The benchmark's any-DR positives are exactly DR1, DR2, DR3 and blur with suspected PDR (151 images).
    positives = set(folders[split["Task_DR_Binary"] == "1"])
    assert positives == {"0.3.DR1", "1.0.DR2", "1.1.DR3", "29.1.Blur fundus with suspected PDR"}
