"""The reader: what every dataset's reader does the same way once its label files are parsed.

A subclass parses its publisher's label files into a `LabelTable`; `DatasetReader.read` then runs the
checks every dataset shares (paths that leave the root, as written or through symbolic links, duplicate
ids, missing or broken images) and splits the rows into kept records and quarantine; kept images whose
content is not their extension's format are listed in the image notes.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, ClassVar

import pandas as pd

from focus_dagster.datasets.files import links_leaving_root, list_images
from focus_dagster.datasets.images import DEFAULT_IMAGE_CHECK, IMAGE_CHECKS, extension_mismatch, inspect_image
from focus_dagster.datasets.marks import REASON, REASON_CODE, mark_rows, with_reason_columns
from focus_dagster.datasets.records import (
    EXTENSION_MISMATCH,
    NOTE_COLUMNS,
    QUARANTINE_COLUMNS,
    STANDARD_COLUMNS,
    LabelTable,
    ReadResult,
)
from focus_dagster.errors import DatasetLayoutError, EmptyDatasetError
from focus_dagster.progress import Progress


class DatasetReader(ABC):
    """Base class: subclasses parse their label files; the shared checks live in `read`.

    `key` is the dataset's registry key; its title and source live in the registry only.
    """

    key: ClassVar[str]

    def read(self, root: str | Path, *, image_check: str = DEFAULT_IMAGE_CHECK,
             say: Callable[[str], None] | None = None) -> ReadResult:
        """Read the dataset under `root` into native records, quarantining rows that cannot be trusted.

        image_check: "header" (magic bytes and end marker: fast, catches truncation), "full" (decode every
        image) or "none" (existence only). `say` gets the image checks' progress lines (focus_dagster/progress.py).
        """
        if image_check not in IMAGE_CHECKS:
            raise ValueError(f"image_check must be one of {IMAGE_CHECKS}, got {image_check!r}")
        root = Path(root)
        if not root.is_dir():
            raise DatasetLayoutError(
                f"[{self.key}] dataset root {root} does not exist or is not a folder. "
                f"Set its path in focus.yaml (datasets: {{{self.key}: /path/to/root}}) or use the synthetic default."
            )
        table = self.read_table(root)
        if table.rows.empty:
            raise EmptyDatasetError(
                f"[{self.key}] {root}: the label file(s) {table.label_files} hold no records. "
                "Check that the dataset was extracted completely."
            )
        return finalize(self.key, root, table, image_check, say)

    @abstractmethod
    def read_table(self, root: Path) -> LabelTable:
        """Parse the dataset's label files into rows (standard + native columns)."""


def finalize(dataset: str, root: Path, table: LabelTable, image_check: str,
             say: Callable[[str], None] | None = None) -> ReadResult:
    """Apply the checks every dataset shares and split rows into kept records and quarantine (`say`: the image
    checks' progress lines)."""
    rows = _prepared_rows(table)
    listing = sorted({p for d in table.image_dirs for p in list_images(root, d, recursive=True)})
    rows = _mark_escaping_paths(rows)
    rows = _mark_links_leaving_root(rows, root)
    _mark_duplicates(rows)
    notes = _mark_image_defects(dataset, rows, root, set(listing), image_check, say)

    bad = rows[REASON].notna()
    quarantine = _quarantine_frame(dataset, rows[bad])
    records = _records_frame(rows[~bad])
    referenced = set(rows["image_path"])
    unlisted = [p for p in listing if p not in referenced]
    image_notes = _notes_frame(dataset, rows, {i: n for i, n in notes.items() if not bad[i]})
    return ReadResult(dataset, root, records, quarantine, unlisted, list(table.label_files), image_notes)


def path_leaves_root(rel: str) -> bool:
    """True for a label-file path that is absolute or climbs out of the dataset root with `..`."""
    rel = rel.replace("\\", "/")
    if not rel or rel.startswith("/") or re.match(r"^[A-Za-z]:", rel):
        return True
    return os.path.normpath(rel).split("/")[0] == ".."


def _prepared_rows(table: LabelTable) -> pd.DataFrame:
    """The table's rows with the reason columns, every standard column present, ids and paths as text."""
    rows = with_reason_columns(table.rows.reset_index(drop=True))
    for column in ("patient_id", "native_split"):
        if column not in rows:
            rows[column] = None
    rows["image_path"] = rows["image_path"].astype(str)
    rows["image_id"] = rows["image_id"].astype(str)
    return rows


def _mark_escaping_paths(rows: pd.DataFrame) -> pd.DataFrame:
    """Quarantine rows whose image path is absolute or leaves the root, whatever the reader built."""
    escaping = rows["image_path"].map(path_leaves_root).astype(bool)
    reasons = [
        f"image path {p!r} leaves the dataset root; only paths inside it are accepted"
        for p in rows.loc[escaping, "image_path"]
    ]
    return mark_rows(rows, escaping, "path_escapes_root", reasons)


