"""RFMiD 2.0 reader: latin-1 headers with NBSP and trailing comma, `.JPG` files, label rows without images."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.datasets.rfmid_2 import PUBLISHED_COLUMNS
from focus_dagster.errors import DatasetLayoutError
from tests.support.environment import SHARED_REFERENCE, copy_tree, needs_reference

REFERENCE_SPLIT = SHARED_REFERENCE / "published_splits" / "labels_splits_rfmid_2.csv"
CSV = {"train": "Training_set/RFMiD_2_Training_labels.csv", "val": "Validation_set/RFMiD_2_Validation_labels.csv",
       "test": "Test_set/RFMiD_2_Testing_labels.csv"}


@pytest.fixture
def rfmid_2(synth_all, tmp_path):
    out, manifests = synth_all
    return copy_tree(out / "rfmid_2", tmp_path / "rfmid_2"), manifests["rfmid_2"]


def labels(root, split):
    frame = pd.read_csv(root / CSV[split], dtype=str, keep_default_na=False, encoding="latin-1")
    return frame.rename(columns=lambda c: c.replace("\xa0", ""))


def write_labels(root, split, frame):
    """Write back with the publisher's quirks: `ON` + NBSP, a trailing comma, latin-1."""
    frame = frame.loc[:, [c for c in frame.columns if not c.startswith("Unnamed")]].copy()
    frame.columns = [c + "\xa0" if c == "ON" else c for c in frame.columns]
    frame[""] = ""
    (root / CSV[split]).write_bytes(frame.to_csv(index=False).encode("latin-1"))


def test_label_rows_without_images_are_quarantined_as_missing(rfmid_2):
    root, manifest = rfmid_2
    assert manifest.expected_quarantine == {"image_missing": 1}
    quarantine = read_dataset("rfmid_2", root).quarantine
    missing = quarantine.iloc[0]
    assert len(quarantine) == 1 and missing["reason_code"] == "image_missing"
    assert not (root / missing["image_path"]).exists() and "not found" in missing["reason"]


def test_latin1_nbsp_header_and_trailing_column_are_read_as_published(rfmid_2):
    root, _ = rfmid_2
    raw = (root / CSV["train"]).read_bytes()
    header = raw.split(b"\n", 1)[0]
    assert b",ON\xa0," in header and header.endswith(b",") and raw.split(b"\n")[1].endswith(b",")
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    records = read_dataset("rfmid_2", root).records
    assert list(records.columns[6:]) == PUBLISHED_COLUMNS
    assert str(records["ON"].dtype) == "Int64"


def test_a_copy_resaved_as_utf8_reads_the_same(rfmid_2):
    root, _ = rfmid_2
    before = read_dataset("rfmid_2", root).records
    for rel in CSV.values():
        text = (root / rel).read_bytes().decode("latin-1")
        (root / rel).write_bytes(text.encode("utf-8"))
    pd.testing.assert_frame_equal(read_dataset("rfmid_2", root).records, before)


def test_upper_case_jpg_files_are_found_by_their_real_name(rfmid_2):
    root, _ = rfmid_2
    records = read_dataset("rfmid_2", root).records
    upper = records[records["image_path"].str.endswith(".JPG")]
    assert 1 <= len(upper) < len(records)
    for path in upper["image_path"]:
        assert path.rsplit("/", 1)[1] in os.listdir(root / path.rsplit("/", 1)[0])
    lower = records.loc[~records.index.isin(upper.index), "image_path"]
    assert lower.str.endswith(".jpg").all()


def test_ids_are_split_prefixed_even_when_splits_restart_at_one(rfmid_2):
    root, manifest = rfmid_2
    for split in ("val", "test"):
        frame = labels(root, split)
        folder = root / CSV[split].split("/")[0]
        files = {p.stem: p for p in folder.iterdir() if p.suffix.lower() == ".jpg"}
        renumbered = [str(k) for k in range(1, len(frame) + 1)]
        pairs = [(old, new) for old, new in zip(frame["ID"], renumbered) if old in files]
        moves = [(files[old], folder / f"tmp{new}{files[old].suffix}") for old, new in pairs]
        for src, dst in moves:
            src.rename(dst)
        for _, dst in moves:
            dst.rename(folder / dst.name[3:])
        frame["ID"] = renumbered
        write_labels(root, split, frame)
    result = read_dataset("rfmid_2", root)
    records = result.records
    assert records["image_id"].is_unique and len(records) == manifest.expected_kept
    for split in ("train", "val", "test"):
        mine = records[records["native_split"] == split]
        expected = labels(root, split).set_index("ID")["DR"]
        assert (mine["image_id"].str.split("/").str[0] == split).all()
        assert [str(v) for v in mine["DR"]] == expected.loc[[str(i) for i in mine["ID"]]].tolist()
    assert {"val/1", "test/1"} <= set(records["image_id"]) | set(result.quarantine["image_id"])


def test_missing_me_column_names_expected_and_found(rfmid_2):
    root, _ = rfmid_2
    write_labels(root, "val", labels(root, "val").rename(columns={"ME": "M E"}))
    with pytest.raises(DatasetLayoutError) as err:
        read_dataset("rfmid_2", root)
    message = str(err.value)
    assert "['ME']" in message and "'M E'" in message and "RFMiD_2_Validation_labels.csv" in message


def test_unknown_flag_value_is_quarantined(rfmid_2):
    root, manifest = rfmid_2
    frame = labels(root, "test")
    frame.loc[0, "ON"] = "yes"
    write_labels(root, "test", frame)
    result = read_dataset("rfmid_2", root)
    flagged = result.quarantine[result.quarantine["reason_code"] == "unknown_code:ON"]
    assert flagged["image_id"].tolist() == [f"test/{frame.loc[0, 'ID']}"]
    assert result.rows_read == manifest.label_rows


@needs_reference(REFERENCE_SPLIT)
def test_paths_and_extension_case_match_the_published_split_file(tmp_path):
    """Label files listing the published IDs, images named as published (`.jpg` and `.JPG`), read back exactly."""
    reference = pd.read_csv(REFERENCE_SPLIT, dtype=str, keep_default_na=False)
    tails = reference["image_path"].str.split("/RFMiD_2/", n=1).str[1]
    root = tmp_path / "rfmid_2"
    for split, group in reference.groupby("split"):
        frame = pd.DataFrame(0, index=range(len(group)), columns=PUBLISHED_COLUMNS)
        frame["ID"] = group["image_id"].to_numpy()
        (root / CSV[split]).parent.mkdir(parents=True)
        write_labels(root, split, frame)
    from PIL import Image

    Image.new("RGB", (4, 4)).save(root / "tiny.jpg")
    for tail in tails:
        os.link(root / "tiny.jpg", root / tail)
    records = read_dataset("rfmid_2", root).records
    assert len(records) == 854 and int(records["image_path"].str.endswith(".JPG").sum()) == 94
    ours = dict(zip(records["image_path"], records["image_id"]))
    assert [ours[t] for t in tails] == (reference["split"] + "/" + reference["image_id"]).tolist()
