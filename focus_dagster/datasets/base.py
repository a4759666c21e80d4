"""What every dataset reader shares: the record contract, code validation, image checks and accounting.

A reader turns one dataset, laid out exactly as its publisher distributes it, into a table of *native
records*: one row per image, the dataset's own columns (typed, codes validated), plus a few standard
columns that every later step relies on. Rows that cannot be trusted are not dropped: they go to a
quarantine table with a reason, so that `rows read = rows kept + rows quarantined` always holds.
"""

from __future__ import annotations

import io
import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterable

import numpy as np
import pandas as pd

from focus_dagster.errors import (
    DatasetLayoutError,
    EmptyDatasetError,
    LabelFileError,
    missing_columns_error,
)

# Columns every native-records table starts with, in this order; the dataset's own columns follow.
STANDARD_COLUMNS = ["image_id", "image_path", "patient_id", "native_split", "source_file", "source_row"]
QUARANTINE_COLUMNS = ["dataset", "source_file", "source_row", "image_id", "image_path", "reason_code", "reason"]
SPLITS = ("train", "val", "test")
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp"})
IMAGE_CHECKS = ("none", "header", "full")

# Private bookkeeping columns a reader may set on rows it already knows to be bad.
_REASON = "_reason"
_REASON_CODE = "_reason_code"


# ----------------------------------------------------------------------------------------------- results


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
    """Native records of one dataset plus everything that did not make it, with reasons."""

    dataset: str
    root: Path
    records: pd.DataFrame
    quarantine: pd.DataFrame
    unlisted_images: list[str]
    label_files: list[str]

    @property
    def rows_read(self) -> int:
        return len(self.records) + len(self.quarantine)

    def quarantine_counts(self) -> dict[str, int]:
        """Quarantined rows per reason code, most frequent first."""
        return {str(k): int(v) for k, v in self.quarantine["reason_code"].value_counts().items()}

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
        }

    def accounting_line(self) -> str:
        """`rows read = kept + quarantined`, with the reasons and the unlisted-image count, in one line."""
        reasons = ", ".join(f"{code}: {n}" for code, n in self.quarantine_counts().items()) or "none"
        return (
            f"{self.dataset}: {self.rows_read} rows read = {len(self.records)} kept + {len(self.quarantine)} "
            f"quarantined (reasons: {reasons}); {len(self.unlisted_images)} image(s) on disk named by no label row"
        )


# ------------------------------------------------------------------------------------------------ reader


class DatasetReader(ABC):
    """Base class: subclasses parse their label files; the shared checks live in `read`."""

    key: ClassVar[str]
    title: ClassVar[str]

    def read(self, root: str | Path, *, image_check: str = "header") -> ReadResult:
        """Read the dataset under `root` into native records, quarantining rows that cannot be trusted.

        image_check: "header" (magic bytes and end marker: fast, catches truncation), "full" (decode every
        image) or "none" (existence only).
        """
        if image_check not in IMAGE_CHECKS:
            raise ValueError(f"image_check must be one of {IMAGE_CHECKS}, got {image_check!r}")
        root = Path(root)
        if not root.is_dir():
            raise DatasetLayoutError(
                f"[{self.key}] dataset root {root} does not exist or is not a folder. "
                "Set its path in focus.yaml (datasets: {key}: /path/to/root) or use the synthetic default."
            )
        table = self.read_table(root)
        if table.rows.empty:
            raise EmptyDatasetError(
                f"[{self.key}] {root}: the label file(s) {table.label_files} hold no records. "
                "Check that the dataset was extracted completely."
            )
        return finalize(self.key, root, table, image_check)

    @abstractmethod
    def read_table(self, root: Path) -> LabelTable:
        """Parse the dataset's label files into rows (standard + native columns)."""


# ------------------------------------------------------------------------------------ finding the files


def find_existing(root: Path, dataset: str, candidates: Iterable[str], what: str) -> str:
    """The first candidate path (relative to root) that exists; a layout error naming all of them if none."""
    candidates = list(candidates)
    for rel in candidates:
        if (root / rel).exists():
            return rel
    raise DatasetLayoutError(
        f"[{dataset}] no {what} under {root}: looked for {candidates}. "
        "Point the dataset root at the folder that holds the publisher's files."
    )


def find_nested_root(root: Path, marker: str) -> Path:
    """`root`, or a copy of it nested once under a folder named like `marker` (a common unzip artefact)."""
    if (root / marker).exists():
        return root
    nested = root / root.name
    if root.name and (nested / marker).exists():
        return nested
    return root


def list_images(root: Path, rel_dir: str, *, recursive: bool = False) -> list[str]:
    """Image files (by suffix, any case) under root/rel_dir as root-relative POSIX paths, sorted."""
    base = root / rel_dir
    found: list[str] = []
    if not base.is_dir():
        return found
    stack = [base]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if recursive:
                        stack.append(Path(entry.path))
                elif os.path.splitext(entry.name)[1].lower() in IMAGE_SUFFIXES:
                    found.append(Path(entry.path).relative_to(root).as_posix())
    return sorted(found)


