"""The table store's commit protocol against real processes: readers racing writers on the same table partition,
and a writer SIGKILLed at every point of a commit. The processes are tests/support/table_race.py; each version they
write says what it is, so a reader can tell one whole version from rows of two, a truncated file or a pointer to a
file not yet there. A store that wrote its files in place (no temporary file and rename), or its pointer before its
data files, fails both tests."""

from __future__ import annotations

import json
import multiprocessing
import signal
from types import SimpleNamespace

import pytest

import resources.tables as tables
from resources.tables import KEEP_FILES, TableStore
from tests.support import table_race as race
from tests.support.waiting import folder_bytes, wait_while_progressing

WRITERS, READERS = 2, 2
MIN_COMMITS = 5  # per writer
MIN_READS = 30  # per reader, each made wholly while every writer was writing
MIN_CHANGES = 4  # per reader: times the version it read changed among those reads


def _context():
    """Processes forked from a server that imported the race module once (a spawned process would import pandas,
    pyarrow and DuckDB again, seconds on a busy machine)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.support.table_race"])
    return context


def _stop(processes) -> None:
    for process in processes:
        if process.is_alive():
            process.kill()
        process.join()


def test_readers_racing_writers_on_one_partition_read_whole_versions_that_never_go_back(tmp_path):
    """Writers commit versions of the same partition while readers read it. The writers go on until every reader
    has made MIN_READS reads while all of them were writing and seen the version change MIN_CHANGES times, so the
    overlap is counted, not hoped for from a sleep: a slow machine only makes the test slower."""
    url = str(tmp_path / "tables")
    store = TableStore(url)
    race.commit(store, 0, 0)
    context = _context()
    shared = SimpleNamespace(
        started=context.Array("b", WRITERS), finished=context.Array("b", WRITERS), commits=context.Array("i", WRITERS),
        reads=context.Array("i", READERS), changes=context.Array("i", READERS), bad=context.Array("b", READERS),
        abort=context.Event(), done=context.Event(), min_commits=MIN_COMMITS, min_reads=MIN_READS,
        min_changes=MIN_CHANGES)
    outs = [tmp_path / f"reader{k}.json" for k in range(READERS)]
    readers = [context.Process(target=race.reader, args=(url, k, shared, str(out))) for k, out in enumerate(outs)]
    writers = [context.Process(target=race.writer, args=(url, k, shared)) for k in range(WRITERS)]
    progress = lambda: (tuple(shared.commits), tuple(shared.reads))  # noqa: E731

    def writers_done() -> bool:
        ended = [(k, r.exitcode) for k, r in enumerate(readers) if not r.is_alive()]
        assert not ended, f"readers (slot, exit code) {ended} ended while the writers wrote"
        return not any(w.is_alive() for w in writers)

    try:
        for process in readers + writers:
            process.start()
        wait_while_progressing(writers_done, "the writers' commits", progress, poll=0.05)
        shared.done.set()
        wait_while_progressing(lambda: not any(r.is_alive() for r in readers), "the readers' last reads", progress,
                               poll=0.05)
    finally:
        shared.abort.set()
        shared.done.set()
        _stop(readers + writers)
    seen = [json.loads(out.read_text()) if out.exists() else {"exit code": r.exitcode} for out, r in zip(outs, readers)]
    assert [(s.get("problem_count"), s.get("problems")) for s in seen] == [(0, [])] * READERS, seen
    assert [w.exitcode for w in writers] == [0] * WRITERS
    assert all(s["overlapped"] >= MIN_READS and s["changes"] >= MIN_CHANGES for s in seen), seen
    assert min(shared.commits) >= MIN_COMMITS
    final = race.whole_version(*race.read(TableStore(url)))
    assert final in {(k + 1, shared.commits[k]) for k in range(WRITERS)}  # some writer's last commit


# Every point of a commit where a writer can die, in the order of the protocol (resources/tables.py), and whether
# its commit has landed there. The asset partition wrote the partition once, then a repair without lineage wrote
# it again: the killed commit (the asset partition's) takes both tables back, writing their CURRENT.json pointers
# in its `owners` step while its own owner pointer still names its first commit's files.
KILL_POINTS = [
    ("data-partial", False),  # half of its first data file written
    ("data", False),
    ("stamps", False),
    ("claim-partial", False),  # half of the first table's CURRENT.json written
    ("between-claims", False),  # the first table's CURRENT.json written, the second's not
    ("owners", False),
    ("pointer-partial", False),  # half of its owner pointer (the commit point) written
    ("pointer", True),
    ("collect", True),
]
FIRST, OLD, NEW = (1, 1), (0, 2), (1, 3)  # (writer, version): the asset partition's, the repair's, the killed one's


@pytest.mark.parametrize("point, landed", KILL_POINTS, ids=[p for p, _ in KILL_POINTS])
def test_a_writer_killed_at_any_point_of_a_commit_leaves_one_whole_version(tmp_path, monkeypatch, point, landed):
    """SIGKILL in the writer's process at `point`: a fresh reader then reads the whole previous version or the whole
    new one (the new one exactly when the owner pointer landed; never the asset partition's first, older one), with
    the lineage that goes with it; the next commit succeeds and sweeps the killed writer's partial files at once,
    and its orphan files once superseded."""
    root = tmp_path / "store"
    race.commit(TableStore(str(root)), *FIRST)
    race.commit(TableStore(str(root)), *OLD, stamped=False)
    writer = _context().Process(target=race.killed_writer, args=(str(root), *NEW, point))
    try:
        writer.start()
        wait_while_progressing(lambda: not writer.is_alive(), f"the writer killed at {point}",
                               lambda: folder_bytes(root), poll=0.05)
    finally:
        _stop([writer])
    assert writer.exitcode == -signal.SIGKILL, f"the writer was not killed at {point}"

    store = TableStore(str(root))  # a fresh reader
    seen = race.whole_version(*race.read(store))
    assert seen in (OLD, NEW)
    assert seen == (NEW if landed else OLD)
    lineage = store.current(race.ASSET, race.PARTITION)["stamp"]["version"]  # the asset partition's last commit
    assert lineage == ("%d.%d" % (NEW if landed else FIRST))

    race.commit(store, 0, 4)
    assert race.whole_version(*race.read(store)) == (0, 4)
    assert race.partial_files(root) == []
    monkeypatch.setattr(tables, "SUPERSEDED_GRACE_S", 0)  # what a commit five minutes later collects
    race.commit(store, 0, 5)
    assert race.whole_version(*race.read(store)) == (0, 5)
    for table in (race.ROWS, race.SUMMARY):
        folder = root / "tables" / table.qualified / race.PARTITION
        kept = sorted(str(p) for p in folder.glob("*.parquet"))
        assert len(kept) == KEEP_FILES and store.files(table.qualified, race.PARTITION)[0] in kept, kept
