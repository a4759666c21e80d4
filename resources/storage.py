"""FocusStorage: the DuckDB database of tables and the artifact folder of heavy files.

DuckDB admits one writing process at a time, so a connection is opened only to move finished data in
or out and closed straight away; every asset step that uses it sits in the `duckdb` pool (limit 1).
Tables and paths are named by `resources.layout`; this class only moves data.
"""

from __future__ import annotations

import json

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd
from dagster import ConfigurableResource
from dagster_duckdb import DuckDBResource

from focus_dagster import lineage
from focus_dagster.errors import NotMaterialisedError
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

    def replace_table(self, table: Table, frame: pd.DataFrame, stamp: dict | None = None) -> str:
        """Replace the whole table with `frame` in one transaction (with its lineage `stamp`); returns its name."""
        return self.replace_partitions([(table, None, frame)], stamp)[0]

    def replace_partition(self, table: Table, partition: str, frame: pd.DataFrame, stamp: dict | None = None,
                          stamps: tuple[dict, ...] = ()) -> str:
        """Replace the rows of one partition of a shared table (its `partition_column` equals `partition`).

        `stamp` becomes the current lineage of its asset partition and `stamps` (the lineage rows refer to by
        `lineage_id`) are kept, all in the transaction that writes the rows. A column the frame has and a table
        written by an earlier version lacks is added first (null in the old rows), so a new column never fails a
        step on an existing FOCUS_HOME."""
        return self.replace_partitions([(table, partition, frame)], stamp, stamps)[0]

    def replace_partitions(self, writes: list[tuple[Table, str | None, pd.DataFrame]], stamp: dict | None = None,
                           stamps: tuple[dict, ...] = ()) -> list[str]:
        """Several replacements (of one partition each, or of a whole table where the partition is None) and
        their lineage, in one transaction."""
        return self._replace([(table, frame, _table_room(table, frame) if partition is None
                               else _partition_room(table, partition, frame))
                              for table, partition, frame in writes], stamp, stamps)

    def _replace(self, writes: list, stamp: dict | None, stamps: tuple[dict, ...] = ()) -> list[str]:
        """In one transaction on one connection, for each (table, frame, make_room): `make_room(con)` runs what it
        must and returns the statements that clear the rows `frame` replaces; then `frame` is inserted by column
        name. The lineage stamps go in with them."""
        with self.connect() as con:
            for table, _, _ in writes:
                con.execute(f"CREATE SCHEMA IF NOT EXISTS {table.schema}")
            _create_lineage_tables(con)
            con.execute("BEGIN TRANSACTION")
            for table, frame, make_room in writes:
                for sql, params in make_room(con):
                    con.execute(sql, params)
                con.register("incoming", frame)
                con.execute(f"INSERT INTO {_qualified(table)} BY NAME SELECT * FROM incoming")
                con.unregister("incoming")
            for value in (*stamps, *([stamp] if stamp else [])):
                _keep_stamp(con, value)
            if stamp:
                con.execute(f"INSERT OR REPLACE INTO {layout.CURRENT} VALUES (?, ?, ?)",
                            [stamp["asset"], stamp["partition"] or "", lineage.stamp_id(stamp)])
            con.execute("COMMIT")
        return [_qualified(table) for table, _, _ in writes]

    def read_table(self, table: Table) -> pd.DataFrame:
        return self._select(table)

    def read_partition(self, table: Table, partition: str) -> pd.DataFrame:
        """The rows of one partition of a shared table."""
        return self._select(table, f"{_partition_column(table)} = ?", [partition])

    def read_records(self, dataset: str) -> pd.DataFrame:
        return self.read_table(layout.records_table(dataset))

    def read_stamped(self, reads: list[tuple[Table, str | None]], asset: str, partition: str
                     ) -> tuple[list[pd.DataFrame], dict | None]:
        """Tables (whole, or one partition each) and the current lineage of `asset`/`partition`, read in one
        transaction: the stamp describes exactly the rows returned, even while another step writes."""
        with self.connect() as con:
            _create_lineage_tables(con)
            con.execute("BEGIN TRANSACTION")
            frames = [con.execute(*_select_sql(table, partition_key)).df() for table, partition_key in reads]
            found = _current_stamp(con, asset, partition)
            con.execute("COMMIT")
        return frames, found

    def read_tables_with_lineage(self, tables: list[Table]) -> tuple[list[pd.DataFrame | None], dict[str, str]]:
        """Whole tables (None for one not written yet) and the current lineage stamp id of every asset
        partition (`asset[partition]`), in one transaction: the ids describe exactly the rows returned."""
        with self.connect() as con:
            _create_lineage_tables(con)
            present = {tuple(row) for row in con.execute(
                "SELECT table_schema, table_name FROM information_schema.tables").fetchall()}
            con.execute("BEGIN TRANSACTION")
            frames = [con.execute(*_select_sql(table, None)).df() if (table.schema, table.name) in present else None
                      for table in tables]
            current = con.execute(f"SELECT asset, partition, stamp_id FROM {layout.CURRENT}").fetchall()
            con.execute("COMMIT")
        return frames, {f"{asset}[{partition}]" if partition else asset: stamp_id
                        for asset, partition, stamp_id in current}

    def current_stamp(self, asset: str, partition: str) -> dict | None:
        with self.connect() as con:
            _create_lineage_tables(con)
            return _current_stamp(con, asset, partition)

    def stamp(self, stamp_id: str) -> dict | None:
        """A stamp kept in `lineage.stamps`, by id."""
        with self.connect() as con:
            _create_lineage_tables(con)
            row = con.execute(f"SELECT stamp FROM {layout.STAMPS} WHERE stamp_id = ?", [stamp_id]).fetchone()
        return lineage.loads(row[0]) if row else None

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

    def write_parquet(self, rel: str, frame: pd.DataFrame, stamp: dict | None = None) -> tuple[Path, str]:
        """A Parquet artifact, with its lineage stamp in the file's key-value metadata (one atomic rename)."""
        return self.write_artifact(rel, lambda partial: write_stamped_parquet(partial, frame, stamp))

    def read_parquet(self, rel: str) -> pd.DataFrame:
        """A Parquet artifact; NotMaterialisedError naming the asset partition that writes it when it is missing."""
        return pd.read_parquet(self._existing_artifact(rel))

    def read_stamped_parquet(self, rel: str) -> tuple[pd.DataFrame, dict | None]:
        """A Parquet artifact and the stamp written with it (None for a file written without lineage);
        NotMaterialisedError naming the asset partition that writes it when it is missing."""
        return read_stamped_parquet(self._existing_artifact(rel))

    def adapter_skipped_reason(self, adapter_key: str) -> str | None:
        """Why no adapter `adapter_key` was trained (the record lora_adapters wrote), or None when one was."""
        path = self.artifact_path(layout.ADAPTERS.skipped(adapter_key))
        return json.loads(path.read_text())["reason"] if path.is_file() else None

    def read_labels(self, dataset: str) -> pd.DataFrame:
        """The harmonised labels of one dataset, from the Parquet copy (no DuckDB connection needed)."""
        return self.read_parquet(layout.labels_file(dataset))

    def read_stamped_labels(self, dataset: str) -> tuple[pd.DataFrame, dict | None]:
        return self.read_stamped_parquet(layout.labels_file(dataset))

    def _existing_artifact(self, rel: str) -> Path:
        """The artifact's path, or the error saying which upstream step has not written it (its run failed, a
        blocking check stopped it, or it never ran): a later step then names that step, not a missing file."""
        path = self.artifact_path(rel)
        if not path.is_file():
            asset, partition = artifact_producer(rel)
            raise NotMaterialisedError(asset, partition, str(path))
        return path

    def has_labels(self, dataset: str) -> bool:
        return self.artifact_path(layout.labels_file(dataset)).exists()


