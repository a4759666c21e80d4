"""PAPILA, RFMiD, RFMiD 2.0, REFUGE, G1020 and JSIEC1000 against literal files written from datasets.md.

Continues tests/core/datasets/test_published_layouts.py (BRSET, mBRSET, IDRiD, Messidor-2) on the same principle: every
label file and folder is spelled out from datasets.md (file and folder names, header spelling with its
glitches, codes), nothing comes from the readers' layout constants or the synthetic writers, and the
expected records and labels are worked out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.labels.harmonise import harmonise
from tests.support.environment import link_stand_in_images
from tests.core.datasets.test_published_layouts import rows, write


def rejected(labelled) -> dict[str, tuple]:
    """{image_id: (stage, reason_code)} of the rejects."""
    return {r["image_id"]: (r["stage"], r["reason_code"]) for r in labelled.rejects.to_dict("records")}


# ------------------------------------------------------------------------------------------------ PAPILA

# datasets.md: ClinicalData/patient_data_od.xlsx and patient_data_os.xlsx, one row per patient, two header
# rows; columns ID, Age, Gender, Diagnosis, Refractive_Defect (3 sub-columns), Phakic/Pseudophakic,
# IOP (Pneumatic, Perkins), Pachymetry, Axial_Length, VF_MD; IDs like `#002`. (The three Refractive_Defect
# sub-column names are not in datasets.md; any three names do.) Gender 0 = male, 1 = female; Diagnosis
# 0 healthy, 1 glaucoma, 2 suspect.
PAPILA_HEADER = [
    ["ID", "Age", "Gender", "Diagnosis", "Refractive_Defect", None, None, "Phakic/Pseudophakic", "IOP", None,
     "Pachymetry", "Axial_Length", "VF_MD"],
    [None, None, None, None, "dioptre_1", "dioptre_2", "astigmatism", None, "Pneumatic", "Perkins", None, None,
     None],
]
PAPILA_OD = [
    ["#002", 39, 0, 0, -1.25, -0.5, 90, 0, 15, 14, 551, 23.4, -0.8],  # male, healthy
    ["#004", 71, 1, 1, 0.5, -1, 180, 1, 22, 21, 520, 24.1, -6.3],  # female, glaucoma
    ["#007", 66, 1, 2, 1.5, -0.75, 10, 0, 19, 18, 538, 22.9, -1.1],  # female, suspect
    ["#010", 58, 0, 2, -3, -1.5, 170, 0, 24, 23, 575, 25.2, -2.4],  # male, suspect
]
PAPILA_OS = [
    ["#002", 39, 0, 0, -1, -0.25, 85, 0, 16, 15, 549, 23.3, -0.5],
    ["#004", 71, 1, 1, 0.75, -1.25, 175, 1, 25, 24, 522, 24.0, -9.7],
    ["#007", 66, 1, 0, 1.25, -0.5, 5, 0, 17, 17, 540, 22.8, -0.9],  # suspect OD, healthy OS
    ["#010", 58, 0, 1, -2.75, -1.25, 165, 0, 27, 26, 571, 25.1, -4.0],  # suspect OD, glaucoma OS
]
PAPILA_IMAGES = [f"FundusImages/RET{n}{eye}.jpg" for n in ("002", "004", "007", "010") for eye in ("OD", "OS")]


def write_xlsx(path: Path, cells: list[list]) -> None:
    from openpyxl import Workbook

    path.parent.mkdir(parents=True, exist_ok=True)
    book = Workbook()
    for row in cells:
        book.active.append(row)
    book.save(path)


@pytest.fixture
def papila(tmp_path) -> Path:
    root = tmp_path / "papila"
    write_xlsx(root / "ClinicalData/patient_data_od.xlsx", PAPILA_HEADER + PAPILA_OD)
    write_xlsx(root / "ClinicalData/patient_data_os.xlsx", PAPILA_HEADER + PAPILA_OS)
    # datasets.md: disc/cup contours under ExpertsSegmentations/Contours/ (annotations, not records).
    write(root, "ExpertsSegmentations/Contours/RET002_OD_disc_exp1.txt", b"1012.5 640.0\n1020.0 655.5\n")
    link_stand_in_images(root, PAPILA_IMAGES)
    return root


def test_papila_reads_one_record_per_patient_and_eye(papila):
    result = read_dataset("papila", papila)
    assert result.quarantine.empty
    # image RET{NNN}{OD|OS}.jpg from the ID `#NNN` and the workbook's eye; patient_id = the numeric ID.
    columns = ["image_path", "patient_id", "eye", "ID", "Age", "Gender", "Diagnosis", "IOP_Pneumatic",
               "IOP_Perkins", "VF_MD"]
    assert rows(result.records, columns) == {
        "RET002OD": ("FundusImages/RET002OD.jpg", "2", "OD", "#002", 39, 0, 0, 15, 14, -0.8),
        "RET004OD": ("FundusImages/RET004OD.jpg", "4", "OD", "#004", 71, 1, 1, 22, 21, -6.3),
        "RET007OD": ("FundusImages/RET007OD.jpg", "7", "OD", "#007", 66, 1, 2, 19, 18, -1.1),
        "RET010OD": ("FundusImages/RET010OD.jpg", "10", "OD", "#010", 58, 0, 2, 24, 23, -2.4),
        "RET002OS": ("FundusImages/RET002OS.jpg", "2", "OS", "#002", 39, 0, 0, 16, 15, -0.5),
        "RET004OS": ("FundusImages/RET004OS.jpg", "4", "OS", "#004", 71, 1, 1, 25, 24, -9.7),
        "RET007OS": ("FundusImages/RET007OS.jpg", "7", "OS", "#007", 66, 1, 0, 17, 17, -0.9),
        "RET010OS": ("FundusImages/RET010OS.jpg", "10", "OS", "#010", 58, 0, 1, 27, 26, -4.0),
    }
    assert set(result.records["source_file"]) == {"ClinicalData/patient_data_od.xlsx",
                                                  "ClinicalData/patient_data_os.xlsx"}


def test_papila_labels_by_hand(papila):
    result = read_dataset("papila", papila)
    labelled = harmonise("papila", result.records, result.quarantine)
    # gon = Diagnosis in {1, 2} (suspects positive); Gender 0 = M, 1 = F (the reference swapped them);
    # OD = right, OS = left; no DR tasks, no quality, no camera (datasets.md: camera only BRSET/mBRSET/REFUGE).
    columns = ["any_dr", "referable_dr", "gon", "sex", "eye", "age", "quality", "camera", "patient_id",
               "label_rule"]
    assert rows(labelled.labels, columns) == {
        "RET002OD": (None, None, 0, "M", "R", 39, None, None, "2", "papila.diagnosis"),
        "RET002OS": (None, None, 0, "M", "L", 39, None, None, "2", "papila.diagnosis"),
        "RET004OD": (None, None, 1, "F", "R", 71, None, None, "4", "papila.diagnosis"),
        "RET004OS": (None, None, 1, "F", "L", 71, None, None, "4", "papila.diagnosis"),
        "RET007OD": (None, None, 1, "F", "R", 66, None, None, "7", "papila.diagnosis"),  # suspect: positive
        "RET007OS": (None, None, 0, "F", "L", 66, None, None, "7", "papila.diagnosis"),
        "RET010OD": (None, None, 1, "M", "R", 58, None, None, "10", "papila.diagnosis"),  # suspect: positive
        "RET010OS": (None, None, 1, "M", "L", 58, None, None, "10", "papila.diagnosis"),
    }
    assert labelled.rejects.empty and labelled.records_in == 8
    # No native split: the seeded split is patient-grouped, so both eyes of a patient share a side.
    sides = labelled.labels.groupby("patient_id")["split"].agg(set)
    assert all(len(s) == 1 for s in sides) and set().union(*sides) <= {"train", "test"}


# ------------------------------------------------------------------------------------------------- RFMiD

# datasets.md: Training_Set/Training_Set/RFMiD_Training_Labels.csv + Training/{ID}.png (likewise
# Evaluation_Set/.../RFMiD_Validation_Labels.csv + Validation/, Test_Set/.../RFMiD_Testing_Labels.csv +
# Test/); these 47 columns, all 0/1; IDs restart at 1 in every split. (Column 3 is DR, 14 ODC, 38 CME.)
RFMID_HEADER = (
    b"ID,Disease_Risk,DR,ARMD,MH,DN,MYA,BRVO,TSLN,ERM,LS,MS,CSR,ODC,CRVO,TV,AH,ODP,ODE,ST,AION,PT,RT,RS,CRS,EDN,"
    b"RPEC,MHL,RP,CWS,CB,ODPM,PRH,MNF,HR,CRAO,TD,CME,PTCR,CF,VH,MCA,VS,BRAO,PLQ,HPED,CL\n"
)
RFMID_TRAIN_CSV = RFMID_HEADER + (
    b"1,1,1,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0\n"  # DR, ODC
    b"2,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0,0,0\n"  # CME
    b"3,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0\n"
)
RFMID_VAL_CSV = RFMID_HEADER + (
    b"1,1,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0,0,0\n"  # DR, CME
)
RFMID_TEST_CSV = RFMID_HEADER + (
    b"1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0\n"
    b"2,1,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0\n"  # DR
)
RFMID_SPLITS = {  # split: (outer folder, label file, image folder, its CSV, IDs)
    "train": ("Training_Set", "RFMiD_Training_Labels.csv", "Training", RFMID_TRAIN_CSV, (1, 2, 3)),
    "val": ("Evaluation_Set", "RFMiD_Validation_Labels.csv", "Validation", RFMID_VAL_CSV, (1,)),
    "test": ("Test_Set", "RFMiD_Testing_Labels.csv", "Test", RFMID_TEST_CSV, (1, 2)),
}


@pytest.fixture
def rfmid(tmp_path) -> Path:
    root = tmp_path / "rfmid"
    for outer, label_file, images, csv, ids in RFMID_SPLITS.values():
        write(root, f"{outer}/{outer}/{label_file}", csv)
        link_stand_in_images(root, [f"{outer}/{outer}/{images}/{i}.png" for i in ids])
    return root


def test_rfmid_keys_images_by_split_and_id(rfmid):
    result = read_dataset("rfmid", rfmid)
    assert result.quarantine.empty
    columns = ["image_path", "patient_id", "native_split", "ID", "Disease_Risk", "DR", "ODC", "CME"]
    assert rows(result.records, columns) == {
        "train/1": ("Training_Set/Training_Set/Training/1.png", None, "train", 1, 1, 1, 1, 0),
        "train/2": ("Training_Set/Training_Set/Training/2.png", None, "train", 2, 1, 0, 0, 1),
        "train/3": ("Training_Set/Training_Set/Training/3.png", None, "train", 3, 0, 0, 0, 0),
        "val/1": ("Evaluation_Set/Evaluation_Set/Validation/1.png", None, "val", 1, 1, 1, 0, 1),
        "test/1": ("Test_Set/Test_Set/Test/1.png", None, "test", 1, 0, 0, 0, 0),
        "test/2": ("Test_Set/Test_Set/Test/2.png", None, "test", 2, 1, 1, 0, 0),
    }


def test_rfmid_labels_by_hand(rfmid):
    result = read_dataset("rfmid", rfmid)
    labelled = harmonise("rfmid", result.records, result.quarantine)
    # any_dr = DR (binary); referable_dr = CME; no gon, no demographics; native split kept (train/val/test).
    columns = ["any_dr", "referable_dr", "gon", "sex", "age", "eye", "quality", "camera", "patient_id", "split"]
    assert rows(labelled.labels, columns) == {
        "train/1": (1, 0, None, None, None, None, None, None, None, "train"),
        "train/2": (0, 1, None, None, None, None, None, None, None, "train"),  # CME without DR: referable
        "train/3": (0, 0, None, None, None, None, None, None, None, "train"),
        "val/1": (1, 1, None, None, None, None, None, None, None, "val"),
        "test/1": (0, 0, None, None, None, None, None, None, None, "test"),
        "test/2": (1, 0, None, None, None, None, None, None, None, "test"),
    }
    assert set(labelled.labels["label_rule"]) == {"rfmid.dr_cme"}
    assert labelled.rejects.empty and labelled.records_in == 6


# --------------------------------------------------------------------------------------------- RFMiD 2.0

# datasets.md: Training_set/RFMiD_2_Training_labels.csv, Validation_set/RFMiD_2_Validation_labels.csv,
# Test_set/RFMiD_2_Testing_labels.csv; images {ID}.jpg; 0/1 columns incl. ID, WNL, DR, ME, ODC; a column
# `ON` + non-breaking space (latin-1 byte 0xA0, invalid as UTF-8), a trailing empty column; IDs restart
# per split; 860 label rows but 854 images matched (a row may have no image).
RFMID2_HEADER = b"ID,WNL,DR,ME,ODC,ON\xa0,\r\n"
RFMID2_TRAIN_CSV = RFMID2_HEADER + b"1,0,1,0,0,0,\r\n" + b"2,1,0,0,0,0,\r\n"
RFMID2_VAL_CSV = RFMID2_HEADER + b"1,0,1,1,0,0,\r\n"
RFMID2_TEST_CSV = RFMID2_HEADER + b"1,0,0,0,1,1,\r\n" + b"2,1,0,0,0,0,\r\n"  # test/2: no image


@pytest.fixture
def rfmid_2(tmp_path) -> Path:
    root = tmp_path / "rfmid_2"
    write(root, "Training_set/RFMiD_2_Training_labels.csv", RFMID2_TRAIN_CSV)
    write(root, "Validation_set/RFMiD_2_Validation_labels.csv", RFMID2_VAL_CSV)
    write(root, "Test_set/RFMiD_2_Testing_labels.csv", RFMID2_TEST_CSV)
    link_stand_in_images(root, ["Training_set/1.jpg", "Training_set/2.jpg", "Validation_set/1.jpg",
                                "Test_set/1.jpg"])
    return root


def test_rfmid_2_reads_latin1_with_the_header_glitches(rfmid_2):
    result = read_dataset("rfmid_2", rfmid_2)
    # `ON\xa0` reads as ON; the trailing empty column is dropped.
    assert [c for c in result.records.columns if c in ("ID", "WNL", "DR", "ME", "ODC", "ON")] == \
        ["ID", "WNL", "DR", "ME", "ODC", "ON"]
    assert not any(str(c).startswith(("Unnamed", "unnamed")) or c == "" for c in result.records.columns)
    columns = ["image_path", "patient_id", "native_split", "ID", "WNL", "DR", "ME", "ODC", "ON"]
    assert rows(result.records, columns) == {
        "train/1": ("Training_set/1.jpg", None, "train", 1, 0, 1, 0, 0, 0),
        "train/2": ("Training_set/2.jpg", None, "train", 2, 1, 0, 0, 0, 0),
        "val/1": ("Validation_set/1.jpg", None, "val", 1, 0, 1, 1, 0, 0),
        "test/1": ("Test_set/1.jpg", None, "test", 1, 0, 0, 0, 1, 1),
    }
    # The label row without its image is kept in quarantine, not dropped.
    assert result.quarantine[["image_id", "reason_code"]].values.tolist() == [["test/2", "image_missing"]]


def test_rfmid_2_labels_by_hand(rfmid_2):
    result = read_dataset("rfmid_2", rfmid_2)
    labelled = harmonise("rfmid_2", result.records, result.quarantine)
    # any_dr = DR; referable_dr = ME; no gon, no demographics; native split kept.
    columns = ["any_dr", "referable_dr", "gon", "sex", "age", "camera", "patient_id", "split", "label_rule"]
    assert rows(labelled.labels, columns) == {
        "train/1": (1, 0, None, None, None, None, None, "train", "rfmid_2.dr_me"),
        "train/2": (0, 0, None, None, None, None, None, "train", "rfmid_2.dr_me"),  # WNL
        "val/1": (1, 1, None, None, None, None, None, "val", "rfmid_2.dr_me"),
        "test/1": (0, 0, None, None, None, None, None, "test", "rfmid_2.dr_me"),  # ODC is not gon here
    }
    assert rejected(labelled) == {"test/2": ("records", "image_missing")}
    assert labelled.records_in == len(labelled.labels) + len(labelled.rejects) == 5


# ------------------------------------------------------------------------------------------------ REFUGE

# datasets.md: REFUGE/{train,val,test}/Images/*.jpg + {split}/index.json with records ImgName, Label
# (1 = glaucoma) and fovea fields (named Fovea_X, Fovea_Y as in the official spreadsheet); train names
# g0001.. (glaucoma) / n0001..; the test split is unlabelled. Cameras: train Zeiss Visucam 500, val/test
# Canon CR-2. Split: train = official train, test = official val.
REFUGE_TRAIN_JSON = (
    b'{"0": {"ImgName": "g0001.jpg", "Fovea_X": 1057.95, "Fovea_Y": 1076.52, "Label": 1}, '
    b'"1": {"ImgName": "n0001.jpg", "Fovea_X": 1113.0, "Fovea_Y": 1040.3, "Label": 0}, '
    b'"2": {"ImgName": "n0002.jpg", "Fovea_X": 998.5, "Fovea_Y": 1102.75, "Label": 0}}'
)
REFUGE_VAL_JSON = (
    b'{"0": {"ImgName": "V0001.jpg", "Fovea_X": 823.1, "Fovea_Y": 806.4, "Label": 1}, '
    b'"1": {"ImgName": "V0002.jpg", "Fovea_X": 810.0, "Fovea_Y": 799.9, "Label": 0}}'
)
REFUGE_TEST_JSON = b'{"0": {"ImgName": "T0001.jpg"}}'


@pytest.fixture
def refuge(tmp_path) -> Path:
    root = tmp_path / "refuge"
    for split, index in (("train", REFUGE_TRAIN_JSON), ("val", REFUGE_VAL_JSON), ("test", REFUGE_TEST_JSON)):
        write(root, f"REFUGE/{split}/index.json", index)
        names = [r["ImgName"] for r in json.loads(index).values()]
        link_stand_in_images(root, [f"REFUGE/{split}/Images/{n}" for n in names])
    return root


def test_refuge_reads_every_split_with_its_camera(refuge):
    result = read_dataset("refuge", refuge)
    assert result.quarantine.empty
    columns = ["image_path", "patient_id", "native_split", "ImgName", "Label", "Fovea_X", "camera"]
    assert rows(result.records, columns) == {
        "g0001": ("REFUGE/train/Images/g0001.jpg", None, "train", "g0001.jpg", 1, 1057.95, "Zeiss Visucam 500"),
        "n0001": ("REFUGE/train/Images/n0001.jpg", None, "train", "n0001.jpg", 0, 1113, "Zeiss Visucam 500"),
        "n0002": ("REFUGE/train/Images/n0002.jpg", None, "train", "n0002.jpg", 0, 998.5, "Zeiss Visucam 500"),
        "V0001": ("REFUGE/val/Images/V0001.jpg", None, "val", "V0001.jpg", 1, 823.1, "Canon CR-2"),
        "V0002": ("REFUGE/val/Images/V0002.jpg", None, "val", "V0002.jpg", 0, 810, "Canon CR-2"),
        "T0001": ("REFUGE/test/Images/T0001.jpg", None, "test", "T0001.jpg", None, None, "Canon CR-2"),
    }


def test_refuge_labels_by_hand(refuge):
    result = read_dataset("refuge", refuge)
    labelled = harmonise("refuge", result.records, result.quarantine)
    # gon = Label; no DR tasks, no demographics; camera by split; official val -> test.
    columns = ["any_dr", "referable_dr", "gon", "sex", "age", "camera", "split", "label_rule"]
    assert rows(labelled.labels, columns) == {
        "g0001": (None, None, 1, None, None, "Zeiss Visucam 500", "train", "refuge.label"),
        "n0001": (None, None, 0, None, None, "Zeiss Visucam 500", "train", "refuge.label"),
        "n0002": (None, None, 0, None, None, "Zeiss Visucam 500", "train", "refuge.label"),
        "V0001": (None, None, 1, None, None, "Canon CR-2", "test", "refuge.label"),
        "V0002": (None, None, 0, None, None, "Canon CR-2", "test", "refuge.label"),
    }
    # The unlabelled test split: rejected with a reason, never scored as negative.
    assert rejected(labelled) == {"T0001": ("labels", "label:unlabelled")}
    assert labelled.records_in == 6


# ------------------------------------------------------------------------------------------------- G1020

# datasets.md: G1020/G1020.csv + G1020/Images/image_{n}.jpg (+ LabelMe image_{n}.json beside each image);
# columns imageID, binaryLabels (0 normal / 1 glaucoma); no patient column.
G1020_CSV = (
    b"imageID,binaryLabels\n"
    b"image_0.jpg,0\n"
    b"image_1.jpg,1\n"
    b"image_10.jpg,0\n"
    b"image_3202.jpg,1\n"
)
G1020_NUMBERS = (0, 1, 10, 3202)


@pytest.fixture
def g1020(tmp_path) -> Path:
    root = tmp_path / "g1020"
    write(root, "G1020/G1020.csv", G1020_CSV)
    link_stand_in_images(root, [f"G1020/Images/image_{n}.jpg" for n in G1020_NUMBERS])
    for n in G1020_NUMBERS:  # disc/cup polygons: annotations, not records
        write(root, f"G1020/Images/image_{n}.json", b'{"version": "4.5.6", "shapes": [], "imagePath": "x"}')
    return root


def test_g1020_reads_the_documented_columns(g1020):
    result = read_dataset("g1020", g1020)
    assert result.quarantine.empty
    columns = ["image_path", "patient_id", "native_split", "imageID", "binaryLabels"]
    assert rows(result.records, columns) == {
        "image_0": ("G1020/Images/image_0.jpg", None, None, "image_0.jpg", 0),
        "image_1": ("G1020/Images/image_1.jpg", None, None, "image_1.jpg", 1),
        "image_10": ("G1020/Images/image_10.jpg", None, None, "image_10.jpg", 0),
        "image_3202": ("G1020/Images/image_3202.jpg", None, None, "image_3202.jpg", 1),
    }


def test_g1020_labels_by_hand(g1020):
    result = read_dataset("g1020", g1020)
    labelled = harmonise("g1020", result.records, result.quarantine)
    # gon = binaryLabels; no DR tasks, no demographics, no camera, no patient id.
    columns = ["any_dr", "referable_dr", "gon", "sex", "age", "camera", "eye", "patient_id", "label_rule"]
    assert rows(labelled.labels, columns) == {
        "image_0": (None, None, 0, None, None, None, None, None, "g1020.binary"),
        "image_1": (None, None, 1, None, None, None, None, None, "g1020.binary"),
        "image_10": (None, None, 0, None, None, None, None, None, "g1020.binary"),
        "image_3202": (None, None, 1, None, None, None, None, None, "g1020.binary"),
    }
    assert labelled.rejects.empty and labelled.records_in == 4
    # No native split, no patient column: a seeded train/test split by image, and the output says so.
    assert set(labelled.labels["split"]) <= {"train", "test"}
    assert "no patient ids" in labelled.split_report["grouping"]


# --------------------------------------------------------------------------------------------- JSIEC1000

# datasets.md: 1000images/<class folder>/<uuid>..JPG (double dot), no CSV, the folder is the label; the
# folders named there: 0.0.Normal, 0.3.DR1, 1.0.DR2, 1.1.DR3, 0.2.Large optic cup, 10.0.Possible glaucoma,
# 29.1.Blur fundus with suspected PDR (39 in all, so `99.Not a class` is none of them). datasets.md fixes no
# image id: the file name without its final extension (`<uuid>.`) is the reference split file's.
JSIEC_FILES = {
    "0.0.Normal": "1ffa9627-8d87-11e8-9daf-6045cb817f5b",
    "0.3.DR1": "2a0c5b1e-8d87-11e8-9daf-6045cb817f5b",
    "1.0.DR2": "3b7d91f4-8d87-11e8-9daf-6045cb817f5b",
    "1.1.DR3": "4c1e2a08-8d87-11e8-9daf-6045cb817f5b",
    "0.2.Large optic cup": "5d9f03c2-8d87-11e8-9daf-6045cb817f5b",
    "10.0.Possible glaucoma": "6e2a47d9-8d87-11e8-9daf-6045cb817f5b",
    "29.1.Blur fundus with suspected PDR": "7f3b58ea-8d87-11e8-9daf-6045cb817f5b",
    "99.Not a class": "8a4c69fb-8d87-11e8-9daf-6045cb817f5b",
}


@pytest.fixture
def jsiec(tmp_path) -> Path:
    root = tmp_path / "jsiec1000"
    link_stand_in_images(root, [f"1000images/{folder}/{uuid}..JPG" for folder, uuid in JSIEC_FILES.items()])
    return root


def test_jsiec_reads_the_folder_as_the_label(jsiec):
    result = read_dataset("jsiec1000", jsiec)
    u = {folder: uuid + "." for folder, uuid in JSIEC_FILES.items()}
    columns = ["image_path", "patient_id", "class_folder", "class_code", "class_name"]
    assert rows(result.records, columns) == {
        u["0.0.Normal"]: (f"1000images/0.0.Normal/{u['0.0.Normal']}.JPG", None, "0.0.Normal", "0.0", "Normal"),
        u["0.3.DR1"]: (f"1000images/0.3.DR1/{u['0.3.DR1']}.JPG", None, "0.3.DR1", "0.3", "DR1"),
        u["1.0.DR2"]: (f"1000images/1.0.DR2/{u['1.0.DR2']}.JPG", None, "1.0.DR2", "1.0", "DR2"),
        u["1.1.DR3"]: (f"1000images/1.1.DR3/{u['1.1.DR3']}.JPG", None, "1.1.DR3", "1.1", "DR3"),
        u["0.2.Large optic cup"]: (f"1000images/0.2.Large optic cup/{u['0.2.Large optic cup']}.JPG", None,
                                   "0.2.Large optic cup", "0.2", "Large optic cup"),
        u["10.0.Possible glaucoma"]: (f"1000images/10.0.Possible glaucoma/{u['10.0.Possible glaucoma']}.JPG",
                                      None, "10.0.Possible glaucoma", "10.0", "Possible glaucoma"),
        u["29.1.Blur fundus with suspected PDR"]: (
            f"1000images/29.1.Blur fundus with suspected PDR/{u['29.1.Blur fundus with suspected PDR']}.JPG",
            None, "29.1.Blur fundus with suspected PDR", "29.1", "Blur fundus with suspected PDR"),
    }
    # A folder that is not one of the 39 classes: its image is quarantined, not labelled.
    assert result.quarantine[["image_id", "reason_code"]].values.tolist() == [
        ["8a4c69fb-8d87-11e8-9daf-6045cb817f5b.", "unknown_code:class_folder"]]


def test_jsiec_labels_by_hand(jsiec):
    result = read_dataset("jsiec1000", jsiec)
    labelled = harmonise("jsiec1000", result.records, result.quarantine)
    folder_of = {uuid + ".": folder for folder, uuid in JSIEC_FILES.items()}
    by_folder = {folder_of[i]: v for i, v in rows(labelled.labels, ["any_dr", "referable_dr", "gon"]).items()}
    # any_dr = DR1, DR2, DR3, blur with suspected PDR; referable_dr = DR2, DR3, suspected PDR (DR1 negative);
    # gon not evaluated (null even for Large optic cup and Possible glaucoma).
    assert by_folder == {
        "0.0.Normal": (0, 0, None),
        "0.3.DR1": (1, 0, None),
        "1.0.DR2": (1, 1, None),
        "1.1.DR3": (1, 1, None),
        "0.2.Large optic cup": (0, 0, None),
        "10.0.Possible glaucoma": (0, 0, None),
        "29.1.Blur fundus with suspected PDR": (1, 1, None),
    }
    assert set(labelled.labels["label_rule"]) == {"jsiec1000.folder"}
    assert labelled.labels["patient_id"].isna().all()
    assert rejected(labelled) == {"8a4c69fb-8d87-11e8-9daf-6045cb817f5b.": ("records", "unknown_code:class_folder")}
    assert labelled.records_in == 8
