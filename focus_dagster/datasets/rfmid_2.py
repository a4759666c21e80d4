"""RFMiD 2.0 (Zenodo 7505822): three split folders, each a latin-1 label CSV and the images beside it.

`Training_set/RFMiD_2_Training_labels.csv`, `Validation_set/RFMiD_2_Validation_labels.csv`,
`Test_set/RFMiD_2_Testing_labels.csv`; images `{ID}.jpg` directly in the split folder, but a block of
them is published as `{ID}.JPG` (the reader takes whichever file is on disk, any extension case).
860 label rows, 854 images: label rows without an image are quarantined (`image_missing`), not dropped.
Header glitches: the files are latin-1, not UTF-8; a column is named `ON` followed by a non-breaking
space (read as `ON`); every line ends with a comma (a trailing empty column, dropped). Columns are `ID`
and 0/1 disease flags, among them `WNL` (within normal limits), `DR`, `ME`, `ODC`; the full column list
below is (reported, not checked): only `ID`, `DR` and `ME` are required, and only the listed flags are
checked as 0/1. IDs restart at 1 in every split (datasets.md), while the reference benchmark's split file
numbers them 1..900 over the three splits; image_id is `<split>/<ID>` (`train/1`), so both read the same. DR is binary; ME has 4 positives in all.
A copy re-saved as UTF-8 reads too (UTF-8 is tried first, then latin-1).
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
    split: str
    folder: str
    label_file: str

    @property
    def label_path(self) -> str:
        return f"{self.folder}/{self.label_file}"


SPLIT_LAYOUTS = (
    SplitLayout("train", "Training_set", "RFMiD_2_Training_labels.csv"),
    SplitLayout("val", "Validation_set", "RFMiD_2_Validation_labels.csv"),
    SplitLayout("test", "Test_set", "RFMiD_2_Testing_labels.csv"),
)
IMAGE_EXTENSION = ".jpg"
ENCODINGS = ("utf-8-sig", "latin-1")
NBSP = "\xa0"

# Disease flags as published (reported, not checked); `ON` is spelled `ON` + NBSP in the files.
DISEASE_COLUMNS = [
    "WNL", "AH", "AION", "ARMD", "BRVO", "CB", "CF", "CL", "CME", "CNV", "CRAO", "CRS", "CRVO", "CSR", "CWS", "DN",
    "DR", "EDN", "ERM", "GRT", "HPED", "HR", "LS", "MCA", "ME", "MH", "MHL", "MS", "MYA", "ODC", "ODE", "ODP", "ON",
    "OPDM", "PRH", "RD", "RHL", "RTR", "RP", "RPEC", "RS", "RT", "SOFE", "ST", "TD", "TSLN", "TV", "VS",
]
PUBLISHED_COLUMNS = ["ID", *DISEASE_COLUMNS]
# Header cells exactly as the publisher wrote them (before the trailing empty column).
PUBLISHED_HEADER = [c + NBSP if c == "ON" else c for c in PUBLISHED_COLUMNS]
REQUIRED_COLUMNS = ["ID", "DR", "ME"]
CODES = [Code("ID", int_range=(1, 10**9)), *(Code(column, int_range=(0, 1)) for column in DISEASE_COLUMNS)]


class Rfmid2Reader(DatasetReader):
    key = "rfmid_2"

    def read_table(self, root: Path) -> LabelTable:
        frames, label_files, image_dirs = [], [], []
        for layout in SPLIT_LAYOUTS:
            label_file = find_existing(root, self.key, [layout.label_path], f"{layout.split} label file")
            native = read_label_csv(root, label_file, self.key, REQUIRED_COLUMNS, encodings=ENCODINGS)
            frames.append(split_rows(root, native, layout.split, layout.folder, IMAGE_EXTENSION))
            label_files.append(label_file)
            image_dirs.append(layout.folder)
        rows = pd.concat(frames, ignore_index=True)
        return LabelTable(apply_codes(rows, CODES, self.key), label_files, image_dirs)


READER = Rfmid2Reader()
