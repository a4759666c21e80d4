"""PAPILA reader: two-row-header workbooks, one record per (patient, eye), bad input, the published split file."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd
import pytest
from openpyxl import load_workbook

from focus_dagster.datasets import read_dataset
from focus_dagster.datasets.papila import (
    EYE_FILES,
    GENDER,
    PUBLISHED_COLUMNS,
    PUBLISHED_HEADER,
)
from focus_dagster.errors import DatasetLayoutError, LabelFileError
from focus_dagster.synthetic import papila as papila_writer
from focus_dagster.synthetic.papila import write_clinical_workbook
from tests.support.environment import SHARED_REFERENCE, copy_tree, needs_reference

REFERENCE_SPLIT = SHARED_REFERENCE / "published_splits" / "labels_splits_papila.csv"
RELEASE_FOLDER = "PapilaDB-PAPILA-17f8fa7746adb20275b5b6a0d99dc9dfe3007e9f"


@pytest.fixture
def papila(synth_all, tmp_path):
    out, manifests = synth_all
    return copy_tree(out / "papila", tmp_path / "papila"), manifests["papila"]


def edit_sheet(path, edit):
    """Open a clinical workbook, let `edit(sheet)` change it, save it back."""
    workbook = load_workbook(path)
    edit(workbook.worksheets[0])
    workbook.save(path)


def test_label_files_are_the_two_eye_workbooks(papila):
    root, _ = papila
    assert read_dataset("papila", root).label_files == [EYE_FILES["OD"], EYE_FILES["OS"]]


def test_two_header_rows_are_flattened_to_published_names(papila):
    root, _ = papila
    sheet = load_workbook(root / EYE_FILES["OD"]).worksheets[0]
    rows = list(sheet.iter_rows(min_row=1, max_row=3, values_only=True))
    assert [v or "" for v in rows[0]] == [group for group, _ in PUBLISHED_HEADER]
    assert [v or "" for v in rows[1]] == [sub for _, sub in PUBLISHED_HEADER]
    assert str(rows[2][0]).startswith("#")
    assert {str(r) for r in sheet.merged_cells.ranges} >= {"E1:G1", "I1:J1", "A1:A2"}
    records = read_dataset("papila", root).records
    assert list(records.columns[6:]) == PUBLISHED_COLUMNS + ["eye"]


def test_one_record_per_patient_and_eye_with_published_codes(papila):
    root, manifest = papila
    records = read_dataset("papila", root).records
    assert records.groupby("patient_id")["eye"].apply(lambda eyes: sorted(eyes) == ["OD", "OS"]).all()
    assert records["patient_id"].nunique() == manifest.label_rows // 2
    expected_id = "RET" + records["patient_id"].str.zfill(3) + records["eye"]
    assert (records["image_id"] == expected_id).all()
    assert (records["ID"] == "#" + records["patient_id"].str.zfill(3)).all()
    assert not records["patient_id"].str.startswith(("0", "#")).any()
    assert (records["image_path"] == "FundusImages/" + records["image_id"] + ".jpg").all()
    assert set(records["Gender"]) <= {0, 1} and set(records["Diagnosis"]) <= {0, 1, 2}
    assert GENDER == {0: "male", 1: "female"}  # the publisher's coding, swapped by the reference benchmark
    assert 0 < int((records["Diagnosis"] > 0).sum()) < len(records)
    # Values come from the row of their own eye's workbook, not the other eye's.
    raw = pd.read_excel(root / EYE_FILES["OS"], header=None, skiprows=2)
    left = records[records["eye"] == "OS"].reset_index(drop=True)
    assert left["Diagnosis"].tolist() == raw[3].astype(int).tolist()
    assert left["source_row"].tolist() == list(range(1, len(raw) + 1))
    assert str(left["IOP_Pneumatic"].dtype) == "Float64" and str(left["Diagnosis"].dtype) == "Int64"


def test_extra_header_row_and_release_top_folder_are_tolerated(papila):
    root, manifest = papila
    before = read_dataset("papila", root).records
    for rel in EYE_FILES.values():
        def split_id_header(sheet):
            for merged in list(sheet.merged_cells.ranges):
                sheet.unmerge_cells(str(merged))
            sheet.insert_rows(2)
            sheet["A1"], sheet["A2"] = None, "ID"
        edit_sheet(root / rel, split_id_header)
    nested = root / RELEASE_FOLDER
    nested.mkdir()
    for name in ("ClinicalData", "FundusImages", "ExpertsSegmentations"):
        shutil.move(root / name, nested / name)
    after = read_dataset("papila", root).records
    assert (after["image_path"] == RELEASE_FOLDER + "/" + before["image_path"]).all()
    pd.testing.assert_frame_equal(
        after.drop(columns=["image_path", "source_file"]), before.drop(columns=["image_path", "source_file"])
    )


def test_contour_files_are_annotations_named_after_images(papila):
    root, _ = papila
    contours = sorted((root / "ExpertsSegmentations" / "Contours").glob("*.txt"))
    assert contours, "the look-alike writes expert contours"
    images = {p.stem for p in (root / "FundusImages").iterdir()}
    for path in contours:
        patient, eye, part, expert = path.stem.split("_")  # RET002_OD_disc_exp1 (datasets.md)
        assert patient + eye in images and part in {"disc", "cup"} and expert in {"exp1", "exp2"}
        points = np.loadtxt(path)
        assert points.ndim == 2 and points.shape[1] == 2
    assert read_dataset("papila", root).unlisted_images == []


def test_missing_left_eye_workbook_is_a_layout_error(papila):
    root, _ = papila
    (root / EYE_FILES["OS"]).unlink()
    with pytest.raises(DatasetLayoutError, match="patient_data_os.xlsx"):
        read_dataset("papila", root)


def test_missing_diagnosis_column_names_expected_and_found(papila):
    root, _ = papila
    edit_sheet(root / EYE_FILES["OD"], lambda sheet: sheet.cell(row=1, column=4, value="Dx"))
    with pytest.raises(DatasetLayoutError) as err:
        read_dataset("papila", root)
    message = str(err.value)
    assert "['Diagnosis']" in message and "'Dx'" in message and "patient_data_od.xlsx" in message


def test_unknown_gender_and_unreadable_id_are_quarantined(papila):
    root, manifest = papila
    edit_sheet(root / EYE_FILES["OD"], lambda sheet: sheet.cell(row=3, column=3, value=2))
    edit_sheet(root / EYE_FILES["OS"], lambda sheet: sheet.cell(row=4, column=1, value="patient x"))
    result = read_dataset("papila", root)
    quarantine = result.quarantine.set_index(["source_file", "source_row"])
    gender = quarantine.loc[(EYE_FILES["OD"], 1)]
    assert gender["reason_code"] == "unknown_code:Gender" and "'2'" in gender["reason"]
    bad_id = quarantine.loc[(EYE_FILES["OS"], 2)]
    assert bad_id["reason_code"] == "unknown_code:ID" and "patient x" in bad_id["reason"]
    assert result.rows_read == manifest.label_rows and len(result.records) == manifest.label_rows - 2


def test_a_file_that_is_not_a_workbook_is_named(papila):
    root, _ = papila
    (root / EYE_FILES["OD"]).write_text("ID,Age\n#002,50\n")
    with pytest.raises(LabelFileError, match=r"patient_data_od\.xlsx is not a readable \.xlsx"):
        read_dataset("papila", root)


def test_a_sheet_without_patient_ids_is_a_layout_error(papila):
    root, _ = papila
    edit_sheet(root / EYE_FILES["OS"], lambda sheet: sheet.delete_rows(3, sheet.max_row))
    with pytest.raises(DatasetLayoutError, match="patient ID like '#002'"):
        read_dataset("papila", root)


def test_workbooks_are_byte_for_byte_reproducible(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    papila_writer.plan(first, 12, np.random.default_rng(3), 0.05)
    papila_writer.plan(second, 12, np.random.default_rng(3), 0.05)
    for rel in EYE_FILES.values():
        assert (first / rel).read_bytes() == (second / rel).read_bytes()


@needs_reference(REFERENCE_SPLIT)
def test_image_ids_and_paths_match_the_published_split_file(tmp_path):
    """Workbooks listing the published patients give exactly the published image ids and path tails."""
    reference = pd.read_csv(REFERENCE_SPLIT, dtype=str, keep_default_na=False)
    tails = reference["image_path"].str.split("/PAPILA/", n=1).str[1]
    root = tmp_path / "papila"
    eye_of = reference["image_id"].str[-2:]
    number = reference["image_id"].str[3:6].astype(int)
    for eye, rel in EYE_FILES.items():
        rows = pd.DataFrame({c: None for c in PUBLISHED_COLUMNS}, index=range((eye_of == eye).sum()))
        rows["ID"] = [f"#{k:03d}" for k in sorted(number[eye_of == eye])]
        rows[["Age", "Gender", "Diagnosis"]] = [60, 0, 0]
        write_clinical_workbook(root / RELEASE_FOLDER / rel, rows)
    (root / RELEASE_FOLDER / "FundusImages").mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (4, 4)).save(root / "tiny.jpg")
    for tail in tails:
        os.link(root / "tiny.jpg", root / tail)
    result = read_dataset("papila", root)
    assert (result.rows_read, len(result.records)) == (488, 488)
    assert result.records["patient_id"].nunique() == 244
    ours = set(zip(result.records["image_id"], result.records["image_path"]))
    assert ours == set(zip(reference["image_id"], tails))
