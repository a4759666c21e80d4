"""FocusStorage: the DuckDB database of tables and the artifact folder of heavy files.

DuckDB admits one writing process at a time, so a connection is opened only to move finished data in
or out and closed straight away; every asset step that uses it sits in the `duckdb` pool (limit 1).
"""

from __future__ import annotations

import hashlib
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pandas as pd
from dagster import ConfigurableResource
from dagster_duckdb import DuckDBResource

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


class FocusStorage(ConfigurableResource):
    """Tables in DuckDB (`schema.table`), heavy outputs under `artifacts_dir`."""

    duckdb: DuckDBResource
    artifacts_dir: str

    @contextmanager
    def connect(self) -> Iterator:
        Path(self.duckdb.database).parent.mkdir(parents=True, exist_ok=True)
        with self.duckdb.get_connection() as con:
            try:
                yield con
            finally:
                con.close()

    def replace_table(self, schema: str, table: str, frame: pd.DataFrame) -> str:
        """Replace `schema.table` with `frame` in one transaction; returns the qualified name."""
        name = _qualified(schema, table)
        with self.connect() as con:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            con.register("incoming", frame)
            con.execute("BEGIN TRANSACTION")
            con.execute(f"DROP TABLE IF EXISTS {name}")
            con.execute(create_table_sql(name, frame))
            con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM incoming")
            con.execute("COMMIT")
            con.unregister("incoming")
        return name

    def replace_rows(self, schema: str, table: str, frame: pd.DataFrame, key: str, value: str) -> str:
        """Replace the rows of `schema.table` whose `key` equals `value` (one partition of a shared table)."""
        name = _qualified(schema, table)
        with self.connect() as con:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            con.register("incoming", frame)
            con.execute("BEGIN TRANSACTION")
            con.execute(create_table_sql(name, frame, if_not_exists=True))
            con.execute(f"DELETE FROM {name} WHERE {key} = ?", [value])
            con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM incoming")
            con.execute("COMMIT")
            con.unregister("incoming")
        return name

    def artifact_path(self, rel: str) -> Path:
        return Path(self.artifacts_dir) / rel

    def write_parquet(self, rel: str, frame: pd.DataFrame) -> tuple[Path, str]:
        """Write a frame under the artifact store atomically (temp file + rename); returns path and sha256."""
        path = self.artifact_path(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
        return path, file_sha256(path)

    def read_table(self, schema: str, table: str, where: str | None = None, params: list | None = None) -> pd.DataFrame:
        name = _qualified(schema, table)
        query = f"SELECT * FROM {name}" + (f" WHERE {where}" if where else "")
        with self.connect() as con:
            return con.execute(query, params or []).df()


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


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


def _qualified(schema: str, table: str) -> str:
    for part in (schema, table):
        if not _IDENTIFIER.match(part):
            raise ValueError(f"{part!r} is not a plain lower-case SQL identifier")
    return f"{schema}.{table}"
