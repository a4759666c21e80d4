"""BRSET reader: published layout, quirks, bad input, and the real public label file."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.errors import DatasetLayoutError, EmptyDatasetError, LabelFileError
from tests.support.environment import SHARED_REFERENCE, copy_tree, link_stand_in_images, needs_reference


@pytest.fixture
def brset(synth_all, tmp_path):
    out, manifests = synth_all
    return copy_tree(out / "brset", tmp_path / "brset"), manifests["brset"]


def rewrite(path, transform):
    text = path.read_text(encoding="utf-8-sig")
    path.write_text(transform(text), encoding="utf-8")


def test_bom_codes_and_na_age_are_read_as_published(brset):
    root, _ = brset
    assert (root / "labels.csv").read_bytes().startswith(b"\xef\xbb\xbf")
    records = read_dataset("brset", root).records
    assert "image_id" in records and "\ufeffimage_id" not in records
    assert set(records["patient_sex"].dropna()) <= {1, 2}
    assert str(records["DR_ICDR"].dtype) == "Int64"
    na_age = pd.read_csv(root / "labels.csv", dtype=str, keep_default_na=False, encoding="utf-8-sig")["patient_age"] == "NA"
    assert records["patient_age"].isna().sum() == na_age.sum()
    assert records["image_path"].str.fullmatch(r"fundus_photos/img\d{5}\.jpg").all()


def test_alternative_file_and_folder_names(brset):
    root, manifest = brset
    (root / "labels.csv").rename(root / "labels_brset.csv")
    (root / "fundus_photos").rename(root / "images")
    result = read_dataset("brset", root)
    assert len(result.records) == manifest.label_rows
    assert result.records["image_path"].str.startswith("images/").all()


def test_missing_label_file_names_what_was_looked_for(brset):
    root, _ = brset
    (root / "labels.csv").unlink()
    with pytest.raises(DatasetLayoutError, match=r"labels\.csv.*labels_brset\.csv"):
        read_dataset("brset", root)


def test_missing_column_names_expected_and_found(brset):
    root, _ = brset
    rewrite(root / "labels.csv", lambda t: t.replace("DR_ICDR", "DR_ICDR_grade", 1))
    with pytest.raises(DatasetLayoutError) as err:
        read_dataset("brset", root)
    message = str(err.value)
    assert "['DR_ICDR']" in message and "DR_ICDR_grade" in message and "labels.csv" in message


def test_extra_unknown_columns_are_kept(brset):
    root, _ = brset
    lines = (root / "labels.csv").read_text(encoding="utf-8-sig").splitlines()
    lines = [lines[0] + ",site_note"] + [line + ",x" for line in lines[1:]]
    (root / "labels.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    records = read_dataset("brset", root).records
    assert (records["site_note"] == "x").all()


def test_listed_but_absent_image_is_quarantined_and_unlisted_image_reported(brset):
    root, manifest = brset
    (root / "fundus_photos" / "img00003.jpg").unlink()
    shutil.copy(root / "fundus_photos" / "img00001.jpg", root / "fundus_photos" / "stray.jpg")
    result = read_dataset("brset", root)
    assert result.quarantine[["image_id", "reason_code"]].values.tolist() == [["img00003", "image_missing"]]
    assert result.unlisted_images == ["fundus_photos/stray.jpg"]
    assert result.rows_read == manifest.label_rows


def test_truncated_and_non_image_files_are_quarantined(brset):
    root, _ = brset
    photo = root / "fundus_photos" / "img00002.jpg"
    photo.write_bytes(photo.read_bytes()[: photo.stat().st_size // 2])
    (root / "fundus_photos" / "img00004.jpg").write_text("<html>not found</html>")
    quarantine = read_dataset("brset", root).quarantine.set_index("image_id")
    assert quarantine.loc["img00002", "reason_code"] == "image_unreadable"
    assert "decoded" in quarantine.loc["img00002", "reason"]
    assert "not an image" in quarantine.loc["img00004", "reason"]


def test_unknown_code_value_is_quarantined_with_column_and_value(brset):
    root, manifest = brset
    frame = pd.read_csv(root / "labels.csv", dtype=str, keep_default_na=False, encoding="utf-8-sig")
    frame.loc[0, "DR_ICDR"] = "7"
    frame.loc[1, "patient_sex"] = "F"
    frame.to_csv(root / "labels.csv", index=False)
    result = read_dataset("brset", root)
    reasons = dict(zip(result.quarantine["image_id"], result.quarantine["reason"]))
    assert "DR_ICDR value '7'" in reasons["img00001"] and "0..4" in reasons["img00001"]
    assert "patient_sex value 'F'" in reasons["img00002"]
    assert len(result.records) == manifest.label_rows - 2


def test_duplicate_ids_identical_kept_once_conflicting_quarantined(brset):
    root, manifest = brset
    frame = pd.read_csv(root / "labels.csv", dtype=str, keep_default_na=False, encoding="utf-8-sig")
    conflicting = frame.iloc[[1]].assign(DR_ICDR="4")
    frame = pd.concat([frame, frame.iloc[[0]], conflicting], ignore_index=True)
    frame.to_csv(root / "labels.csv", index=False)
    result = read_dataset("brset", root)
    codes = result.quarantine.groupby("image_id")["reason_code"].apply(list).to_dict()
    assert codes == {"img00001": ["duplicate_row"], "img00002": ["conflicting_duplicate_id", "conflicting_duplicate_id"]}
    assert result.rows_read == manifest.label_rows + 2
    assert result.records["image_id"].is_unique


def test_empty_dataset_is_an_error(brset):
    root, _ = brset
    rewrite(root / "labels.csv", lambda t: t.splitlines()[0] + "\n")
    with pytest.raises(EmptyDatasetError, match="no records"):
        read_dataset("brset", root)


def test_unexpected_encoding_is_named(brset):
    root, _ = brset
    text = (root / "labels.csv").read_text(encoding="utf-8-sig")
    (root / "labels.csv").write_bytes(text.encode("utf-16"))
    with pytest.raises(LabelFileError, match="UTF-16"):
        read_dataset("brset", root)
    (root / "labels.csv").write_bytes(text.replace("Brazil", "Brasil\xe9").encode("latin-1"))
    with pytest.raises(LabelFileError, match=r"not valid utf-8-sig: byte 0xe9"):
        read_dataset("brset", root)


@needs_reference(SHARED_REFERENCE / "brset_labels.csv")
def test_real_public_label_file_reads_every_row(tmp_path):
    """The published labels.csv (16,266 rows) reads completely, with the codes of datasets.md."""
    root = tmp_path / "brset"
    root.mkdir()
    shutil.copy(SHARED_REFERENCE / "brset_labels.csv", root / "labels.csv")
    frame = pd.read_csv(root / "labels.csv", dtype=str, keep_default_na=False, encoding="utf-8-sig")
    link_stand_in_images(root, "fundus_photos/" + frame["image_id"] + ".jpg")
    result = read_dataset("brset", root)
    records = result.records
    assert (result.rows_read, len(records)) == (16266, 16266)
    assert records["patient_id"].nunique() == 8524
    diabetic = records[records["diabetes"] == "yes"]
    assert len(diabetic) == 2579
    assert diabetic["DR_ICDR"].value_counts().sort_index().tolist() == [1922, 107, 181, 127, 242]
    assert int(diabetic["macular_edema"].sum()) == 275
    assert int(diabetic["increased_cup_disc"].sum()) == 508
    assert int((diabetic["patient_sex"] == 1).sum()) == 1011
    assert int((diabetic["quality"] == "Inadequate").sum()) == 201
    assert records["patient_age"].isna().sum() == 5445
