"""Tables that many writers can share: one Parquet file per table partition, in a folder or an object store.

A write never changes a file another process may be reading. Each write is a *commit*, made visible by one
atomic step however many tables it writes:

1. `data`: its frames go to new files (`tables/<schema>.<table>/<partition>/<commit>.parquet`);
2. `stamps`: its lineage stamps to `lineage/stamps/<commit>.parquet`;
3. `owners`: each table partition's `CURRENT.json` names the *owner* pointer that holds its current file, written
   only when the owner changes (the first write of a partition, or another writer taking it over), keeping the
   file the old owner named as `previous` until the new owner's pointer lands (and, as `stale`, the file the new
   owner's pointer still names from before it lost the partition, which readers never take for the new one);
4. `pointer`: the owner pointer, in one atomic step (a rename on a local disk, one PUT on an object store), names
   every file of the commit: `lineage/current/<asset>/<partition>.json` for the asset partition that wrote them
   (with its stamp), `lineage/unstamped/<key>.json` for a commit without lineage. This is the commit point.
5. `collect`: superseded files and partial files of dead writers are removed.

A reader resolves a table partition through its owner's pointer, reading each owner pointer once per snapshot
(`Snapshot`), so every table an asset partition wrote is seen from one commit, old or new, never a mix, even
while that asset partition is written again; a writer killed before step 4 leaves the last commit whole, and
its files are orphans that later commits collect. Two runs writing different partitions share nothing but
folders. Superseded files are removed after a commit, except the newest two of each partition and those
superseded less than five minutes ago, so a reader that resolved an earlier pointer can still read it.

The tables are read with DuckDB, in memory: `views()` gives a connection with the familiar names
(`metrics.values`, `lineage.stamps`, ...) as views over the current files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
import uuid
from contextlib import contextmanager
from urllib.parse import quote, unquote

import pandas as pd

from focus_dagster import lineage

WHOLE = "_whole"  # the partition folder of a table that is not partitioned
EMPTY = "%00"  # the partition folder of the empty partition key (a folder needs a name)
POINTER = "CURRENT.json"
KEEP_FILES = 2
# A superseded file stays this long after the commit that superseded it, for readers that resolved it before
# (a views() connection resolves its files when opened and may query them minutes later).
SUPERSEDED_GRACE_S = 300
# The steps of a commit, in order (module docstring); `TableStore._reached` is called after each.
COMMIT_STEPS = ("data", "stamps", "owners", "pointer", "collect")
# A partial file of a writer on another machine (a shared volume) is taken for abandoned after this long.
ABANDONED_AFTER_S = 3600
_PARTIAL = re.compile(r"^\..+\.tmp-(?P<host>[^/]*)-(?P<pid>\d+)-[0-9a-f]+$")


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
        commit = _commit_id()
        files = {}
        for table, partition, frame in writes:
            path = self._data_path(table.qualified, partition, commit)
            self._put(path, parquet_bytes(frame))
            files[_entry(table.qualified, partition)] = self._relative(path)
        self._reached("data")
        kept = (*stamps, *([stamp] if stamp else []))
        if kept:
            self._put(f"{self.root}/lineage/stamps/{commit}.parquet", parquet_bytes(stamps_frame(kept)))
        self._reached("stamps")
        owner = (self._current_path(stamp["asset"], stamp["partition"] or "") if stamp
                 else self._unstamped_path(sorted(files)))
        for table, partition, _ in writes:
            self._claim(table.qualified, partition, owner)
        self._reached("owners")
        self._put(owner, json.dumps(self._owner_content(owner, commit, files, stamp), default=str).encode())
        self._reached("pointer")
        for table, partition, _ in writes:
            self._collect(table.qualified, partition, self.path(files[_entry(table.qualified, partition)]))
        self._sweep_partials(f"{self.root}/lineage/stamps")
        self._sweep_partials(os.path.dirname(owner))  # a writer killed while writing this owner pointer
        self._reached("collect")
        return [table.qualified for table, _, _ in writes]

    def _owner_content(self, owner: str, commit: str, files: dict, stamp: dict | None) -> dict:
        """The owner pointer after this commit: its files, over those of the owner's earlier commits that this
        one did not write again (an asset partition that writes fewer tables keeps the others' last rows)."""
        earlier = (self._read_json(owner) or {}).get("files", {})
        content = {"commit": commit, "files": {**earlier, **files}}
        if stamp:
            content = {"asset": stamp["asset"], "partition": stamp["partition"] or "",
                       "stamp_id": lineage.stamp_id(stamp), **content, "stamp": stamp}
        return content

    def _claim(self, table: str, partition: str | None, owner: str) -> None:
        """Make `owner` the pointer that names this table partition's file; until that pointer names it, readers
        keep reading the file the previous owner named."""
        pointer = self._pointer(table, partition) or {}
        relative = self._relative(owner)
        if pointer.get("owner") == relative:
            return
        previous = self._resolve(table, partition, pointer, {})
        stale = ((self._read_json(owner) or {}).get("files") or {}).get(_entry(table, partition))
        self._put(self._pointer_path(table, partition), json.dumps({
            "owner": relative, "previous": previous and self._relative(previous["file"]),
            "previous_stamp_id": previous and previous["stamp_id"], "stale": stale}).encode())

    def edit(self, table: str, partition: str | None, frame: pd.DataFrame) -> None:
        """Replace a partition's rows in place, its lineage unchanged (what an UPDATE was): for repairs and for
        tests that plant a defect. The pointer that owns the partition keeps its stamp and now names the new file."""
        pointer = self._pointer(table, partition) or {}
        owner = self.path(pointer["owner"]) if "owner" in pointer else None
        found = self._read_json(owner) if owner else None
        if found is None:  # never written, or written before owner pointers: an unstamped commit of its own
            self.commit([(_named_table(table), partition, frame)])
            return
        path = self._data_path(table, partition, _commit_id())
        self._put(path, parquet_bytes(frame))
        found["files"][_entry(table, partition)] = self._relative(path)
        self._put(owner, json.dumps(found, default=str).encode())

    def _reached(self, step: str) -> None:
        """Called after each step of a commit (COMMIT_STEPS): a place for tests and the benchmark to stop a
        writer at an exact point of the protocol."""

    def _put(self, path: str, data: bytes) -> None:
        if self.local:  # a temporary file beside the target, then one rename
            os.makedirs(os.path.dirname(path), exist_ok=True)
            partial = (f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp-{_HOST}-{os.getpid()}-"
                       f"{uuid.uuid4().hex[:6]}")
            with open(partial, "wb") as handle:
                handle.write(data)
            os.replace(partial, path)
        else:  # an object PUT is atomic: readers see the old object or the new one
            self.fs.pipe_file(path, data)

    def _collect(self, table: str, partition: str | None, current: str) -> None:
        """Remove superseded files of a partition, once `current` (the file this commit wrote) is named by its owner
        pointer: all but `current`, the newest KEEP_FILES and those superseded less than SUPERSEDED_GRACE_S ago (a
        file a concurrent commit wrote is among those); and the partial files of writers that died."""
        folder = os.path.dirname(self._pointer_path(table, partition))
        versions = sorted(p for p in self._list(folder) if p.endswith(".parquet"))
        now = time.time_ns()
        for path, newer in zip(versions[:-KEEP_FILES], versions[1:]):
            if path != current and now - _written_ns(newer) > SUPERSEDED_GRACE_S * 1e9:
                self._remove(path)
        self._sweep_partials(folder)

    def _sweep_partials(self, folder: str) -> None:
        """Remove the partial files (`.<name>.tmp-<host>-<pid>-<hex>`) that a killed writer left: at once when
        that writer ran on this machine and is gone, after ABANDONED_AFTER_S when it ran on another."""
        if not self.local:
            return  # an object store has no partial objects
        for path in self._list(folder):
            found = _PARTIAL.match(os.path.basename(path))
            if found and _abandoned(path, found["host"], int(found["pid"])):
                self._remove(path)

    def _remove(self, path: str) -> None:
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:  # another writer collected it first
            pass

    # ---------------------------------------------------------------------------------------- reading

    def snapshot(self) -> Snapshot:
        """A consistent reading of the store: each owner pointer is read once, so the tables an asset partition
        wrote are all seen from the same commit."""
        return Snapshot(self)

    def tables(self) -> list[str]:
        """Every table with at least one partition (`schema.table`)."""
        return sorted(os.path.basename(p) for p in self._list(f"{self.root}/tables") if not p.endswith(".json"))

    def files(self, table: str, partition: str | None = "*") -> list[str]:
        """The current files of a table: of every partition (`"*"`), or of one (None: the whole table)."""
        return self.snapshot().files(table, partition)

    def partitions(self, table: str) -> list[dict]:
        """The current partitions of a table, each as its owner pointer names it: `partition` (None for a table
        written whole), `file` (full path), `url` (the file as DuckDB opens it on `connection()`) and `stamp_id`
        (the lineage stamp of the commit that wrote it; None for rows written without one)."""
        return self.snapshot().partitions(table)

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

    def _resolve(self, table: str, partition: str | None, pointer: dict, owners: dict) -> dict | None:
        """The current file and stamp id of a table partition from its `CURRENT.json` content, reading its owner
        pointer through `owners` (path -> content, filled on first read): the owner's file once the owner names
        the partition (a file other than the `stale` one it named before it claimed it), the previous owner's until
        then."""
        if "file" in pointer and "owner" not in pointer:  # a pointer written before owner pointers
            return {"file": self.path(pointer["file"]), "stamp_id": pointer.get("stamp_id")}
        if "owner" not in pointer:
            return None
        owner = pointer["owner"]
        if owner not in owners:
            owners[owner] = self._read_json(self.path(owner))
        named = ((owners[owner] or {}).get("files") or {}).get(_entry(table, partition))
        if named and named != pointer.get("stale"):
            return {"file": self.path(named), "stamp_id": owners[owner].get("stamp_id")}
        if pointer.get("previous"):
            return {"file": self.path(pointer["previous"]), "stamp_id": pointer.get("previous_stamp_id")}
        return None

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
        `lineage.stamps` (every stamp kept) and `lineage.current` (asset, partition, stamp_id), all from one
        snapshot (the lineage pointers are read first, and each table partition resolves through them)."""
        self._register(con)
        snapshot = self.snapshot()
        current = snapshot.current_stamps()
        for table in self.tables():
            files = snapshot.files(table)
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
                                for (a, p), s in current.items()],
                               columns=["asset", "partition", "stamp_id"])
        con.execute("CREATE OR REPLACE TABLE lineage.current AS SELECT * FROM current")

    # ----------------------------------------------------------------------------------------- paths

    def _data_path(self, table: str, partition: str | None, commit: str) -> str:
        return f"{self.root}/tables/{table}/{_key(partition)}/{commit}.parquet"

    def _pointer_path(self, table: str, partition: str | None) -> str:
        return f"{self.root}/tables/{table}/{_key(partition)}/{POINTER}"

    def _current_path(self, asset: str, partition: str) -> str:
        return f"{self.root}/lineage/current/{_key(asset)}/{_key(partition or None)}.json"

    def _unstamped_path(self, entries: list[str]) -> str:
        """The owner pointer of commits without lineage that write exactly these table partitions."""
        key = _key(entries[0]) if len(entries) == 1 else hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]
        return f"{self.root}/lineage/unstamped/{key}.json"

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
        if not self.local:  # a client answers "no such object" from a listing it cached; other processes write here
            self.fs.invalidate_cache(os.path.dirname(path))
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


class Snapshot:
    """One consistent reading of a store: every owner pointer is read at most once (the first time a table
    partition or `current_stamps` needs it), so two tables written by one commit are never seen from two."""

    def __init__(self, store: TableStore):
        self.store = store
        self.owners: dict[str, dict | None] = {}  # owner pointer (relative path) -> its content when first read
        self._scanned = False

    def current_stamps(self) -> dict[tuple[str, str], str]:
        """(asset, partition) -> the stamp id of what it holds, for every asset partition, read once: call it
        before reading tables for the tables and the stamps to agree."""
        if not self._scanned:
            for path, pointer in self.store._lineage_pointers():
                self.owners.setdefault(self.store._relative(path), pointer)
            self._scanned = True
        return {(p["asset"], p["partition"]): p["stamp_id"] for key, p in self.owners.items()
                if p and key.startswith("lineage/current/")}

    def files(self, table: str, partition: str | None = "*") -> list[str]:
        """The current files of a table: of every partition (`"*"`), or of one (None: the whole table)."""
        if partition != "*":
            found = self._resolve(table, partition, self.store._pointer(table, partition) or {})
            return [found["file"]] if found else []
        return [found["file"] for found in self.partitions(table)]

    def partitions(self, table: str) -> list[dict]:
        """`TableStore.partitions`, resolved in this snapshot."""
        found = []
        for folder in sorted(self.store._list(f"{self.store.root}/tables/{table}")):
            pointer = self.store._read_json(f"{folder}/{POINTER}")
            partition = partition_of(os.path.basename(folder))
            resolved = self._resolve(table, partition, pointer) if pointer else None
            if resolved:
                found.append({"partition": partition, **resolved, "url": self.store._urls([resolved["file"]])[0]})
        return found

    def _resolve(self, table: str, partition: str | None, pointer: dict) -> dict | None:
        return self.store._resolve(table, partition, pointer, self.owners)


_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:40] or "host"


def _commit_id() -> str:
    """Time first, so that a folder's files sort by when they were written."""
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


def _written_ns(path: str) -> int:
    """When a data file's commit began, from its name (`<time_ns>-<random>.parquet`); 0 for another name."""
    head = os.path.basename(path).split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def _abandoned(path: str, host: str, pid: int) -> bool:
    """Whether a partial file's writer is gone: its process has ended (this machine), or it is old (another)."""
    if host == _HOST:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            pass
    try:  # alive, or a process id since reused, or another machine's writer: judged by age
        return time.time() - os.path.getmtime(path) > ABANDONED_AFTER_S
    except FileNotFoundError:
        return False


def _named_table(qualified: str):
    from resources.layout import Table

    return Table(*qualified.split(".", 1))


def _key(partition: str | None) -> str:
    """A partition key as one path segment (`tiny_llava|idrid` -> `tiny_llava%7Cidrid`)."""
    if partition is None:
        return WHOLE
    quoted = quote(str(partition), safe="") or EMPTY
    return quoted.replace(".", "%2E") if set(quoted) == {"."} else quoted  # `.` and `..` never name a folder


def partition_of(segment: str) -> str | None:
    """The partition key a folder holds (`_key` read back; `%00` is the empty key)."""
    if segment == WHOLE:
        return None
    return "" if segment == EMPTY else unquote(segment)


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

    from resources.layout import TABLES, Table

    known = {(t.schema, t.name): t for t in TABLES}
    moved = []
    with duckdb.connect(str(database), read_only=True) as con:
        names = con.execute("SELECT table_schema, table_name FROM information_schema.tables "
                            "WHERE table_schema <> 'lineage' ORDER BY 1, 2").fetchall()
        for schema, name in names:
            table = known.get((schema, name)) or Table(schema, name)
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
