"""mBRSET (PhysioNet "mbrset"): `labels_mbrset.csv` + `images/{patient}.{1..4}.jpg`.

5,164 images of 1,291 patients taken with a handheld Phelcom Eyer smartphone camera, four per patient
(`.1`/`.3` macula-centred, `.2`/`.4` disc-centred). `sex` is 0 = female, 1 = male (the opposite order
to BRSET); `final_icdr` and `final_edema` have blanks, kept here as nulls.
"""

from __future__ import annotations

from pathlib import Path

from focus_dagster.datasets.codes import Code, apply_codes
from focus_dagster.datasets.files import find_existing
from focus_dagster.datasets.label_files import read_label_csv
from focus_dagster.datasets.reader import DatasetReader
from focus_dagster.datasets.records import LabelTable
from focus_dagster.datasets.rows import mark_unsafe_file_names, standard_frame

LABEL_FILES = ("labels_mbrset.csv",)
IMAGE_DIR = "images"
CAMERA = "Phelcom Eyer"

PUBLISHED_COLUMNS = [
    "patient", "age", "sex", "dm_time", "insulin", "insulin_time", "oraltreatment_dm", "systemic_hypertension",
    "insurance", "educational_level", "alcohol_consumption", "smoking", "obesity", "vascular_disease",
    "acute_myocardial_infarction", "nephropathy", "neuropathy", "diabetic_foot", "file", "laterality",
    "final_artifacts", "final_quality", "final_icdr", "final_edema",
]
REQUIRED_COLUMNS = ["patient", "age", "sex", "file", "laterality", "final_quality", "final_icdr", "final_edema"]
CODES = [
    Code("age", number=True, blank=True, na=("NA",)),
    Code("sex", int_range=(0, 1)),
    Code("laterality", choices=("right", "left")),
    Code("final_artifacts", choices=("yes", "no"), blank=True),
    Code("final_quality", choices=("yes", "no")),
    Code("final_icdr", int_range=(0, 4), blank=True),
    Code("final_edema", choices=("yes", "no"), blank=True),
]


class MbrsetReader(DatasetReader):
    key = "mbrset"

    def read_table(self, root: Path) -> LabelTable:
        label_file = find_existing(root, self.key, LABEL_FILES, "label file")
        find_existing(root, self.key, (IMAGE_DIR,), "image folder")
        native = read_label_csv(root, label_file, self.key, REQUIRED_COLUMNS)
        rows = standard_frame(
            native,
            image_id=native["file"].str.rsplit(".", n=1).str[0],
            image_path=IMAGE_DIR + "/" + native["file"],
            patient_id=native["patient"],
            native_split=None,
        )
        rows = mark_unsafe_file_names(rows, native["file"], "file", IMAGE_DIR)
        return LabelTable(apply_codes(rows, CODES, self.key), [label_file], [IMAGE_DIR])


READER = MbrsetReader()
