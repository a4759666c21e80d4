"""mBRSET reader: smartphone layout, its own sex coding, blank grades, path escapes, the real label file."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.errors import DatasetLayoutError
from tests.support.environment import SHARED_REFERENCE, copy_tree, link_stand_in_images, needs_reference


@pytest.fixture
def mbrset(synth_all, tmp_path):
    out, manifests = synth_all
    return copy_tree(out / "mbrset", tmp_path / "mbrset"), manifests["mbrset"]


def labels(root):
    return pd.read_csv(root / "labels_mbrset.csv", dtype=str, keep_default_na=False)


def test_standard_columns_come_from_file_and_patient(mbrset):
    root, _ = mbrset
    records = read_dataset("mbrset", root).records
    assert records["image_id"].str.fullmatch(r"\d+\.[1-4]").all()
    assert (records["image_path"] == "images/" + records["file"]).all()
    assert (records["patient_id"] == records["patient"]).all()
    assert records["native_split"].isna().all()


def test_blank_grade_and_edema_become_null_not_negative(mbrset):
    root, _ = mbrset
    frame = labels(root)
    frame.loc[0, "final_icdr"] = ""
    frame.loc[1, "final_edema"] = ""
    frame.to_csv(root / "labels_mbrset.csv", index=False)
    records = read_dataset("mbrset", root).records.set_index("file")
    assert pd.isna(records.loc[frame.loc[0, "file"], "final_icdr"])
    assert pd.isna(records.loc[frame.loc[1, "file"], "final_edema"])
    assert str(records["final_icdr"].dtype) == "Int64"


def test_sex_uses_the_datasets_own_codes(mbrset):
    root, manifest = mbrset
    frame = labels(root)
    frame.loc[0, "sex"] = "2"  # BRSET's code for female is not an mBRSET code
    frame.to_csv(root / "labels_mbrset.csv", index=False)
    result = read_dataset("mbrset", root)
    [reason] = result.quarantine["reason"]
    assert "sex value '2'" in reason and "0..1" in reason
    assert set(result.records["sex"]) <= {0, 1}


def test_file_names_that_leave_the_root_are_quarantined(mbrset):
    root, manifest = mbrset
    frame = labels(root)
    frame.loc[0, "file"] = "../../outside.jpg"
    frame.loc[1, "file"] = "/etc/passwd"
    frame.to_csv(root / "labels_mbrset.csv", index=False)
    (root.parent / "outside.jpg").write_bytes((root / "images" / labels(root).loc[2, "file"]).read_bytes())
    result = read_dataset("mbrset", root)
    assert result.quarantine["reason_code"].tolist() == ["path_escapes_root"] * 2
    assert "not a plain file name" in result.quarantine["reason"].iloc[0]
    assert result.rows_read == manifest.label_rows


def test_missing_image_folder_is_a_layout_error(mbrset):
    root, _ = mbrset
    shutil.rmtree(root / "images")
    with pytest.raises(DatasetLayoutError, match="image folder"):
        read_dataset("mbrset", root)


@needs_reference(SHARED_REFERENCE / "mbrset_labels.csv")
def test_real_public_label_file_reads_every_row(tmp_path):
    root = tmp_path / "mbrset"
    root.mkdir()
    shutil.copy(SHARED_REFERENCE / "mbrset_labels.csv", root / "labels_mbrset.csv")
    link_stand_in_images(root, "images/" + labels(root)["file"])
    result = read_dataset("mbrset", root)
    records = result.records
    assert (result.rows_read, len(records)) == (5164, 5164)
    assert records["patient_id"].nunique() == 1291
    assert records["final_icdr"].isna().sum() == 280
    assert records["final_icdr"].value_counts().sort_index().tolist() == [3750, 272, 568, 82, 212]
    assert (records["sex"] == 1).sum() == 1804
    assert (records["final_quality"] == "no").sum() == 292
