"""Readers and label rules against literal files written from the publishers' documentation (datasets.md).

The round-trip tests of each reader use synthetic look-alikes whose writers import the readers' own layout
constants, so a wrong column name, folder or code would be written and read back the same way. Here every
label file is spelled out byte by byte from datasets.md (file names, folder names, header spelling with its
original typos and glitches, codes), nothing is imported from the readers or the synthetic writers, and
the expected records and labels are worked out by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.labels.harmonise import harmonise
from tests.support.environment import link_stand_in_images, require_reference

BOM = b"\xef\xbb\xbf"


def write(root: Path, rel: str, data: bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def value(v):
    """A record or label value as plain Python: None for any kind of missing, ints for whole numbers."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "item"):
        v = v.item()
    return int(v) if isinstance(v, float) and v.is_integer() else v


def rows(frame, columns) -> dict[str, tuple]:
    """{image_id: (values of `columns`)} as plain Python values."""
    return {r["image_id"]: tuple(value(r[c]) for c in columns) for r in frame.to_dict("records")}


# ------------------------------------------------------------------------------------------------- BRSET

# datasets.md: labels.csv, UTF-8 with BOM, these 34 columns in this order, original typos (insuline,
# iluminaton, drusens) kept; patient_sex 1 = male, 2 = female; exam_eye 1 = right, 2 = left; quality
# Adequate exactly when focus, iluminaton, image_field, artifacts are all 1.
BRSET_CSV = BOM + (
    b"image_id,patient_id,camera,patient_age,comorbidities,diabetes_time_y,insuline,patient_sex,exam_eye,"
    b"diabetes,nationality,optic_disc,vessels,macula,DR_SDRG,DR_ICDR,focus,iluminaton,image_field,artifacts,"
    b"diabetic_retinopathy,macular_edema,scar,nevus,amd,vascular_occlusion,hypertensive_retinopathy,drusens,"
    b"hemorrhage,retinal_detachment,myopic_fundus,increased_cup_disc,other,quality\n"
    b"img00001,1,Canon CR,48,diabetes,10,yes,1,1,yes,Brazil,1,1,1,0,0,1,1,1,1,0,0,0,0,0,0,0,0,0,0,0,0,0,Adequate\n"
    b"img00002,1,Canon CR,48,diabetes,10,yes,1,2,yes,Brazil,1,1,1,1,1,2,1,1,1,1,1,0,0,0,0,0,0,1,0,0,1,0,Inadequate\n"
    b"img00003,2,NIKON NF5050,NA,diabetes,5,no,2,1,yes,Brazil,1,1,1,2,2,1,1,1,1,1,0,0,0,0,0,0,0,1,0,0,0,0,Adequate\n"
    b"img00004,3,Canon CR,61,0,0,no,2,1,no,Brazil,1,1,1,0,0,1,1,1,1,0,0,0,0,0,0,0,0,0,0,0,0,0,Adequate\n"
    b"img00005,2,NIKON NF5050,NA,diabetes,5,no,2,2,yes,Brazil,1,1,1,0,0,1,1,1,1,0,1,0,0,0,0,0,0,0,0,0,0,0,Adequate\n"
    b"img00006,4,Canon CR,70,diabetes,20,yes,1,1,yes,Brazil,1,1,1,1,1,1,1,1,1,1,0,0,0,0,0,0,0,0,0,0,0,0,Adequate\n"
)
BRSET_IDS = ["img00001", "img00002", "img00003", "img00004", "img00005", "img00006"]


@pytest.fixture
def brset(tmp_path) -> Path:
    root = tmp_path / "brset"
    write(root, "labels.csv", BRSET_CSV)
    link_stand_in_images(root, [f"fundus_photos/{i}.jpg" for i in BRSET_IDS])
    return root


