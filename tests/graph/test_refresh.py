"""Refresh driven end to end by the automation, as the `focus_refresh` sensor launches it.

From an empty instance the automation alone builds the whole graph; then, in turn, records materialised again
on unchanged data (as from the UI), a changed label, a new image, a broken release, a change materialised by hand
and label mappings that lose group attributes (one: its rows withheld, the rest flows; all: blocked) are each
followed by ticks until nothing more is requested. After each: every affected partition of every asset was
refreshed, with its checks, in dependency order; nothing else was (unchanged data refreshes nothing); nothing
downstream of a failed blocking check ran; and no asset partition is left unsynced but those behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg
import pytest

from assets.datasets import OBSERVE_JOB
from focus_dagster.config import FocusConfig
from tests.support.automation_driver import Refresh, drive, unsynced
from tests.support.events import check_verdict, materialised
from tests.support.tables import query
from tests.support.world import build_world

pytestmark = pytest.mark.heavy(100)  # seconds on a quiet 2-core machine: started first

DATASETS = ("idrid", "papila", "g1020")
MODELS = ("tiny_vit", "tiny_clip", "tiny_llava")  # one per interface, seeded: fast on a CPU
AGGREGATES = {"cross_dataset_metrics", "leaderboard", "arena_report", "robustness_summary"}
# The graph in dependency order: a refreshed dataset must reach all of these.
CHAIN = ["dataset_records", "harmonised_labels", "image_embeddings", "probe_predictions", "predictions", "metrics",
         "leaderboard", "arena_report"]
EVERY_ASSET = {"dataset_records", "harmonised_labels", "label_rejects", "yes_no_questions", "image_embeddings",
               "zero_shot_scores", "token_probabilities", "probe_predictions", "predictions", "metrics",
               "cross_dataset_metrics", "leaderboard", "arena_report", "degraded_embeddings", "robustness_metrics",
               "zero_shot_robustness", "degraded_token_probabilities", "yes_no_robustness", "robustness_summary"}
EVERY_CHECK = {"dataset_records:quarantine_rate", "harmonised_labels:label_values", "harmonised_labels:rule_consistency",
               "harmonised_labels:split_leakage", "harmonised_labels:row_accounting",
               "harmonised_labels:referable_implies_any_dr", "harmonised_labels:metadata_coverage",
               "harmonised_labels:patient_ids", "harmonised_labels:degenerate_tasks",
               "yes_no_questions:no_label_leak", "image_embeddings:checkpoint_audit",
               "token_probabilities:checkpoint_audit"}


METRIC_ASSETS = {"metrics", "cross_dataset_metrics", "fairness_metrics", "quality_metrics"}


def fast(request) -> dict:
    """Fewer bootstrap resamples: the intervals are not under test here."""
    names = {k.to_user_string() for k in request.asset_selection or []} & METRIC_ASSETS
    return {"ops": {name: {"config": {"n_resamples": 50}} for name in names}}


@dataclass
class World:
    """One instance shared by the scenarios, in order; each refresh continues from the cursor the last left."""

    config: FocusConfig
    defs: dg.Definitions
    instance: dg.DagsterInstance
    cursor: object = None

    def refresh(self) -> Refresh:
        """Observe the releases, then tick until nothing more is requested."""
        assert self.defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=self.instance).success
        done = drive(self.defs, self.instance, cursor=self.cursor, run_config=fast)
        self.cursor = done.cursor
        return done


@pytest.fixture(scope="module")
def world(synth_all, tmp_path_factory):
    """Three datasets and one model per interface, built from nothing by the automation alone."""
    built = World(*build_world(synth_all, tmp_path_factory.mktemp("refresh"), DATASETS, models=MODELS))
    return built, built.refresh()


def test_the_automation_builds_the_whole_graph_with_every_check(world):
    w, built = world
    requested = built.requested()
    assert EVERY_ASSET <= set(requested)
    assert EVERY_CHECK <= set(requested)
    assert all(built.check_verdicts().get(("harmonised_labels", "label_values", d)) for d in DATASETS)
    assert unsynced(w.defs, w.instance) == set()


def records_by_hand(w: World, dataset: str, with_check: bool) -> None:
    """dataset_records[dataset] materialised outside the automation, as from the UI: with its check (the UI's
    default) or bare."""
    checks = None if with_check else set()  # None: every check of the selected asset
    job = w.defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection={dg.AssetKey("dataset_records")}, asset_check_selection=checks)
    assert job.execute_in_process(instance=w.instance, partition_key=dataset).success


def data_version(w: World, asset: str, partition: str) -> str:
    """The data version of the latest materialisation of one asset partition."""
    [record] = w.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
    return record.asset_materialization.tags["dagster/data_version"]


def test_records_materialised_again_on_unchanged_data_refresh_nothing_downstream(world):
    """IDRiD's records materialised again on unchanged data, as from the UI, first with their check and then bare:
    their data version is the one they had, so the automation requests nothing below them (no labels, no GPU
    step, no metrics). After the bare one it runs the records' check alone, so that the gates downstream keep a
    verdict on the latest materialisation. The next scenario changes one label: then the whole chain runs."""
    w, _ = world
    before = data_version(w, "dataset_records", "idrid")
    records_by_hand(w, "idrid", with_check=True)
    assert data_version(w, "dataset_records", "idrid") == before
    assert w.refresh().requested() == {}
    records_by_hand(w, "idrid", with_check=False)
    refresh = w.refresh()
    assert refresh.requested() == {"dataset_records:quarantine_rate": {"idrid"}}
    assert refresh.check_verdicts() == {("dataset_records", "quarantine_rate", "idrid"): True}
    assert materialised(refresh.results) == set()
    assert unsynced(w.defs, w.instance) == set()


def test_a_changed_label_refreshes_its_dataset_in_order_and_leaves_nothing_unsynced(world):
    w, _ = world
    label = w.config.root_of("idrid") / "B. Disease Grading" / "2. Groundtruths" / \
        "a. IDRiD_Disease Grading_Training Labels.csv"
    lines = label.read_bytes().split(b"\r\n")
    name, grade, rest = lines[1].split(b",", 2)
    lines[1] = b",".join([name, b"0" if grade != b"0" else b"2", rest])
    label.write_bytes(b"\r\n".join(lines))
    refresh = w.refresh()
    requested = refresh.requested()
    assert EVERY_ASSET <= set(requested)  # the whole chain below the dataset, the model layer included
    assert EVERY_CHECK <= set(requested)  # every check ran with its asset
    for asset, partitions in requested.items():
        if asset.split(":")[0] not in AGGREGATES:
            assert only_about(partitions, "idrid"), (asset, partitions)
    first = [min(refresh.tick_of(asset)) for asset in CHAIN]
    assert first == sorted(first), dict(zip(CHAIN, first))
    assert min(refresh.tick_of("predictions")) > max(refresh.tick_of("probe_predictions"))
    assert min(refresh.tick_of("leaderboard")) > max(refresh.tick_of("metrics"))
    # The report is rebuilt once, after every metric table it reads is current.
    assert len(refresh.tick_of("arena_report")) == 1
    assert min(refresh.tick_of("arena_report")) > max(refresh.tick_of("quality_metrics") + refresh.tick_of("metrics"))
    assert unsynced(w.defs, w.instance) == set()


def test_a_new_image_refreshes_only_its_dataset_and_the_aggregates(world):
    w, _ = world
    images = sorted((w.config.root_of("papila") / "FundusImages").glob("*.jpg"))
    (images[0].parent / "RET998OD.jpg").write_bytes(images[0].read_bytes())
    requested = w.refresh().requested()
    assert {"dataset_records", "image_embeddings", "predictions", "metrics", "leaderboard"} <= set(requested)
    for asset, partitions in requested.items():
        if asset.split(":")[0] not in AGGREGATES:
            assert only_about(partitions, "papila"), (asset, partitions)
    assert unsynced(w.defs, w.instance) == set()


def test_a_change_materialised_by_hand_is_checked_then_followed(world):
    """An image damaged in place (same name and size, so the release's listing cannot see it), and the records
    re-read outside the automation and without their check (a bare materialisation, as from the UI): the image's
    row is quarantined, so the records have a new data version; the automation runs the check, then the rest of
    the chain."""
    w, _ = world
    image = sorted(w.config.root_of("idrid").rglob("*.jpg"))[0]  # one of those a later scenario removes
    image.write_bytes(bytes(image.stat().st_size))
    before = data_version(w, "dataset_records", "idrid")
    records_by_hand(w, "idrid", with_check=False)
    assert data_version(w, "dataset_records", "idrid") != before
    refresh = w.refresh()
    requested = refresh.requested()
    assert requested["dataset_records:quarantine_rate"] == {"idrid"}
    assert "dataset_records" not in requested  # the materialisation made by hand stands
    assert {"harmonised_labels", "image_embeddings", "token_probabilities", "predictions", "metrics"} <= set(requested)
    # The labels run behind the check: in the run that executes it (blocking within the run) or after it.
    first = refresh.ticks[min(refresh.tick_of("harmonised_labels"))]
    with_labels = [r for r in first if dg.AssetKey("harmonised_labels") in (r.asset_selection or [])]
    check = dg.AssetCheckKey(dg.AssetKey("dataset_records"), "quarantine_rate")
    assert all(check in (r.asset_check_keys or []) for r in with_labels) or \
        min(refresh.tick_of("harmonised_labels")) > 0
    assert unsynced(w.defs, w.instance) == set()


def test_a_release_with_some_unreadable_images_flows_on_with_a_warning(world):
    """Three of IDRiD's 24 images gone (12.5%, between the 5% warning and the 50% failure): the check passes
    with a warning, and the refresh reaches the metrics."""
    w, _ = world
    images = sorted(w.config.root_of("idrid").rglob("*.jpg"))
    for image in images[:3]:
        image.unlink()
    refresh = w.refresh()
    verdicts = refresh.check_verdicts()
    assert verdicts[("dataset_records", "quarantine_rate", "idrid")] is True
    evaluation = check_verdict(refresh.results, "quarantine_rate")
    assert evaluation.metadata["quarantine_rate"].value == round(3 / 24, 4) and "warning" in evaluation.metadata
    materialized = {asset for asset, _ in materialised(refresh.results)}
    assert {"harmonised_labels", "image_embeddings", "predictions", "metrics"} <= materialized
    assert unsynced(w.defs, w.instance) == set()


def test_a_broken_release_stops_at_its_failed_check(world):
    w, _ = world
    images = sorted((w.config.root_of("g1020") / "G1020" / "Images").glob("*.jpg"))
    for image in images[: len(images) * 2 // 3]:
        image.unlink()
    refresh = w.refresh()
    assert refresh.check_verdicts()[("dataset_records", "quarantine_rate", "g1020")] is False
    assert materialised(refresh.results) == {("dataset_records", "g1020")}
    # Planned at most: the rest of the data-layer run, skipped behind the failed check; nothing below it.
    planned = {asset.split(":")[0] for asset, partitions in refresh.requested().items()}
    assert planned <= {"dataset_records", "harmonised_labels", "label_rejects", "yes_no_questions", "group_attributes"}
    left = unsynced(w.defs, w.instance)
    assert left and all(partition and "g1020" in partition for _, partition in left)
    assert "dataset_records" not in {asset for asset, _ in left}


def lose_attributes(w: World, monkeypatch, *attributes: str):
    """A planted regression: PAPILA's rule maps every value of `attributes` to nothing. No label check can see it
    (they are not labels, and the rule is consistent with itself); the labels are rematerialised by hand with
    it, as from the UI. Returns that run, and the share of papila's test images with each attribute, counted here."""
    from dataclasses import replace

    from focus_dagster.labels import rules

    original = rules.RULES["papila"]
    monkeypatch.setitem(rules.RULES, "papila", replace(
        original, metadata=lambda r: {**original.metadata(r), **{a: rules.constant(r, None) for a in attributes}}))
    labels = w.defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection={dg.AssetKey("harmonised_labels"), dg.AssetKey("label_rejects")})
    by_hand = labels.execute_in_process(instance=w.instance, partition_key="papila")
    # The label-mapping checks pass; only the warning notices, and a warning blocks nothing.
    assert check_verdict(by_hand, "label_values").passed and check_verdict(by_hand, "rule_consistency").passed
    assert check_verdict(by_hand, "metadata_coverage").passed is False
    test = query(w.config, "SELECT age, sex FROM labels.harmonised WHERE dataset = 'papila' AND split = 'test'")
    return {a: test[a].notna().mean() for a in ("age", "sex")}


