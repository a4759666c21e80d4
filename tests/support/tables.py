"""The tables as a test reads and edits them: DuckDB views over the Parquet files of a FOCUS_HOME's table store."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from resources.tables import TableStore


def store_of(where) -> TableStore:
    """The table store of a FocusConfig, or of a FOCUS_HOME folder with the default layout."""
    return TableStore(where.tables if hasattr(where, "tables") else str(Path(where) / "artifacts" / "tables"))


@contextmanager
def table_views(where):
    """A DuckDB connection with every table as a view (`metrics.values`, ...)."""
    with store_of(where).views() as con:
        yield con


def query(where, sql: str, params: list | None = None) -> pd.DataFrame:
    with table_views(where) as con:
        return con.execute(sql, params or []).df()


def edit_partition(where, table: str, partition: str | None, change) -> pd.DataFrame:
    """Plant a change in one partition (`change(frame) -> frame`), its lineage untouched; returns the original."""
    store = store_of(where)
    original = store.read(table, partition)
    store.edit(table, partition, change(original.copy()))
    return original


def sql_edit(where, table: str, partition: str | None, *statements: str) -> pd.DataFrame:
    """Plant a change written as SQL (UPDATE / DELETE on `table`, e.g. `labels.harmonised`) in one partition,
    its lineage untouched; returns the original rows."""
    import duckdb

    store = store_of(where)
    original = store.read(table, partition)
    schema = table.split(".")[0]
    with duckdb.connect() as con:
        con.execute(f"CREATE SCHEMA {schema}")
        con.register("original", original)
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM original")
        for statement in statements:
            con.execute(statement)
        changed = con.execute(f"SELECT * FROM {table}").df()
    store.edit(table, partition, changed)
    return original
