"""REFUGE reader: per-split index.json (object or list), unlabelled test split, cameras, bad input."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.errors import DatasetLayoutError, LabelFileError
from focus_dagster.synthetic import refuge as writer
from tests.support.environment import SHARED_REFERENCE, copy_tree, needs_reference

REFERENCE_SPLIT = SHARED_REFERENCE / "published_splits" / "labels_splits_refuge.csv"


@pytest.fixture
def refuge(synth_all, tmp_path):
    out, manifests = synth_all
    return copy_tree(out / "refuge", tmp_path / "refuge"), manifests["refuge"]


def index_of(root, split):
    return root / "REFUGE" / split / "index.json"


def load(root, split) -> dict:
    return json.loads(index_of(root, split).read_text())


def dump(root, split, data) -> None:
    index_of(root, split).write_text(json.dumps(data))


def test_label_files_are_the_split_indexes(refuge):
    root, _ = refuge
    assert read_dataset("refuge", root).label_files == [f"REFUGE/{s}/index.json" for s in ("train", "val", "test")]


def test_splits_names_cameras_and_unlabelled_test(refuge):
    root, _ = refuge
    records = read_dataset("refuge", root).records.set_index("image_id")
    by_split = records.groupby("native_split")
    assert set(by_split.groups) == {"train", "val", "test"} and by_split.size().min() >= 2
    assert records.index.str.fullmatch(r"[gn]\d{4}|V\d{4}|T\d{4}").all()
    assert (records["image_path"] == "REFUGE/" + records["native_split"] + "/Images/" + records.index + ".jpg").all()
    assert by_split["camera"].unique().map(list).to_dict() == {
        "train": ["Zeiss Visucam 500"], "val": ["Canon CR-2"], "test": ["Canon CR-2"]
    }
    test = records[records["native_split"] == "test"]
    assert test["Label"].isna().all() and test["Fovea_X"].isna().all()
    labelled = records[records["native_split"] != "test"]
    assert str(labelled["Label"].dtype) == "Int64" and labelled["Label"].notna().all()
    # Train glaucoma images are the g-names, and both classes are present in train and val.
    train = labelled[labelled["native_split"] == "train"]
    assert ((train["Label"] == 1) == train.index.str.startswith("g")).all()
    assert labelled.groupby("native_split")["Label"].nunique().tolist() == [2, 2]
    assert records["patient_id"].isna().all()


def test_fovea_and_size_fields_are_typed_and_inside_the_image(refuge):
    root, _ = refuge
    records = read_dataset("refuge", root).records
    labelled = records[records["native_split"] != "test"]
    assert str(labelled["Fovea_X"].dtype) == "Float64"
    assert ((labelled["Fovea_X"] > 0) & (labelled["Fovea_X"] < labelled["Size_X"])).all()
    assert ((labelled["Fovea_Y"] > 0) & (labelled["Fovea_Y"] < labelled["Size_Y"])).all()


def test_index_as_a_json_list_reads_the_same(refuge):
    root, _ = refuge
    before = read_dataset("refuge", root).records
    for split in ("train", "val", "test"):
        dump(root, split, list(load(root, split).values()))
    after = read_dataset("refuge", root).records
    pd.testing.assert_frame_equal(before, after)


def test_root_may_be_the_refuge_folder_itself_and_images_lower_case(refuge):
    root, manifest = refuge
    inner = root / "REFUGE"
    (inner / "val" / "Images").rename(inner / "val" / "images")
    records = read_dataset("refuge", inner).records
    assert len(records) == manifest.expected_kept
    assert records["image_path"].str.match(r"(train/Images|val/images|test/Images)/").all()


def test_missing_test_split_is_allowed_missing_val_is_not(refuge):
    root, _ = refuge
    shutil.rmtree(root / "REFUGE" / "test")
    records = read_dataset("refuge", root).records
    assert set(records["native_split"]) == {"train", "val"}
    shutil.rmtree(root / "REFUGE" / "val")
    with pytest.raises(DatasetLayoutError, match=r"split folder .*val is missing"):
        read_dataset("refuge", root)


def test_official_spreadsheet_layout_is_refused_clearly(refuge):
    root, _ = refuge
    index_of(root, "val").unlink()
    (root / "REFUGE" / "val" / "Glaucoma_label_and_Fovea_Location.xlsx").write_bytes(b"PK\x03\x04")
    with pytest.raises(DatasetLayoutError, match=r"Glaucoma_label_and_Fovea_Location\.xlsx.*not supported yet"):
        read_dataset("refuge", root)
    (root / "REFUGE" / "val" / "Glaucoma_label_and_Fovea_Location.xlsx").unlink()
    with pytest.raises(DatasetLayoutError, match=r"val/index\.json is missing"):
        read_dataset("refuge", root)


def test_labelled_split_without_label_field_is_a_layout_error(refuge):
    root, _ = refuge
    data = load(root, "train")
    for record in data.values():
        record.pop("Label")
    dump(root, "train", data)
    with pytest.raises(DatasetLayoutError, match=r"train/index\.json lacks required column\(s\) \['Label'\]"):
        read_dataset("refuge", root)


def test_unknown_label_escaping_name_and_broken_json(refuge):
    root, manifest = refuge
    data = load(root, "val")
    replaced = data["1"]["ImgName"]
    data["0"]["Label"] = 2
    data["1"]["ImgName"] = "../../train/Images/g0001.jpg"  # exists, but is not this split's image
    data["2"]["Label"] = None  # a labelled split may still leave one image unlabelled: null, kept
    dump(root, "val", data)
    result = read_dataset("refuge", root)
    codes = result.quarantine.set_index("source_row")["reason_code"].to_dict()
    assert codes == {1: "unknown_code:Label", 2: "path_escapes_root"}
    assert result.rows_read == manifest.label_rows
    assert result.unlisted_images == [f"REFUGE/val/Images/{replaced}"]
    kept = result.records.set_index("ImgName")
    assert pd.isna(kept.loc[data["2"]["ImgName"], "Label"])
    index_of(root, "val").write_text('{"0": {"ImgName": "V0001.jpg",')
    with pytest.raises(LabelFileError, match="not readable JSON"):
        read_dataset("refuge", root)
    dump(root, "val", ["V0001.jpg"])
    with pytest.raises(LabelFileError, match="record 1 is a str"):
        read_dataset("refuge", root)


def test_writer_is_deterministic_and_splits_evenly(tmp_path):
    a = writer.plan(tmp_path / "a", 60, np.random.default_rng(3), 0.05)
    b = writer.plan(tmp_path / "b", 60, np.random.default_rng(3), 0.05)
    assert a.jobs == b.jobs
    assert index_of(tmp_path / "a", "val").read_bytes() == index_of(tmp_path / "b", "val").read_bytes()
    splits = pd.Series([job.rel_path.split("/")[1] for job in a.jobs]).value_counts().to_dict()
    assert splits == {"train": 20, "val": 20, "test": 20}
    assert [job.spec.camera.name for job in a.jobs[:1] + a.jobs[-1:]] == ["zeiss_visucam500", "canon_cr2"]
    labels = [r["Label"] for r in load(tmp_path / "a", "train").values()]
    assert labels == [1, 1] + [0] * 18


@needs_reference(REFERENCE_SPLIT)
def test_image_ids_match_the_published_split_file(tmp_path):
    """On the mirror layout of the benchmark authors' disk, the reader gives their image ids and labels."""
    split = pd.read_csv(REFERENCE_SPLIT, dtype=str, keep_default_na=False)
    tails = split["image_path"].str.split("/G1020/", n=1).str[1]
    assert tails.str.match(r"REFUGE/(train|val)/Images/").all()
    from PIL import Image

    Image.new("RGB", (4, 4)).save(tmp_path / "tiny.jpg")
    root = tmp_path / "root"
    for part in ("train", "val"):
        (root / "REFUGE" / part / "Images").mkdir(parents=True)
        rows = split[tails.str.startswith(f"REFUGE/{part}/")]
        records = {
            str(k): {"ImgName": f"{image_id}.jpg", "Label": int(label)}
            for k, (image_id, label) in enumerate(zip(rows["image_id"], rows["Task_Glaucoma"]))
        }
        (root / "REFUGE" / part / "index.json").write_text(json.dumps(records))
    for tail in tails:
        os.link(tmp_path / "tiny.jpg", root / tail)
    records = read_dataset("refuge", root, image_check="none").records
    assert records["image_path"].tolist() == tails.tolist()
    assert records["image_id"].tolist() == split["image_id"].tolist()
    # datasets.md: 400 + 400, 40 glaucoma in each; the train glaucoma images are exactly g0001..g0040.
    counts = records.groupby("native_split")["Label"].agg(["size", "sum"]).to_dict("list")
    assert counts == {"size": [400, 400], "sum": [40, 40]}
    train = records[records["native_split"] == "train"]
    assert sorted(train.loc[train["Label"] == 1, "image_id"]) == [f"g{i:04d}" for i in range(1, 41)]
