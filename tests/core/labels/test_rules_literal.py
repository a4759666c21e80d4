"""Each rule on a few native rows written out by hand from the publishers' codes (datasets.md): the ICDR grade
boundaries and the edema flag (blank = no edema), each dataset's own sex, quality, eye and camera codes, codes a
dataset does not define, and Messidor-2's two grade-file layouts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from focus_dagster.labels.rules import RULES

NA = np.nan


def _labels(key, records):
    out = RULES[key].task_labels(pd.DataFrame(records))
    return {task: [None if pd.isna(v) else int(v) for v in out[task]] for task in out}


def _metadata(key, records):
    out = RULES[key].metadata(pd.DataFrame(records))
    return {column: [None if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in values]
            for column, values in out.items()}


def test_icdr_grades_and_edema_flags():
    """IDRiD: any DR from grade 1, referable from grade 2 or a macular edema risk above 0; a blank grade is no
    label (null), whatever the edema says."""
    records = {"Retinopathy grade": [0, 1, 2, 3, 4, 0, 1, NA], "Risk of macular edema": [0, 0, 0, 0, 0, 1, 2, 1]}
    assert _labels("idrid", records) == {"any_dr": [0, 1, 1, 1, 1, 0, 1, None],
                                         "referable_dr": [0, 0, 1, 1, 1, 1, 1, None], "gon": [None] * 8}


def test_a_blank_edema_flag_is_no_edema():
    records = {"final_icdr": [1, 1, 1, 2], "final_edema": ["yes", "no", None, None], "file": ["a.1.jpg"] * 4}
    assert _labels("mbrset", records)["referable_dr"] == [1, 0, 0, 1]


def test_messidor_2_reads_either_grade_file_and_its_dme_flag():
    kaggle = {"diagnosis": [0, 1, 1, 2], "adjudicated_dme": [1, 0, 1, 0], "adjudicated_gradable": [1, 1, 1, 1]}
    original = {"adjudicated_dr_grade": [0, 1, 1, 2], "adjudicated_dme": [1, 0, 1, 0],
                "adjudicated_gradable": [1, 1, 1, 1]}
    for records in (kaggle, original):
        assert _labels("messidor_2", records) == {"any_dr": [0, 1, 1, 1], "referable_dr": [1, 0, 1, 1],
                                                  "gon": [None] * 4}


def test_brset_codes():
    """patient_sex 1 = male, 2 = female; exam_eye 1 = right, 2 = left; quality Adequate / Inadequate; a code the
    dataset does not define is no value."""
    records = {"patient_age": ["61", 48, None], "patient_sex": [1, 2, 3], "exam_eye": [1, 2, NA],
               "quality": ["Adequate", "Inadequate", "adequate"], "camera": ["Canon CR", "NIKON NF505", None],
               "DR_ICDR": [0, 2, 1], "macular_edema": [0, 0, 1], "increased_cup_disc": [1, 0, NA]}
    assert _metadata("brset", records) == {"age": [61.0, 48.0, None], "sex": ["M", "F", None],
                                           "quality": ["adequate", "inadequate", None],
                                           "camera": ["Canon CR", "NIKON NF505", None], "eye": ["R", "L", None]}
    assert _labels("brset", records) == {"any_dr": [0, 1, 1], "referable_dr": [0, 1, 1], "gon": [1, 0, None]}


def test_mbrset_codes():
    """sex 0 = female, 1 = male; laterality right / left; final_quality yes / no; the camera is the Phelcom Eyer
    for every image (no column)."""
    records = {"age": [70, "n/a"], "sex": [0, 1], "laterality": ["right", "left"], "final_quality": ["yes", "no"],
               "final_icdr": [0, 3], "final_edema": ["no", "no"], "file": ["p1.1.jpg", "p1.3.jpg"]}
    assert _metadata("mbrset", records) == {"age": [70.0, None], "sex": ["F", "M"],
                                            "quality": ["adequate", "inadequate"],
                                            "camera": ["Phelcom Eyer", "Phelcom Eyer"], "eye": ["R", "L"]}


def test_papila_codes():
    """Gender 0 = male, 1 = female; eye OD = right, OS = left; gon = Diagnosis 1 (glaucoma) or 2 (suspect)."""
    records = {"Age": [55, 71, 80], "Gender": [0, 1, NA], "eye": ["OD", "OS", "OD"], "Diagnosis": [0, 2, 1]}
    assert _metadata("papila", records) == {"age": [55.0, 71.0, 80.0], "sex": ["M", "F", None],
                                            "eye": ["R", "L", "R"]}
    assert _labels("papila", records)["gon"] == [0, 1, 1]


def test_refuge_camera_and_label():
    records = {"camera": ["Zeiss Visucam 500", "Canon CR-2"], "Label": [1, NA], "ImgName": ["g0001", "V0001"]}
    assert _metadata("refuge", records) == {"camera": ["Zeiss Visucam 500", "Canon CR-2"]}
    assert _labels("refuge", records)["gon"] == [1, None]


@pytest.mark.parametrize(("key", "records", "kept"), [
    ("brset", {"diabetes": ["yes", "no", None]}, [True, False, False]),
    ("mbrset", {"file": ["a.1.jpg", "a.2.jpg", "a.3.jpg", "a.4.jpg", "b.1.jpg"], "final_icdr": [0, 0, 1, 1, NA]},
     [True, False, True, False, False]),
    ("messidor_2", {"diagnosis": [0, 1, NA], "adjudicated_gradable": [1, 0, 1]}, [True, False, False]),
    ("refuge", {"Label": [0, NA]}, [True, False]),
])
def test_subsets_keep_what_the_benchmark_uses(key, records, kept):
    frame = pd.DataFrame(records)
    excluded = np.zeros(len(frame), dtype=bool)
    for rule in RULES[key].subset:
        excluded |= rule.excluded(frame).fillna(False).to_numpy(dtype=bool)
    assert (~excluded).tolist() == kept


@pytest.mark.parametrize("key", ["idrid", "papila", "jsiec1000"])
def test_task_labels_are_nullable_int8_for_every_task(key):
    """The stored label columns' type, whether a task is defined (IDRiD's DR), absent (PAPILA's DR, IDRiD's
    glaucoma) or boolean at source (JSIEC's folders): Int8 with nulls, never floats or objects."""
    records = {"idrid": {"Retinopathy grade": [0, 2, NA], "Risk of macular edema": [0, 1, 0]},
               "papila": {"Diagnosis": [0, 1, NA]},
               "jsiec1000": {"class_name": ["DR1", "Normal", "DR3"]}}[key]
    labels = RULES[key].task_labels(pd.DataFrame(records))
    assert list(labels.columns) == ["any_dr", "referable_dr", "gon"]
    assert [str(dtype) for dtype in labels.dtypes] == ["Int8"] * 3
