"""Processes racing on one table partition of a TableStore, for tests/ops/test_table_races.py.

Every commit writes one *version* of the partition `race.rows@p` and its one-row summary `race.summary@p`, both
made from (writer, version) alone, so a reader can tell whether what it read is exactly one whole commit: the rows
of one version, as many as that version has, each with its value, and the summary of the same version. A writer
runs over a disk that writes each file in pieces with a pause between them (a slow disk, or a large file), so that
a file written where a reader can see it is seen half-written; and a writer can be SIGKILLed at any point of a
commit, between two of its steps or in the middle of writing one file.
"""

from __future__ import annotations

import builtins
import json
import os
import signal
import time
from pathlib import Path

import pandas as pd

import resources.tables as tables
from resources.layout import Table
from resources.tables import TableStore

ROWS = Table("race", "rows")
SUMMARY = Table("race", "summary")
PARTITION = "p"
ASSET = "race"
PIECES = 8  # a file reaches the disk in this many writes,
PAUSE_S = 0.001  # with this pause between two of them


def frames(writer: int, version: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows and the summary of one version: its row count and values follow from (writer, version)."""
    n = 40 + (version * 37 + writer * 11) % 60
    values = [(writer * 1_000_003 + version * 7_919 + i * 104_729) % 1_000_000_007 for i in range(n)]
    rows = pd.DataFrame({"writer": writer, "version": version, "n": n, "i": range(n), "value": values})
    summary = pd.DataFrame({"writer": [writer], "version": [version], "n": [n], "checksum": [sum(values)]})
    return rows, summary


def commit(store: TableStore, writer: int, version: int, stamped: bool = True) -> None:
    """One commit of both tables; `stamped`: as the asset partition `race/p` (else without lineage, a repair)."""
    rows, summary = frames(writer, version)
    stamp = ({"asset": ASSET, "partition": PARTITION, "run_id": f"w{writer}", "version": f"{writer}.{version}"}
             if stamped else None)
    store.commit([(ROWS, PARTITION, rows), (SUMMARY, PARTITION, summary)], stamp)


def read(store: TableStore) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both tables as a reader of the platform sees them: the views of one connection (one snapshot)."""
    with store.views() as con:
        return (con.execute("SELECT * FROM race.rows").df(), con.execute("SELECT * FROM race.summary").df())


def whole_version(rows: pd.DataFrame, summary: pd.DataFrame) -> tuple[int, int]:
    """(writer, version) of what was read, or AssertionError saying how it is not exactly one whole version."""
    assert len(summary) == 1, f"{len(summary)} summary rows"
    writer, version = int(summary["writer"].iloc[0]), int(summary["version"].iloc[0])
    held = sorted({(int(w), int(v)) for w, v in zip(rows["writer"], rows["version"])})
    assert held == [(writer, version)], f"rows of versions {held} under the summary of {(writer, version)}"
    expected_rows, expected_summary = frames(writer, version)
    found = rows.sort_values("i").reset_index(drop=True)
    assert len(found) == len(expected_rows), \
        f"{len(found)} rows of version {(writer, version)}, which has {len(expected_rows)}"
    assert found[list(expected_rows)].astype("int64").equals(expected_rows.astype("int64")), \
        f"the rows of version {(writer, version)} differ from what it wrote"
    assert summary[list(expected_summary)].astype("int64").equals(expected_summary.astype("int64")), \
        f"the summary of version {(writer, version)} differs from what it wrote"
    return writer, version


def partial_files(root: Path) -> list[str]:
    """Files a writer left half-written: the store's temporary files (`.<name>.tmp-<host>-<pid>-<hex>`)."""
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if ".tmp-" in p.name)


# ------------------------------------------------------------------------------------------------ the disk