def test_brset_reads_the_documented_columns_and_codes(brset):
    result = read_dataset("brset", brset)
    assert result.quarantine.empty
    columns = ["image_path", "patient_id", "camera", "patient_age", "patient_sex", "exam_eye", "diabetes",
               "DR_ICDR", "macular_edema", "increased_cup_disc", "quality"]
    assert rows(result.records, columns) == {
        "img00001": ("fundus_photos/img00001.jpg", "1", "Canon CR", 48, 1, 1, "yes", 0, 0, 0, "Adequate"),
        "img00002": ("fundus_photos/img00002.jpg", "1", "Canon CR", 48, 1, 2, "yes", 1, 1, 1, "Inadequate"),
        "img00003": ("fundus_photos/img00003.jpg", "2", "NIKON NF5050", None, 2, 1, "yes", 2, 0, 0, "Adequate"),
        "img00004": ("fundus_photos/img00004.jpg", "3", "Canon CR", 61, 2, 1, "no", 0, 0, 0, "Adequate"),
        "img00005": ("fundus_photos/img00005.jpg", "2", "NIKON NF5050", None, 2, 2, "yes", 0, 1, 0, "Adequate"),
        "img00006": ("fundus_photos/img00006.jpg", "4", "Canon CR", 70, 1, 1, "yes", 1, 0, 0, "Adequate"),
    }


def test_brset_labels_by_hand(brset):
    result = read_dataset("brset", brset)
    labelled = harmonise("brset", result.records, result.quarantine)
    columns = ["any_dr", "referable_dr", "gon", "sex", "eye", "quality", "age", "camera", "patient_id", "label_rule"]
    assert rows(labelled.labels, columns) == {
        "img00001": (0, 0, 0, "M", "R", "adequate", 48, "Canon CR", "1", "brset.icdr"),
        "img00002": (1, 1, 1, "M", "L", "inadequate", 48, "Canon CR", "1", "brset.icdr"),  # ICDR 1 + edema
        "img00003": (1, 1, 0, "F", "R", "adequate", None, "NIKON NF5050", "2", "brset.icdr"),
        "img00005": (0, 1, 0, "F", "L", "adequate", None, "NIKON NF5050", "2", "brset.icdr"),  # edema at ICDR 0
        "img00006": (1, 0, 0, "M", "R", "adequate", 70, "Canon CR", "4", "brset.icdr"),  # ICDR 1: not referable
    }
    # img00004 is not diabetic: outside the benchmark subset, rejected with its reason, never lost.
    assert labelled.rejects["image_id"].tolist() == ["img00004"]
    assert labelled.records_in == len(labelled.labels) + len(labelled.rejects) == 6


# ------------------------------------------------------------------------------------------------ mBRSET

# datasets.md: labels_mbrset.csv, these 24 columns; images/{patient}.{1..4}.jpg; sex 0 = female, 1 = male
# (the reverse of BRSET's 1 = male, 2 = female); final_quality yes = adequate; final_icdr blank -> rejected;
# blank final_edema = no edema; only macula-centred views (.1, .3) belong to the benchmark.
MBRSET_CSV = (
    b"patient,age,sex,dm_time,insulin,insulin_time,oraltreatment_dm,systemic_hypertension,insurance,"
    b"educational_level,alcohol_consumption,smoking,obesity,vascular_disease,acute_myocardial_infarction,"
    b"nephropathy,neuropathy,diabetic_foot,file,laterality,final_artifacts,final_quality,final_icdr,final_edema\n"
    b"7,55,0,5,0,,1,1,1,3,0,0,0,0,0,0,0,0,7.1.jpg,right,no,yes,0,no\n"
    b"7,55,0,5,0,,1,1,1,3,0,0,0,0,0,0,0,0,7.2.jpg,right,no,yes,0,no\n"
    b"7,55,0,5,0,,1,1,1,3,0,0,0,0,0,0,0,0,7.3.jpg,left,yes,no,1,\n"
    b"9,63,1,12,1,4,0,1,0,2,0,1,0,0,0,0,0,0,9.1.jpg,right,no,yes,,no\n"
    b"9,63,1,12,1,4,0,1,0,2,0,1,0,0,0,0,0,0,9.3.jpg,left,no,yes,0,yes\n"
)


@pytest.fixture
def mbrset(tmp_path) -> Path:
    root = tmp_path / "mbrset"
    write(root, "labels_mbrset.csv", MBRSET_CSV)
    link_stand_in_images(root, [f"images/{n}.jpg" for n in ("7.1", "7.2", "7.3", "9.1", "9.3")])
    return root


