"""Check verdicts as the UI reads them from the instance: a non-blocking check that fails is a warning (severity
WARN, shown in yellow), a blocking one an error (ERROR, red), on a run of the partition and on "Execute all".

The UI colours a failed check by the severity of its latest evaluation in the instance's check-execution records
(`executionForLatestMaterialization.evaluation.severity`), which is what these tests read back.
"""

from __future__ import annotations

import dagster as dg
import pytest

from assets.labels import DATA_LAYER_JOB
from focus_dagster.config import FocusConfig
from tests.support.tables import sql_edit
from tests.support.world import world_for

LABELS = dg.AssetKey("harmonised_labels")
# Every check that does not block what follows, decided one by one: the label warnings describe the dataset
# (metadata, patient ids, too few positives, referable DR without any DR), and attribute_coverage withholds only
# the rows of an attribute below its floor. Every other check is blocking, and fails at ERROR.
NON_BLOCKING = {"group_attributes:attribute_coverage", "harmonised_labels:degenerate_tasks",
                "harmonised_labels:metadata_coverage", "harmonised_labels:patient_ids",
                "harmonised_labels:referable_implies_any_dr"}


@pytest.fixture(scope="module")
def data_layer(tmp_path_factory):
    """BRSET's 24-image look-alike through the data layer on an instance of its own: too few positives per split
    for `degenerate_tasks` to pass, sound labels for every blocking check."""
    from focus_dagster.synthetic import synthesize

    tmp = tmp_path_factory.mktemp("severity")
    synthesize(tmp / "data", ["brset"], per_dataset=24, seed=7, scale=0.05, workers=1)
    config, defs, instance = world_for(FocusConfig(home=tmp / "home", roots={"brset": tmp / "data" / "brset"}))
    assert defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance).success
    return config, defs, instance


def latest(instance, check: str, partition: str = "brset") -> tuple[str, str | None]:
    """(status, severity) of the latest evaluation of a label check on one partition, from the instance."""
    key = dg.AssetCheckKey(LABELS, check)
    records = instance.event_log_storage.get_asset_check_execution_history(key, limit=50)
    record = next(r for r in records if r.partition == partition)
    severity = record.evaluation.severity.value if record.evaluation else None
    return record.status.value, severity


def test_the_non_blocking_checks_are_the_surveyed_warnings():
    """A check added without blocking=True joins this list only on purpose (and must fail at WARN)."""
    from focus_dagster.definitions import defs

    graph = defs.resolve_asset_graph()
    found = {key.to_user_string() for key in graph.asset_check_keys if not graph.get_check_spec(key).blocking}
    assert found == NON_BLOCKING


def test_a_failed_warning_is_recorded_as_warn_and_the_blocking_checks_as_error(data_layer):
    _, _, instance = data_layer
    assert latest(instance, "degenerate_tasks") == ("FAILED", "WARN")
    for check in ("metadata_coverage", "patient_ids", "referable_implies_any_dr"):
        assert latest(instance, check)[1] == "WARN", check
    for check in ("label_values", "rule_consistency", "split_leakage", "row_accounting", "split_has_test"):
        assert latest(instance, check) == ("SUCCEEDED", "ERROR"), check


def test_execute_all_keeps_each_severity_and_a_blocking_failure_stays_error(data_layer):
    """"Execute all" (no partition) reports each verdict on its dataset's partition with the same severity; a
    label of -1 planted in BRSET fails label_values at ERROR while degenerate_tasks stays a WARN."""
    config, defs, instance = data_layer
    sql_edit(config, "labels.harmonised", "brset", "UPDATE labels.harmonised SET any_dr = -1 WHERE image_id = "
             "(SELECT min(image_id) FROM labels.harmonised WHERE dataset = 'brset')")
    checks = {key for key in defs.resolve_asset_graph().asset_check_keys if key.asset_key == LABELS}
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(), asset_check_selection=checks)
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success  # a blocking failure fails its step, as in a run of the partition
    assert latest(instance, "label_values") == ("FAILED", "ERROR")
    assert latest(instance, "degenerate_tasks") == ("FAILED", "WARN")