def report_cell(w: World, dataset: str, axis: str) -> str:
    """The reason of one cell of the arena report's coverage table, as written (tables/coverage.csv)."""
    import pandas as pd

    from resources import layout

    table = pd.read_csv(w.config.artifacts / layout.ARENA_REPORT / "tables" / "coverage.csv", keep_default_na=False)
    return table.set_index(["dataset", "axis"]).loc[(dataset, axis), "reason"]


def test_a_mapping_that_loses_sex_withholds_the_sex_rows_and_the_rest_flows(world, monkeypatch):
    """Sex lost, age kept: attribute_coverage fails (a warning) naming sex, its coverage and the floor; the gate
    passes, so the automation still materialises fairness and quality of papila, the sex rows kept without a
    value and with the reason, while metrics follow the new labels too."""
    w, _ = world
    share = lose_attributes(w, monkeypatch, "sex")
    assert share["sex"] == 0 and share["age"] >= 0.9
    refresh = w.refresh()
    assert refresh.requested()["group_attributes:attribute_coverage"] == {"papila"}
    # Partitioned like its asset: the verdicts are papila's own, not ones shared by every dataset.
    verdicts = refresh.check_verdicts()
    assert verdicts[("group_attributes", "attribute_coverage", "papila")] is False
    assert verdicts[("group_attributes", "attributes_usable", "papila")] is True
    coverage = check_verdict(refresh.results, "attribute_coverage")
    reason = f"attribute_coverage: sex is set on {share['sex']:.1%} of the test images (floor 90%)"
    assert coverage.severity == dg.AssetCheckSeverity.WARN and reason.split(": ", 1)[1] in coverage.description
    assert {(a, "papila") for a in ("predictions", "metrics", "group_attributes", "fairness_metrics",
                                    "quality_metrics")} <= materialised(refresh.results)
    rows = query(w.config, "SELECT \"group\", value, reason FROM metrics.values WHERE dataset = 'papila' "
                 "AND axis = 'fairness' AND partition LIKE 'papila|%'")
    sex = rows["group"].str.startswith("sex")
    assert sex.any() and rows.loc[sex, "value"].isna().all() and (rows.loc[sex, "reason"] == reason).all()
    assert rows["group"].str.startswith("age_").any() and not rows.loc[~sex, "reason"].eq(reason).any()
    assert report_cell(w, "papila", "fairness").startswith(reason)  # the report names it too
    # Nothing left behind but the partitions of the broken release, which still waits for its images.
    assert all(partition and "g1020" in partition for _, partition in unsynced(w.defs, w.instance))