def test_mbrset_reads_the_documented_columns_and_codes(mbrset):
    result = read_dataset("mbrset", mbrset)
    assert result.quarantine.empty
    columns = ["image_path", "patient_id", "age", "sex", "file", "laterality", "final_quality", "final_icdr"]
    assert rows(result.records, columns) == {
        "7.1": ("images/7.1.jpg", "7", 55, 0, "7.1.jpg", "right", "yes", 0),
        "7.2": ("images/7.2.jpg", "7", 55, 0, "7.2.jpg", "right", "yes", 0),
        "7.3": ("images/7.3.jpg", "7", 55, 0, "7.3.jpg", "left", "no", 1),
        "9.1": ("images/9.1.jpg", "9", 63, 1, "9.1.jpg", "right", "yes", None),
        "9.3": ("images/9.3.jpg", "9", 63, 1, "9.3.jpg", "left", "yes", 0),
    }


def test_mbrset_labels_by_hand(mbrset):
    result = read_dataset("mbrset", mbrset)
    labelled = harmonise("mbrset", result.records, result.quarantine)
    columns = ["any_dr", "referable_dr", "gon", "sex", "eye", "quality", "age", "camera"]
    assert rows(labelled.labels, columns) == {
        "7.1": (0, 0, None, "F", "R", "adequate", 55, "Phelcom Eyer"),
        "7.3": (1, 0, None, "F", "L", "inadequate", 55, "Phelcom Eyer"),  # ICDR 1, blank edema = no edema
        "9.3": (0, 1, None, "M", "L", "adequate", 63, "Phelcom Eyer"),  # edema at ICDR 0
    }
    # 7.2 is disc-centred, 9.1 has no grade: both rejected with a reason.
    assert sorted(labelled.rejects["image_id"]) == ["7.2", "9.1"]
    assert labelled.records_in == 5


# ------------------------------------------------------------------------------------------------- IDRiD

IDRID_PART = "B. Disease Grading"
# datasets.md: the header sometimes carries a trailing space after `Risk of macular edema` and trailing
# empty `Unnamed` columns; test names repeat training names with different images and labels.
IDRID_TRAIN_CSV = (
    b"Image name,Retinopathy grade,Risk of macular edema ,,\r\n"
    b"IDRiD_001,3,2,,\r\n"
    b"IDRiD_002,0,1,,\r\n"
    b"IDRiD_003,1,0,,\r\n"
)
IDRID_TEST_CSV = (
    b"Image name,Retinopathy grade,Risk of macular edema \r\n"
    b"IDRiD_001,0,0\r\n"
    b"IDRiD_002,2,0\r\n"
)


@pytest.fixture
def idrid(tmp_path) -> Path:
    root = tmp_path / "idrid"
    truth = f"{IDRID_PART}/2. Groundtruths"
    write(root, f"{truth}/a. IDRiD_Disease Grading_Training Labels.csv", IDRID_TRAIN_CSV)
    write(root, f"{truth}/b. IDRiD_Disease Grading_Testing Labels.csv", IDRID_TEST_CSV)
    images = f"{IDRID_PART}/1. Original Images"
    link_stand_in_images(root, [f"{images}/a. Training Set/IDRiD_00{n}.jpg" for n in (1, 2, 3)]
                         + [f"{images}/b. Testing Set/IDRiD_00{n}.jpg" for n in (1, 2)])
    return root


def test_idrid_keys_images_by_split_and_name(idrid):
    result = read_dataset("idrid", idrid)
    assert result.quarantine.empty
    images = f"{IDRID_PART}/1. Original Images"
    columns = ["image_path", "native_split", "Image name", "Retinopathy grade", "Risk of macular edema"]
    assert rows(result.records, columns) == {
        "train/IDRiD_001": (f"{images}/a. Training Set/IDRiD_001.jpg", "train", "IDRiD_001", 3, 2),
        "train/IDRiD_002": (f"{images}/a. Training Set/IDRiD_002.jpg", "train", "IDRiD_002", 0, 1),
        "train/IDRiD_003": (f"{images}/a. Training Set/IDRiD_003.jpg", "train", "IDRiD_003", 1, 0),
        "test/IDRiD_001": (f"{images}/b. Testing Set/IDRiD_001.jpg", "test", "IDRiD_001", 0, 0),
        "test/IDRiD_002": (f"{images}/b. Testing Set/IDRiD_002.jpg", "test", "IDRiD_002", 2, 0),
    }


