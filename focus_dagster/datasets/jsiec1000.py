"""JSIEC1000 (Joint Shantou International Eye Centre, Zenodo 3477553): `1000images/<class folder>/<file>`.

1,000 images in 39 class folders and no label file: the folder is the label. Folder names are
`<code>.<name>` (`0.0.Normal`, `0.3.DR1`, `1.0.DR2`, `11.Severe hypertensive retinopathy`, ...).
Most file names are a UUID followed by a double dot (`1ffa9627-8d87-11e8-9daf-6045cb817f5b..JPG`);
a few folders hold other names (`<sha1>.jpg`, `prob100#99__23___<sha1>.JPG`) and three images are
`..TIF`. The image id is the file name with its final extension removed (`1ffa9627-...-6045cb817f5b.`,
trailing dot kept), as in the benchmark's split file. No patient ids (patient_id None).

One row per file found in a class folder, in sorted order: `source_file` is the class folder and
`source_row` the file's 1-based position in that folder's sorted listing. Native columns:
`class_folder`, and its parts `class_code` ("1.0") and `class_name` ("DR2").
- An image in a folder that is not one of the 39 is quarantined (`unknown_code:class_folder`).
- A file that is not an image by its extension (`Thumbs.db`, `notes.txt`) is a row quarantined as
  `not_an_image`, so that nothing in a class folder goes uncounted.
- Images outside any class folder (directly in `1000images/`, or in sub-folders of a class folder) are
  reported as unlisted images.
Tolerated: the dataset root being the `1000images` folder itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.codes import Code, apply_codes
from focus_dagster.datasets.images import IMAGE_SUFFIXES
from focus_dagster.datasets.marks import mark_rows
from focus_dagster.datasets.reader import DatasetReader
from focus_dagster.datasets.records import LabelTable
from focus_dagster.datasets.rows import standard_frame
from focus_dagster.errors import DatasetLayoutError

IMAGE_ROOT = "1000images"

# The 39 published class folders and the number of images each holds (1,000 in all).
CLASS_FOLDERS: dict[str, int] = {
    "0.0.Normal": 38,
    "0.1.Tessellated fundus": 13,
    "0.2.Large optic cup": 50,
    "0.3.DR1": 18,
    "1.0.DR2": 49,
    "1.1.DR3": 39,
    "2.0.BRVO": 44,
    "2.1.CRVO": 22,
    "3.RAO": 16,
    "4.Rhegmatogenous RD": 57,
    "5.0.CSCR": 14,
    "5.1.VKH disease": 14,
    "6.Maculopathy": 74,
    "7.ERM": 26,
    "8.MH": 23,
    "9.Pathological myopia": 54,
    "10.0.Possible glaucoma": 13,
    "10.1.Optic atrophy": 12,
    "11.Severe hypertensive retinopathy": 15,
    "12.Disc swelling and elevation": 13,
    "13.Dragged Disc": 10,
    "14.Congenital disc abnormality": 10,
    "15.0.Retinitis pigmentosa": 22,
    "15.1.Bietti crystalline dystrophy": 8,
    "16.Peripheral retinal degeneration and break": 14,
    "17.Myelinated nerve fiber": 11,
    "18.Vitreous particles": 14,
    "19.Fundus neoplasm": 8,
    "20.Massive hard exudates": 13,
    "21.Yellow-white spots-flecks": 29,
    "22.Cotton-wool spots": 10,
    "23.Vessel tortuosity": 14,
    "24.Chorioretinal atrophy-coloboma": 15,
    "25.Preretinal hemorrhage": 10,
    "26.Fibrosis": 10,
    "27.Laser Spots": 20,
    "28.Silicon oil in eye": 19,
    "29.0.Blur fundus without PDR": 114,
    "29.1.Blur fundus with suspected PDR": 45,
}
NATIVE_COLUMNS = ["class_folder", "class_code", "class_name"]
REQUIRED_COLUMNS = ["class_folder"]
CODES = [Code("class_folder", choices=tuple(CLASS_FOLDERS))]
_FOLDER_NAME = re.compile(r"^(\d+(?:\.\d+)?)\.(.+)$")


class Jsiec1000Reader(DatasetReader):
    key = "jsiec1000"

    def read_table(self, root: Path) -> LabelTable:
        image_root = image_root_folder(root, self.key)
        rows = [row for folder in class_folders(root, image_root) for row in folder_rows(root, image_root, folder)]
        columns = ["image_id", "image_path", "source_file", "source_row", *NATIVE_COLUMNS, "not_image"]
        frame = pd.DataFrame(rows, columns=columns)
        native = frame[["source_file", "source_row", *NATIVE_COLUMNS]]
        table = standard_frame(
            native,
            image_id=frame["image_id"],
            image_path=frame["image_path"],
            patient_id=None,
            native_split=None,
        )
        table = mark_non_images(table, frame["not_image"].to_numpy(dtype=bool))
        # The folder listing is the label "file": report it as such.
        return LabelTable(apply_codes(table, CODES, self.key), [f"{image_root or '.'}/"], [image_root or "."])


def image_root_folder(root: Path, dataset: str) -> str:
    """`1000images` under the root, or "" when the root is that folder itself (it holds class folders)."""
    if (root / IMAGE_ROOT).is_dir():
        return IMAGE_ROOT
    if any((root / name).is_dir() for name in CLASS_FOLDERS):
        return ""
    raise DatasetLayoutError(
        f"[{dataset}] no {IMAGE_ROOT}/ folder under {root}, and {root} holds none of the 39 class folders "
        f"(e.g. {IMAGE_ROOT}/0.0.Normal). Point the dataset root at the folder holding {IMAGE_ROOT}/."
    )


def class_folders(root: Path, image_root: str) -> list[str]:
    base = root / image_root
    return sorted(entry.name for entry in os.scandir(base) if entry.is_dir(follow_symlinks=False))


def folder_rows(root: Path, image_root: str, folder: str) -> list[tuple]:
    """One row per regular file of a class folder, in sorted order (the published listing)."""
    rel_folder = f"{image_root}/{folder}" if image_root else folder
    names = sorted(e.name for e in os.scandir(root / rel_folder) if e.is_file(follow_symlinks=True))
    code, name = split_folder_name(folder)
    rows = []
    for position, file_name in enumerate(names, start=1):
        is_image = os.path.splitext(file_name)[1].lower() in IMAGE_SUFFIXES
        rows.append((
            image_id_of(file_name),
            f"{rel_folder}/{file_name}",
            rel_folder,
            position,
            folder,
            code,
            name,
            not is_image,
        ))
    return rows


def image_id_of(file_name: str) -> str:
    """The file name without its final extension: `uuid..JPG` -> `uuid.` (the benchmark's image id)."""
    return file_name.rsplit(".", 1)[0] if "." in file_name else file_name


def split_folder_name(folder: str) -> tuple[str | None, str | None]:
    """`1.0.DR2` -> ("1.0", "DR2"); `11.Severe hypertensive retinopathy` -> ("11", "Severe ...")."""
    match = _FOLDER_NAME.match(folder)
    return (match.group(1), match.group(2)) if match else (None, None)


def mark_non_images(rows: pd.DataFrame, not_image: np.ndarray) -> pd.DataFrame:
    """Quarantine rows for files that are not images by their extension (they are counted, not dropped)."""
    reasons = [
        f"{p} is not an image file (extension not one of {sorted(IMAGE_SUFFIXES)})"
        for p in rows.loc[not_image, "image_path"]
    ]
    return mark_rows(rows, not_image, "not_an_image", reasons)


READER = Jsiec1000Reader()
