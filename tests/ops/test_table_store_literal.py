"""The table store's files as its module docstring lays them out, checked literally: the folders and names a commit
writes, the content of each pointer, which file a reader resolves at every point of a takeover, what a commit
collects and what it keeps, whose partial files are abandoned, and the reading calls on a folder and on an fsspec
store. Each test builds its own small store (no shared fixture), so a fault shows in the test that names it."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import time
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from resources import tables as store_module
from resources.layout import Table
from resources.tables import TableStore, migrate_if_needed

SAMPLES = Table("predictions", "samples", "partition")
UNAVAILABLE = Table("predictions", "unavailable", "partition")
RECORDS = Table("records", "g1020")
COMMIT_NAME = re.compile(r"^\d{20}-[0-9a-f]{8}\.parquet$")


def stamp(asset: str, partition: str, version: str) -> dict:
    return {"asset": asset, "partition": partition, "run_id": f"run-{version}", "version": version, "facts": {}}


def stamp_hash(value: dict) -> str:
    """The stamp id as the lineage module documents it: sha256 of the canonical JSON, 20 hex digits."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


def rows(version: str, n: int = 2) -> pd.DataFrame:
    return pd.DataFrame({"image_id": [f"{version}-{k}" for k in range(n)], "version": version})


def versions(store: TableStore, table: str, partition="*") -> list[str]:
    frame = store.read(table, partition)
    return [] if frame is None else sorted(set(frame["version"]))


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


class Killed(Exception):
    pass


def killed_after(step: str):
    def reached(self, reached_step):
        if reached_step == step:
            raise Killed(step)
    return reached


