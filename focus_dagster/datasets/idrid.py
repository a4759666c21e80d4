"""IDRiD (Indian Diabetic Retinopathy Image Dataset, IEEE DataPort), disease-grading part.

`B. Disease Grading/1. Original Images/a. Training Set/IDRiD_001.jpg ..IDRiD_413.jpg` and
`b. Testing Set/IDRiD_001.jpg ..IDRiD_103.jpg`; grades in `B. Disease Grading/2. Groundtruths/`
`a. IDRiD_Disease Grading_Training Labels.csv` and `b. IDRiD_Disease Grading_Testing Labels.csv`, columns
`Image name` (no extension), `Retinopathy grade` (ICDR 0-4), `Risk of macular edema` (0-2). 4288x2848
images from a Kowa VX-10 alpha camera; no patient id, no demographics.
**Both splits start at IDRiD_001**: the names collide while the images (and in 41 cases the labels)
differ, so records are keyed by (split, name): image_id `train/IDRiD_001`, `test/IDRiD_001`. (The
reference benchmark's split file got this wrong and put all 103 test images in train as well.)

Tolerated: the edema header with a trailing space (`Risk of macular edema `), trailing empty `Unnamed`
columns (trailing commas), an image extension in another case, and the dataset root being the folder
that holds `B. Disease Grading/`, a copy where that folder is nested twice
(`B. Disease Grading/B. Disease Grading/...`, as the reference split file's paths show), or the
`B. Disease Grading` folder itself.
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

PART = "B. Disease Grading"
# Where the grading part may start below the dataset root, most specific first.
PART_PREFIXES = (f"{PART}/{PART}/", f"{PART}/", "")
IMAGES = "1. Original Images"
GROUNDTRUTHS = "2. Groundtruths"
IMAGE_EXTENSION = ".jpg"
PUBLISHED_RESOLUTION = (4288, 2848)
CAMERA = "Kowa VX-10 alpha"


@dataclass(frozen=True)
class SplitLayout:
    split: str
    image_folder: str
    label_file: str


SPLIT_LAYOUTS = (
    SplitLayout("train", "a. Training Set", "a. IDRiD_Disease Grading_Training Labels.csv"),
    SplitLayout("test", "b. Testing Set", "b. IDRiD_Disease Grading_Testing Labels.csv"),
)
# Published header spelling (the edema column carries a trailing space in the real files).
PUBLISHED_HEADER = ["Image name", "Retinopathy grade", "Risk of macular edema "]
PUBLISHED_COLUMNS = [name.strip() for name in PUBLISHED_HEADER]
REQUIRED_COLUMNS = PUBLISHED_COLUMNS
CODES = [Code("Retinopathy grade", int_range=(0, 4)), Code("Risk of macular edema", int_range=(0, 2))]


class IdridReader(DatasetReader):
    key = "idrid"

    def read_table(self, root: Path) -> LabelTable:
        prefix = grading_prefix(root)
        frames, label_files, image_dirs = [], [], []
        for layout in SPLIT_LAYOUTS:
            label_file = find_existing(
                root, self.key, [f"{prefix}{GROUNDTRUTHS}/{layout.label_file}"], f"{layout.split} label file"
            )
            image_dir = find_existing(
                root, self.key, [f"{prefix}{IMAGES}/{layout.image_folder}"], f"{layout.split} image folder"
            )
            native = read_label_csv(root, label_file, self.key, REQUIRED_COLUMNS)
            frames.append(split_rows(root, native, layout.split, image_dir, IMAGE_EXTENSION, "Image name"))
            label_files.append(label_file)
            image_dirs.append(image_dir)
        rows = pd.concat(frames, ignore_index=True)
        return LabelTable(apply_codes(rows, CODES, self.key), label_files, image_dirs)


def grading_prefix(root: Path) -> str:
    """The path from the root to the folder holding `1. Original Images` and `2. Groundtruths`."""
    marker = f"{GROUNDTRUTHS}/{SPLIT_LAYOUTS[0].label_file}"
    found = find_existing(root, "idrid", [p + marker for p in PART_PREFIXES], "training label file")
    return found[: -len(marker)]


READER = IdridReader()
