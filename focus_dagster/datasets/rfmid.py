"""RFMiD (Retinal Fundus Multi-disease Image Dataset, RIADD challenge), common mirror layout.

Three splits, each a label CSV and an image folder, nested twice in the common mirror:
`Training_Set/Training_Set/RFMiD_Training_Labels.csv` + `Training_Set/Training_Set/Training/{ID}.png`
(1920 images), `Evaluation_Set/Evaluation_Set/RFMiD_Validation_Labels.csv` + `.../Validation/{ID}.png`
(640), `Test_Set/Test_Set/RFMiD_Testing_Labels.csv` + `.../Test/{ID}.png` (640). Columns: `ID`,
`Disease_Risk` and 45 disease columns, all 0/1. **IDs restart at 1 in every split**, so the image_id is
`<split>/<ID>` (`train/1`, `val/1`, `test/1`). No demographics, no patient id, no camera column (three
cameras: 4288x2848, 2144x1424, 2048x1536). DR is binary (no grade); CME has only 7 positives in all.

Tolerated: the split folder nested once instead of twice (`Training_Set/RFMiD_Training_Labels.csv`), an
image extension in another case (`1.PNG`). Strict: a missing split's label file or image folder, or a
missing ID/Disease_Risk/DR/CME column, is a layout error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from focus_dagster.datasets.codes import Code, apply_codes
from focus_dagster.datasets.files import find_existing
from focus_dagster.datasets.label_files import read_label_csv
from focus_dagster.datasets.reader import DatasetReader
from focus_dagster.datasets.records import LabelTable
from focus_dagster.datasets.rows import split_rows


@dataclass(frozen=True)
class SplitLayout:
    """Where one published split lives: its outer folder, label file name and image folder name."""

    split: str
    folder: str
    label_file: str
    image_folder: str

    def label_candidates(self) -> list[str]:
        """The mirror's doubly nested folder first, then the folder nested once."""
        return [f"{self.folder}/{self.folder}/{self.label_file}", f"{self.folder}/{self.label_file}"]


SPLIT_LAYOUTS = (
    SplitLayout("train", "Training_Set", "RFMiD_Training_Labels.csv", "Training"),
    SplitLayout("val", "Evaluation_Set", "RFMiD_Validation_Labels.csv", "Validation"),
    SplitLayout("test", "Test_Set", "RFMiD_Testing_Labels.csv", "Test"),
)
IMAGE_EXTENSION = ".png"
RESOLUTIONS = ((4288, 2848), (2144, 1424), (2048, 1536))

DISEASE_COLUMNS = [
    "DR", "ARMD", "MH", "DN", "MYA", "BRVO", "TSLN", "ERM", "LS", "MS", "CSR", "ODC", "CRVO", "TV", "AH", "ODP",
    "ODE", "ST", "AION", "PT", "RT", "RS", "CRS", "EDN", "RPEC", "MHL", "RP", "CWS", "CB", "ODPM", "PRH", "MNF",
    "HR", "CRAO", "TD", "CME", "PTCR", "CF", "VH", "MCA", "VS", "BRAO", "PLQ", "HPED", "CL",
]
PUBLISHED_COLUMNS = ["ID", "Disease_Risk", *DISEASE_COLUMNS]
REQUIRED_COLUMNS = ["ID", "Disease_Risk", "DR", "CME"]
CODES = [
    Code("ID", int_range=(1, 10**9)),
    *(Code(column, int_range=(0, 1)) for column in ["Disease_Risk", *DISEASE_COLUMNS]),
]


class RfmidReader(DatasetReader):
    key = "rfmid"

    def read_table(self, root: Path) -> LabelTable:
        frames, label_files, image_dirs = [], [], []
        for layout in SPLIT_LAYOUTS:
            label_file = find_existing(root, self.key, layout.label_candidates(), f"{layout.split} label file")
            image_dir = label_file.rsplit("/", 1)[0] + "/" + layout.image_folder
            find_existing(root, self.key, [image_dir], f"{layout.split} image folder")
            native = read_label_csv(root, label_file, self.key, REQUIRED_COLUMNS)
            frames.append(split_rows(root, native, layout.split, image_dir, IMAGE_EXTENSION))
            label_files.append(label_file)
            image_dirs.append(image_dir)
        rows = pd.concat(frames, ignore_index=True)
        return LabelTable(apply_codes(rows, CODES, self.key), label_files, image_dirs)


READER = RfmidReader()
