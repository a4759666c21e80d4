"""PAPILA (Figshare 10.6084/m9.figshare.14798004): clinical spreadsheets + `FundusImages/RET{NNN}{OD|OS}.jpg`.

488 disc-region fundus photographs of 244 patients, both eyes each (Topcon TRC-NW400, 2576x1934).
The clinical data come as two Excel workbooks, `ClinicalData/patient_data_od.xlsx` (right eyes) and
`ClinicalData/patient_data_os.xlsx` (left eyes), one row per patient, with **two header rows**: a group
row (`ID, Age, Gender, Diagnosis, Refractive_Defect, Phakic/Pseudophakic, IOP, Pachymetry, Axial_Length,
VF_MD`, where `Refractive_Defect` spans three sub-columns and `IOP` spans `Pneumatic` and `Perkins`) and a
sub-header row. Patient IDs are written `#002`; the image of that patient's right eye is `RET002OD.jpg`.
Codes: `Gender` **0 = male, 1 = female** (the reference benchmark swapped them); `Diagnosis` 0 healthy,
1 glaucoma, 2 suspect. Disc and cup contours of two experts sit in `ExpertsSegmentations/Contours/`
(`RET002_OD_disc_exp1.txt`, ...); they are annotations, not records.

The reader flattens the header to unique names (`Refractive_Defect_dioptre_1`, `IOP_Pneumatic`, ...),
treats every row above the first `#NNN` ID as header (so a copy with an extra header row also reads), and
accepts the dataset root either as the folder holding `ClinicalData/` or as the folder holding the
Figshare archive's top folder `PapilaDB-PAPILA-<commit>/`. One record per (patient, eye): image_id
`RET002OD`, patient_id `"2"`, native column `eye` (OD/OS). `source_row` counts the rows below the header
(blank rows included), so `source_row + header rows` is the spreadsheet row number.
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

import pandas as pd

from focus_dagster.datasets.codes import Code, apply_codes
from focus_dagster.datasets.files import find_existing
from focus_dagster.datasets.marks import mark_rows
from focus_dagster.datasets.reader import DatasetReader
from focus_dagster.datasets.records import LabelTable
from focus_dagster.datasets.rows import standard_frame
from focus_dagster.errors import (
    DatasetLayoutError,
    LabelFileError,
    missing_columns_error,
)

EYE_FILES = {"OD": "ClinicalData/patient_data_od.xlsx", "OS": "ClinicalData/patient_data_os.xlsx"}
IMAGE_DIR = "FundusImages"
CONTOUR_DIR = "ExpertsSegmentations/Contours"
RELEASE_FOLDER_PREFIX = "PapilaDB-PAPILA-"
PUBLISHED_RESOLUTION = (2576, 1934)

# The published two-row header: (group row cell, sub-header row cell) per column; an empty group cell
# lies inside the merged group to its left. Sub-column names of Refractive_Defect are (reported).
PUBLISHED_HEADER = [
    ("ID", ""), ("Age", ""), ("Gender", ""), ("Diagnosis", ""),
    ("Refractive_Defect", "dioptre_1"), ("", "dioptre_2"), ("", "astigmatism"),
    ("Phakic/Pseudophakic", ""), ("IOP", "Pneumatic"), ("", "Perkins"),
    ("Pachymetry", ""), ("Axial_Length", ""), ("VF_MD", ""),
]
PUBLISHED_COLUMNS = [
    "ID", "Age", "Gender", "Diagnosis", "Refractive_Defect_dioptre_1", "Refractive_Defect_dioptre_2",
    "Refractive_Defect_astigmatism", "Phakic/Pseudophakic", "IOP_Pneumatic", "IOP_Perkins", "Pachymetry",
    "Axial_Length", "VF_MD",
]
REQUIRED_COLUMNS = ["ID", "Age", "Gender", "Diagnosis"]
CODES = [
    Code("Age", number=True, blank=True),
    Code("Gender", int_range=(0, 1)),
    Code("Diagnosis", int_range=(0, 2)),
    Code("Refractive_Defect_dioptre_1", number=True, blank=True),
    Code("Refractive_Defect_dioptre_2", number=True, blank=True),
    Code("Refractive_Defect_astigmatism", number=True, blank=True),
    Code("Phakic/Pseudophakic", int_range=(0, 1), blank=True),
    Code("IOP_Pneumatic", number=True, blank=True),
    Code("IOP_Perkins", number=True, blank=True),
    Code("Pachymetry", number=True, blank=True),
    Code("Axial_Length", number=True, blank=True),
    Code("VF_MD", number=True, blank=True),
]
GENDER = {0: "male", 1: "female"}
DIAGNOSIS = {0: "healthy", 1: "glaucoma", 2: "suspect"}

# A patient ID cell: `#002` as published; `002`, `2` or a number cell from a re-saved copy mean the same.
ID_PATTERN = re.compile(r"#?\s*(\d+)")
# Header rows above the first ID row; more than this means the sheet is not PAPILA's.
MAX_HEADER_ROWS = 5


class PapilaReader(DatasetReader):
    key = "papila"

    def read_table(self, root: Path) -> LabelTable:
        prefix = release_prefix(root)
        od_file = prefix + EYE_FILES["OD"]  # release_prefix found it
        os_file = find_existing(root, self.key, [prefix + EYE_FILES["OS"]], "left-eye clinical workbook")
        image_dir = find_existing(root, self.key, [prefix + IMAGE_DIR], "image folder")
        frames = [
            eye_records(read_clinical_sheet(root, rel, self.key), eye, image_dir)
            for eye, rel in (("OD", od_file), ("OS", os_file))
        ]
        rows = pd.concat(frames, ignore_index=True)
        return LabelTable(apply_codes(rows, CODES, self.key), [od_file, os_file], [image_dir])


def release_prefix(root: Path) -> str:
    """Where the published folders start below `root`: "" or the Figshare archive's top folder + "/".

    Tries the root itself, then `PapilaDB-PAPILA-*` folders (sorted), then a copy nested once under a
    folder of the root's own name; when none holds the right-eye workbook, the error lists every path tried.
    """
    candidates = [""]
    if root.is_dir():
        releases = [p.name for p in root.iterdir() if p.is_dir() and p.name.startswith(RELEASE_FOLDER_PREFIX)]
        candidates += [name + "/" for name in sorted(releases)]
    candidates.append(root.name + "/")
    found = find_existing(root, "papila", [c + EYE_FILES["OD"] for c in candidates], "right-eye clinical workbook")
    return found[: -len(EYE_FILES["OD"])]


def read_clinical_sheet(root: Path, rel: str, dataset: str) -> pd.DataFrame:
    """The first worksheet of a clinical workbook as strings, header flattened, plus source_file/source_row."""
    path = root / rel
    cells = _sheet_cells(path, dataset)
    start = first_data_row(cells, path, dataset)
    names = flatten_header(cells[:start])
    body = [(i - start + 1, row) for i, row in enumerate(cells[start:], start=start) if any(row)]
    frame = pd.DataFrame([row for _, row in body], columns=names, dtype=object)
    frame = _drop_empty_nameless_columns(frame, names)
    if frame.columns.duplicated().any():
        dupes = sorted(set(frame.columns[frame.columns.duplicated()]))
        raise LabelFileError(f"[{dataset}] {path} has duplicate column names {dupes} after flattening its header rows.")
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise missing_columns_error(dataset, str(path), REQUIRED_COLUMNS, list(frame.columns))
    frame.insert(0, "source_file", rel)
    frame.insert(1, "source_row", [n for n, _ in body])
    return frame


def _sheet_cells(path: Path, dataset: str) -> list[list[str]]:
    from openpyxl import load_workbook

    try:
        workbook = load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises zip, XML and key errors for a file that is not a workbook
        raise LabelFileError(
            f"[{dataset}] {path} is not a readable .xlsx workbook ({type(exc).__name__}: {exc}). "
            "Restore the publisher's original file."
        ) from exc
    try:
        sheet = workbook.worksheets[0]
        sheet.reset_dimensions()  # some writers store a wrong sheet size; read every row there is
        rows = [[cell_text(v) for v in row] for row in sheet.iter_rows(values_only=True)]
    finally:
        workbook.close()
    width = max((len(r) for r in rows), default=0)
    return [r + [""] * (width - len(r)) for r in rows]


def cell_text(value) -> str:
    """A spreadsheet cell as the text a person sees: integral numbers without `.0`, blanks as ""."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    return str(value).replace("\xa0", " ").strip()