def index_by_stem(paths: Iterable[str]) -> dict[str, str]:
    """Map `folder/stem` (extension and its case removed) to the real path, for datasets that name images by id."""
    index: dict[str, str] = {}
    for p in paths:
        stem = p.rsplit(".", 1)[0] if "." in p.rsplit("/", 1)[-1] else p
        index.setdefault(stem, p)
    return index


# -------------------------------------------------------------------------------------- label file input


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


# ------------------------------------------------------------------------------------- marking bad rows


def with_reason_columns(rows: pd.DataFrame) -> pd.DataFrame:
    """A copy of `rows` with the (empty) reason columns that `mark_rows` and `finalize` use."""
    rows = rows.copy()
    for column in (_REASON, _REASON_CODE):
        if column not in rows:
            rows[column] = pd.Series([None] * len(rows), index=rows.index, dtype=object)
    return rows


def mark_rows(rows: pd.DataFrame, mask, reason_code: str, reasons) -> pd.DataFrame:
    """Give the rows in `mask` a quarantine reason (a string, or one string per masked row).

    A row keeps the first reason it was given, so the earliest, most specific check wins. Returns a copy.
    """
    rows = with_reason_columns(rows)
    mask = pd.Series(mask, index=rows.index).astype(bool)
    if isinstance(reasons, str):
        reasons = [reasons] * int(mask.sum())
    reasons = pd.Series(list(reasons), index=rows.index[mask], dtype=object)
    fresh = mask & rows[_REASON].isna()
    if fresh.any():
        rows.loc[fresh, _REASON] = reasons[fresh[mask]].to_numpy()
        rows.loc[fresh, _REASON_CODE] = reason_code
    return rows


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


# ------------------------------------------------------------------------------------------------- codes


@dataclass(frozen=True)
class Code:
    """The values one published column may take, and the type it becomes.

    Exactly one of `choices` (exact strings), `int_range` (inclusive) or `number` describes the domain.
    `blank` and `na` name raw values that mean "missing" (they become null).
    """

    column: str
    choices: tuple[str, ...] = ()
    int_range: tuple[int, int] | None = None
    number: bool = False
    blank: bool = False
    na: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.choices:
            domain = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.int_range:
            domain = f"an integer {self.int_range[0]}..{self.int_range[1]}"
        else:
            domain = "a number"
        missing = [repr(v) for v in self.na] + (["blank"] if self.blank else [])
        return domain + (f" or {'/'.join(missing)}" if missing else "")


def apply_codes(rows: pd.DataFrame, codes: Iterable[Code], dataset: str) -> pd.DataFrame:
    """Type the coded columns and mark rows holding a value outside the published codes.

    Marked rows get `_reason` naming the column, the value and what was expected; they are quarantined
    by `finalize`. Columns absent from the table are skipped (required columns are checked on reading).
    """
    rows = with_reason_columns(rows)
    for code in codes:
        if code.column not in rows:
            continue
        typed, invalid = _coerce(rows[code.column].astype(str).str.strip(), code)
        values = rows.loc[invalid, code.column].astype(str)
        reasons = [f"unknown {code.column} value {v!r} (expected {code.describe()})" for v in values]
        rows = mark_rows(rows, invalid, f"unknown_code:{code.column}", reasons)
        rows[code.column] = typed
    return rows


def _coerce(raw: pd.Series, code: Code) -> tuple[pd.Series, pd.Series]:
    missing = raw.isin(code.na) | ((raw == "") if code.blank else False)
    if code.choices:
        valid = raw.isin(code.choices) | missing
        typed = raw.where(~missing, None).astype(object)
        return typed, ~valid
    numbers = pd.to_numeric(raw.where(~missing, None), errors="coerce")
    valid = missing | numbers.notna()
    if code.int_range is not None:
        lo, hi = code.int_range
        integral = numbers.notna() & (numbers == numbers.round()) & (numbers >= lo) & (numbers <= hi)
        valid = missing | integral
        typed = numbers.where(integral).astype("Int64")
        return typed, ~valid
    return numbers.astype("Float64"), ~valid


# -------------------------------------------------------------------------------------------- the checks


def finalize(dataset: str, root: Path, table: LabelTable, image_check: str) -> ReadResult:
    """Apply the checks every dataset shares and split rows into kept records and quarantine."""
    rows = with_reason_columns(table.rows.reset_index(drop=True))
    for column in ("patient_id", "native_split"):
        if column not in rows:
            rows[column] = None
    rows["image_path"] = rows["image_path"].astype(str)
    rows["image_id"] = rows["image_id"].astype(str)

    listing = sorted({p for d in table.image_dirs for p in list_images(root, d, recursive=True)})
    escaping = rows["image_path"].map(path_leaves_root).astype(bool)
    rows = mark_rows(rows, escaping, "path_escapes_root", [
        f"image path {p!r} leaves the dataset root; only paths inside it are accepted" for p in rows.loc[escaping, "image_path"]
    ])
    _mark_duplicates(rows)
    _mark_image_defects(rows, root, set(listing), image_check)

    bad = rows[_REASON].notna()
    quarantine = _quarantine_frame(dataset, rows[bad])
    records = _records_frame(rows[~bad])
    referenced = set(rows["image_path"])
    unlisted = [p for p in listing if p not in referenced]
    return ReadResult(dataset, root, records, quarantine, unlisted, list(table.label_files))