def artifact_producer(rel: str) -> tuple[str | None, str | None]:
    """(asset, partition key as the UI spells it) of the step that writes the artifact `rel`; (None, None)
    for a path the layout does not name."""
    for name_file, asset in ((layout.labels_file, "harmonised_labels"), (layout.questions_file, "yes_no_questions")):
        found = re.fullmatch(_placeholders(name_file(_DATASET)), rel)
        if found:
            return asset, found["dataset"]
    outputs = ((layout.PROBE_SKIPPED.file, "probe_predictions"), (layout.TOKEN_PROBABILITIES.quarantine,
               "token_probabilities"), (layout.EMBEDDINGS.file, "image_embeddings"),
               (layout.TOKEN_PROBABILITIES.file, "token_probabilities"), (layout.PROBES.file, "probe_predictions"),
               (layout.PROBE_SCORES.file, "probe_predictions"))
    for model_file, asset in outputs:
        found = re.fullmatch(_placeholders(model_file(_MODEL, _DATASET)), rel)
        if found:
            return asset, str(layout.model_dataset_key(found["model"], found["dataset"]))
    return None, None


_MODEL, _DATASET = "<model>", "<dataset>"


def _placeholders(template: str) -> str:
    """A pattern matching the paths of a layout template written with the placeholders `<model>`, `<dataset>`."""
    pattern = re.escape(template)
    return pattern.replace(re.escape(_MODEL), "(?P<model>[^/]+)").replace(re.escape(_DATASET), "(?P<dataset>[^/]+?)")