def commit_killed_after(store: TableStore, step: str, writes: list, kept: dict | None = None) -> None:
    """A commit whose writer dies right after `step`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TableStore, "_reached", killed_after(step))
        with pytest.raises(Killed):
            store.commit(writes, stamp=kept)


def table_pointer(store: TableStore, table: str, partition: str) -> dict:
    return read_json(Path(store.root) / "tables" / table / partition / "CURRENT.json")


# ------------------------------------------------------------------------------------------------ layout


def test_a_stamped_commit_writes_the_documented_files_and_pointers(tmp_path):
    store = TableStore(str(tmp_path))
    kept = stamp("predictions", "idrid", "v1")
    written = store.commit([(SAMPLES, "idrid", rows("v1", 3)), (UNAVAILABLE, "idrid", rows("v1", 1))], stamp=kept)
    assert written == ["predictions.samples", "predictions.unavailable"]
    data = sorted((tmp_path / "tables" / "predictions.samples" / "idrid").iterdir())
    assert [p.name for p in data][-1] == "CURRENT.json" and len(data) == 2 and COMMIT_NAME.match(data[0].name)
    commit = data[0].name.removesuffix(".parquet")
    assert pd.read_parquet(data[0])["version"].tolist() == ["v1"] * 3
    assert read_json(data[1]) == {"owner": "lineage/current/predictions/idrid.json", "previous": None,
                                  "previous_stamp_id": None, "stale": None}
    owner = read_json(tmp_path / "lineage" / "current" / "predictions" / "idrid.json")
    assert owner == {"asset": "predictions", "partition": "idrid", "stamp_id": stamp_hash(kept), "commit": commit,
                     "files": {"predictions.samples@idrid": f"tables/predictions.samples/idrid/{commit}.parquet",
                               "predictions.unavailable@idrid":
                                   f"tables/predictions.unavailable/idrid/{commit}.parquet"},
                     "stamp": kept}
    stamps = pd.read_parquet(tmp_path / "lineage" / "stamps" / f"{commit}.parquet")
    assert stamps.to_dict("records") == [{"stamp_id": stamp_hash(kept), "asset": "predictions", "partition": "idrid",
                                          "run_id": "run-v1", "version": "v1",
                                          "stamp": json.dumps(kept, sort_keys=True, separators=(",", ":"))}]
    assert store.current("predictions", "idrid") == owner
    assert store.current_stamps() == {("predictions", "idrid"): stamp_hash(kept)}


def test_an_unstamped_commit_is_owned_by_a_pointer_named_after_what_it_wrote(tmp_path):
    store = TableStore(str(tmp_path))
    store.commit([(RECORDS, None, rows("v1"))])
    store.commit([(SAMPLES, "a", rows("v1")), (SAMPLES, "b", rows("v1"))])
    unstamped = tmp_path / "lineage" / "unstamped"
    pair = hashlib.sha256(b"predictions.samples@a\npredictions.samples@b").hexdigest()[:16]
    assert sorted(p.name for p in unstamped.iterdir()) == sorted(["records.g1020%40.json", f"{pair}.json"])
    whole = read_json(tmp_path / "tables" / "records.g1020" / "_whole" / "CURRENT.json")
    assert whole["owner"] == "lineage/unstamped/records.g1020%40.json"
    assert set(read_json(unstamped / "records.g1020%40.json")) == {"commit", "files"}
    assert not (tmp_path / "lineage" / "stamps").exists() and store.current_stamps() == {}
    assert store.partitions("records.g1020")[0]["stamp_id"] is None


@pytest.mark.parametrize("partition, folder", [
    (None, "_whole"), ("idrid", "idrid"), ("tiny_llava|idrid", "tiny_llava%7Cidrid"), ("", "%00"), (".", "%2E"),
    ("..", "%2E%2E"), ("a/b", "a%2Fb"), ("..a", "..a"), ("x y", "x%20y"),
])
def test_a_partition_key_is_one_safe_folder_and_reads_back_as_itself(tmp_path, partition, folder):
    store = TableStore(str(tmp_path))
    store.commit([(SAMPLES, partition, rows("v1"))])
    assert [p.name for p in (tmp_path / "tables" / "predictions.samples").iterdir()] == [folder]
    assert [found["partition"] for found in store.partitions("predictions.samples")] == [partition]
    assert versions(store, "predictions.samples", partition) == ["v1"]


def test_the_lineage_pointer_of_an_asset_without_partitions_is_named_whole(tmp_path):
    store = TableStore(str(tmp_path))
    store.commit([(RECORDS, None, rows("v1"))], stamp=stamp("records", "", "v1"))
    assert (tmp_path / "lineage" / "current" / "records" / "_whole.json").is_file()
    assert store.current("records", None)["stamp"]["version"] == "v1"
    assert store.current_stamps() == {("records", ""): stamp_hash(stamp("records", "", "v1"))}


def test_the_tables_listed_are_the_folders_under_tables(tmp_path):
    store = TableStore(str(tmp_path))
    assert store.tables() == [] and not store.has("predictions.samples")
    store.commit([(SAMPLES, "a", rows("v1"))])
    store.commit([(RECORDS, None, rows("v1"))])
    (tmp_path / "tables" / "index.json").write_text("{}")  # not a table
    assert store.tables() == ["predictions.samples", "records.g1020"]
    assert store.has("records.g1020") and not store.has("records.other")


# ------------------------------------------------------------------------------------------------ reading


def test_read_gives_every_partition_one_or_none(tmp_path):
    store = TableStore(str(tmp_path))
    assert store.read("predictions.samples") is None and store.read_files([]) is None
    store.commit([(SAMPLES, "a", rows("a", 2))])
    store.commit([(SAMPLES, "b", rows("b", 3).assign(extra=1))])
    every = store.read("predictions.samples").sort_values("image_id")
    assert every["image_id"].tolist() == ["a-0", "a-1", "b-0", "b-1", "b-2"]
    assert every["extra"].isna().tolist() == [True, True, False, False, False]  # union by name
    assert versions(store, "predictions.samples", "b") == ["b"]
    assert store.read("predictions.samples", "c") is None and store.files("predictions.samples", "c") == []
    assert [p["partition"] for p in store.partitions("predictions.samples")] == ["a", "b"]
    found = store.partitions("predictions.samples")[1]
    assert found["url"] == found["file"] and found["file"] == store.files("predictions.samples", "b")[0]


def test_stamps_are_found_by_id_once_each_and_unknown_ids_are_left_out(tmp_path):
    store = TableStore(str(tmp_path))
    assert store.stamps(["x"]) == {} and store.stamp("x") is None
    first, second = stamp("metrics", "a", "v1"), stamp("metrics", "b", "v1")
    store.commit([(SAMPLES, "a", rows("v1"))], stamp=first)
    store.commit([(SAMPLES, "b", rows("v1"))], stamp=second, stamps=(first,))  # first kept by two commits
    assert store.stamps([stamp_hash(first), stamp_hash(second), "unknown", stamp_hash(first)]) == {
        stamp_hash(first): first, stamp_hash(second): second}
    assert store.stamp(stamp_hash(second)) == second and store.stamps([]) == {}
    with store.views() as con:
        assert con.execute("SELECT count(*), count(DISTINCT stamp_id) FROM lineage.stamps").fetchone() == (2, 2)
        assert sorted(con.execute("SELECT asset, partition FROM lineage.current").fetchall()) == [
            ("metrics", "a"), ("metrics", "b")]


def test_views_of_an_empty_store_have_empty_lineage_tables(tmp_path):
    with TableStore(str(tmp_path)).views() as con:
        assert con.execute("SELECT count(*) FROM lineage.stamps").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM lineage.current").fetchone() == (0,)
        columns = [c[0] for c in con.execute("SELECT * FROM lineage.stamps").description]
        assert columns == ["stamp_id", "asset", "partition", "run_id", "version", "stamp"]


def test_a_store_in_a_folder_whose_name_has_a_quote_is_read_through_its_views(tmp_path):
    store = TableStore(str(tmp_path / "o'brien's tables"))
    store.commit([(SAMPLES, "a", rows("v1", 3))], stamp=stamp("predictions", "a", "v1"))
    with store.views() as con:
        assert con.execute('SELECT count(*) FROM "predictions"."samples"').fetchone() == (3,)
        assert con.execute("SELECT count(*) FROM lineage.stamps").fetchone() == (1,)


def test_an_fsspec_store_reads_writes_and_opens_its_files_with_their_protocol():
    url = f"memory://literal-{os.getpid()}-{time.time_ns()}/tables"
    store = TableStore(url)
    assert not store.local
    kept = stamp("predictions", "a", "v1")
    store.commit([(SAMPLES, "a", rows("v1", 2))], stamp=kept)
    store.commit([(SAMPLES, "a", rows("v2", 4))], stamp=stamp("predictions", "a", "v2"))
    found = store.partitions("predictions.samples")
    assert len(found) == 1 and found[0]["url"].startswith("memory://") and not found[0]["file"].startswith("memory")
    assert versions(store, "predictions.samples") == ["v2"] and store.stamp(stamp_hash(kept)) == kept
    with store.connection() as con:
        store._register(con)  # a second registration on the same connection is no error
        assert con.execute("SELECT count(*) FROM read_parquet(?)", [found[0]["url"]]).fetchone() == (4,)
    with store.views() as con:
        assert con.execute("SELECT count(*) FROM predictions.samples").fetchone() == (4,)


def test_a_registration_refused_for_another_reason_is_raised():
    store = TableStore(f"memory://refused-{os.getpid()}/tables")

    class Refusing:
        def register_filesystem(self, fs):
            raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        store._register(Refusing())


# ------------------------------------------------------------------------------------- commits and owners


def test_an_asset_partition_that_writes_fewer_tables_keeps_the_others_last_rows(tmp_path):
    store = TableStore(str(tmp_path))
    store.commit([(SAMPLES, "a", rows("v1")), (UNAVAILABLE, "a", rows("v1"))], stamp=stamp("p", "a", "v1"))
    store.commit([(SAMPLES, "a", rows("v2"))], stamp=stamp("p", "a", "v2"))
    assert versions(store, "predictions.samples") == ["v2"] and versions(store, "predictions.unavailable") == ["v1"]
    files = read_json(tmp_path / "lineage" / "current" / "p" / "a.json")["files"]
    assert sorted(files) == ["predictions.samples@a", "predictions.unavailable@a"]


def test_a_takeover_reads_the_previous_owners_file_until_the_new_owner_names_it(tmp_path):
    store = TableStore(str(tmp_path))
    store.commit([(SAMPLES, "a", rows("old"))])  # owned by an unstamped pointer
    old_file = store.files("predictions.samples", "a")[0]
    commit_killed_after(store, "owners", [(SAMPLES, "a", rows("new"))], stamp("p", "a", "v1"))
    assert table_pointer(store, "predictions.samples", "a") == {
        "owner": "lineage/current/p/a.json", "previous": store._relative(old_file),
        "previous_stamp_id": None, "stale": None}
    assert versions(store, "predictions.samples") == ["old"]
    assert store.partitions("predictions.samples")[0]["stamp_id"] is None
    store.commit([(SAMPLES, "a", rows("new"))], stamp=stamp("p", "a", "v2"))
    assert versions(store, "predictions.samples") == ["new"]
    assert store.partitions("predictions.samples")[0]["stamp_id"] == stamp_hash(stamp("p", "a", "v2"))


def test_an_owner_that_reclaims_a_partition_never_shows_its_own_stale_file(tmp_path):
    """Owner P writes partition a (v1), owner Q takes it over (v2), P claims it back and is killed before its
    pointer lands: readers keep Q's v2 with Q's stamp, never P's v1 that P's pointer still names."""
    store = TableStore(str(tmp_path))
    mine, theirs = stamp("p", "a", "v1"), stamp("q", "a", "v2")
    store.commit([(SAMPLES, "a", rows("v1"))], stamp=mine)
    p_file = store.files("predictions.samples", "a")[0]
    store.commit([(SAMPLES, "a", rows("v2"))], stamp=theirs)
    q_file = store.files("predictions.samples", "a")[0]
    commit_killed_after(store, "owners", [(SAMPLES, "a", rows("v3"))], stamp("p", "a", "v3"))
    assert table_pointer(store, "predictions.samples", "a") == {
        "owner": "lineage/current/p/a.json", "previous": store._relative(q_file),
        "previous_stamp_id": stamp_hash(theirs), "stale": store._relative(p_file)}
    assert versions(store, "predictions.samples") == ["v2"]
    assert store.partitions("predictions.samples")[0]["stamp_id"] == stamp_hash(theirs)
    store.commit([(SAMPLES, "a", rows("v4"))], stamp=stamp("p", "a", "v4"))
    assert versions(store, "predictions.samples") == ["v4"]


def test_an_owner_pointer_that_is_gone_leaves_the_partition_unread_without_a_previous(tmp_path):
    store = TableStore(str(tmp_path))
    store.commit([(SAMPLES, "a", rows("v1"))], stamp=stamp("p", "a", "v1"))
    (tmp_path / "lineage" / "current" / "p" / "a.json").unlink()
    assert store.files("predictions.samples") == [] and store.read("predictions.samples") is None


def test_a_table_pointer_without_an_owner_or_a_file_names_nothing(tmp_path):
    store = TableStore(str(tmp_path))
    folder = tmp_path / "tables" / "predictions.samples" / "a"
    folder.mkdir(parents=True)
    (folder / "CURRENT.json").write_text(json.dumps({"commit": "x"}))
    assert store.partitions("predictions.samples") == []


def test_the_same_owner_writing_again_does_not_rewrite_the_table_pointer(tmp_path):
    store = TableStore(str(tmp_path))
    store.commit([(SAMPLES, "a", rows("v1"))], stamp=stamp("p", "a", "v1"))
    pointer = tmp_path / "tables" / "predictions.samples" / "a" / "CURRENT.json"
    before = pointer.stat().st_mtime_ns, pointer.stat().st_ino
    store.commit([(SAMPLES, "a", rows("v2"))], stamp=stamp("p", "a", "v2"))
    assert (pointer.stat().st_mtime_ns, pointer.stat().st_ino) == before
    assert versions(store, "predictions.samples") == ["v2"]


def test_the_steps_of_a_commit_are_reached_in_their_documented_order(tmp_path, monkeypatch):
    reached = []
    monkeypatch.setattr(TableStore, "_reached", lambda self, step: reached.append(step))
    TableStore(str(tmp_path)).commit([(SAMPLES, "a", rows("v1"))], stamp=stamp("p", "a", "v1"))
    assert reached == ["data", "stamps", "owners", "pointer", "collect"]


@pytest.mark.parametrize("step, seen", [("data", ["v1"]), ("stamps", ["v1"]), ("owners", ["v1"]),
                                        ("pointer", ["v2"]), ("collect", ["v2"])])
def test_a_commit_is_visible_from_its_pointer_step_on(tmp_path, step, seen):
    store = TableStore(str(tmp_path))
    store.commit([(SAMPLES, "a", rows("v1"))])
    commit_killed_after(store, step, [(SAMPLES, "a", rows("v2"))], stamp("p", "a", "v2"))
    assert versions(store, "predictions.samples") == seen
    assert store.current_stamps() == ({("p", "a"): stamp_hash(stamp("p", "a", "v2"))} if seen == ["v2"] else {})


# ------------------------------------------------------------------------------------------------ edits


def test_an_edit_replaces_the_rows_and_keeps_the_lineage(tmp_path):
    store = TableStore(str(tmp_path))
    kept = stamp("p", "a", "v1")
    store.commit([(SAMPLES, "a", rows("v1")), (UNAVAILABLE, "a", rows("v1"))], stamp=kept)
    before = store.current("p", "a")
    store.edit("predictions.samples", "a", rows("planted", 1))
    after = store.current("p", "a")
    assert versions(store, "predictions.samples") == ["planted"]
    assert versions(store, "predictions.unavailable") == ["v1"]
    assert after["stamp_id"] == stamp_hash(kept) and after["commit"] == before["commit"] and after["stamp"] == kept
    assert after["files"]["predictions.unavailable@a"] == before["files"]["predictions.unavailable@a"]
    assert after["files"]["predictions.samples@a"] != before["files"]["predictions.samples@a"]
    assert COMMIT_NAME.match(os.path.basename(after["files"]["predictions.samples@a"]))
    assert os.path.dirname(after["files"]["predictions.samples@a"]) == "tables/predictions.samples/a"


def test_an_edit_of_a_partition_never_written_is_an_unstamped_commit(tmp_path):
    store = TableStore(str(tmp_path))
    store.edit("records.g1020", None, rows("planted", 3))
    assert versions(store, "records.g1020", None) == ["planted"] and len(store.read("records.g1020")) == 3
    assert read_json(tmp_path / "tables" / "records.g1020" / "_whole" / "CURRENT.json")["owner"] == (
        "lineage/unstamped/records.g1020%40.json")
    store.edit("predictions.samples", "b", rows("planted", 1))
    assert store.partitions("predictions.samples")[0]["partition"] == "b"


# -------------------------------------------------------------------------------------- what is collected


def test_superseded_files_go_once_their_successor_is_older_than_the_grace(tmp_path, monkeypatch):
    """Four commits at now-1000 s, now-900 s, now-10 s and now: the first was superseded 900 s ago (gone), the
    second 10 s ago (kept for readers that resolved it), the last two are the newest two (kept)."""
    now = time.time_ns()
    names = iter(f"{now - seconds * 10**9:020d}-0000000{k}" for k, seconds in enumerate((1000, 900, 10, 0)))
    monkeypatch.setattr(store_module, "_commit_id", lambda: next(names))
    store = TableStore(str(tmp_path))
    for version in ("v1", "v2", "v3", "v4"):
        store.commit([(SAMPLES, "a", rows(version))])
    left = sorted(p.name for p in (tmp_path / "tables" / "predictions.samples" / "a").glob("*.parquet"))
    assert left == [f"{now - s * 10**9:020d}-0000000{k}.parquet" for k, s in ((1, 900), (2, 10), (3, 0))]
    assert versions(store, "predictions.samples") == ["v4"]


def test_a_file_with_a_name_that_is_not_a_commit_counts_as_written_long_ago(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "KEEP_FILES", 1)
    store = TableStore(str(tmp_path))
    folder = tmp_path / "tables" / "predictions.samples" / "a"
    folder.mkdir(parents=True)
    rows("copied").to_parquet(folder / "00-a.parquet")
    rows("copied").to_parquet(folder / "01-b.parquet")
    store.commit([(SAMPLES, "a", rows("v1"))])
    left = sorted(p.name for p in folder.glob("*.parquet"))
    assert left[0] == "01-b.parquet" and len(left) == 2  # 00-a's successor 01-b dates from time 0


def test_removing_a_file_another_writer_collected_first_is_no_error(tmp_path):
    store = TableStore(str(tmp_path))
    store._remove(str(tmp_path / "gone.parquet"))
    (tmp_path / "here.parquet").write_bytes(b"x")
    store._remove(str(tmp_path / "here.parquet"))
    assert not (tmp_path / "here.parquet").exists()


def _exit_at_once() -> None:
    pass


def test_a_partial_file_is_abandoned_when_its_writer_is_gone_or_it_is_old(tmp_path):
    process = multiprocessing.get_context("spawn").Process(target=_exit_at_once)
    process.start()
    process.join(120)
    young, old = tmp_path / "young", tmp_path / "old"
    for path in (young, old):
        path.write_bytes(b"")
    os.utime(old, (time.time() - 3700, time.time() - 3700))
    here = store_module._HOST
    assert store_module._abandoned(str(young), here, process.pid) is True  # this machine, its writer ended
    assert store_module._abandoned(str(young), here, os.getpid()) is False  # alive
    assert store_module._abandoned(str(old), here, os.getpid()) is True  # a process id reused since: by age
    assert store_module._abandoned(str(young), "elsewhere", 1) is False
    assert store_module._abandoned(str(old), "elsewhere", 1) is True
    assert store_module._abandoned(str(tmp_path / "missing"), "elsewhere", 1) is False


def test_a_partial_file_of_another_users_live_process_is_judged_by_age(tmp_path, monkeypatch):
    def refused(pid, signal):
        raise PermissionError(pid)

    young, old = tmp_path / "young", tmp_path / "old"
    for path in (young, old):
        path.write_bytes(b"")
    os.utime(old, (time.time() - 3700, time.time() - 3700))
    monkeypatch.setattr(store_module.os, "kill", refused)
    assert store_module._abandoned(str(young), store_module._HOST, 12345) is False
    assert store_module._abandoned(str(old), store_module._HOST, 12345) is True


def test_only_partial_files_of_the_documented_form_are_swept(tmp_path):
    store = TableStore(str(tmp_path))
    store.commit([(SAMPLES, "a", rows("v1"))])
    folder = tmp_path / "tables" / "predictions.samples" / "a"
    gone = folder / ".x.parquet.tmp-elsewhere-7-abc123"
    lookalikes = [folder / "x.parquet.tmp-elsewhere-7-abc123", folder / ".x.parquet.tmp-elsewhere-7-xyz",
                  folder / ".x.parquet.tmp-elsewhere-seven-abc123"]
    for path in (gone, *lookalikes):
        path.write_bytes(b"")
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    store.commit([(SAMPLES, "a", rows("v2"))])
    assert not gone.exists() and all(path.exists() for path in lookalikes)


# ------------------------------------------------------------------------------------------------ migration


def test_a_home_whose_store_has_tables_is_not_migrated_again(tmp_path, capsys):
    database = tmp_path / "focus.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE SCHEMA records; CREATE TABLE records.g1020 AS SELECT 'old' AS version")
    url = str(tmp_path / "tables")
    assert migrate_if_needed(tmp_path / "absent.duckdb", url) == []
    TableStore(url).commit([(RECORDS, None, rows("new"))])
    assert migrate_if_needed(database, url) == [] and database.is_file()
    assert versions(TableStore(url), "records.g1020") == ["new"] and capsys.readouterr().out == ""


def test_a_first_use_moves_the_tables_and_says_so(tmp_path, capsys):
    database = tmp_path / "focus.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE SCHEMA records; CREATE TABLE records.g1020 AS SELECT 'old' AS version")
    url = str(tmp_path / "tables")
    assert migrate_if_needed(database, url) == ["records.g1020"]
    assert not database.exists() and (tmp_path / "focus.duckdb.migrated").is_file()
    assert versions(TableStore(url), "records.g1020") == ["old"]
    assert capsys.readouterr().out == (f"focus: moved 1 table(s) of {database} into {url} (one Parquet file per "
                                       "partition); the old file is kept as focus.duckdb.migrated\n")


def _old_home(database: Path, kept: dict) -> None:
    """A focus.duckdb of the layout before the table store: a shared table with its partition column, a table of
    one dataset, a shared table written without its partition column, and the two lineage tables."""
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE SCHEMA metrics; CREATE SCHEMA records; CREATE SCHEMA lineage")
        con.execute("CREATE TABLE metrics.values AS SELECT * FROM (VALUES ('m-2', 'b'), ('m-1', 'a'), ('m-3', 'b')) "
                    "t(metric_id, partition)")
        con.execute("CREATE TABLE records.g1020 AS SELECT 'old' AS version")
        con.execute("CREATE TABLE records.quarantine AS SELECT 7 AS source_row")  # no `dataset` column
        con.execute("CREATE TABLE lineage.stamps AS SELECT ? AS stamp_id, ? AS stamp",
                    [stamp_hash(kept), json.dumps(kept, sort_keys=True, separators=(",", ":"))])
        con.execute("CREATE TABLE lineage.current AS SELECT * FROM (VALUES ('records', NULL, ?)) "
                    "t(asset, partition, stamp_id)", [stamp_hash(kept)])


def test_a_migration_moves_every_table_but_the_lineage_and_keeps_the_current_stamps(tmp_path):
    database, url = tmp_path / "focus.duckdb", str(tmp_path / "tables")
    kept = stamp("records", "", "v-old")
    _old_home(database, kept)
    with duckdb.connect(str(database), read_only=True):  # a reader of the old file (a DuckDB shell, say) is no bar
        moved = store_module.migrate_duckdb(database, TableStore(url))
    assert moved == ["metrics.values", "records.g1020", "records.quarantine"]
    store = TableStore(url)
    assert store.tables() == moved
    assert [p["partition"] for p in store.partitions("metrics.values")] == ["a", "b"]
    assert store.read("metrics.values", "b").to_dict("list") == {"metric_id": ["m-2", "m-3"], "partition": ["b", "b"]}
    assert [p["partition"] for p in store.partitions("records.quarantine")] == [None]
    assert store.read("records.quarantine").to_dict("list") == {"source_row": [7]}
    assert read_json(tmp_path / "tables" / "lineage" / "current" / "records" / "_whole.json") == {
        "asset": "records", "partition": "", "stamp_id": stamp_hash(kept), "commit": "migrated", "files": {},
        "stamp": kept}
    assert store.current_stamps() == {("records", ""): stamp_hash(kept)} and store.stamp(stamp_hash(kept)) == kept
