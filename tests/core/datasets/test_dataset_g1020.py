"""G1020 reader: `G1020/G1020.csv` with file-name or stem ids, LabelMe files beside images, bad input."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.errors import DatasetLayoutError
from focus_dagster.synthetic import g1020 as writer
from tests.support.environment import SHARED_REFERENCE, copy_tree, needs_reference

LABELS = "G1020/G1020.csv"
REFERENCE_SPLIT = SHARED_REFERENCE / "published_splits" / "labels_splits_g1020.csv"


@pytest.fixture
def g1020(synth_all, tmp_path):
    out, manifests = synth_all
    return copy_tree(out / "g1020", tmp_path / "g1020"), manifests["g1020"]


def labels(root) -> pd.DataFrame:
    return pd.read_csv(root / LABELS, dtype=str, keep_default_na=False)


def save(root, frame: pd.DataFrame) -> None:
    frame.to_csv(root / LABELS, index=False)


def test_image_ids_are_file_stems_and_labels_binary(g1020):
    root, _ = g1020
    records = read_dataset("g1020", root).records
    assert records["image_id"].str.fullmatch(r"image_\d+").all()
    assert (records["image_path"] == "G1020/Images/" + records["image_id"] + ".jpg").all()
    assert records["patient_id"].isna().all()
    assert str(records["binaryLabels"].dtype) == "Int64" and set(records["binaryLabels"]) == {0, 1}


def test_labelme_disc_and_cup_polygons_lie_beside_each_image(g1020):
    root, _ = g1020
    from PIL import Image

    for image_path in read_dataset("g1020", root).records["image_path"]:
        document = json.loads((root / image_path).with_suffix(".json").read_text())
        with Image.open(root / image_path) as image:
            assert (document["imageWidth"], document["imageHeight"]) == image.size
        assert document["imagePath"] == image_path.rsplit("/", 1)[1]
        shapes = {s["label"]: np.array(s["points"]) for s in document["shapes"]}
        assert set(shapes) == {"disc", "cup"}
        assert all(s["shape_type"] == "polygon" for s in document["shapes"])
        disc, cup = shapes["disc"], shapes["cup"]
        assert (disc >= 0).all() and (disc[:, 0] <= image.size[0]).all() and (disc[:, 1] <= image.size[1]).all()
        # The cup sits inside the disc's bounding box and is smaller.
        assert (cup.min(axis=0) >= disc.min(axis=0) - 0.2).all() and (cup.max(axis=0) <= disc.max(axis=0) + 0.2).all()
        assert np.ptp(cup[:, 1]) < np.ptp(disc[:, 1])


def test_glaucoma_images_have_larger_annotated_cups(g1020):
    root, _ = g1020
    records = read_dataset("g1020", root).records

    def vertical_cdr(image_path):
        shapes = json.loads((root / image_path).with_suffix(".json").read_text())["shapes"]
        heights = {s["label"]: np.ptp(np.array(s["points"])[:, 1]) for s in shapes}
        return heights["cup"] / heights["disc"]

    cdr = records["image_path"].map(vertical_cdr)
    assert cdr[records["binaryLabels"] == 1].min() > cdr[records["binaryLabels"] == 0].max()


def test_image_ids_given_without_extension_are_accepted(g1020):
    root, manifest = g1020
    before = read_dataset("g1020", root).records
    raw = labels(root)
    raw["imageID"] = raw["imageID"].str.removesuffix(".jpg")
    save(root, raw)
    after = read_dataset("g1020", root).records
    assert after["image_id"].tolist() == before["image_id"].tolist()
    assert after["image_path"].tolist() == before["image_path"].tolist()
    assert len(after) == manifest.expected_kept


def test_root_may_be_the_g1020_folder_itself(g1020):
    root, manifest = g1020
    records = read_dataset("g1020", root / "G1020").records
    assert len(records) == manifest.expected_kept
    assert records["image_path"].str.startswith("Images/image_").all()
    assert records["source_file"].unique().tolist() == ["G1020.csv"]


def test_bad_rows_are_quarantined(g1020):
    root, manifest = g1020
    raw = labels(root)
    raw.loc[0, "binaryLabels"] = "2"
    raw.loc[1, "imageID"] = "../Images/" + raw.loc[2, "imageID"]
    raw.loc[3, "binaryLabels"] = "glaucoma"
    save(root, raw)
    result = read_dataset("g1020", root)
    codes = result.quarantine.set_index("source_row")["reason_code"].to_dict()
    assert codes == {1: "unknown_code:binaryLabels", 2: "path_escapes_root", 4: "unknown_code:binaryLabels"}
    assert result.rows_read == manifest.label_rows
    assert len(result.unlisted_images) == 1


def test_missing_column_file_or_folder_is_a_layout_error(g1020):
    root, _ = g1020
    save(root, labels(root).rename(columns={"binaryLabels": "label"}))
    with pytest.raises(DatasetLayoutError, match=r"\['binaryLabels'\]"):
        read_dataset("g1020", root)
    shutil.rmtree(root / "G1020" / "Images")
    with pytest.raises(DatasetLayoutError, match=r"image folder .*G1020/Images is missing"):
        read_dataset("g1020", root)
    (root / LABELS).unlink()
    with pytest.raises(DatasetLayoutError, match=r"G1020/G1020\.csv.*G1020\.csv"):
        read_dataset("g1020", root)


def test_writer_is_deterministic_with_real_prevalence(tmp_path):
    a = writer.plan(tmp_path / "a", 200, np.random.default_rng(5), 0.05)
    b = writer.plan(tmp_path / "b", 200, np.random.default_rng(5), 0.05)
    assert a.jobs == b.jobs
    assert (tmp_path / "a" / LABELS).read_bytes() == (tmp_path / "b" / LABELS).read_bytes()
    raw = labels(tmp_path / "a")
    assert (raw["binaryLabels"] == "1").sum() == round(200 * 296 / 1020)
    numbers = raw["imageID"].str.extract(r"image_(\d+)\.jpg")[0].astype(int)
    assert numbers.is_monotonic_increasing and numbers.max() > 200  # numbered with gaps, as published


@needs_reference(REFERENCE_SPLIT)
def test_image_ids_match_the_published_split_file(tmp_path):
    """On the published layout, the reader gives the split file's ids; its labels are 724 / 296."""
    split = pd.read_csv(REFERENCE_SPLIT, dtype=str, keep_default_na=False)
    tails = split["image_path"].str.split("/datasets/G1020/", n=1).str[1]
    assert tails.str.fullmatch(r"G1020/Images/image_\d+\.jpg").all()
    root = tmp_path / "root"
    (root / "G1020" / "Images").mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (4, 4)).save(tmp_path / "tiny.jpg")
    for tail in tails:
        os.link(tmp_path / "tiny.jpg", root / tail)
    names = tails.str.rsplit("/", n=1).str[1]
    pd.DataFrame({"imageID": names, "binaryLabels": split["Task_Glaucoma"]}).to_csv(root / LABELS, index=False)
    records = read_dataset("g1020", root, image_check="none").records
    assert records["image_id"].tolist() == split["image_id"].tolist()
    assert records["image_path"].tolist() == tails.tolist()
    assert records["binaryLabels"].value_counts().sort_index().tolist() == [724, 296]
