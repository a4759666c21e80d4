"""REFUGE (MICCAI 2018 Retinal Fundus Glaucoma Challenge), common mirror layout.

Layout: `REFUGE/{train,val,test}/Images/*.jpg` + `REFUGE/{split}/index.json`. Each index holds one
record per image with `ImgName` (file name), `Size_X`, `Size_Y`, `Fovea_X`, `Fovea_Y` and `Label`
(1 = glaucoma, 0 = not), either as a JSON object keyed by record number (`{"0": {...}, ...}`, as
the mirror ships it) or as a JSON list; both are accepted. The test split is unlabelled: its records
have no `Label` (null here). Image ids are the file stems, unique across splits: train `g0001`..`g0040`
(glaucoma) and `n0001`..`n0360`, val `V0001`..`V0400`, test `T0001`..`T0400`. 400 images per split,
40 glaucoma in train and in val.

Cameras differ by split (no column in the files; added here as the native `camera` column): train
Zeiss Visucam 500 (2124x2056), val and test Canon CR-2 (1634x1634).

Tolerated: the dataset root being the `REFUGE` folder itself; `images` spelled in lower case; a
missing `test` split (it is unlabelled and unused by the benchmark). The challenge's official
spreadsheet (`Glaucoma_label_and_Fovea_Location.xlsx`) is an unverified alternative: a split that has
one instead of `index.json` is refused with a message saying so. No patient ids (patient_id None).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from focus_dagster.datasets.codes import Code, apply_codes
from focus_dagster.datasets.reader import DatasetReader
from focus_dagster.datasets.records import STANDARD_COLUMNS, LabelTable
from focus_dagster.datasets.rows import file_name_rows
from focus_dagster.errors import (
    DatasetLayoutError,
    LabelFileError,
    missing_columns_error,
)

DATASET_FOLDER = "REFUGE"
SPLIT_FOLDERS = ("train", "val", "test")
REQUIRED_SPLITS = ("train", "val")
UNLABELLED_SPLITS = ("test",)
INDEX_FILE = "index.json"
IMAGE_FOLDERS = ("Images", "images")
CAMERA_BY_SPLIT = {"train": "Zeiss Visucam 500", "val": "Canon CR-2", "test": "Canon CR-2"}

PUBLISHED_COLUMNS = ["ImgName", "Size_X", "Size_Y", "Fovea_X", "Fovea_Y", "Label"]
REQUIRED_COLUMNS = ["ImgName", "Label"]
CODES = [
    Code("Label", int_range=(0, 1), blank=True),
    Code("Size_X", int_range=(1, 100_000), blank=True),
    Code("Size_Y", int_range=(1, 100_000), blank=True),
    Code("Fovea_X", number=True, blank=True),
    Code("Fovea_Y", number=True, blank=True),
]


class RefugeReader(DatasetReader):
    key = "refuge"

    def read_table(self, root: Path) -> LabelTable:
        base = dataset_folder(root, self.key)
        frames, label_files, image_dirs = [], [], []
        for split in SPLIT_FOLDERS:
            split_dir = _join(base, split)
            if not (root / split_dir).is_dir():
                if split in REQUIRED_SPLITS:
                    raise DatasetLayoutError(
                        f"[{self.key}] split folder {root / split_dir} is missing; the mirror layout has "
                        f"{', '.join(f'{base or root.name}/{s}' for s in SPLIT_FOLDERS)}."
                    )
                continue
            index_file = index_path(root, split_dir, self.key)
            image_dir = image_folder(root, split_dir, self.key)
            frames.append(self.split_rows(root, split, index_file, image_dir))
            label_files.append(index_file)
            image_dirs.append(image_dir)
        rows = pd.concat(frames, ignore_index=True)
        # A field one split's index lacks (the test split has no fovea or label) is null there, not invalid.
        native = [c for c in rows.columns if c not in STANDARD_COLUMNS and not c.startswith("_")]
        rows[native] = rows[native].fillna("")
        return LabelTable(apply_codes(rows, CODES, self.key), label_files, image_dirs)

    def split_rows(self, root: Path, split: str, index_file: str, image_dir: str) -> pd.DataFrame:
        native = read_index(root, index_file, self.key)
        required = ["ImgName"] if split in UNLABELLED_SPLITS else REQUIRED_COLUMNS
        if any(c not in native.columns for c in required):
            found = [c for c in native.columns if c not in ("source_file", "source_row")]
            raise missing_columns_error(self.key, str(root / index_file), required, found)
        if "Label" not in native:
            native["Label"] = ""  # the unlabelled split: null labels, not missing rows
        rows = file_name_rows(native, root, "ImgName", image_dir, default_suffix=".jpg", native_split=split)
        rows["camera"] = CAMERA_BY_SPLIT[split]
        return rows


def dataset_folder(root: Path, dataset: str) -> str:
    """`REFUGE` under the root, or "" when the root is that folder itself."""
    if (root / DATASET_FOLDER).is_dir():
        return DATASET_FOLDER
    if any((root / split).is_dir() for split in SPLIT_FOLDERS):
        return ""
    raise DatasetLayoutError(
        f"[{dataset}] no {DATASET_FOLDER}/ folder under {root} (nor train/, val/, test/ directly in it). "
        f"Point the dataset root at the folder holding {DATASET_FOLDER}/ or at {DATASET_FOLDER}/ itself."
    )


def index_path(root: Path, split_dir: str, dataset: str) -> str:
    """The split's index.json; the official spreadsheet layout is refused with a clear message."""
    rel = f"{split_dir}/{INDEX_FILE}"
    if (root / rel).is_file():
        return rel
    spreadsheets = sorted(p.name for p in (root / split_dir).glob("*.xlsx"))
    if spreadsheets:
        raise DatasetLayoutError(
            f"[{dataset}] {root / split_dir} has {spreadsheets} but no {INDEX_FILE}. The official "
            "spreadsheet layout (Glaucoma_label_and_Fovea_Location.xlsx) is not supported yet: it could not "
            f"be verified against a real copy. Use the mirror layout with {{split}}/{INDEX_FILE}."
        )
    raise DatasetLayoutError(f"[{dataset}] label file {root / rel} is missing. Expected the mirror's {rel}.")


