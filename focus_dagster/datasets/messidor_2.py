"""Messidor-2 (ADCIS images, adjudicated grades of Krause et al. 2018), common preprocessed mirror.

Layout: `messidor_data.csv` + `messidor-2/preprocess/<file>`. 1,748 images of 874 examinations: the
Messidor-1 part as `20051020_43808_0100_PP.png` (1,058 files) and the Messidor-2 part as
`IM000012.JPG` (690 files), three published resolutions (1440x960, 2240x1488, 2304x1536), all
from a Topcon TRC NW6 camera. Many copies nest the image folder once more
(`messidor-2/messidor-2/preprocess`): both are accepted, as is a dataset root nested inside itself.

The label file comes in two schemas under the same name, both accepted and kept as published:
- mirror: `id_code` (file name *with* extension), `diagnosis` (adjudicated ICDR 0-4),
  `adjudicated_dme` (0/1), `adjudicated_gradable` (0/1);
- original grade file: `image_id` (file name), `adjudicated_dr_grade`, `adjudicated_dme`,
  `adjudicated_gradable`. Its `image_id` column becomes the standard `image_id` (the file stem); the
  file name itself stays visible in `image_path`.
The image id is the file stem (`20051020_43808_0100_PP`, `IM000012`), as in the benchmark's split file.
Four images are ungradable (`adjudicated_gradable` 0, grade and DME blank): they are kept here as
records with null grades; the label step rejects them with a reason. 1,744 gradable images; ICDR
0..4 = 1017/270/347/75/35; DME 151.

patient_id is None: the label file carries no patient key, and file names only hint at the
examination (consecutive `IM` numbers pair the two eyes of the Messidor-2 part; the Messidor-1 names
do not pair reliably), so no grouping key is invented here.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from focus_dagster.datasets.codes import Code, apply_codes
from focus_dagster.datasets.files import find_existing, find_nested_root
from focus_dagster.datasets.label_files import read_label_csv
from focus_dagster.datasets.reader import DatasetReader
from focus_dagster.datasets.records import LabelTable
from focus_dagster.datasets.rows import file_name_rows
from focus_dagster.errors import missing_columns_error

LABEL_FILE = "messidor_data.csv"
# The published folder first, then the doubled folder of the common mirror, then a flattened copy.
IMAGE_DIRS = ("messidor-2/preprocess", "messidor-2/messidor-2/preprocess", "preprocess")
CAMERA = "topcon_trc"

MIRROR_COLUMNS = ["id_code", "diagnosis", "adjudicated_dme", "adjudicated_gradable"]
ORIGINAL_COLUMNS = ["image_id", "adjudicated_dr_grade", "adjudicated_dme", "adjudicated_gradable"]
PUBLISHED_COLUMNS = MIRROR_COLUMNS
# Each schema is recognised by the column naming the image file.
SCHEMAS = {"id_code": MIRROR_COLUMNS, "image_id": ORIGINAL_COLUMNS}
REQUIRED_COLUMNS = MIRROR_COLUMNS
CODES = [
    Code("diagnosis", int_range=(0, 4), blank=True),
    Code("adjudicated_dr_grade", int_range=(0, 4), blank=True),
    Code("adjudicated_dme", int_range=(0, 1), blank=True),
    Code("adjudicated_gradable", int_range=(0, 1)),
]


class Messidor2Reader(DatasetReader):
    key = "messidor_2"

    def read_table(self, root: Path) -> LabelTable:
        base = find_nested_root(root, LABEL_FILE)
        prefix = base.relative_to(root).as_posix()
        label_file = _join(prefix, find_existing(base, self.key, (LABEL_FILE,), "label file"))
        image_dir = _join(prefix, find_existing(base, self.key, IMAGE_DIRS, "image folder"))
        native = read_label_csv(root, label_file, self.key, required=[])
        name_column = schema_name_column(native, str(root / label_file), self.key)
        rows = file_name_rows(native, root, name_column, image_dir, default_suffix=".png")
        return LabelTable(apply_codes(rows, CODES, self.key), [label_file], [image_dir])


def schema_name_column(native: pd.DataFrame, path: str, dataset: str) -> str:
    """Which of the two published schemas the file follows, named by its file-name column."""
    for name_column, columns in SCHEMAS.items():
        if name_column in native.columns:
            missing = [c for c in columns if c not in native.columns]
            if missing:
                raise missing_columns_error(dataset, path, columns, list(native.columns))
            return name_column
    found = [c for c in native.columns if c not in ("source_file", "source_row")]
    raise missing_columns_error(dataset, path, REQUIRED_COLUMNS, found)


def _join(prefix: str, rel: str) -> str:
    return rel if prefix in ("", ".") else f"{prefix}/{rel}"


READER = Messidor2Reader()
