"""Tables that many writers can share: one Parquet file per table partition, in a folder or an object store.

A write never changes a file another process may be reading. Each write is a *commit*: its frames go to new
files (`tables/<schema>.<table>/<partition>/<commit>.parquet`), its lineage stamps to
`lineage/stamps/<commit>.parquet`; then, each in one atomic step (a rename on a local disk, one PUT on an
object store), the pointer of every table partition it wrote (`tables/.../<partition>/CURRENT.json`) and, last,
the pointer of the asset partition that wrote them (`lineage/current/<asset>/<partition>.json`, naming the stamp
and the files). A reader resolves pointers and reads the files they name: it sees a partition whole, old or
new, never half; a read of an asset partition's tables through its lineage pointer sees one commit, even while
that asset partition is written again. Two runs writing different partitions share nothing but folders.
Superseded files are removed after a commit, except the newest two of each partition, so a reader that
resolved the previous pointer an instant before can still read it.

The tables are read with DuckDB, in memory: `views()` gives a connection with the familiar names
(`metrics.values`, `lineage.stamps`, ...) as views over the current files.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from contextlib import contextmanager
from urllib.parse import quote, unquote

import pandas as pd

from focus_dagster import lineage

WHOLE = "_whole"  # the partition folder of a table that is not partitioned
POINTER = "CURRENT.json"
KEEP_FILES = 2


class TableStore:
    """Table partitions under `url` (a local folder or any fsspec URL such as `s3://bucket/focus/tables`)."""

    def __init__(self, url: str):
        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        self.url = str(url)
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.local = isinstance(self.fs, LocalFileSystem)
        self.root = self.root.rstrip("/")

    # ---------------------------------------------------------------------------------------- writing

    def commit(self, writes: list, stamp: dict | None = None, stamps: tuple = ()) -> list[str]:
        """Write `(table, partition or None, frame)`s and their lineage as one commit (module docstring)."""
        commit = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        files = {}
        for table, partition, frame in writes:
            path = self._data_path(table.qualified, partition, commit)
            self._put(path, parquet_bytes(frame))
            files[_entry(table.qualified, partition)] = self._relative(path)
        kept = (*stamps, *([stamp] if stamp else []))
        if kept:
            self._put(f"{self.root}/lineage/stamps/{commit}.parquet", parquet_bytes(stamps_frame(kept)))
        stamp_id = lineage.stamp_id(stamp) if stamp else None
        for table, partition, _ in writes:
            self._put(self._pointer_path(table.qualified, partition), json.dumps({
                "file": files[_entry(table.qualified, partition)], "commit": commit, "stamp_id": stamp_id}).encode())
        if stamp:
            self._put(self._current_path(stamp["asset"], stamp["partition"] or ""), json.dumps({
                "asset": stamp["asset"], "partition": stamp["partition"] or "", "stamp_id": stamp_id,
                "commit": commit, "files": files, "stamp": stamp}, default=str).encode())
        for table, partition, _ in writes:
            self._collect(table.qualified, partition)
        return [table.qualified for table, _, _ in writes]

    def edit(self, table: str, partition: str | None, frame: pd.DataFrame) -> None:
        """Replace a partition's rows in place, its lineage unchanged (what an UPDATE was): for repairs and for
        tests that plant a defect. The asset partition that wrote it keeps its stamp and now names the new file."""
        commit = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        pointer = self._pointer(table, partition) or {}
        path = self._data_path(table, partition, commit)
        self._put(path, parquet_bytes(frame))
        self._put(self._pointer_path(table, partition), json.dumps({**pointer, "file": self._relative(path),
                                                                     "commit": commit}).encode())
        entry = _entry(table, partition)
        for current, found in self._lineage_pointers():
            if entry in found.get("files", {}):
                found["files"][entry] = self._relative(path)
                self._put(current, json.dumps(found, default=str).encode())

    def _put(self, path: str, data: bytes) -> None:
        if self.local:  # a temporary file beside the target, then one rename
            os.makedirs(os.path.dirname(path), exist_ok=True)
            partial = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
            with open(partial, "wb") as handle:
                handle.write(data)
            os.replace(partial, path)
        else:  # an object PUT is atomic: readers see the old object or the new one
            self.fs.pipe_file(path, data)

    def _collect(self, table: str, partition: str | None) -> None:
        """Remove superseded files of a partition: all but the one its pointer names and the newest KEEP_FILES."""
        folder = os.path.dirname(self._pointer_path(table, partition))
        current = self._pointer(table, partition)
        named = {self.path(current['file'])} if current else set()
        versions = sorted(p for p in self._list(folder) if p.endswith(".parquet"))
        for path in versions[:-KEEP_FILES]:
            if path not in named:
                try:
                    self.fs.rm_file(path)
                except FileNotFoundError:  # another writer collected it first
                    pass

    # ---------------------------------------------------------------------------------------- reading

    def tables(self) -> list[str]:
        """Every table with at least one partition (`schema.table`)."""
        return sorted(os.path.basename(p) for p in self._list(f"{self.root}/tables") if not p.endswith(".json"))

    def files(self, table: str, partition: str | None = "*") -> list[str]:
        """The current files of a table: of every partition (`"*"`), or of one (None: the whole table)."""
        if partition != "*":
            pointer = self._pointer(table, partition)
            return [self.path(pointer['file'])] if pointer else []
        return [found["file"] for found in self.partitions(table)]

    def partitions(self, table: str) -> list[dict]:
        """The current partitions of a table, each as its pointer names it: `partition` (None for a table written
        whole), `file` (full path), `url` (the file as DuckDB opens it on `connection()`) and `stamp_id` (the
        lineage stamp of the commit that wrote it; None for rows written without one)."""
        found = []
        for folder in sorted(self._list(f"{self.root}/tables/{table}")):
            pointer = self._read_json(f"{folder}/{POINTER}")
            if pointer:
                path = self.path(pointer["file"])
                found.append({"partition": partition_of(os.path.basename(folder)), "file": path,
                              "url": self._urls([path])[0], "stamp_id": pointer.get("stamp_id")})
        return found

    def has(self, table: str) -> bool:
        return bool(self.files(table))

    def read(self, table: str, partition: str | None = "*") -> pd.DataFrame | None:
        """A table (every partition, or one), or None when nothing of it was ever written."""
        return self.read_files(self.files(table, partition))

    def read_files(self, files: list[str]) -> pd.DataFrame | None:
        if not files:
            return None
        with self.connection() as con:
            return con.execute("SELECT * FROM read_parquet(?, union_by_name = true)", [self._urls(files)]).df()

    def current(self, asset: str, partition: str) -> dict | None:
        """The lineage pointer of an asset partition: its stamp id, commit and the files it wrote."""
        return self._read_json(self._current_path(asset, partition or ""))

    def current_stamps(self) -> dict[tuple[str, str], str]:
        """(asset, partition) -> the stamp id of what it holds now, for every asset partition."""
        return {(pointer["asset"], pointer["partition"]): pointer["stamp_id"] for _, pointer in self._lineage_pointers()}

    def _lineage_pointers(self):
        """(path, content) of the lineage pointer of every asset partition."""
        for folder in self._list(f"{self.root}/lineage/current"):
            for path in self._list(folder):
                pointer = self._read_json(path) if path.endswith(".json") else None
                if pointer:
                    yield path, pointer

    def stamp(self, stamp_id: str) -> dict | None:
        """A stamp kept by any commit, by id."""
        return self.stamps([stamp_id]).get(stamp_id)

    def stamps(self, stamp_ids) -> dict[str, dict]:
        """The stamps kept by any commit with these ids, by id (an id no commit kept is left out)."""
        files, wanted = self.stamp_files(), sorted(set(stamp_ids))
        if not files or not wanted:
            return {}
        with self.connection() as con:
            rows = con.execute("SELECT DISTINCT ON (stamp_id) stamp_id, stamp FROM read_parquet(?) "
                               "WHERE stamp_id IN (SELECT unnest(?::VARCHAR[]))", [self._urls(files), wanted]).fetchall()
        return {found: lineage.loads(text) for found, text in rows}

    def stamp_files(self) -> list[str]:
        return sorted(p for p in self._list(f"{self.root}/lineage/stamps") if p.endswith(".parquet"))

    # ------------------------------------------------------------------------------------ DuckDB views

    @contextmanager
    def connection(self):
        """An in-memory DuckDB connection that reads this store's files (through fsspec when not local)."""
        import duckdb

        con = duckdb.connect()
        try:
            self._register(con)
            yield con
        finally:
            con.close()

    @contextmanager
    def views(self):
        """A DuckDB connection where every table is a view over its current files (`define_views`)."""
        with self.connection() as con:
            self.define_views(con)
            yield con

    def _register(self, con) -> None:
        """Let DuckDB read this store's files through fsspec (a local folder needs nothing)."""
        if not self.local:
            try:
                con.register_filesystem(self.fs)
            except Exception as exc:  # registered by an earlier call on this connection
                if "already" not in str(exc).lower():
                    raise

    def define_views(self, con) -> None:
        """On a DuckDB connection: every table as a view over its current files (`metrics.values`, ...), with
        `lineage.stamps` (every stamp kept) and `lineage.current` (asset, partition, stamp_id)."""
        self._register(con)
        for table in self.tables():
            files = self.files(table)
            if files:
                schema, name = table.split(".", 1)
                con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
                con.execute(f'CREATE OR REPLACE VIEW "{schema}"."{name}" AS SELECT * FROM '
                            f"read_parquet({_sql_list(self._urls(files))}, union_by_name = true)")
        con.execute("CREATE SCHEMA IF NOT EXISTS lineage")
        stamps = self.stamp_files()
        if stamps:
            con.execute(f"CREATE OR REPLACE VIEW lineage.stamps AS SELECT DISTINCT ON (stamp_id) * FROM "
                        f"read_parquet({_sql_list(self._urls(stamps))})")
        else:
            con.execute("CREATE OR REPLACE TABLE lineage.stamps (stamp_id VARCHAR, asset VARCHAR, partition VARCHAR, "
                        "run_id VARCHAR, version VARCHAR, stamp VARCHAR)")
        current = pd.DataFrame([{"asset": a, "partition": p, "stamp_id": s}  # noqa: F841 (read by the SQL below)
                                for (a, p), s in self.current_stamps().items()],
                               columns=["asset", "partition", "stamp_id"])
        con.execute("CREATE OR REPLACE TABLE lineage.current AS SELECT * FROM current")

    # ----------------------------------------------------------------------------------------- paths

    def _data_path(self, table: str, partition: str | None, commit: str) -> str:
        return f"{self.root}/tables/{table}/{_key(partition)}/{commit}.parquet"

    def _pointer_path(self, table: str, partition: str | None) -> str:
        return f"{self.root}/tables/{table}/{_key(partition)}/{POINTER}"

    def _current_path(self, asset: str, partition: str) -> str:
        return f"{self.root}/lineage/current/{_key(asset)}/{_key(partition or None)}.json"

    def _pointer(self, table: str, partition: str | None) -> dict | None:
        return self._read_json(self._pointer_path(table, partition))

    def _urls(self, paths: list[str]) -> list[str]:
        """Paths as DuckDB opens them: local paths as they are, others with their protocol (read through fsspec)."""
        return paths if self.local else [self.fs.unstrip_protocol(p) for p in paths]

    def _relative(self, path: str) -> str:
        return path[len(self.root) + 1:]

    def path(self, relative: str) -> str:
        """The full path of a file named relative to the store (as pointers name them)."""
        return f"{self.root}/{relative}"

    def _read_json(self, path: str) -> dict | None:
        try:  # one GET: no size or listing cached from an earlier look stands in for the object as it is now
            return json.loads(self.fs.cat_file(path))
        except FileNotFoundError:
            return None

    def _list(self, folder: str) -> list[str]:
        try:
            # Listed afresh every time: an object store's client caches listings, and other processes write here.
            return [p.rstrip("/") for p in self.fs.ls(folder, detail=False, **({} if self.local else {"refresh": True}))]
        except FileNotFoundError:
            return []