def test_a_mapping_that_loses_every_published_attribute_blocks_fairness_and_quality_but_not_metrics(
        world, monkeypatch):
    """Sex and age lost: no attribute papila publishes reaches its floor, and the blocking check attributes_usable
    fails. It keeps fairness and quality from materialising, across ticks and within a run, while the metrics
    follow the new labels; the report and the demo's message name the attributes and their coverage."""
    from assets.evaluation import EVALUATION_JOB
    from assets.report import REPORT_JOB
    from focus_dagster.platform.demo import _failure_message

    w, _ = world
    share = lose_attributes(w, monkeypatch, "sex", "age")
    assert share == {"age": 0, "sex": 0}
    refresh = w.refresh()
    assert refresh.requested()["group_attributes:attributes_usable"] == {"papila"}
    assert refresh.check_verdicts()[("group_attributes", "attributes_usable", "papila")] is False
    materialized = materialised(refresh.results)
    assert {("predictions", "papila"), ("metrics", "papila"), ("group_attributes", "papila")} <= materialized
    assert not {(a, "papila") for a in ("fairness_metrics", "quality_metrics")} & materialized
    assert {("fairness_metrics", "papila"), ("quality_metrics", "papila")} <= unsynced(w.defs, w.instance)
    # The report waits for the blocked tables (they owe an update); built by hand, as `focus report` does, it
    # names the check, the attributes and their coverage.
    assert w.defs.resolve_job_def(REPORT_JOB).execute_in_process(instance=w.instance).success
    shortfall = [f"{a} is set on {share[a]:.1%} of the test images (floor 90%)" for a in ("age", "sex")]
    assert report_cell(w, "papila", "fairness").startswith("attributes_usable: every attribute papila publishes")
    assert all(s in report_cell(w, "papila", "quality") for s in shortfall)
    # Within one run: the evaluation job stops them behind the failed check, and says why.
    run = w.defs.resolve_job_def(EVALUATION_JOB).execute_in_process(
        instance=w.instance, partition_key="papila", raise_on_error=False,
        run_config={"ops": {name: {"config": {"n_resamples": 50}}
                            for name in METRIC_ASSETS - {"cross_dataset_metrics"}}})
    done = {asset for asset, _ in materialised(run)}
    assert {"metrics", "group_attributes"} <= done and not {"fairness_metrics", "quality_metrics"} & done
    failed = check_verdict(run, "attributes_usable")
    assert not failed.passed and failed.severity == dg.AssetCheckSeverity.ERROR
    assert all(s in failed.metadata["reason"].value for s in shortfall)
    message = _failure_message(run)
    assert message.startswith("blocked by attributes_usable") and all(s in message for s in shortfall)


def only_about(partitions: set[str], dataset: str) -> bool:
    return all(dataset in partition for partition in partitions)