def path_leaves_root(rel: str) -> bool:
    """True for a label-file path that is absolute or climbs out of the dataset root with `..`."""
    rel = rel.replace("\\", "/")
    if not rel or rel.startswith("/") or re.match(r"^[A-Za-z]:", rel):
        return True
    return os.path.normpath(rel).split("/")[0] == ".."


def _mark_duplicates(rows: pd.DataFrame) -> None:
    """Identical repeated rows: keep the first. Repeated ids with different content: quarantine them all,
    because nothing says which version is right."""
    live = rows[_REASON].isna()
    dup = rows["image_id"].duplicated(keep=False) & live
    if not dup.any():
        return
    content = [c for c in rows.columns if c not in ("source_row", _REASON, _REASON_CODE)]
    for image_id, group in rows[dup].groupby("image_id", sort=False):
        first_row = group["source_row"].iloc[0]
        identical = len(group[content].astype(str).drop_duplicates()) == 1
        targets = group.index[1:] if identical else group.index
        for i in targets:
            if identical:
                rows.at[i, _REASON] = f"duplicate of {group.at[group.index[0], 'source_file']} row {first_row}"
                rows.at[i, _REASON_CODE] = "duplicate_row"
            else:
                where = ", ".join(f"{f} row {r}" for f, r in zip(group["source_file"], group["source_row"]))
                rows.at[i, _REASON] = f"image_id {image_id!r} appears with different values ({where})"
                rows.at[i, _REASON_CODE] = "conflicting_duplicate_id"


def _mark_image_defects(rows: pd.DataFrame, root: Path, on_disk: set[str], image_check: str) -> None:
    for i in rows.index[rows[_REASON].isna()]:
        rel = rows.at[i, "image_path"]
        path = root / rel
        if rel not in on_disk and not path.is_file():
            rows.at[i, _REASON] = f"image file {rel} not found"
            rows.at[i, _REASON_CODE] = "image_missing"
            continue
        defect = image_defect(path, image_check)
        if defect:
            rows.at[i, _REASON] = f"image file {rel}: {defect}"
            rows.at[i, _REASON_CODE] = "image_unreadable"


def _quarantine_frame(dataset: str, bad: pd.DataFrame) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "dataset": dataset,
            "source_file": bad["source_file"].astype(str),
            "source_row": bad["source_row"].astype("int64"),
            "image_id": bad["image_id"].astype(str),
            "image_path": bad["image_path"].astype(str),
            "reason_code": bad[_REASON_CODE].astype(str),
            "reason": bad[_REASON].astype(str),
        },
        columns=QUARANTINE_COLUMNS,
    )
    return frame.reset_index(drop=True)


def _records_frame(good: pd.DataFrame) -> pd.DataFrame:
    native = [c for c in good.columns if c not in STANDARD_COLUMNS and c not in (_REASON, _REASON_CODE)]
    records = good[STANDARD_COLUMNS + native].reset_index(drop=True).copy()
    records["patient_id"] = records["patient_id"].astype(object).where(records["patient_id"].notna(), None)
    records["source_row"] = records["source_row"].astype("int64")
    return records


# ---------------------------------------------------------------------------------------------- images

_TAIL_BYTES = 4096


def image_defect(path: Path, image_check: str = "header") -> str | None:
    """Why an image file cannot be used, or None when it looks sound.

    "header" checks the format signature and that the file ends with the format's end marker (a
    truncated download loses it); odd files (data after the end marker) fall back to a full decode.
    """
    if image_check == "none":
        return None
    try:
        size = path.stat().st_size
        if size == 0:
            return "empty file"
        with open(path, "rb") as handle:
            head = handle.read(16)
            handle.seek(max(0, size - _TAIL_BYTES))
            tail = handle.read()
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    kind = sniff_image_format(head)
    if kind is None:
        return f"not an image (starts with bytes {head[:8].hex()})"
    if image_check == "full" or not _has_end_marker(kind, tail):
        return _decode_defect(path)
    return None


def sniff_image_format(head: bytes) -> str | None:
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head.startswith(b"BM"):
        return "bmp"
    return None


def _has_end_marker(kind: str, tail: bytes) -> bool:
    if kind == "jpeg":
        return b"\xff\xd9" in tail
    if kind == "png":
        return b"IEND" in tail[-16:]
    return False  # no cheap end marker: decode


def _decode_defect(path: Path) -> str | None:
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()
    except Exception as exc:  # PIL raises many types for broken files; all mean "unusable"
        return f"cannot be decoded ({type(exc).__name__}: {exc})"
    return None


# -------------------------------------------------------------------------------------------- utilities


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
