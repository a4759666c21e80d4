"""The reader of a dataset declared in focus.yaml: a label table (CSV, TSV or XLSX) naming one image per row.

The declaration (`focus_dagster/datasets/declaration.py`) names the columns; this reader checks that the
table has them and that each holds something, then builds the standard record columns and validates every
declared column against its scale. A value outside the scale quarantines its row with the column and the
value (`out_of_scale:<column>`); a blank cell (empty, or NA / N/A / null / none / nan in any case) is stored
as null. Numbers of a numeric scale (ICDR grade, cup-to-disc ratio, age) are stored as numbers, every other
column as the text of the file.

Mistakes in the declaration itself stop the read with one error naming the key, the column and the file:
a column the table lacks, a column blank in every row, an image column none of whose files exists, a
delimiter that does not split the header.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Callable

import pandas as pd

from focus_dagster.datasets.declaration import (
    AGE_RANGE,
    ICDR_SCALE,
    ColumnTask,
    DatasetDeclaration,
    IcdrTask,
    VcdrTask,
    described,
    matches,
    number,
)
from focus_dagster.datasets.label_files import (
    DELIMITERS,
    decode_label_bytes,
    header_columns,
    normalise_header,
    read_label_csv,
)
from focus_dagster.datasets.marks import mark_rows, with_reason_columns
from focus_dagster.datasets.reader import DatasetReader, path_leaves_root
from focus_dagster.datasets.records import LabelTable
from focus_dagster.datasets.rows import standard_frame
from focus_dagster.errors import DatasetLayoutError

BLANKS = ("", "na", "n/a", "null", "none", "nan")
DETECTED_ENCODINGS = ("utf-8-sig", "cp1252")
EXAMPLES = 3


class DeclaredReader(DatasetReader):
    """Reads a dataset of the user's own as its focus.yaml declaration describes it."""

    def __init__(self, key: str, declaration: DatasetDeclaration):
        self.key = key
        self.declaration = declaration

    def read_table(self, root: Path) -> LabelTable:
        spec = self.declaration
        table = self._read_label_table(root)
        self._check_columns(table)
        rows = self._standard_rows(root, table)
        rows = self._validate_scales(rows)
        return LabelTable(rows, [spec.labels], image_folders(rows["image_path"], root))

    # ----------------------------------------------------------------------------------------- the table

    def _where(self, key: str) -> str:
        return f"datasets.{self.key}.{key}"

    def _read_label_table(self, root: Path) -> pd.DataFrame:
        spec = self.declaration
        if path_leaves_root(spec.labels):
            raise DatasetLayoutError(f"[{self.key}] {self._where('labels')} = {spec.labels!r} leaves the dataset root; "
                                     "give the label table's path relative to root.")
        path = root / spec.labels
        if not path.is_file():
            raise DatasetLayoutError(f"[{self.key}] label table {path} ({self._where('labels')}) is missing; the path "
                                     f"is relative to root ({root}).")
        if path.suffix.lower() in (".xlsx", ".xlsm"):
            return self._read_workbook(path)
        encodings = (spec.encoding,) if spec.encoding else DETECTED_ENCODINGS
        text = decode_label_bytes(path.read_bytes(), str(path), self.key, encodings)
        delimiter = self._delimiter(text, path)
        return read_label_csv(root, spec.labels, self.key, [], encodings, delimiter)

    def _read_workbook(self, path: Path) -> pd.DataFrame:
        sheet = self.declaration.sheet if self.declaration.sheet is not None else 0
        try:
            frame = pd.read_excel(path, sheet_name=sheet, dtype=str, keep_default_na=False, na_filter=False)
        except ValueError as error:  # an unknown sheet name or index
            raise DatasetLayoutError(f"[{self.key}] {path}: {error} ({self._where('sheet')}).") from error
        frame = frame.rename(columns=normalise_header).fillna("").astype(str)
        frame = frame.apply(lambda column: column.str.strip())
        frame.insert(0, "source_file", self.declaration.labels)
        # Row numbers as a spreadsheet shows them: the header is row 1.
        frame.insert(1, "source_row", range(2, len(frame) + 2))
        return frame

    def _delimiter(self, text: str, path: Path) -> str:
        """The declared delimiter, checked against the header; else the one the header is split by."""
        header = text.splitlines()[0] if text else ""
        counts = header_columns(text)
        best = max(DELIMITERS, key=lambda d: counts[d])
        declared = self.declaration.delimiter
        if declared is not None:
            if counts.get(declared, len(header.split(declared))) == 1 and counts[best] > 1:
                raise DatasetLayoutError(
                    f"[{self.key}] {path}: {self._where('delimiter')} is {declared!r}, but the header splits on "
                    f"{best!r} into {counts[best]} columns ({header[:80]!r}); set delimiter: {best!r} or remove the "
                    "key to detect it.")
            return declared
        if path.suffix.lower() == ".tsv" and counts["\t"] > 1:
            return "\t"
        return best

    def _check_columns(self, table: pd.DataFrame) -> None:
        """Every declared column is in the table and holds a value somewhere."""
        spec = self.declaration
        found = [c for c in table.columns if c not in ("source_file", "source_row")]
        for key, column in spec.columns().items():
            if column not in table.columns:
                raise DatasetLayoutError(
                    f"[{self.key}] {self._where(key)} names column {column!r}, which {spec.labels} lacks; its "
                    f"columns: {found}. Correct the column name in focus.yaml (names are case-sensitive).")
            if blank(table[column]).all():
                raise DatasetLayoutError(
                    f"[{self.key}] {self._where(key)} names column {column!r} of {spec.labels}, which is blank in "
                    f"every one of its {len(table)} rows; point the key at the column that holds the values, or "
                    "remove it.")

    # ------------------------------------------------------------------------------------------ the rows

    def _standard_rows(self, root: Path, table: pd.DataFrame) -> pd.DataFrame:
        spec = self.declaration
        paths = table[spec.image].map(image_path)
        self._check_images_exist(root, paths)
        ids = table[spec.id].str.strip() if spec.id else paths.map(lambda p: posixpath.splitext(p)[0])
        patients = (table[spec.patient].where(~blank(table[spec.patient]), None) if spec.patient else None)
        rows = standard_frame(table, image_id=ids, image_path=paths, patient_id=patients,
                              native_split=self._native_split(table))
        rows = mark_rows(with_reason_columns(rows), paths == "", "missing_file_name",
                         f"{spec.image} is blank: the row names no image")
        if spec.split.column:
            rows = self._mark_unknown_splits(rows, table[spec.split.column])
        return rows

    def _check_images_exist(self, root: Path, paths: pd.Series) -> None:
        named = paths[paths != ""]
        if named.empty or any((root / p).is_file() for p in named if not path_leaves_root(p)):
            return
        examples = ", ".join(repr(p) for p in named.head(EXAMPLES))
        raise DatasetLayoutError(
            f"[{self.key}] none of the {len(named)} image files that column {self.declaration.image!r} "
            f"({self._where('image')}) names exists under root {root} (e.g. {examples}); image paths are relative to "
            f"root: check {self._where('root')}, or name the column that holds the image paths.")

    def _native_split(self, table: pd.DataFrame) -> pd.Series | None:
        split = self.declaration.split
        if not split.column:
            return None
        values = split.value_map()

        def benchmark_split(cell: str) -> str | None:
            return next((name for name, accepted in values.items() if matches(cell, accepted)), None)

        return table[split.column].map(benchmark_split)

    def _mark_unknown_splits(self, rows: pd.DataFrame, cells: pd.Series) -> pd.DataFrame:
        column = self.declaration.split.column
        bad = rows["native_split"].isna()
        accepted = "; ".join(f"{name}: {described(v)}" for name, v in self.declaration.split.value_map().items())
        reasons = [f"{column} value {v!r} is not a split ({accepted}; split.values in focus.yaml maps others)"
                   for v in cells[bad]]
        return mark_rows(rows, bad, f"out_of_scale:{column}", reasons)

    def _validate_scales(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Quarantine values outside each declared column's scale; store blanks as null, numbers as numbers.

        Every column a task or attribute is read from is listed, with "any value" where its declaration lists
        no closed set, so that blanks are null everywhere."""
        for column, (scale, check, numeric) in self._scales().items():
            cells = rows[column].astype(str).str.strip()
            empty = blank(cells)
            bad = ~empty & ~cells.map(check).astype(bool)
            reasons = [f"{column} value {v!r} is outside its declared scale ({scale})" for v in cells[bad]]
            rows = mark_rows(rows, bad, f"out_of_scale:{column}", reasons)
            typed = cells.where(~empty, None)
            rows[column] = pd.to_numeric(typed, errors="coerce").astype("Float64") if numeric else typed.astype(object)
        return rows

    def _scales(self) -> dict[str, tuple[str, Callable[[str], bool], bool]]:
        """column -> (its scale in words, whether a non-blank value is on it, whether it is stored as a number)."""
        scales: dict[str, tuple[str, Callable[[str], bool], bool]] = {}
        for spec in self.declaration.tasks.declared().values():
            if isinstance(spec, IcdrTask):
                low, high = ICDR_SCALE
                scales[spec.icdr] = (f"ICDR grade, a whole number {low}..{high}", _whole_number(low, high), True)
                edema = spec.edema_flag()
                if edema is not None:
                    values = edema.positive + edema.negative
                    scales[edema.column] = (f"edema: {described(values)}", lambda v, a=values: matches(v, a), False)
            elif isinstance(spec, VcdrTask):
                scales[spec.vcdr] = ("vertical cup-to-disc ratio, a number 0..1", _number_in(0.0, 1.0), True)
            elif isinstance(spec, ColumnTask):
                values = spec.positive + (spec.negative or ())
                scales[spec.column] = ((described(values), lambda v, a=values: matches(v, a), False)
                                       if spec.negative is not None else ("any value", _any, False))
        attributes = self.declaration.attributes
        if attributes.age:
            scales[attributes.age] = (f"age in years, {AGE_RANGE[0]:g}..{AGE_RANGE[1]:g}", _number_in(*AGE_RANGE), True)
        coded = {"sex": ("female", "male"), "quality": ("adequate", "inadequate"), "eye": ("right", "left")}
        for name, groups in coded.items():
            spec = getattr(attributes, name)
            lists = [getattr(spec, group) for group in groups] if spec is not None else []
            if spec is not None and all(values is not None for values in lists):
                values = tuple(v for group in lists for v in group)
                scales[spec.column] = (f"{name}: {described(values)}", lambda v, a=values: matches(v, a), False)
            elif spec is not None:
                scales[spec.column] = ("any value", _any, False)
        camera = attributes.camera_spec()
        if camera is not None and camera.column:
            scales[camera.column] = ("any value", _any, False)
        return scales


# --------------------------------------------------------------------------------------------- helpers


def blank(cells: pd.Series) -> pd.Series:
    """True where a cell holds nothing: empty, or a missing-value word (NA, N/A, null, none, nan)."""
    return cells.isna() | cells.astype(str).str.strip().str.casefold().isin(BLANKS)


def image_path(cell: str) -> str:
    """An image cell as a POSIX path relative to the root (`.\\img\\a.jpg` -> `img/a.jpg`)."""
    path = str(cell).strip().replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path


def image_folders(paths: pd.Series, root: Path) -> list[str]:
    """The folders holding the named images, so that images no row names are listed (most general first)."""
    folders = sorted({posixpath.dirname(p) for p in paths if p and not path_leaves_root(p)})
    return [f for f in folders if not any(f.startswith(g + "/") for g in folders if g and g != f)
            and not (f and "" in folders)] or [""]


def _any(value: str) -> bool:
    return True


def _whole_number(low: int, high: int) -> Callable[[str], bool]:
    def on_scale(value: str) -> bool:
        n = number(value)
        return n is not None and n == int(n) and low <= n <= high
    return on_scale


def _number_in(low: float, high: float) -> Callable[[str], bool]:
    def on_scale(value: str) -> bool:
        n = number(value)
        return n is not None and low <= n <= high
    return on_scale
