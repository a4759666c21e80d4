"""Standard rows: the contract's leading columns built from what a label table names.

Most published label tables name each image either by its file name in one folder (`file_name_rows`) or
by an id that restarts in every split (`split_rows`); both resolve the name to the file actually on
disk, whatever the case of its extension. `mark_unsafe_file_names` quarantines names that are not plain
file names; paths that leave the root are caught again by the reader's shared checks, whoever built them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from focus_dagster.datasets.files import index_by_stem, list_images
from focus_dagster.datasets.images import IMAGE_SUFFIXES
from focus_dagster.datasets.marks import mark_rows
from focus_dagster.datasets.records import STANDARD_COLUMNS


def standard_frame(native: pd.DataFrame, **standard) -> pd.DataFrame:
    """Prepend the standard columns to a native table (replacing native columns of the same name)."""
    frame = native.copy()
    for name in reversed(STANDARD_COLUMNS):
        if name in standard:
            value = standard[name]
            if name in frame:
                frame = frame.drop(columns=name)
            frame.insert(0, name, value)
    return frame


def file_stem(name: str) -> str:
    """A published file name without its image extension (any case); other names unchanged."""
    stem, suffix = os.path.splitext(name)
    return stem if suffix.lower() in IMAGE_SUFFIXES else name


def resolve_file_names(names: pd.Series, listing: list[str], folder: str, default_suffix: str) -> pd.Series:
    """File names as they are on disk: a name given without extension is matched to the image of that
    stem in `folder` (the label files of some copies drop the extension), else given `default_suffix`."""
    by_stem: dict[str, str] = {}
    for path in listing:
        rel = path[len(folder) + 1 :] if folder else path
        by_stem.setdefault(file_stem(rel), rel)

    def resolve(name: str) -> str:
        if file_stem(name) != name or not name:
            return name
        return by_stem.get(name, name + default_suffix)

    return names.map(resolve)


def file_name_rows(
    native: pd.DataFrame,
    root: Path,
    name_column: str,
    image_dir: str,
    *,
    default_suffix: str,
    native_split: str | None = None,
) -> pd.DataFrame:
    """Standard rows for a label table that names each image by its file name inside `image_dir`.

    The image id is the name without extension; a name without extension is matched to the file on
    disk; names that are blank or carry a folder part are quarantined. No patient id: the datasets laid
    out this way (Messidor-2, REFUGE, G1020) publish none.
    """
    names = native[name_column]
    files = resolve_file_names(names, list_images(root, image_dir), image_dir, default_suffix)
    rows = standard_frame(
        native,
        image_id=names.map(file_stem),
        image_path=image_dir + "/" + files,
        patient_id=None,
        native_split=native_split,
    )
    return mark_unsafe_file_names(rows, names, name_column, image_dir)


def mark_unsafe_file_names(rows: pd.DataFrame, names: pd.Series, column: str, folder: str) -> pd.DataFrame:
    """Quarantine rows whose label names no plain file: a blank name, or one with a folder part.

    A file name such as `../x.png` or `/etc/passwd` could otherwise point at a file outside the image
    folder (or, with enough `..`, outside the dataset root); the published label files hold bare names.
    """
    names = names.astype(str).str.strip()
    blank = names == ""
    nested = (names.str.contains(r"[/\\]", regex=True) | names.isin([".", ".."])) & ~blank
    rows = mark_rows(rows, blank, "missing_file_name", f"{column} is blank: the row names no image")
    return mark_rows(
        rows,
        nested,
        "path_escapes_root",
        [f"{column} {n!r} is not a plain file name; only files directly in {folder}/ are accepted" for n in names[nested]],
    )


def split_rows(
    root: Path, native: pd.DataFrame, split: str, image_dir: str, extension: str, name_column: str = "ID"
) -> pd.DataFrame:
    """Standard columns for one split whose images are named by `name_column`: image_id `<split>/<name>`.

    The file on disk wins over the published extension's case (`7.PNG`, `7.JPG`); a name with no file
    keeps the published extension, so the shared checks report it as missing. Used by the datasets whose
    names restart per split (RFMiD, RFMiD 2.0, IDRiD).
    """
    on_disk = index_by_stem(list_images(root, image_dir))
    expected = image_dir + "/" + native[name_column]
    return standard_frame(
        native,
        image_id=split + "/" + native[name_column],
        image_path=[on_disk.get(stem, stem + extension) for stem in expected],
        patient_id=None,
        native_split=split,
    )
