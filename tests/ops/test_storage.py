"""FocusStorage: tables as Parquet files per partition, replaced per partition in commits that readers see whole,
shared by concurrent writers, in a folder or an fsspec store."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pandas as pd
import pytest

from resources.layout import METRICS, QUARANTINE, SAMPLES, UNAVAILABLE, Table
from resources.storage import FocusStorage
from resources.tables import KEEP_FILES, TableStore


@pytest.fixture
def storage(tmp_path):
    return FocusStorage(tables_url=str(tmp_path / "tables"), artifacts_dir=str(tmp_path / "a"))


def quarantine(dataset, n):
    return pd.DataFrame({"dataset": pd.Series([dataset] * n, dtype=object), "source_row": pd.Series(range(n), dtype="int64"),
                         "reason": pd.Series([f"r{i}" for i in range(n)], dtype=object)})


def test_a_first_empty_partition_does_not_fix_column_types_to_null(storage):
    storage.replace_partition(QUARANTINE, "brset", quarantine("brset", 0))
    storage.replace_partition(QUARANTINE, "rfmid_2", quarantine("rfmid_2", 2))
    assert storage.read_table(QUARANTINE)["reason"].tolist() == ["r0", "r1"]


def test_replace_partition_touches_only_its_partition(storage):
    storage.replace_partition(QUARANTINE, "a", quarantine("a", 3))
    storage.replace_partition(QUARANTINE, "b", quarantine("b", 2))
    storage.replace_partition(QUARANTINE, "a", quarantine("a", 1))
    assert storage.read_partition(QUARANTINE, "a")["source_row"].tolist() == [0]
    counts = storage.read_table(QUARANTINE)["dataset"].value_counts().to_dict()
    assert counts == {"a": 1, "b": 2}


def test_replace_table_keeps_types_of_all_null_columns(storage):
    frame = pd.DataFrame({"image_id": ["x", "y"], "patient_id": [None, None], "grade": pd.array([1, None], dtype="Int64")})
    storage.replace_table(Table("records", "g1020"), frame)
    storage.replace_table(Table("records", "g1020"), frame.assign(patient_id=["p1", None]))
    with storage.views() as con:
        types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                 "WHERE table_name = 'g1020'").fetchall())
        assert con.execute("SELECT patient_id FROM records.g1020 ORDER BY image_id").fetchall() == [("p1",), (None,)]
    assert types == {"image_id": "VARCHAR", "patient_id": "VARCHAR", "grade": "BIGINT"}


def test_identifiers_are_checked(storage):
    with pytest.raises(ValueError, match="identifier"):
        storage.replace_table(Table("records", "x; drop table y"), quarantine("a", 1))


def test_a_table_of_one_partition_is_not_read_by_partition(storage):
    with pytest.raises(ValueError, match="one partition"):
        storage.read_partition(Table("records", "brset"), "brset")


def test_artifacts_are_written_whole_or_not_at_all(storage):
    frame = pd.DataFrame({"image_id": ["a", "b"]})
    path, sha = storage.write_parquet("labels/x.parquet", frame)
    assert pd.read_parquet(path).equals(frame) and len(sha) == 64

    def broken(partial):
        partial.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        storage.write_artifact("labels/x.parquet", broken)
    assert pd.read_parquet(path).equals(frame)  # the previous file is untouched
    assert [p.name for p in path.parent.iterdir()] == ["x.parquet"]  # and no partial file is left behind


def test_a_table_from_an_earlier_version_gains_the_new_columns(storage):
    storage.replace_partition(QUARANTINE, "a", quarantine("a", 2))
    storage.replace_partition(QUARANTINE, "b", quarantine("b", 1).assign(stage=["records"]))
    table = storage.read_table(QUARANTINE).sort_values(["dataset", "source_row"])
    assert table["stage"].tolist() == [None, None, "records"]  # old rows: null in the new column


def test_a_column_typed_as_numbers_by_an_empty_first_partition_takes_the_type_of_its_first_values(storage):
    """A dataset with no predictions at all wrote first: pandas typed its empty id column as float; the ids of the
    datasets written later stay text."""
    empty = quarantine("a", 0).assign(lineage_id=pd.Series([], dtype="float64"))
    storage.replace_partition(QUARANTINE, "a", empty)
    storage.replace_partition(QUARANTINE, "b", quarantine("b", 2).assign(lineage_id=["ad63d9818c75", "076b7d66a146"]))
    assert storage.read_table(QUARANTINE)["lineage_id"].tolist() == ["ad63d9818c75", "076b7d66a146"]


def _stamp(asset: str, partition: str, version: str) -> dict:
    return {"asset": asset, "partition": partition, "run_id": f"run-{version}", "version": version,
            "code_version": "test", "facts": {}, "inputs": {}}


def _predictions(storage, version: str, rows: int) -> None:
    samples = pd.DataFrame({"image_id": [f"i{k}" for k in range(rows)], "version": version, "partition": "idrid"})
    unavailable = pd.DataFrame({"reason": [f"r-{version}"], "partition": "idrid"})
    storage.replace_partitions([(SAMPLES, "idrid", samples), (UNAVAILABLE, "idrid", unavailable)],
                               stamp=_stamp("predictions", "idrid", version))


def test_a_stamped_read_sees_one_commit_of_its_asset_partition(storage):
    _predictions(storage, "v1", 3)
    _predictions(storage, "v2", 5)
    (samples, unavailable), stamp = storage.read_stamped([(SAMPLES, "idrid"), (UNAVAILABLE, "idrid")],
                                                         "predictions", "idrid")
    assert stamp["version"] == "v2" and set(samples["version"]) == {"v2"} and len(samples) == 5
    assert unavailable["reason"].tolist() == ["r-v2"]
    assert storage.current_stamp("predictions", "idrid") == stamp and storage.stamp(
        storage.store.current("predictions", "idrid")["stamp_id"]) == stamp


def test_a_write_killed_before_its_pointers_leaves_the_last_commit_whole(storage, monkeypatch):
    _predictions(storage, "v1", 3)
    store = TableStore(storage.tables_url)
    real_put = TableStore._put

    def dies_at_the_first_pointer(self, path, data):
        if path.endswith(".json"):
            raise KeyboardInterrupt("killed")  # the data files are written, no pointer is
        real_put(self, path, data)

    monkeypatch.setattr(TableStore, "_put", dies_at_the_first_pointer)
    with pytest.raises(KeyboardInterrupt):
        _predictions(storage, "v2", 5)
    monkeypatch.setattr(TableStore, "_put", real_put)
    (samples, unavailable), stamp = storage.read_stamped([(SAMPLES, "idrid"), (UNAVAILABLE, "idrid")],
                                                         "predictions", "idrid")
    assert stamp["version"] == "v1" and set(samples["version"]) == {"v1"} and unavailable["reason"].tolist() == ["r-v1"]
    with storage.views() as con:
        assert con.execute("SELECT DISTINCT version FROM predictions.samples").fetchall() == [("v1",)]
    assert len(store.files("predictions.samples")) == 1
    _predictions(storage, "v3", 2)  # the rerun completes
    assert set(storage.read_partition(SAMPLES, "idrid")["version"]) == {"v3"}


def test_superseded_files_are_collected_but_the_newest_are_kept(storage, tmp_path, monkeypatch):
    monkeypatch.setattr("resources.tables.SUPERSEDED_GRACE_S", 0)
    for version in ("v1", "v2", "v3", "v4"):
        _predictions(storage, version, 1)
    folder = Path(storage.tables_url) / "tables" / "predictions.samples" / "idrid"
    assert len(list(folder.glob("*.parquet"))) == KEEP_FILES
    assert set(storage.read_partition(SAMPLES, "idrid")["version"]) == {"v4"}


def test_a_file_superseded_moments_ago_stays_for_the_readers_that_resolved_it(storage):
    files = []
    for version in ("v1", "v2", "v3", "v4"):
        _predictions(storage, version, 1)
        files += storage.store.files("predictions.samples", "idrid")
    assert [set(storage.store.read_files([f])["version"]) for f in files] == [{"v1"}, {"v2"}, {"v3"}, {"v4"}]


def _writer(url: str, dataset: str, rounds: int) -> None:
    storage = FocusStorage(tables_url=url, artifacts_dir=url)
    for k in range(rounds):
        frame = pd.DataFrame({"metric_id": [f"{dataset}-{k}-{j}" for j in range(50)], "round": k, "partition": dataset})
        storage.replace_partition(METRICS, dataset, frame, stamp=_stamp("metrics", dataset, f"{dataset}-{k}"))


def test_concurrent_writers_of_different_partitions_lose_nothing(storage):
    datasets = [f"d{k}" for k in range(6)]
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_writer, args=(storage.tables_url, d, 5)) for d in datasets]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
        assert writer.exitcode == 0
    table = storage.read_table(METRICS)
    assert sorted(table["partition"].unique()) == datasets and len(table) == 50 * len(datasets)
    assert set(table["round"]) == {4}
    assert {key[1] for key in storage.store.current_stamps()} == set(datasets)


def test_an_fsspec_store_takes_the_same_path(tmp_path):
    storage = FocusStorage(tables_url="memory://focus-test/tables", artifacts_dir=str(tmp_path / "a"))
    _predictions(storage, "v1", 2)
    _predictions(storage, "v2", 4)
    (samples,), stamp = storage.read_stamped([(SAMPLES, "idrid")], "predictions", "idrid")
    assert len(samples) == 4 and stamp["version"] == "v2"
    with storage.views() as con:
        assert con.execute("SELECT count(*) FROM predictions.samples").fetchone()[0] == 4
        assert con.execute("SELECT count(*) FROM lineage.current").fetchone()[0] == 1


def test_a_home_from_before_the_parquet_store_is_migrated_on_first_use(tmp_path):
    """The tables of focus.duckdb (the layout of earlier versions: shared tables with a partition column, and
    lineage.stamps / lineage.current) move into the store once, with their current lineage."""
    import duckdb

    from focus_dagster import lineage
    from focus_dagster.config import parse_config

    config = parse_config({}, tmp_path)
    stamp = _stamp("metrics", "idrid", "v-old")
    with duckdb.connect(str(config.database)) as con:
        con.execute("CREATE SCHEMA metrics; CREATE SCHEMA records; CREATE SCHEMA lineage")
        con.execute("CREATE TABLE metrics.values AS SELECT * FROM (VALUES ('m-1', 0.7, 'idrid'), ('m-2', 0.6, 'brset'))"
                    " t(metric_id, value, partition)")
        con.execute("CREATE TABLE records.idrid AS SELECT * FROM (VALUES ('img1'), ('img2')) t(image_id)")
        con.execute("CREATE TABLE lineage.stamps (stamp_id VARCHAR, asset VARCHAR, partition VARCHAR, run_id VARCHAR, "
                    "version VARCHAR, stamp VARCHAR)")
        con.execute("INSERT INTO lineage.stamps VALUES (?, 'metrics', 'idrid', 'r', 'v-old', ?)",
                    [lineage.stamp_id(stamp), lineage.dumps(stamp)])
        con.execute("CREATE TABLE lineage.current (asset VARCHAR, partition VARCHAR, stamp_id VARCHAR)")
        con.execute("INSERT INTO lineage.current VALUES ('metrics', 'idrid', ?)", [lineage.stamp_id(stamp)])
    storage = FocusStorage.from_config(config)
    assert storage.read_partition(METRICS, "idrid")["metric_id"].tolist() == ["m-1"]
    assert storage.read_records("idrid")["image_id"].tolist() == ["img1", "img2"]
    (rows,), found = storage.read_stamped([(METRICS, "idrid")], "metrics", "idrid")
    assert rows["value"].tolist() == [0.7] and found == stamp and storage.stamp(lineage.stamp_id(stamp)) == stamp
    assert not config.database.exists() and config.database.with_name("focus.duckdb.migrated").is_file()
    FocusStorage.from_config(config)  # a second use finds nothing to move
    assert len(storage.store.files("metrics.values")) == 2


# ------------------------------------------------------------------- one commit point for every table it writes


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no cleanup of the writer's own."""