def image_folder(root: Path, split_dir: str, dataset: str) -> str:
    for name in IMAGE_FOLDERS:
        if (root / split_dir / name).is_dir():
            return f"{split_dir}/{name}"
    raise DatasetLayoutError(
        f"[{dataset}] no image folder in {root / split_dir}: looked for {list(IMAGE_FOLDERS)}."
    )


def read_index(root: Path, rel: str, dataset: str) -> pd.DataFrame:
    """One row per index record, every value as a string ("" for null), with source_file/source_row."""
    path = root / rel
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LabelFileError(f"[{dataset}] {path} is not readable JSON: {exc}") from exc
    if isinstance(data, dict):
        records = list(data.values())
    elif isinstance(data, list):
        records = data
    else:
        raise LabelFileError(
            f"[{dataset}] {path} holds a JSON {type(data).__name__}; expected a list of records or an object "
            "of records keyed by record number."
        )
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict):
            raise LabelFileError(f"[{dataset}] {path} record {number} is a {type(record).__name__}, not an object.")
    # An empty index gives an empty split (the dataset as a whole may still have records).
    columns = list(dict.fromkeys(key for record in records for key in record)) or PUBLISHED_COLUMNS
    frame = pd.DataFrame(
        [[_text(record.get(c)) for c in columns] for record in records], columns=columns, dtype=object
    )
    frame.insert(0, "source_file", rel)
    frame.insert(1, "source_row", range(1, len(records) + 1))
    return frame


def _text(value) -> str:
    """A JSON value as the string the code checks expect: null -> "", 1.0 -> "1", true -> "1"."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _join(base: str, rel: str) -> str:
    return f"{base}/{rel}" if base else rel


READER = RefugeReader()
