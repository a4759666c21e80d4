"""Backfills of many datasets as one run: the data layer over a range of dataset partitions, in one run.

The run is what Dagster launches for a single-run backfill: the data-layer job with the partition-range tags.
Each dataset must come out as it does from a run of its own: its own materialisation with its own metadata
(counts checked against the look-alikes' manifests, written when they were generated), its rows in the tables,
and its own verdict of every check. A dataset that cannot be read fails the step by name, and the others are
still recorded.
"""

from __future__ import annotations

import shutil

import dagster as dg
import pytest

from assets.labels import DATA_LAYER_JOB
from focus_dagster import lineage
from tests.support.events import check_verdicts, metadata_by_partition
from tests.support.tables import table_views
from tests.support.world import build_world

# Contiguous in the registry's order, as a range must be.
DATASETS = ("papila", "idrid", "messidor_2", "refuge")
LABEL_CHECKS = {"label_values", "rule_consistency", "split_leakage", "row_accounting", "metadata_coverage"}


@pytest.fixture(scope="module")
def setup(synth_all, tmp_path_factory):
    _, manifests = synth_all
    return build_world(synth_all, tmp_path_factory.mktemp("backfill"), DATASETS, models=("tiny_llava",)), manifests


def range_tags(first: str, last: str) -> dict[str, str]:
    return {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}


def test_one_run_materialises_every_dataset_of_the_range_as_its_own_run_would(setup):
    (config, defs, instance), manifests = setup
    result = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(
        instance=instance, tags=range_tags(DATASETS[0], DATASETS[-1]))
    assert result.success
    records = metadata_by_partition(result, "dataset_records")
    assert set(records) == set(DATASETS)
    for dataset in DATASETS:
        assert records[dataset]["rows_read"] == manifests[dataset].label_rows, dataset
        assert records[dataset]["dagster/table_name"] == f"records.{dataset}"
    labels = metadata_by_partition(result, "harmonised_labels")
    questions = metadata_by_partition(result, "yes_no_questions")
    assert set(labels) == set(metadata_by_partition(result, "label_rejects")) == set(questions) == set(DATASETS)
    with table_views(config) as con:
        counted = dict(con.execute("SELECT dataset, count(*) FROM labels.harmonised GROUP BY dataset").fetchall())
        runs = {r for (r,) in con.execute("SELECT DISTINCT s.run_id FROM lineage.current c "
                                          "JOIN lineage.stamps s USING (stamp_id)").fetchall()}
    # Each partition's metadata is its own, not one partition's numbers repeated for the range.
    assert {d: labels[d]["dagster/row_count"] for d in DATASETS} == counted
    assert runs == {result.run_id}
    seen = check_verdicts(result)
    for dataset in DATASETS:
        assert seen[("dataset_records", "quarantine_rate", dataset)] is True, dataset
        assert seen[("yes_no_questions", "no_label_leak", dataset)] is True, dataset
        for check in LABEL_CHECKS:
            assert ("harmonised_labels", check, dataset) in seen, (check, dataset)
    # No run-level verdict standing for every dataset.
    assert ("dataset_records", "quarantine_rate", None) not in seen
    assert instance.get_materialized_partitions(dg.AssetKey("harmonised_labels")) == set(DATASETS)


def test_a_dataset_that_cannot_be_read_fails_by_name_and_the_others_are_recorded(synth_all, tmp_path):
    broken, defs, instance = build_world(synth_all, tmp_path, DATASETS[:3], models=("tiny_llava",))
    shutil.rmtree(broken.root_of("idrid"))
    result = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(
        instance=instance, tags=range_tags("papila", "messidor_2"), raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.event_specific_data.error.message
    assert "idrid" in message and "1 dataset(s)" in message, message
    assert instance.get_materialized_partitions(dg.AssetKey("dataset_records")) == {"papila", "messidor_2"}
    recorded = {r.partition_key: r.asset_materialization.tags["dagster/data_version"] for r in
                instance.fetch_materializations(dg.AssetKey("dataset_records"), limit=10).records}
    with table_views(broken) as con:
        stamps = dict(con.execute("SELECT c.partition, s.stamp FROM lineage.current c JOIN lineage.stamps s "
                                  "USING (stamp_id) WHERE c.asset = 'dataset_records'").fetchall())
    assert set(stamps) == {"papila", "messidor_2"}
    # Each one recorded carries the data version of what it holds, as a run of its own would.
    assert recorded == {d: lineage.data_version(lineage.loads(stamp)) for d, stamp in stamps.items()}