def test_idrid_labels_by_hand(idrid):
    result = read_dataset("idrid", idrid)
    labelled = harmonise("idrid", result.records, result.quarantine)
    # any_dr = grade >= 1; referable_dr = grade >= 2 or edema risk > 0; no gon; native split kept.
    assert rows(labelled.labels, ["any_dr", "referable_dr", "gon", "split"]) == {
        "train/IDRiD_001": (1, 1, None, "train"),
        "train/IDRiD_002": (0, 1, None, "train"),  # grade 0 with edema risk 1: referable
        "train/IDRiD_003": (1, 0, None, "train"),
        "test/IDRiD_001": (0, 0, None, "test"),  # same name as a training image, other labels
        "test/IDRiD_002": (1, 1, None, "test"),
    }
    assert labelled.rejects.empty


# -------------------------------------------------------------------------------------------- Messidor-2

# datasets.md: messidor_data.csv with id_code (file name with its extension), diagnosis (adjudicated ICDR),
# adjudicated_dme, adjudicated_gradable; images under messidor-2/preprocess/; not gradable -> rejected.
MESSIDOR_CSV = (
    b"id_code,diagnosis,adjudicated_dme,adjudicated_gradable\n"
    b"20051020_43808_0100_PP.png,0,0,1\n"
    b"20051020_43832_0100_PP.png,1,0,1\n"
    b"IM002385.jpg,0,1,1\n"
    b"IM004176.jpg,3,1,1\n"
    b"IM003718.jpg,,0,0\n"
)


@pytest.fixture
def messidor(tmp_path) -> Path:
    root = tmp_path / "messidor_2"
    write(root, "messidor_data.csv", MESSIDOR_CSV)
    names = ["20051020_43808_0100_PP.png", "20051020_43832_0100_PP.png", "IM002385.jpg", "IM004176.jpg",
             "IM003718.jpg"]
    link_stand_in_images(root, [f"messidor-2/preprocess/{n}" for n in names])
    return root


def test_messidor_reads_the_documented_columns(messidor):
    result = read_dataset("messidor_2", messidor)
    assert result.quarantine.empty
    columns = ["image_path", "id_code", "diagnosis", "adjudicated_dme", "adjudicated_gradable"]
    assert rows(result.records, columns) == {
        "20051020_43808_0100_PP": ("messidor-2/preprocess/20051020_43808_0100_PP.png",
                                   "20051020_43808_0100_PP.png", 0, 0, 1),
        "20051020_43832_0100_PP": ("messidor-2/preprocess/20051020_43832_0100_PP.png",
                                   "20051020_43832_0100_PP.png", 1, 0, 1),
        "IM002385": ("messidor-2/preprocess/IM002385.jpg", "IM002385.jpg", 0, 1, 1),
        "IM004176": ("messidor-2/preprocess/IM004176.jpg", "IM004176.jpg", 3, 1, 1),
        "IM003718": ("messidor-2/preprocess/IM003718.jpg", "IM003718.jpg", None, 0, 0),
    }


def test_messidor_labels_by_hand(messidor):
    result = read_dataset("messidor_2", messidor)
    labelled = harmonise("messidor_2", result.records, result.quarantine)
    # any_dr = grade >= 1; referable_dr = grade >= 2 or dme == 1; no gon, no demographics.
    assert rows(labelled.labels, ["any_dr", "referable_dr", "gon", "sex", "age", "label_rule"]) == {
        "20051020_43808_0100_PP": (0, 0, None, None, None, "messidor_2.adjudicated"),
        "20051020_43832_0100_PP": (1, 0, None, None, None, "messidor_2.adjudicated"),
        "IM002385": (0, 1, None, None, None, "messidor_2.adjudicated"),  # DME at grade 0
        "IM004176": (1, 1, None, None, None, "messidor_2.adjudicated"),
    }
    assert labelled.rejects["image_id"].tolist() == ["IM003718"]  # not gradable
    assert labelled.records_in == 5


# ----------------------------------------------------------------------- the reference copy under CI


def test_an_absent_reference_file_fails_under_ci_and_skips_elsewhere(tmp_path, monkeypatch):
    absent = tmp_path / "published_splits" / "labels_splits_idrid.csv"
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"labels_splits_idrid.csv is absent.*CI=true"):
        require_reference(absent)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="labels_splits_idrid.csv is absent"):
        require_reference(absent)
    present = tmp_path / "here.csv"
    present.write_bytes(b"x\n")
    assert require_reference(present) == present