def _kill_at(monkeypatch, step: str) -> None:
    def reached(self, name):
        if name == step:
            raise Killed(step)

    monkeypatch.setattr(TableStore, "_reached", reached)


def _seen(storage) -> dict:
    """What a reader sees of the predictions of idrid: the versions each table holds, read through the views,
    through a stamped read and through the store's per-table reads."""
    with storage.views() as con:
        views = {table: {v for (v,) in con.execute(f"SELECT DISTINCT version FROM {table}").fetchall()}
                 for table in ("predictions.samples", "predictions.unavailable")}
        stamp_ids = {s for (s,) in con.execute("SELECT stamp_id FROM lineage.current").fetchall()}
    (samples, unavailable), stamp = storage.read_stamped([(SAMPLES, "idrid"), (UNAVAILABLE, "idrid")],
                                                         "predictions", "idrid")
    return {"views": views, "stamped": ({*samples["version"]}, {*unavailable["version"]}, stamp["version"]),
            "stamp_ids": stamp_ids}


def _predictions_with_versions(storage, version: str, rows: int) -> None:
    samples = pd.DataFrame({"image_id": [f"i{k}" for k in range(rows)], "version": version, "partition": "idrid"})
    unavailable = pd.DataFrame({"reason": [f"r-{version}"], "version": version, "partition": "idrid"})
    storage.replace_partitions([(SAMPLES, "idrid", samples), (UNAVAILABLE, "idrid", unavailable)],
                               stamp=_stamp("predictions", "idrid", version))


