"""Checks executed without a partition, as the UI's "Execute all" on an asset's Checks tab launches them.

Such a run used to fail every step ("Cannot access partition_key for a non-partitioned run") and leave the
asset with failed checks that said nothing about its data. Now each check is evaluated on every materialised
dataset and reported on that dataset's partition, with the verdict a run on that partition gives; the
run-level entry gets no verdict at all (never a false failure). The browser test clicks the real button.
"""

from __future__ import annotations

import dagster as dg
import pytest

from assets.labels import DATA_LAYER_JOB
from tests.support.events import check_evaluations, check_verdicts
from tests.support.tables import sql_edit, store_of
from tests.support.world import build_world

DATASETS = ("brset", "idrid")
GUARDED = {"dataset_records", "harmonised_labels"}


@pytest.fixture(scope="module")
def built(synth_all, tmp_path_factory):
    """BRSET and IDRiD through the data layer, one partitioned run each: the verdicts to compare with."""
    config, defs, instance = build_world(synth_all, tmp_path_factory.mktemp("no_partition"), DATASETS)
    partitioned = {}
    for dataset in DATASETS:
        result = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key=dataset, instance=instance)
        partitioned.update({k: v for k, v in check_verdicts(result).items() if k[0] in GUARDED})
    return config, defs, instance, partitioned


def execute_checks_without_partition(defs, instance):
    """What "Execute all" launches: the checks of the data-layer assets, no asset, no partition tag."""
    checks = {k for k in defs.resolve_asset_graph().asset_check_keys if k.asset_key.to_user_string() in GUARDED}
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(), asset_check_selection=checks)
    return checks, job.execute_in_process(instance=instance, raise_on_error=False)


def test_every_check_is_evaluated_on_every_dataset_as_a_partitioned_run_would(built):
    _, defs, instance, partitioned = built
    checks, result = execute_checks_without_partition(defs, instance)
    assert result.success
    found = check_verdicts(result)
    assert found == partitioned  # the same verdict per (asset, check, dataset), and nothing without a dataset
    assert {(k.asset_key.to_user_string(), k.name) for k in checks} == {(a, c) for a, c, _ in found}
    # Each verdict is recorded against that dataset's latest materialisation, as in a partitioned run.
    for evaluation in check_evaluations(result):
        target = evaluation.target_materialization_data
        latest = instance.fetch_materializations(dg.AssetRecordsFilter(
            asset_key=evaluation.asset_key, asset_partitions=[evaluation.partition]), limit=1).records[0]
        assert target is not None and target.storage_id == latest.storage_id
    # The run-level entry is left without a verdict (shown as skipped), never as a failure.
    for key in checks:
        history = instance.event_log_storage.get_asset_check_execution_history(key, limit=50)
        assert all(record.status.value != "FAILED" for record in history if record.partition is None), key


def test_a_defect_in_one_dataset_fails_that_dataset_only(built):
    config, defs, instance, _ = built
    image = "(SELECT min(image_id) FROM labels.harmonised WHERE dataset = 'idrid')"
    original = sql_edit(config, "labels.harmonised", "idrid",
                        f"UPDATE labels.harmonised SET any_dr = -1 WHERE image_id = {image}")
    try:
        _, result = execute_checks_without_partition(defs, instance)
    finally:
        store_of(config).edit("labels.harmonised", "idrid", original)
    found = check_verdicts(result)
    assert found[("harmonised_labels", "label_values", "idrid")] is False
    assert found[("harmonised_labels", "label_values", "brset")] is True
    # A blocking failure fails the step, as in a partitioned run; the other dataset's verdicts still count.
    assert not result.success
    key = dg.AssetCheckKey(dg.AssetKey("harmonised_labels"), "label_values")
    latest = {}
    for record in reversed(instance.event_log_storage.get_asset_check_execution_history(key, limit=50)):
        latest[record.partition] = record.status.value
    assert latest["idrid"] == "FAILED" and latest["brset"] == "SUCCEEDED"


def test_every_check_of_a_partitioned_asset_has_a_verdict_per_partition():
    """A check without partitions on a partitioned asset keeps one verdict for all of them: one model's failed
    audit would then be overwritten by another's clean one at the gates downstream (automation reads it)."""
    from focus_dagster.definitions import defs

    graph = defs.resolve_asset_graph()
    for key in graph.asset_check_keys:
        asset_partitions = graph.get(key.asset_key).partitions_def
        assert graph.get_check_spec(key).partitions_def == asset_partitions, key.to_user_string()
