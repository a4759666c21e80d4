"""FocusStorage: the DuckDB database of tables and the artifact folder of heavy files.

DuckDB admits one writing process at a time, so a connection is opened only to move finished data in
or out and closed straight away; every asset step that uses it sits in the `duckdb` pool (limit 1).
Tables and paths are named by `resources.layout`; this class only moves data.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd
from dagster import ConfigurableResource
from dagster_duckdb import DuckDBResource

from focus_dagster.files import atomic_path, file_sha256
from resources import layout
from resources.layout import Table

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


class FocusStorage(ConfigurableResource):
    """Tables in DuckDB (`schema.table`), heavy outputs under `artifacts_dir`."""

    duckdb: DuckDBResource
    artifacts_dir: str

    @classmethod
    def from_config(cls, config) -> FocusStorage:
        return cls(duckdb=DuckDBResource(database=str(config.database)), artifacts_dir=str(config.artifacts))

    @contextmanager
    def connect(self) -> Iterator:
        Path(self.duckdb.database).parent.mkdir(parents=True, exist_ok=True)
        with self.duckdb.get_connection() as con:
            try:
                yield con
            finally:
                con.close()

    # ------------------------------------------------------------------------------------------- tables

    def replace_table(self, table: Table, frame: pd.DataFrame) -> str:
        """Replace the whole table with `frame` in one transaction; returns the qualified name."""
        name = _qualified(table)
        return self._replace(table, frame, lambda con: [(f"DROP TABLE IF EXISTS {name}", []),
                                                        (create_table_sql(name, frame), [])])

    def replace_partition(self, table: Table, partition: str, frame: pd.DataFrame) -> str:
        """Replace the rows of one partition of a shared table (its `partition_column` equals `partition`).

        A column the frame has and a table written by an earlier version lacks is added first (null in the old
        rows), so a new column never fails a step on an existing FOCUS_HOME."""
        name = _qualified(table)

        def make_room(con) -> list[tuple[str, list]]:
            con.execute(create_table_sql(name, frame, if_not_exists=True))
            present = {row[0] for row in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ?",
                [table.schema, table.name]).fetchall()}
            added = [(f'ALTER TABLE {name} ADD COLUMN "{column}" {duckdb_type(dtype)}', [])
                     for column, dtype in frame.dtypes.items() if column not in present]
            return [*added, (f"DELETE FROM {name} WHERE {_partition_column(table)} = ?", [partition])]

        return self._replace(table, frame, make_room)

    def _replace(self, table: Table, frame: pd.DataFrame, make_room) -> str:
        """In one transaction on one connection: `make_room(con)` runs what it must and returns the statements
        that clear the rows `frame` replaces; then `frame` is inserted by column name."""
        name = _qualified(table)
        with self.connect() as con:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {table.schema}")
            con.register("incoming", frame)
            con.execute("BEGIN TRANSACTION")
            for sql, params in make_room(con):
                con.execute(sql, params)
            con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM incoming")
            con.execute("COMMIT")
            con.unregister("incoming")
        return name

    def read_table(self, table: Table) -> pd.DataFrame:
        return self._select(table)

    def read_partition(self, table: Table, partition: str) -> pd.DataFrame:
        """The rows of one partition of a shared table."""
        return self._select(table, f"{_partition_column(table)} = ?", [partition])

    def read_records(self, dataset: str) -> pd.DataFrame:
        return self.read_table(layout.records_table(dataset))

    def _select(self, table: Table, where: str | None = None, params: list | None = None) -> pd.DataFrame:
        query = f"SELECT * FROM {_qualified(table)}" + (f" WHERE {where}" if where else "")
        with self.connect() as con:
            return con.execute(query, params or []).df()

    # ---------------------------------------------------------------------------------------- artifacts

    def artifact_path(self, rel: str) -> Path:
        return Path(self.artifacts_dir) / rel

    def write_artifact(self, rel: str, write: Callable[[Path], None], suffix: str = "") -> tuple[Path, str]:
        """Write an artifact atomically (`write` fills a temporary path); returns its path and sha256."""
        path = self.artifact_path(rel)
        with atomic_path(path, suffix) as partial:
            write(partial)
        return path, file_sha256(path)

    def write_parquet(self, rel: str, frame: pd.DataFrame) -> tuple[Path, str]:
        return self.write_artifact(rel, lambda partial: frame.to_parquet(partial, index=False))

    def read_parquet(self, rel: str) -> pd.DataFrame:
        return pd.read_parquet(self.artifact_path(rel))

    def read_labels(self, dataset: str) -> pd.DataFrame:
        """The harmonised labels of one dataset, from the Parquet copy (no DuckDB connection needed)."""
        return self.read_parquet(layout.labels_file(dataset))

    def has_labels(self, dataset: str) -> bool:
        return self.artifact_path(layout.labels_file(dataset)).exists()


def create_table_sql(name: str, frame: pd.DataFrame, if_not_exists: bool = False) -> str:
    """DDL with column types taken from the pandas dtypes.

    Letting DuckDB infer types from the data fails for columns that hold only nulls (it types them NULL,
    and the next partition's strings cannot be inserted); the dtype says what the column is meant to hold.
    """
    columns = ", ".join(f'"{column}" {duckdb_type(dtype)}' for column, dtype in frame.dtypes.items())
    return f"CREATE TABLE {'IF NOT EXISTS ' if if_not_exists else ''}{name} ({columns})"


def duckdb_type(dtype) -> str:
    if pd.api.types.is_bool_dtype(dtype):
        return "BOOLEAN"
    if pd.api.types.is_integer_dtype(dtype):
        return "BIGINT"
    if pd.api.types.is_float_dtype(dtype):
        return "DOUBLE"
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return "TIMESTAMP"
    return "VARCHAR"


def _qualified(table: Table) -> str:
    for part in (table.schema, table.name):
        if not _IDENTIFIER.match(part):
            raise ValueError(f"{part!r} is not a plain lower-case SQL identifier")
    return table.qualified


def _partition_column(table: Table) -> str:
    if table.partition_column is None:
        raise ValueError(f"{table} holds one partition only; replace or read it whole")
    return table.partition_column