@pytest.mark.parametrize("step", ["data", "stamps", "owners", "pointer", "collect"])
def test_a_writer_killed_at_any_step_leaves_every_table_of_one_commit(storage, monkeypatch, step):
    """Two tables of one asset partition: before the commit point (the owner pointer) readers see the old
    commit in both tables, after it the new one in both; never the new samples with the old unavailable rows."""
    _predictions_with_versions(storage, "v1", 3)
    _kill_at(monkeypatch, step)
    with pytest.raises(Killed):
        _predictions_with_versions(storage, "v2", 5)
    monkeypatch.undo()
    landed = step in ("pointer", "collect")
    version = "v2" if landed else "v1"
    seen = _seen(storage)
    assert seen["views"] == {"predictions.samples": {version}, "predictions.unavailable": {version}}
    assert seen["stamped"] == ({version}, {version}, version)
    assert seen["stamp_ids"] == {storage.store.current("predictions", "idrid")["stamp_id"]}
    _predictions_with_versions(storage, "v3", 2)  # the rerun completes
    assert _seen(storage)["views"] == {"predictions.samples": {"v3"}, "predictions.unavailable": {"v3"}}


def test_a_kill_between_two_table_pointers_shows_neither_new_table(storage, monkeypatch):
    """A partition that another writer owned (an unstamped repair) taken over by an asset partition: the writer
    dies after the first table pointer changed owner and before the second did; readers still see the old rows
    of both tables, then the rerun's."""
    storage.replace_partitions([(SAMPLES, "idrid", pd.DataFrame({"version": ["v0"], "partition": "idrid"})),
                                (UNAVAILABLE, "idrid", pd.DataFrame({"version": ["v0"], "partition": "idrid"}))])
    real_put, pointers = TableStore._put, []

    def dies_at_the_second_table_pointer(self, path, data):
        if path.endswith("/CURRENT.json"):
            pointers.append(path)
            if len(pointers) == 2:
                raise Killed(path)
        real_put(self, path, data)

    monkeypatch.setattr(TableStore, "_put", dies_at_the_second_table_pointer)
    with pytest.raises(Killed):
        _predictions_with_versions(storage, "v1", 3)
    monkeypatch.undo()
    with storage.views() as con:
        for table in ("predictions.samples", "predictions.unavailable"):
            assert con.execute(f"SELECT DISTINCT version FROM {table}").fetchall() == [("v0",)]
    _predictions_with_versions(storage, "v1", 3)
    assert _seen(storage)["views"] == {"predictions.samples": {"v1"}, "predictions.unavailable": {"v1"}}


