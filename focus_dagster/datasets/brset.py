"""BRSET (PhysioNet "brazilian-ophthalmological" v1.0.0): `labels.csv` + `fundus_photos/{image_id}.jpg`.

16,266 images of 8,524 patients, two desktop cameras. The CSV starts with a UTF-8 BOM; `patient_age` is
an integer or the string `NA`; `patient_sex` is 1 = male, 2 = female; the four quality flags are 1 =
adequate, 2 = inadequate. Column names keep the publisher's typos (`iluminaton`, `insuline`, `drusens`).
"""

from __future__ import annotations

from pathlib import Path

from focus_dagster.datasets.codes import Code, apply_codes
from focus_dagster.datasets.files import find_existing
from focus_dagster.datasets.label_files import read_label_csv
from focus_dagster.datasets.reader import DatasetReader
from focus_dagster.datasets.records import LabelTable
from focus_dagster.datasets.rows import standard_frame

LABEL_FILES = ("labels.csv", "labels_brset.csv")
IMAGE_DIRS = ("fundus_photos", "images")

# Every column of the published file, in order (typos are the publisher's).
PUBLISHED_COLUMNS = [
    "image_id", "patient_id", "camera", "patient_age", "comorbidities", "diabetes_time_y", "insuline",
    "patient_sex", "exam_eye", "diabetes", "nationality", "optic_disc", "vessels", "macula", "DR_SDRG",
    "DR_ICDR", "focus", "iluminaton", "image_field", "artifacts", "diabetic_retinopathy", "macular_edema",
    "scar", "nevus", "amd", "vascular_occlusion", "hypertensive_retinopathy", "drusens", "hemorrhage",
    "retinal_detachment", "myopic_fundus", "increased_cup_disc", "other", "quality",
]
QUALITY_FLAGS = ("focus", "iluminaton", "image_field", "artifacts")
# The columns later steps depend on: their absence is a layout error, not something to guess around.
REQUIRED_COLUMNS = [
    "image_id", "patient_id", "camera", "patient_age", "patient_sex", "exam_eye", "diabetes", "DR_ICDR",
    "macular_edema", "increased_cup_disc", *QUALITY_FLAGS, "quality",
]
CODES = [
    Code("patient_age", number=True, na=("NA",), blank=True),
    Code("patient_sex", int_range=(1, 2)),
    Code("exam_eye", int_range=(1, 2)),
    Code("diabetes", choices=("yes", "no")),
    Code("DR_ICDR", int_range=(0, 4)),
    Code("DR_SDRG", int_range=(0, 4)),
    Code("macular_edema", int_range=(0, 1)),
    Code("increased_cup_disc", int_range=(0, 1)),
    *(Code(flag, int_range=(1, 2)) for flag in QUALITY_FLAGS),
    Code("quality", choices=("Adequate", "Inadequate")),
]


class BrsetReader(DatasetReader):
    key = "brset"

    def read_table(self, root: Path) -> LabelTable:
        label_file = find_existing(root, self.key, LABEL_FILES, "label file")
        image_dir = find_existing(root, self.key, IMAGE_DIRS, "image folder")
        native = read_label_csv(root, label_file, self.key, REQUIRED_COLUMNS)
        rows = standard_frame(
            native,
            image_id=native["image_id"],
            image_path=image_dir + "/" + native["image_id"] + ".jpg",
            patient_id=native["patient_id"],
            native_split=None,
        )
        return LabelTable(apply_codes(rows, CODES, self.key), [label_file], [image_dir])


READER = BrsetReader()