def first_data_row(cells: list[list[str]], path: Path, dataset: str) -> int:
    """Index of the first row whose first cell is a patient ID; the rows above it are the header."""
    for i, row in enumerate(cells[: MAX_HEADER_ROWS + 1]):
        if row and ID_PATTERN.fullmatch(row[0]) and i > 0:
            return i
    seen = [row[0] if row else "" for row in cells[: MAX_HEADER_ROWS + 1]]
    raise DatasetLayoutError(
        f"[{dataset}] {path}: expected header rows followed by rows whose first cell is a patient ID like "
        f"'#002' (within the first {MAX_HEADER_ROWS + 1} rows); found first cells {seen}. "
        "Point the dataset root at the publisher's ClinicalData workbooks."
    )


def flatten_header(header_rows: list[list[str]]) -> list[str]:
    """One name per column from stacked header rows: `group_sub`, or the single name where there is one.

    A group cell is merged over the columns to its right that have a sub-header but no group cell of
    their own (`IOP` over `Pneumatic`, `Perkins`), so the group name is carried into them.
    """
    width = len(header_rows[0]) if header_rows else 0
    names = []
    for j in range(width):
        parts: list[str] = []
        for level, row in enumerate(header_rows):
            text = row[j]
            if not text and level == 0 and any(r[j] for r in header_rows[1:]):
                text = _group_to_the_left(row, j)
            if text and text.lower() not in (p.lower() for p in parts):
                parts.append(text)
        names.append("_".join(parts))
    return names