def _write_forever(url: str, done) -> None:
    storage = FocusStorage(tables_url=url, artifacts_dir=url)
    k = 0
    while not done.is_set():
        k += 1
        _predictions_with_versions(storage, f"v{k}", 1 + k % 7)


def test_a_reader_never_combines_two_commits_while_a_writer_commits(storage):
    """A writer in another process commits both tables again and again; every snapshot this process reads shows
    one version in both tables (the bound is on reads, so a slow machine only reads fewer commits)."""
    _predictions_with_versions(storage, "v0", 1)
    context = multiprocessing.get_context("spawn")
    done = context.Event()
    writer = context.Process(target=_write_forever, args=(storage.tables_url, done))
    writer.start()
    try:
        versions = set()
        for _ in range(60):
            seen = _seen(storage)
            assert seen["views"]["predictions.samples"] == seen["views"]["predictions.unavailable"]
            assert seen["stamped"][0] == seen["stamped"][1] == {seen["stamped"][2]}
            versions |= seen["views"]["predictions.samples"]
    finally:
        done.set()
        writer.join(60)
    assert writer.exitcode == 0


def _dies_while_writing(url: str) -> None:
    """A writer that is SIGKILLed after its first data file is written and before its rename."""
    import os
    import signal

    def killed_before_rename(source, target):
        os.kill(os.getpid(), signal.SIGKILL)

    os.replace = killed_before_rename
    _predictions_with_versions(FocusStorage(tables_url=url, artifacts_dir=url), "killed", 4)


