"""Reading published label files: their encodings, header quirks and stray columns, strictly typed as text."""

from __future__ import annotations

import codecs
import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.marks import mark_rows
from focus_dagster.errors import DatasetLayoutError, LabelFileError, missing_columns_error

TRUNCATED_ROW = "truncated_row"
# The delimiters a label file may be written with: the publishers' commas, and what a spreadsheet set to a locale
# with decimal commas (';'), a TSV export (tab) or a database dump ('|') writes instead.
DELIMITERS = (",", ";", "\t", "|")


def decode_label_bytes(raw: bytes, path: str, dataset: str, encodings: tuple[str, ...]) -> str:
    """Decode a label file with the encodings its publisher uses, or say clearly which encoding it is not."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise LabelFileError(
            f"[{dataset}] {path} is UTF-16 encoded; this dataset's label files are {encodings[0]}. "
            "Re-save the file as UTF-8 (or restore the publisher's original)."
        )
    first: tuple[str, UnicodeDecodeError] | None = None
    for encoding in encodings:
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError as exc:
            first = first or (encoding, exc)
    assert first is not None
    encoding, error = first
    # A BOM-stripping codec (utf-8-sig) counts its offsets from after the BOM: count from the file's first byte.
    offset = error.start + _bom_length(raw, encoding)
    line_start = raw.rfind(b"\n", 0, offset) + 1
    line = raw.count(b"\n", 0, offset) + 1
    near = raw[max(line_start, offset - 24) : offset]
    raise LabelFileError(
        f"[{dataset}] {path} is not valid {' or '.join(encodings)}: byte 0x{raw[offset]:02x} at offset {offset} "
        f"on line {line} (byte {offset - line_start + 1} of the line, after {near!r}; offsets count from "
        "the file's first byte, BOM included). The publisher's file is in that encoding; re-save the file in it "
        "or restore the original."
    )


def _bom_length(raw: bytes, encoding: str) -> int:
    """Bytes of BOM a codec drops before decoding (and before counting the offsets of its errors)."""
    if codecs.lookup(encoding).name == "utf-8-sig" and raw.startswith(codecs.BOM_UTF8):
        return len(codecs.BOM_UTF8)
    return 0


def normalise_header(name: str) -> str:
    """Strip BOMs, ordinary and non-breaking spaces from a column name (published headers carry all three)."""
    return str(name).replace("\ufeff", "").replace("\xa0", " ").strip()


def header_columns(text: str, delimiters: tuple[str, ...] = DELIMITERS) -> dict[str, int]:
    """How many columns the first line of a CSV text splits into on each delimiter (quotes respected)."""
    header = text.splitlines()[0] if text else ""
    return {d: len(next(csv.reader(io.StringIO(header), delimiter=d), [])) for d in delimiters}


def refuse_other_delimiter(text: str, path, dataset: str, expected: str = ",") -> None:
    """Refuse a file whose header does not split on the delimiter its reader expects but does on another: it was
    re-saved with that one. Said before pandas reads it, which would report a field count ("Expected 1 fields in
    line 3, saw 2") or every required column missing, and name neither delimiter."""
    counts = header_columns(text, tuple(dict.fromkeys((expected, *DELIMITERS))))
    found = max(counts, key=counts.get)
    if counts[expected] > 1 or counts[found] <= 1:
        return
    raise LabelFileError(
        f"[{dataset}] {path} is not delimited by {expected!r} as its publisher's file is: its header line splits "
        f"into {counts[found]} columns on {found!r} and into {counts[expected]} on {expected!r}. Save it with "
        f"{expected!r} between the fields, or restore the publisher's original file."
    )


def read_label_csv(
    root: Path,
    rel_path: str,
    dataset: str,
    required: list[str],
    encodings: tuple[str, ...] = ("utf-8-sig",),
    delimiter: str = ",",
) -> pd.DataFrame:
    """Read a published CSV as strings, tolerant of its quirks, strict about the columns a reader needs.

    Every cell stays a string (codes are validated later, `NA` is not turned into a float); trailing
    empty columns are dropped; `source_file` and `source_row` (1-based data row) are added.
    """
    path = root / rel_path
    if not path.is_file():
        raise DatasetLayoutError(f"[{dataset}] label file {path} is missing. Expected the publisher's {rel_path}.")
    text = decode_label_bytes(path.read_bytes(), str(path), dataset, encodings)
    refuse_other_delimiter(text, path, dataset, delimiter)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_filter=False, sep=delimiter)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        if "EOF inside string" in str(exc):
            lines = csv_rows(text, delimiter)
            where = f" (the row starting on line {lines[-1].first_line})" if lines else ""
            raise LabelFileError(
                f"[{dataset}] {path} ends inside a quoted value{where}: the file is truncated, or a quote is never "
                "closed. Restore the publisher's complete file."
            ) from exc
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
    return mark_truncated_rows(frame, text, delimiter)


@dataclass(frozen=True)
class CsvRow:
    """One row as the csv module splits it: its fields and the physical lines it spans (1-based)."""

    fields: list[str]
    first_line: int
    last_line: int


def csv_rows(text: str, delimiter: str = ",") -> list[CsvRow]:
    """The rows pandas reads (header first; blank lines skipped as pandas skips them), with their line
    numbers; empty when the csv module cannot split the text."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows, previous = [], 0
    try:
        for fields in reader:
            if fields and not (len(fields) == 1 and not fields[0].strip()):
                rows.append(CsvRow(fields, previous + 1, reader.line_num))
            previous = reader.line_num
    except csv.Error:
        return []
    return rows


def mark_truncated_rows(frame: pd.DataFrame, text: str, delimiter: str = ",") -> pd.DataFrame:
    """Quarantine rows with fewer fields than the header names: a line cut short, not values to check.

    pandas fills the missing fields with empty strings, which the code checks would then report as
    unknown values; the field count says what really happened. Trailing header-less columns (a
    trailing comma on the header only) are not counted. Rows are matched to pandas' by position, and
    nothing is marked when the two parsers disagree on the number of rows.
    """
    rows = csv_rows(text, delimiter)
    if len(rows) != len(frame) + 1:
        return frame
    header = [normalise_header(name) for name in rows[0].fields]
    while header and not header[-1]:
        header.pop()
    expected = len(header)
    ends_mid_line = not text.endswith(("\n", "\r"))
    truncated, reasons = [], []
    for i, row in enumerate(rows[1:]):
        count = len(row.fields)
        short = count < expected
        truncated.append(short)
        if not short:
            continue
        last = f"{header[count - 1]!r} = {row.fields[-1]!r}" if count else "nothing"
        if i == len(rows) - 2 and ends_mid_line:
            reasons.append(
                f"row truncated: the file ends in the middle of line {row.last_line}, after {count} of {expected} "
                f"fields (last read: {last}, possibly cut short too); restore the publisher's complete file"
            )
        else:
            lines = f"line {row.first_line}"
            if row.last_line != row.first_line:
                lines = f"lines {row.first_line}-{row.last_line}"
            reasons.append(
                f"row truncated: the row on {lines} has {count} of {expected} fields (last read: {last}); "
                f"the columns from {header[count]!r} on are absent"
            )
    if not any(truncated):
        return frame
    return mark_rows(frame, truncated, TRUNCATED_ROW, reasons)


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
