"""The data layer materialised in-process on small look-alikes with a temporary DuckDB and instance."""

from __future__ import annotations

import logging
import re

import pytest
from dagster import AssetKey

from assets.datasets import OBSERVE_JOB
from assets.labels import DATA_LAYER_JOB
from focus_dagster.config import FocusConfig, SyntheticSettings
from focus_dagster.definitions import build_definitions
from focus_dagster.progress import is_progress
from tests.support.events import check_verdict, materialisation_metadata
from tests.support.tables import table_views
from tests.support.world import build_world


@pytest.fixture
def setup(synth_all, tmp_path):
    """brset from a real-style root, mbrset from the embedded default (written on first use)."""
    _, manifests = synth_all
    config, defs, instance = build_world(synth_all, tmp_path, roots={"mbrset": None},
                                         synthetic=SyntheticSettings(per_dataset=12, seed=3, scale=0.05))
    return config, defs, instance, manifests["brset"]


def materialize(defs, instance, key):
    return defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key=key, instance=instance, raise_on_error=False)


def observed_versions(instance, keys):
    return {
        k: instance.get_latest_data_version_record(AssetKey("dataset_release"), is_source=True, partition_key=k)
        .asset_observation.tags["dagster/data_version"]
        for k in keys
    }


def test_definitions_partition_by_registered_datasets(setup):
    config, defs, _, _ = setup
    graph = defs.resolve_asset_graph()
    assert graph.get(AssetKey("dataset_records")).partitions_def.get_partition_keys() == ["brset", "mbrset"]
    assert graph.get(AssetKey("dataset_records")).pools == set()  # table partitions are files: no pool to wait for


def test_observe_writes_one_version_per_dataset_and_generates_the_default(setup):
    config, defs, instance, _ = setup
    assert not (config.synthetic_dir / "mbrset").exists()
    assert defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success
    versions = observed_versions(instance, ["brset", "mbrset"])
    assert (config.synthetic_dir / "mbrset" / "labels_mbrset.csv").is_file()
    assert len(set(versions.values())) == 2 and all(len(v) == 24 for v in versions.values())

    label = config.root_of("brset") / "labels.csv"
    label.write_bytes(label.read_bytes().replace(b"Brazil", b"Brasil", 1))
    defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance)
    after = observed_versions(instance, ["brset", "mbrset"])
    assert after["brset"] != versions["brset"] and after["mbrset"] == versions["mbrset"]


def test_records_land_in_duckdb_with_accounting_metadata(setup):
    config, defs, instance, manifest = setup
    result = materialize(defs, instance, "brset")
    assert result.success
    meta = materialisation_metadata(result, "dataset_records")
    assert meta["rows_read"] == meta["rows_kept"] == manifest.label_rows
    assert meta["dagster/row_count"] == manifest.label_rows
    assert meta["dagster/table_name"] == "records.brset"
    assert len(meta["release_version"]) == 24
    check = check_verdict(result, "quarantine_rate")
    assert check.passed
    with table_views(config) as con:
        assert con.execute("SELECT count(*) FROM records.brset").fetchone()[0] == manifest.label_rows
        assert con.execute("SELECT count(*) FROM records.quarantine WHERE dataset = 'brset'").fetchone()[0] == 0


def test_the_records_step_logs_its_image_checks_progress_at_info_in_the_run(setup):
    """What the UI shows and `focus demo` prints: INFO records of the run's event log, of the records step."""
    config, defs, instance, manifest = setup
    result = materialize(defs, instance, "brset")
    lines = [(entry.step_key, entry.level, entry.user_message) for entry in instance.all_logs(result.run_id)
             if entry.dagster_event is None and is_progress(entry.user_message)]
    n = manifest.label_rows
    assert len(lines) == 1, lines  # a read of seconds: the final line only
    [(step, level, message)] = lines
    assert (step, level) == ("dataset_records", logging.INFO)
    assert re.fullmatch(rf"\[progress\] brset image checks \(header\): {n}/{n} images in \d+s, [\d.]+ images/s", message)


def test_a_broken_copy_fails_the_check_and_quarantine_rows_stay_per_dataset(setup):
    config, defs, instance, manifest = setup
    images = sorted((config.root_of("brset") / "fundus_photos").iterdir())
    removed = len(images) * 2 // 3
    for image in images[:removed]:
        image.unlink()
    result = materialize(defs, instance, "brset")
    check = check_verdict(result, "quarantine_rate")
    assert not check.passed and check.severity.value == "ERROR"
    assert check.metadata["rows_quarantined"].value == removed
    # Materialising another dataset replaces only its own quarantine rows.
    assert materialize(defs, instance, "mbrset").success
    with table_views(config) as con:
        quarantined = con.execute("SELECT count(*) FROM records.quarantine WHERE dataset = 'brset'").fetchone()[0]
        kept = con.execute("SELECT count(*) FROM records.brset").fetchone()[0]
        reasons = {r for (r,) in con.execute("SELECT DISTINCT reason_code FROM records.quarantine WHERE dataset = 'brset'").fetchall()}
    assert (quarantined, kept + quarantined, reasons) == (removed, manifest.label_rows, {"image_missing"})


def test_a_missing_root_fails_the_step_with_the_dataset_named(setup, tmp_path):
    config, _, instance, _ = setup
    broken = FocusConfig(home=config.home, roots={"brset": tmp_path / "absent"})
    result = materialize(build_definitions(broken), instance, "brset")
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "[brset] dataset root" in str(failure.event_specific_data.error)


@pytest.mark.parametrize("kept, quarantined, passed, warned", [
    (97, 3, True, False),    # 3%: fine
    (90, 10, True, True),    # 10%: passes, with a warning
    (50, 50, True, True),    # 50% exactly: still a warning
    (49, 51, False, False),  # 51%: a broken copy, a blocking failure
])
def test_quarantine_rate_bands_as_documented(kept, quarantined, passed, warned):
    """README: the check warns above 5% and blocks above 50%."""
    from checks.records import quarantine_result

    result = quarantine_result(kept, {"image_missing": quarantined})
    assert result.passed is passed and ("warning" in result.metadata) is warned
    if not passed:
        assert result.severity.value == "ERROR"
    if warned:
        assert result.severity.value == "WARN"
