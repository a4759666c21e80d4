"""Marking bad rows: the bookkeeping that sends a row to quarantine with a reason instead of dropping it.

A reader, the code checks and the shared checks all mark rows the same way; `finalize` later moves every
marked row to the quarantine table.
"""

from __future__ import annotations

import pandas as pd

# Bookkeeping columns on rows already known to be bad. The leading underscore keeps them apart from
# the dataset's own columns (readers skip `_*` columns) and out of the records `finalize` returns.
REASON = "_reason"
REASON_CODE = "_reason_code"


def with_reason_columns(rows: pd.DataFrame) -> pd.DataFrame:
    """A copy of `rows` with the (empty) reason columns that `mark_rows` and `finalize` use."""
    rows = rows.copy()
    for column in (REASON, REASON_CODE):
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
    fresh = mask & rows[REASON].isna()
    if fresh.any():
        rows.loc[fresh, REASON] = reasons[fresh[mask]].to_numpy()
        rows.loc[fresh, REASON_CODE] = reason_code
    return rows
