"""Reading published label files: their encodings, header quirks and stray columns, strictly typed as text."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.errors import DatasetLayoutError, LabelFileError, missing_columns_error


def decode_label_bytes(raw: bytes, path: str, dataset: str, encodings: tuple[str, ...]) -> str:
    """Decode a label file with the encodings its publisher uses, or say clearly which encoding it is not."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise LabelFileError(
            f"[{dataset}] {path} is UTF-16 encoded; this dataset's label files are {encodings[0]}. "
            "Re-save the file as UTF-8 (or restore the publisher's original)."
        )
    error: UnicodeDecodeError | None = None
    for encoding in encodings:
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError as exc:
            error = error or exc
    assert error is not None
    bad = raw[error.start : error.start + 1].hex()
    raise LabelFileError(
        f"[{dataset}] {path} is not valid {' or '.join(encodings)}: byte 0x{bad} at offset {error.start}. "
        "The publisher's file is in that encoding; re-save the file in it or restore the original."
    )


def normalise_header(name: str) -> str:
    """Strip BOMs, ordinary and non-breaking spaces from a column name (published headers carry all three)."""
    return str(name).replace("\ufeff", "").replace("\xa0", " ").strip()


def read_label_csv(
    root: Path,
    rel_path: str,
    dataset: str,
    required: list[str],
    encodings: tuple[str, ...] = ("utf-8-sig",),
) -> pd.DataFrame:
    """Read a published CSV as strings, tolerant of its quirks, strict about the columns a reader needs.

    Every cell stays a string (codes are validated later, `NA` is not turned into a float); trailing
    empty columns are dropped; `source_file` and `source_row` (1-based data row) are added.
    """
    path = root / rel_path
    if not path.is_file():
        raise DatasetLayoutError(f"[{dataset}] label file {path} is missing. Expected the publisher's {rel_path}.")
    text = decode_label_bytes(path.read_bytes(), str(path), dataset, encodings)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_filter=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise LabelFileError(f"[{dataset}] {path} is not a readable CSV: {exc}") from exc
    frame = drop_empty_unnamed_columns(frame.rename(columns=normalise_header))
    if frame.columns.duplicated().any():
        dupes = sorted(set(frame.columns[frame.columns.duplicated()]))
        raise LabelFileError(f"[{dataset}] {path} has duplicate column names {dupes} after trimming spaces.")
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise missing_columns_error(dataset, str(path), required, list(frame.columns))
    frame = frame.apply(lambda col: col.str.strip())
    frame.insert(0, "source_file", rel_path)
    frame.insert(1, "source_row", np.arange(1, len(frame) + 1))
    return frame


def drop_empty_unnamed_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Drop header-less columns that hold nothing (trailing commas); keep and rename any that hold data."""
    keep, rename = [], {}
    for i, name in enumerate(frame.columns):
        unnamed = name == "" or name.startswith("Unnamed:")
        if unnamed and (frame.iloc[:, i].str.strip() == "").all():
            continue
        if unnamed:
            rename[name] = f"unnamed_{i}"
        keep.append(name)
    return frame[keep].rename(columns=rename)