def _group_to_the_left(row: list[str], j: int) -> str:
    for k in range(j - 1, -1, -1):
        if row[k]:
            return row[k]
    return ""


def _drop_empty_nameless_columns(frame: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """Columns with no header text: dropped when empty (formatting residue), kept as `unnamed_<i>` otherwise."""
    keep, renamed = [], []
    for i, name in enumerate(names):
        if not name:
            if (frame.iloc[:, i].astype(str) == "").all():
                continue
            name = f"unnamed_{i}"
        keep.append(i)
        renamed.append(name)
    out = frame.iloc[:, keep].copy()
    out.columns = renamed
    return out


def eye_records(sheet: pd.DataFrame, eye: str, image_dir: str) -> pd.DataFrame:
    """Standard columns for one eye's workbook: image RET{NNN}{eye}.jpg, patient_id the ID without padding."""
    raw_id = sheet["ID"].astype(str)
    number = raw_id.str.extract(f"^{ID_PATTERN.pattern}$", expand=False)
    valid = number.notna()
    padded = number.fillna("").map(lambda d: f"{int(d):03d}" if d else "")
    stem = "RET" + padded.where(valid, raw_id) + eye
    rows = standard_frame(
        sheet.assign(eye=eye),
        image_id=stem,
        image_path=image_dir + "/" + stem + ".jpg",
        patient_id=number.map(lambda d: str(int(d)) if isinstance(d, str) else None),
        native_split=None,
    )
    reasons = [f"unknown ID value {v!r} (expected a patient number like '#002')" for v in raw_id[~valid]]
    return mark_rows(rows, ~valid, "unknown_code:ID", reasons)


READER = PapilaReader()
