"""Published codes: the values each coded column may take, the type it becomes, and rows that break them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import pandas as pd

from focus_dagster.datasets.marks import mark_rows, with_reason_columns


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
        """The domain in words, as quarantine reasons quote it (`an integer 0..4 or 'NA'/blank`)."""
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

    Marked rows get a reason naming the column, the value and what was expected; they are quarantined
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
    """(typed values, invalid mask) of one raw text column under its code."""
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