def test_the_partial_file_of_a_killed_writer_is_collected(storage, tmp_path):
    import os
    import time

    _predictions_with_versions(storage, "v1", 3)
    context = multiprocessing.get_context("spawn")
    writer = context.Process(target=_dies_while_writing, args=(storage.tables_url,))
    writer.start()
    writer.join(120)
    assert writer.exitcode == -9
    folder = Path(storage.tables_url) / "tables" / "predictions.samples" / "idrid"
    partials = [p for p in folder.iterdir() if ".tmp-" in p.name]
    assert len(partials) == 1 and f"-{writer.pid}-" in partials[0].name
    assert set(storage.read_partition(SAMPLES, "idrid")["version"]) == {"v1"}
    # Partial files of other writers: one alive here (this process), two of another machine, one old.
    alive = folder / f".x.parquet.tmp-{partials[0].name.split('.tmp-')[1].rsplit('-', 2)[0]}-{os.getpid()}-abcdef"
    elsewhere_new, elsewhere_old = (folder / ".y.parquet.tmp-elsewhere-1-abcdef",
                                    folder / ".z.parquet.tmp-elsewhere-2-abcdef")
    for path in (alive, elsewhere_new, elsewhere_old):
        path.write_bytes(b"")
    os.utime(elsewhere_old, (time.time() - 7200, time.time() - 7200))
    _predictions_with_versions(storage, "v2", 2)
    left = sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)
    assert left == sorted([alive.name, elsewhere_new.name])
    assert set(storage.read_partition(SAMPLES, "idrid")["version"]) == {"v2"}


def test_a_store_written_before_owner_pointers_is_read_and_taken_over(storage):
    """Table pointers of the earlier protocol (`{"file", "commit", "stamp_id"}`) still resolve; the next commit
    takes the partition over without a moment where it is missing."""
    import json

    root = Path(storage.tables_url)
    folder = root / "tables" / "predictions.samples" / "idrid"
    folder.mkdir(parents=True)
    pd.DataFrame({"version": ["old"], "partition": "idrid"}).to_parquet(folder / "00000000000000000001-aaaa.parquet")
    (folder / "CURRENT.json").write_text(json.dumps({
        "file": "tables/predictions.samples/idrid/00000000000000000001-aaaa.parquet",
        "commit": "00000000000000000001-aaaa", "stamp_id": None}))
    assert storage.read_partition(SAMPLES, "idrid")["version"].tolist() == ["old"]
    _predictions_with_versions(storage, "v1", 2)
    assert set(storage.read_partition(SAMPLES, "idrid")["version"]) == {"v1"}
