"""Lineage stamps: where they are stored, that they travel with the data they describe, and the model facts."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from focus_dagster import lineage
from focus_dagster.config import FocusConfig
from resources import FocusStorage, layout


@pytest.fixture
def storage(tmp_path):
    return FocusStorage.from_config(FocusConfig(home=tmp_path / "home", roots={}))


def a_stamp(version: str, **inputs) -> dict:
    return lineage.stamp("harmonised_labels", "brset", "run-1", version, code_version="c1", inputs=inputs,
                         label_rule="brset.icdr")


def test_a_parquet_artifact_carries_its_stamp_in_the_file(storage):
    frame = pd.DataFrame({"image_id": ["a", "b"], "any_dr": [0, 1]})
    stamp = a_stamp("v1", records={"asset": "dataset_records", "version": "r1"})
    path, sha = storage.write_parquet("labels/brset.parquet", frame, stamp)
    # Any Parquet reader sees the stamp: here pyarrow's schema metadata, read without our code.
    metadata = pq.read_schema(path).metadata
    assert json.loads(metadata[b"focus.lineage"]) == stamp
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    read, found = storage.read_stamped_parquet("labels/brset.parquet")
    pd.testing.assert_frame_equal(read, frame)
    assert found == stamp
    storage.write_parquet("labels/old.parquet", frame)  # written without lineage: read as None, never guessed
    assert storage.read_stamped_parquet("labels/old.parquet")[1] is None


def test_a_partition_and_its_stamp_are_written_and_read_as_one(storage):
    table = layout.LABELS
    first = pd.DataFrame({"dataset": ["brset"] * 2, "image_id": ["a", "b"], "any_dr": [0, 1]})
    storage.replace_partition(table, "brset", first, stamp=a_stamp("v1"))
    (rows,), stamp = storage.read_stamped([(table, "brset")], "harmonised_labels", "brset")
    assert stamp["version"] == "v1" and rows["image_id"].tolist() == ["a", "b"]
    # A write that fails half-way (a value Parquet cannot hold) leaves the rows and the stamp as they were.
    broken = pd.DataFrame({"dataset": ["brset"], "image_id": ["c"], "any_dr": [object()]})
    with pytest.raises(pa.ArrowException):
        storage.replace_partition(table, "brset", broken, stamp=a_stamp("v2"))
    (rows,), stamp = storage.read_stamped([(table, "brset")], "harmonised_labels", "brset")
    assert stamp["version"] == "v1" and rows["image_id"].tolist() == ["a", "b"]
    storage.replace_partition(table, "brset", first.iloc[:1], stamp=a_stamp("v3"))
    (rows,), stamp = storage.read_stamped([(table, "brset")], "harmonised_labels", "brset")
    assert stamp["version"] == "v3" and rows["image_id"].tolist() == ["a"]
    assert storage.stamp(lineage.stamp_id(a_stamp("v1")))["version"] == "v1"  # every stamp written is kept


def test_the_content_version_follows_the_content_not_the_run():
    import numpy as np

    frame = pd.DataFrame({"image_id": ["a", "b"], "embedding": [np.zeros(3), np.ones(3)]})
    same = pd.DataFrame({"image_id": ["a", "b"], "embedding": [np.zeros(3), np.ones(3)]})
    nudged = pd.DataFrame({"image_id": ["a", "b"], "embedding": [np.zeros(3), np.ones(3) + 1e-6]})
    assert lineage.frame_version(frame) == lineage.frame_version(same) != lineage.frame_version(nudged)
    assert lineage.frame_version(frame) != lineage.frame_version(frame.iloc[::-1])


def test_the_data_version_follows_the_content_and_the_inputs_not_the_run():
    """What the refresh compares: the same output of the same inputs, written by another run or code, is the same
    data; other content, or the same content computed from another input, is not."""
    def records(run: str, version: str) -> dict:
        return lineage.stamp("dataset_records", "brset", run, version, code_version=f"code-{run}",
                             inputs={"release": lineage.stamp("dataset_release", "brset", run, "rel-1",
                                                              code_version=f"code-{run}")})

    def labels(run: str, version: str, read: dict) -> dict:
        return lineage.stamp("harmonised_labels", "brset", run, version, code_version=f"code-{run}",
                             inputs={"records": read}, label_rule="brset.icdr")

    first = labels("run-1", "lab-1", records("run-1", "rec-1"))
    again = labels("run-2", "lab-1", records("run-2", "rec-1"))
    assert lineage.data_version(first) == lineage.data_version(again)
    assert lineage.data_version(labels("run-2", "lab-2", records("run-2", "rec-1"))) != lineage.data_version(first)
    # Same labels read from other records: what is computed from them must follow too.
    assert lineage.data_version(labels("run-2", "lab-1", records("run-2", "rec-2"))) != lineage.data_version(first)
    assert lineage.data_version(None) is None


def test_model_facts_name_the_hub_snapshot_commit_and_the_weights_file(tmp_path):
    # The hub cache layout: models--{org}--{name}/snapshots/{commit}/<files> (huggingface_hub's documented layout).
    commit = "0123456789abcdef0123456789abcdef01234567"
    folder = tmp_path / "hub" / "models--openai--clip-vit-base-patch32" / "snapshots" / commit
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x" * 100)
    (folder / "config.json").write_text("{}")
    spec = SimpleNamespace(id="clip_vit_b32", source="openai/clip-vit-base-patch32", revision="main")
    report = SimpleNamespace(checkpoint=str(folder), weights_sha256="abc", clean=True)
    facts = lineage.model_facts(spec, report)
    assert facts["snapshot"] == commit and facts["revision"] == "main" and facts["source"] == spec.source
    assert facts["weights_bytes"] == 102 and facts["audit_clean"] is True
    single = tmp_path / "weights.pth"
    single.write_bytes(b"y" * 7)
    facts = lineage.model_facts(spec, SimpleNamespace(checkpoint=str(single), weights_sha256="d", clean=False))
    assert facts["snapshot"] is None and facts["weights_bytes"] == 7 and facts["audit_clean"] is False


def test_find_and_fact_walk_a_nested_chain():
    release = lineage.stamp("dataset_release", "brset", "r", "rel-1", code_version="c")
    records = lineage.stamp("dataset_records", "brset", "r", "rec-1", code_version="c", inputs={"release": release})
    labels = a_stamp("lab-1", records=records)
    assert lineage.find(labels, "dataset_release")["version"] == "rel-1"
    assert lineage.fact(labels, "inputs", "records", "inputs", "release", "version") == "rel-1"
    assert lineage.fact(labels, "inputs", "missing", "version") is None
