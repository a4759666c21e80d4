"""FocusStorage: typed tables, per-partition replacement, and no connection left open."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from dagster_duckdb import DuckDBResource

from resources.layout import QUARANTINE, Table
from resources.storage import FocusStorage


@pytest.fixture
def storage(tmp_path):
    return FocusStorage(duckdb=DuckDBResource(database=str(tmp_path / "db" / "focus.duckdb")), artifacts_dir=str(tmp_path / "a"))


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


def test_replace_table_keeps_types_of_all_null_columns(storage, tmp_path):
    frame = pd.DataFrame({"image_id": ["x", "y"], "patient_id": [None, None], "grade": pd.array([1, None], dtype="Int64")})
    storage.replace_table(Table("records", "g1020"), frame)
    storage.replace_table(Table("records", "g1020"), frame.assign(patient_id=["p1", None]))
    with duckdb.connect(str(tmp_path / "db" / "focus.duckdb"), read_only=True) as con:  # no writer left holding it
        types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'g1020'").fetchall())
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


def test_a_column_typed_as_numbers_by_an_empty_first_partition_takes_the_type_of_its_first_values(storage, tmp_path):
    """A dataset with no predictions at all wrote first: pandas typed its empty id column as float, the table was
    created with DOUBLE, and every later dataset failed with "Could not convert string ... to DOUBLE"."""
    empty = quarantine("a", 0).assign(lineage_id=pd.Series([], dtype="float64"))
    storage.replace_partition(QUARANTINE, "a", empty)
    storage.replace_partition(QUARANTINE, "b", quarantine("b", 2).assign(lineage_id=["ad63d9818c75", "076b7d66a146"]))
    assert storage.read_table(QUARANTINE)["lineage_id"].tolist() == ["ad63d9818c75", "076b7d66a146"]
    # A column that already holds values elsewhere keeps its type: a wrong value still fails, loudly.
    with pytest.raises(duckdb.ConversionException):
        storage.replace_partition(QUARANTINE, "c", quarantine("c", 1).assign(source_row=["not a number"]))
    assert sorted(storage.read_table(QUARANTINE)["dataset"]) == ["b", "b"]  # the failed write changed nothing
