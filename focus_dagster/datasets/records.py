"""The record contract: what every dataset reader returns, whatever the publisher's layout.

A reader turns one dataset, laid out exactly as its publisher distributes it, into a table of *native
records*: one row per image, the dataset's own columns (typed, codes validated), plus a few standard
columns that every later step relies on. Rows that cannot be trusted are not dropped: they go to a
quarantine table with a reason, so that `rows read = rows kept + rows quarantined` always holds. Kept rows
with something a user should know about their image (a PNG saved under a `.jpg` name) stay in the records,
which keep their columns, and are listed in an image-notes table beside them, each with a code and a note.

No data library is imported here at run time, so the contract's names can be used anywhere cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# Columns every native-records table starts with, in this order; the dataset's own columns follow.
STANDARD_COLUMNS = ["image_id", "image_path", "patient_id", "native_split", "source_file", "source_row"]
QUARANTINE_COLUMNS = ["dataset", "source_file", "source_row", "image_id", "image_path", "reason_code", "reason"]
# Notes on kept records (the row stays in the records): `note_code` says what kind, `note` says it in words.
NOTE_COLUMNS = ["dataset", "source_file", "source_row", "image_id", "image_path", "note_code", "note"]
# A kept image whose content is not the format its extension names (decoded by its content).
EXTENSION_MISMATCH = "extension_mismatch"
# The values `native_split` (and every split assignment downstream) may take.
SPLITS = ("train", "val", "test")


@dataclass
class LabelTable:
    """What a reader found in the label files, before the shared image and identity checks.

    `rows` holds the standard columns (image_path relative to the root, POSIX style) and the native
    columns; `image_dirs` are the folders (relative to the root) that hold the dataset's images, used to
    find images that no label row names.
    """

    rows: pd.DataFrame
    label_files: list[str]
    image_dirs: list[str]


@dataclass
class ReadResult:
    """Native records of one dataset plus everything that did not make it, with reasons.

    `image_notes` (NOTE_COLUMNS) lists kept records whose image needs a word of warning; None when the
    reader that built the result did not look.
    """

    dataset: str
    root: Path
    records: pd.DataFrame
    quarantine: pd.DataFrame
    unlisted_images: list[str]
    label_files: list[str]
    image_notes: pd.DataFrame | None = None

    @property
    def rows_read(self) -> int:
        return len(self.records) + len(self.quarantine)

    def quarantine_counts(self) -> dict[str, int]:
        """Quarantined rows per reason code, most frequent first."""
        return {str(k): int(v) for k, v in self.quarantine["reason_code"].value_counts().items()}

    def note_counts(self) -> dict[str, int]:
        """Kept records with an image note, per note code, most frequent first."""
        if self.image_notes is None or self.image_notes.empty:
            return {}
        return {str(k): int(v) for k, v in self.image_notes["note_code"].value_counts().items()}

    def summary(self) -> dict:
        """The accounting line shown by the CLI and in the asset metadata."""
        return {
            "dataset": self.dataset,
            "rows_read": self.rows_read,
            "rows_kept": len(self.records),
            "rows_quarantined": len(self.quarantine),
            "quarantine_reasons": self.quarantine_counts(),
            "unlisted_images": len(self.unlisted_images),
            "label_files": list(self.label_files),
            "image_notes": self.note_counts(),
        }

    def accounting_line(self) -> str:
        """`rows read = kept + quarantined`, with the reasons and the unlisted-image count, in one line."""
        reasons = ", ".join(f"{code}: {n}" for code, n in self.quarantine_counts().items()) or "none"
        notes = self.note_counts()
        noted = (
            f"; {sum(notes.values())} kept record(s) with an image note ("
            + ", ".join(f"{code}: {n}" for code, n in notes.items()) + ")"
        ) if notes else ""
        return (
            f"{self.dataset}: {self.rows_read} rows read = {len(self.records)} kept + {len(self.quarantine)} "
            f"quarantined (reasons: {reasons}); {len(self.unlisted_images)} image(s) on disk named by no label row"
            + noted
        )