def _mark_links_leaving_root(rows: pd.DataFrame, root: Path) -> pd.DataFrame:
    """Quarantine rows whose image path stays inside the root as written but leaves it through a symbolic
    link (the file, or a folder on its way, links elsewhere): only what lies inside the root is the dataset."""
    live = rows[REASON].isna()
    leaving = links_leaving_root(root, rows.loc[live, "image_path"])
    if not leaving:
        return rows
    real_root = os.path.realpath(root)
    mask = live & rows["image_path"].isin(leaving)
    reasons = [
        f"image path {p!r} leads through a symbolic link to {leaving[p]}, outside the dataset root {real_root}; "
        "only files inside the root are accepted (copy the images into the root rather than linking them)"
        for p in rows.loc[mask, "image_path"]
    ]
    return mark_rows(rows, mask, "path_escapes_root", reasons)


def _mark_duplicates(rows: pd.DataFrame) -> None:
    """Identical repeated rows: keep the first. Repeated ids with different content: quarantine them all,
    because nothing says which version is right."""
    live = rows[REASON].isna()
    dup = rows["image_id"].duplicated(keep=False) & live
    if not dup.any():
        return
    content = [c for c in rows.columns if c not in ("source_row", REASON, REASON_CODE)]
    for image_id, group in rows[dup].groupby("image_id", sort=False):
        first_row = group["source_row"].iloc[0]
        identical = len(group[content].astype(str).drop_duplicates()) == 1
        targets = group.index[1:] if identical else group.index
        for i in targets:
            if identical:
                rows.at[i, REASON] = f"duplicate of {group.at[group.index[0], 'source_file']} row {first_row}"
                rows.at[i, REASON_CODE] = "duplicate_row"
            else:
                where = ", ".join(f"{f} row {r}" for f, r in zip(group["source_file"], group["source_row"]))
                rows.at[i, REASON] = f"image_id {image_id!r} appears with different values ({where})"
                rows.at[i, REASON_CODE] = "conflicting_duplicate_id"


def _mark_image_defects(dataset: str, rows: pd.DataFrame, root: Path, on_disk: set[str], image_check: str,
                        say: Callable[[str], None] | None = None) -> dict:
    """Quarantine rows still live whose image is missing or fails `image_check`; return the notes on the
    sound ones (row index -> note) whose content is not the format their extension names."""
    notes = {}
    live = rows.index[rows[REASON].isna()]
    # Reading every image's header (or all of it) is the long part of a large dataset's read.
    progress = Progress(f"{dataset} image checks ({image_check})", len(live), "images", say)
    for i in live:
        note = _mark_image_defect(rows, i, root, on_disk, image_check)
        if note:
            notes[i] = note
        progress.advance()
    return notes


def _mark_image_defect(rows: pd.DataFrame, i, root: Path, on_disk: set[str], image_check: str) -> str | None:
    """Quarantine row `i` if its image is missing or fails `image_check`; else the note on its format, if any."""
    rel = rows.at[i, "image_path"]
    path = root / rel
    if rel not in on_disk and not path.is_file():
        rows.at[i, REASON] = f"image file {rel} not found"
        rows.at[i, REASON_CODE] = "image_missing"
        return None
    defect, kind = inspect_image(path, image_check)
    if defect:
        rows.at[i, REASON] = f"image file {rel}: {defect}"
        rows.at[i, REASON_CODE] = "image_unreadable"
        return None
    return extension_mismatch(rel, kind)


def _notes_frame(dataset: str, rows: pd.DataFrame, notes: dict) -> pd.DataFrame:
    noted = rows.loc[list(notes)]
    texts = pd.Series(list(notes.values()), index=noted.index, dtype=object)
    return _located_frame(dataset, noted, {"note_code": EXTENSION_MISMATCH, "note": texts}, NOTE_COLUMNS)


def _quarantine_frame(dataset: str, bad: pd.DataFrame) -> pd.DataFrame:
    return _located_frame(dataset, bad, {"reason_code": bad[REASON_CODE].astype(str),
                                         "reason": bad[REASON].astype(str)}, QUARANTINE_COLUMNS)


def _located_frame(dataset: str, rows: pd.DataFrame, extra: dict, columns: list[str]) -> pd.DataFrame:
    """Rows named by where they came from (dataset, label file and row, image id and path), plus `extra`."""
    frame = pd.DataFrame(
        {
            "dataset": dataset,
            "source_file": rows["source_file"].astype(str),
            "source_row": rows["source_row"].astype("int64"),
            "image_id": rows["image_id"].astype(str),
            "image_path": rows["image_path"].astype(str),
            **extra,
        },
        columns=columns,
    )
    return frame.reset_index(drop=True)


def _records_frame(good: pd.DataFrame) -> pd.DataFrame:
    native = [c for c in good.columns if c not in STANDARD_COLUMNS and c not in (REASON, REASON_CODE)]
    records = good[STANDARD_COLUMNS + native].reset_index(drop=True).copy()
    records["patient_id"] = records["patient_id"].astype(object).where(records["patient_id"].notna(), None)
    records["source_row"] = records["source_row"].astype("int64")
    return records