def _key(partition: str | None) -> str:
    """A partition key as one path segment (`tiny_llava|idrid` -> `tiny_llava%7Cidrid`)."""
    return WHOLE if partition is None else quote(str(partition), safe="") or "%00"


def partition_of(segment: str) -> str | None:
    return None if segment == WHOLE else unquote(segment)


def _entry(table: str, partition: str | None) -> str:
    return f"{table}@{'' if partition is None else partition}"


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buffer)
    return buffer.getvalue()


def stamps_frame(stamps) -> pd.DataFrame:
    return pd.DataFrame([{"stamp_id": lineage.stamp_id(s), "asset": s.get("asset"), "partition": s.get("partition") or "",
                          "run_id": s.get("run_id"), "version": s.get("version"), "stamp": lineage.dumps(s)}
                         for s in stamps], columns=["stamp_id", "asset", "partition", "run_id", "version", "stamp"])


# ------------------------------------------------------------------------------------------ migration


def migrate_duckdb(database, store: TableStore) -> list[str]:
    """Move the tables of a FOCUS_HOME from before the Parquet store (one DuckDB file) into `store`: every table
    partition becomes a commit of its own, every stamp is kept, and the current stamp of every asset partition
    stays current (its reads resolve through the table pointers). Returns the tables moved."""
    import duckdb

    from resources import layout

    known = {(t.schema, t.name): t for t in layout.TABLES}
    moved = []
    with duckdb.connect(str(database), read_only=True) as con:
        names = con.execute("SELECT table_schema, table_name FROM information_schema.tables "
                            "WHERE table_schema <> 'lineage' ORDER BY 1, 2").fetchall()
        for schema, name in names:
            table = known.get((schema, name)) or layout.Table(schema, name)
            frame = con.execute(f'SELECT * FROM "{schema}"."{name}"').df()
            column = table.partition_column
            if column and column in frame:
                for key, rows in frame.groupby(column, sort=True):
                    store.commit([(table, str(key), rows.reset_index(drop=True))])
            else:
                store.commit([(table, None, frame)])
            moved.append(table.qualified)
        lineage_tables = {n for s, n in con.execute("SELECT table_schema, table_name FROM information_schema.tables "
                                                    "WHERE table_schema = 'lineage'").fetchall()}
        stamps = ([lineage.loads(text) for (text,) in con.execute("SELECT stamp FROM lineage.stamps").fetchall()]
                  if "stamps" in lineage_tables else [])
        current = (con.execute("SELECT asset, partition, stamp_id FROM lineage.current").fetchall()
                   if "current" in lineage_tables else [])
    if stamps:
        store._put(f"{store.root}/lineage/stamps/{time.time_ns():020d}-migrated.parquet",
                   parquet_bytes(stamps_frame(stamps)))
    by_id = {lineage.stamp_id(s): s for s in stamps}
    for asset, partition, stamp_id in current:
        store._put(store._current_path(asset, partition or ""), json.dumps({
            "asset": asset, "partition": partition or "", "stamp_id": stamp_id, "commit": "migrated", "files": {},
            "stamp": by_id.get(stamp_id)}, default=str).encode())
    return moved


def migrate_if_needed(database, url: str) -> list[str]:
    """On first use of a FOCUS_HOME whose tables are still in `database` (focus.duckdb) and whose table store is
    empty: migrate them, and keep the old file as `focus.duckdb.migrated` (so this runs once)."""
    from pathlib import Path

    database = Path(database)
    if not database.is_file():
        return []
    store = TableStore(url)
    if store.tables():
        return []
    moved = migrate_duckdb(database, store)
    database.rename(database.with_name(database.name + ".migrated"))
    print(f"focus: moved {len(moved)} table(s) of {database} into {url} (one Parquet file per partition); the old "
          f"file is kept as {database.name}.migrated")
    return moved
