"""The table store on S3, for real: a local S3 server (moto's, over HTTP), reached by s3fs through the same
environment variables a deployment sets (AWS_ENDPOINT_URL and the keys), with `tables: s3://bucket/...`.

The objects are listed with boto3, apart from the store's own code: every table partition a commit wrote is there
with its pointer. Writers in separate processes, each writing its own partition again and again, lose nothing;
the data layer runs over a range of datasets into the bucket, and `focus`'s views read it back.
"""

from __future__ import annotations

import json
import multiprocessing

import pandas as pd
import pytest

from focus_dagster.config import FocusConfig
from resources import FocusStorage
from resources.layout import METRICS, SAMPLES
from tests.support.environment import copy_tree
from tests.support.ports import free_port

pytestmark = pytest.mark.heavy(100)  # seconds on a quiet 2-core machine: started first

BUCKET = "focus-tables"


@pytest.fixture(scope="module")
def s3_server():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_server, monkeypatch, request):
    """A fresh bucket on the server, and the environment s3fs and boto3 read their endpoint and keys from."""
    import boto3

    for key, value in {"AWS_ENDPOINT_URL": s3_server, "AWS_ACCESS_KEY_ID": "focus", "AWS_SECRET_ACCESS_KEY": "focus",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    name = f"{BUCKET}-{request.node.name.replace('_', '-')[:40]}".lower()
    client = boto3.client("s3")
    client.create_bucket(Bucket=name)
    return client, name


def objects(client, bucket: str, prefix: str = "") -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def _stamp(asset: str, partition: str, version: str) -> dict:
    return {"asset": asset, "partition": partition, "run_id": f"run-{version}", "version": version}


def _write_samples(storage: FocusStorage, version: str, rows: int) -> None:
    frame = pd.DataFrame({"image_id": [f"i{k}" for k in range(rows)], "version": version, "partition": "idrid"})
    storage.replace_partition(SAMPLES, "idrid", frame, stamp=_stamp("predictions", "idrid", version))


def test_commits_land_in_the_bucket_and_read_back_through_the_views(bucket, tmp_path):
    client, name = bucket
    storage = FocusStorage(tables_url=f"s3://{name}/focus/tables", artifacts_dir=str(tmp_path / "artifacts"))
    _write_samples(storage, "v1", 3)
    _write_samples(storage, "v2", 5)
    keys = objects(client, name, "focus/tables/")
    partition = [k for k in keys if k.startswith("focus/tables/tables/predictions.samples/idrid/")]
    assert "focus/tables/tables/predictions.samples/idrid/CURRENT.json" in partition
    assert len([k for k in partition if k.endswith(".parquet")]) == 2  # both commits kept (the newest two)
    pointer = json.loads(client.get_object(Bucket=name, Key="focus/tables/tables/predictions.samples/idrid/"
                                                               "CURRENT.json")["Body"].read())
    assert pointer["owner"] == "lineage/current/predictions/idrid.json"  # the commit point of every table it wrote
    owner = json.loads(client.get_object(Bucket=name, Key=f"focus/tables/{pointer['owner']}")["Body"].read())
    assert f"focus/tables/{owner['files']['predictions.samples@idrid']}" in partition
    (samples,), stamp = storage.read_stamped([(SAMPLES, "idrid")], "predictions", "idrid")
    assert stamp["version"] == "v2" and len(samples) == 5
    with storage.views() as con:
        assert con.execute("SELECT count(*), min(version) FROM predictions.samples").fetchone() == (5, "v2")
        assert con.execute("SELECT stamp_id FROM lineage.current").fetchall() == [(
            storage.store.current("predictions", "idrid")["stamp_id"],)]


def _writer(url: str, dataset: str, rounds: int) -> None:
    storage = FocusStorage(tables_url=url, artifacts_dir="unused")
    for k in range(rounds):
        frame = pd.DataFrame({"metric_id": [f"{dataset}-{k}-{j}" for j in range(20)], "round": k, "partition": dataset})
        storage.replace_partition(METRICS, dataset, frame, stamp=_stamp("metrics", dataset, f"{dataset}-{k}"))


def test_writers_in_separate_processes_lose_nothing_and_readers_see_their_commits(bucket):
    _, name = bucket
    url = f"s3://{name}/tables"
    datasets = [f"d{k}" for k in range(4)]
    context = multiprocessing.get_context("spawn")  # each with its own s3fs client, as separate pods would be
    writers = [context.Process(target=_writer, args=(url, dataset, 4)) for dataset in datasets]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
        assert writer.exitcode == 0
    storage = FocusStorage(tables_url=url, artifacts_dir="unused")
    table = storage.read_table(METRICS)
    assert sorted(table["partition"].unique()) == datasets and len(table) == 20 * len(datasets)
    assert set(table["round"]) == {3}
    assert {partition for (_, partition) in storage.store.current_stamps()} == set(datasets)
    # This process has listed the bucket; others write a partition again and a new one; this process sees both.
    for dataset, rounds in (("d0", 6), ("d4", 2)):
        writer = context.Process(target=_writer, args=(url, dataset, rounds))
        writer.start()
        writer.join(120)
        assert writer.exitcode == 0
    table = storage.read_table(METRICS)
    assert table.groupby("partition")["round"].max().to_dict() == {"d0": 5, "d1": 3, "d2": 3, "d3": 3, "d4": 1}
    assert {partition for (_, partition) in storage.store.current_stamps()} == {*datasets, "d4"}


def test_the_data_layer_writes_its_tables_to_the_bucket(bucket, synth_all, tmp_path, monkeypatch):
    import dagster as dg

    from assets.labels import DATA_LAYER_JOB
    from focus_dagster.definitions import build_definitions

    client, name = bucket
    out, manifests = synth_all
    roots = {key: copy_tree(out / key, tmp_path / key) for key in ("papila", "idrid")}
    config = FocusConfig(home=tmp_path / "home", roots=roots, models=("tiny_vit",),
                         tables_url=f"s3://{name}/focus/tables")
    with dg.DagsterInstance.ephemeral() as instance:
        result = build_definitions(config).resolve_job_def(DATA_LAYER_JOB).execute_in_process(
            instance=instance, tags={"dagster/asset_partition_range_start": "papila",
                                     "dagster/asset_partition_range_end": "idrid"})
    assert result.success
    assert not (config.artifacts / "tables").exists()  # nothing went to the local folder
    assert "focus/tables/tables/labels.harmonised/idrid/CURRENT.json" in objects(client, name)
    with FocusStorage(tables_url=config.tables, artifacts_dir=str(config.artifacts)).views() as con:
        records = dict(con.execute("SELECT dataset, count(*) FROM records.quarantine GROUP BY dataset").fetchall())
        read = {table: con.execute(f"SELECT count(*) FROM records.{table}").fetchone()[0] for table in roots}
    assert read == {key: manifests[key].label_rows - records.get(key, 0) for key in roots}