def write_stamped_parquet(path: Path, frame: pd.DataFrame, stamp: dict | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if stamp is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               lineage.PARQUET_KEY: lineage.dumps(stamp).encode()})
    pq.write_table(table, path)


def read_stamped_parquet(path: Path) -> tuple[pd.DataFrame, dict | None]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return table.to_pandas(), lineage.loads((table.schema.metadata or {}).get(lineage.PARQUET_KEY))


def _table_room(table: Table, frame: pd.DataFrame):
    name = _qualified(table)
    return lambda con: [(f"DROP TABLE IF EXISTS {name}", []), (create_table_sql(name, frame), [])]


def _partition_room(table: Table, partition: str, frame: pd.DataFrame):
    name = _qualified(table)

    def make_room(con) -> list[tuple[str, list]]:
        con.execute(create_table_sql(name, frame, if_not_exists=True))
        present = dict(con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = ? AND table_name = ?",
            [table.schema, table.name]).fetchall())
        added = [(f'ALTER TABLE {name} ADD COLUMN "{column}" {duckdb_type(dtype)}', [])
                 for column, dtype in frame.dtypes.items() if column not in present]
        return [*added, *_retyped(con, table, frame, present),
                (f"DELETE FROM {name} WHERE {_partition_column(table)} = ?", [partition])]

    return make_room


def _retyped(con, table: Table, frame: pd.DataFrame, present: dict) -> list[tuple[str, list]]:
    """Columns whose type was guessed from a partition that had no values in them, retyped from this one's.

    A table is created with the column types of the first frame written; a column with no rows there (a
    dataset with no predictions at all) can come out as DOUBLE where the values are text, and every later
    partition would then fail to insert. Such a column, still without a single value in the table, takes the
    type of the first frame that has values in it; a column that holds values keeps its type.
    """
    name, statements = _qualified(table), []
    for column, dtype in frame.dtypes.items():
        wanted = duckdb_type(dtype)
        if column not in present or present[column] == wanted or not frame[column].notna().any():
            continue
        [(values,)] = con.execute(f'SELECT count("{column}") FROM {name}').fetchall()
        if values == 0:
            statements.append((f'ALTER TABLE {name} ALTER COLUMN "{column}" SET DATA TYPE {wanted}', []))
    return statements


def _select_sql(table: Table, partition: str | None) -> tuple[str, list]:
    if partition is None:
        return f"SELECT * FROM {_qualified(table)}", []
    return f"SELECT * FROM {_qualified(table)} WHERE {_partition_column(table)} = ?", [partition]


def _create_lineage_tables(con) -> None:
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {layout.STAMPS.schema}")
    con.execute(f"CREATE TABLE IF NOT EXISTS {layout.STAMPS} (stamp_id VARCHAR PRIMARY KEY, asset VARCHAR, "
                "partition VARCHAR, run_id VARCHAR, version VARCHAR, stamp VARCHAR)")
    con.execute(f"CREATE TABLE IF NOT EXISTS {layout.CURRENT} (asset VARCHAR, partition VARCHAR, stamp_id VARCHAR, "
                "PRIMARY KEY (asset, partition))")


def _keep_stamp(con, value: dict) -> None:
    con.execute(f"INSERT OR IGNORE INTO {layout.STAMPS} VALUES (?, ?, ?, ?, ?, ?)",
                [lineage.stamp_id(value), value["asset"], value["partition"] or "", value["run_id"], value["version"],
                 lineage.dumps(value)])


def _current_stamp(con, asset: str, partition: str) -> dict | None:
    row = con.execute(layout.CURRENT_STAMP_SQL, [asset, partition or ""]).fetchone()
    return lineage.loads(row[0]) if row else None


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