class _Piecewise:
    """A file opened for writing whose every write reaches the disk in PIECES writes, PAUSE_S apart; `dies_at` (a
    fraction of a write) ends the process with SIGKILL once that much of the write is on disk."""

    def __init__(self, raw, dies_at: float | None = None):
        self.raw, self.dies_at = raw, dies_at

    def write(self, data: bytes) -> int:
        size = max(1, -(-len(data) // PIECES))
        for start in range(0, len(data), size):
            if self.dies_at is not None and start >= len(data) * self.dies_at:
                _die()
            self.raw.write(data[start:start + size])
            time.sleep(PAUSE_S)
        return len(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.close()

    def __getattr__(self, name):
        return getattr(self.raw, name)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def slow_disk(root: str | None = None, kill_at=None, nth: int = 1, half: bool = True) -> None:
    """Make this process's table store write through `_Piecewise` files (binary writes of resources.tables only).
    `kill_at(path)`: whether a file (its path relative to the store `root`, a partial file's name as it is) is one
    where the process may die: the `nth` such file opened is where it dies, after writing half its bytes (`half`)
    or before writing any."""
    opened = [0]

    def piecewise_open(path, mode="r", *args, **kwargs):
        if "w" not in mode or "b" not in mode:
            return builtins.open(path, mode, *args, **kwargs)
        raw = builtins.open(path, mode, buffering=0)  # unbuffered: each piece is on disk when written
        if kill_at and kill_at(os.path.relpath(path, root)):
            opened[0] += 1
            if opened[0] == nth:
                return _Piecewise(raw, dies_at=0.5 if half else 0.0)
        return _Piecewise(raw)

    tables.open = piecewise_open  # the module's `open`, looked up before the builtin one


# --------------------------------------------------------------------------------------------- processes


def writer(url: str, slot: int, shared) -> None:
    """Commit versions 1, 2, ... of writer `slot + 1` until every reader has read enough while writers write (and
    this writer has made `shared.min_commits`), or the test gives up."""
    slow_disk()
    store, version = TableStore(url), 0
    shared.started[slot] = 1
    while not shared.abort.is_set():
        version += 1
        commit(store, slot + 1, version)
        shared.commits[slot] = version
        if version >= shared.min_commits and all(
                reads >= shared.min_reads and (changes >= shared.min_changes or bad)
                for reads, changes, bad in zip(shared.reads, shared.changes, shared.bad)):
            break
    shared.finished[slot] = 1


def reader(url: str, slot: int, shared, out: str) -> None:
    """Read both tables again and again until `shared.done`; every read must be one whole version, and the versions
    of each writer must never go back. Counts the reads made wholly while every writer was writing (started, none
    finished) and how often the version seen changed; writes what it saw to `out`."""
    store = TableStore(url)
    last, seen, problems, reads = {}, set(), [], 0
    previous = None
    while not shared.done.is_set():
        overlapped = all(shared.started) and not any(shared.finished)
        try:
            found = whole_version(*read(store))
        except Exception as exc:  # a torn read, or an error from a file caught half-written
            found = None
            problems.append(f"read {reads}: {type(exc).__name__}: {str(exc)[:300]}")
            shared.bad[slot] = 1
        reads += 1
        if found:
            writer_id, version = found
            if version < last.get(writer_id, -1):
                problems.append(f"read {reads}: version {version} of writer {writer_id} after {last[writer_id]}")
                shared.bad[slot] = 1
            last[writer_id] = max(version, last.get(writer_id, -1))
            seen.add(found)
        overlapped = overlapped and not any(shared.finished)
        if overlapped:
            shared.reads[slot] += 1
            if found != previous:
                shared.changes[slot] += 1
        previous = found
    Path(out).write_text(json.dumps({"reads": reads, "overlapped": shared.reads[slot], "changes": shared.changes[slot],
                                     "versions": len(seen), "problems": problems[:5], "problem_count": len(problems)}))


def killed_writer(url: str, writer_id: int, version: int, point: str) -> None:
    """Commit a version, stamped, and die at `point` (tests/ops/test_table_races.py, KILL_POINTS)."""
    store = TableStore(url)
    if point in tables.COMMIT_STEPS:
        slow_disk()
        TableStore._reached = lambda self, step: _die() if step == point else None
    else:
        kill_at, nth, half = {
            "data-partial": (lambda path: path.startswith("tables/") and ".parquet" in path, 1, True),
            "claim-partial": (lambda path: path.startswith("tables/") and "CURRENT.json" in path, 1, True),
            "between-claims": (lambda path: path.startswith("tables/") and "CURRENT.json" in path, 2, False),
            "pointer-partial": (lambda path: path.startswith("lineage/current/"), 1, True)}[point]
        slow_disk(url, kill_at, nth, half)
    commit(store, writer_id, version)
