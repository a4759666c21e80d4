"""The refresh conditions on a small graph of the same shape as the platform's, evaluated tick by tick with
Dagster's own evaluation: a release observed per dataset, records that follow it, labels behind the records'
blocking check, a model whose own blocking check can fail, probes over labels and model, predictions over the
probes, and metrics over predictions and labels. Every asset reports the data version of a literal stamp, so each
test decides which data changed and which check failed, and reads which partitions each tick requests.

The graph's own refresh tests (tests/graph/test_automation.py, the daemon tests) run these conditions on the real
assets; here each runs in a second or two, which lets `make mutate` run every mutant of the conditions."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.automation import GATED_EAGER, RELEASE_CHANGED, data_version, definitions

DATASETS = ("a", "b")
PARTS = dg.StaticPartitionsDefinition(list(DATASETS))
ORDER = ("dataset_records", "harmonised_labels", "model_weights", "probes", "predictions", "metrics")


class State:
    """What each asset holds (its content version per partition) and whether each blocking check passes."""

    def __init__(self):
        self.release = {key: "r1" for key in DATASETS}
        self.content = {asset: {key: "v1" for key in (*DATASETS, None)} for asset in ORDER}
        self.passes = {"records_ok": True, "labels_ok": True, "weights_ok": True}
        self.fails: set[str] = set()  # assets whose step raises

    def version(self, asset: str, key: str | None) -> dg.DataVersion:
        return data_version({"version": self.content[asset][key], "inputs": {}, "run_id": "any"})


def build(state: State) -> dg.Definitions:
    def materialised(context) -> dg.MaterializeResult:
        key = context.partition_key if context.has_partition_key else None
        if context.asset_key.to_user_string() in state.fails:
            raise RuntimeError("the step failed")
        return dg.MaterializeResult(data_version=state.version(context.asset_key.to_user_string(), key))

    def check(name: str, asset):
        @dg.asset_check(asset=asset, name=name, blocking=True)
        def _check(context):
            return dg.AssetCheckResult(passed=state.passes[name])
        return _check

    @dg.observable_source_asset(name="dataset_release", partitions_def=PARTS)
    def release(context):
        return dg.DataVersionsByPartition(dict(state.release))

    @dg.asset(partitions_def=PARTS, deps=["dataset_release"], automation_condition=RELEASE_CHANGED)
    def dataset_records(context):
        return materialised(context)

    @dg.asset(partitions_def=PARTS, deps=[dataset_records], automation_condition=GATED_EAGER)
    def harmonised_labels(context):
        return materialised(context)

    @dg.asset(automation_condition=GATED_EAGER)
    def model_weights(context):
        return materialised(context)

    @dg.asset(partitions_def=PARTS, deps=[harmonised_labels, model_weights], automation_condition=GATED_EAGER)
    def probes(context):
        return materialised(context)

    @dg.asset(partitions_def=PARTS, deps=[probes], automation_condition=GATED_EAGER)
    def predictions(context):
        return materialised(context)

    @dg.asset(partitions_def=PARTS, deps=[predictions, harmonised_labels], automation_condition=GATED_EAGER)
    def metrics(context):
        return materialised(context)

    checks = [check("records_ok", dataset_records), check("labels_ok", harmonised_labels),
              check("weights_ok", model_weights)]
    graph = dg.Definitions(
        assets=[release, dataset_records, harmonised_labels, model_weights, probes, predictions, metrics],
        asset_checks=checks, jobs=[
            dg.define_asset_job("observe", selection=dg.AssetSelection.assets("dataset_release")),
            dg.define_asset_job("whole", selection=dg.AssetSelection.assets(model_weights)),
            dg.define_asset_job("partitioned", selection=dg.AssetSelection.all() - dg.AssetSelection.assets(
                model_weights, "dataset_release"), partitions_def=PARTS)])
    return dg.Definitions.merge(graph, definitions(refresh_seconds=30))


class Graph:
    """The toy graph on an ephemeral instance, with the cursor of the last tick."""

    def __init__(self):
        self.state = State()
        self.defs = build(self.state)
        self.instance = dg.DagsterInstance.ephemeral()
        self.cursor = None

    def observe(self) -> None:
        assert self.defs.resolve_job_def("observe").execute_in_process(instance=self.instance).success

    def materialise(self, *assets: str, key: str | None = None) -> None:
        """`assets` (and the checks on them) materialised in one run, for one partition or unpartitioned; the run
        names what it plans, as the sensor's runs do."""
        job = self.defs.resolve_job_def("partitioned" if key else "whole")
        job.execute_in_process(partition_key=key, instance=self.instance, raise_on_error=False,
                               asset_selection=[dg.AssetKey(asset) for asset in assets])

    def tick(self) -> dict[str, set]:
        """One evaluation of every condition: the partitions requested per asset (None for an unpartitioned one)."""
        result = dg.evaluate_automation_conditions(defs=self.defs, instance=self.instance, cursor=self.cursor)
        self.cursor = result.cursor
        requested = {}
        for asset in ORDER:
            key = dg.AssetKey(asset)
            if asset == "model_weights":
                partitions = {None} if result.get_num_requested(key) else set()
            else:
                partitions = result.get_requested_partitions(key)
            if partitions:
                requested[asset] = partitions
        return requested


@pytest.fixture
def graph():
    """Both datasets observed and everything materialised with passing checks, then one tick taken."""
    built = Graph()
    built.observe()
    built.materialise("model_weights")
    for key in DATASETS:
        built.materialise("dataset_records", "harmonised_labels", "probes", "predictions", "metrics", key=key)
    assert built.tick() == {}
    return built


def test_a_dataset_never_read_has_its_records_requested_and_nothing_below_them_yet():
    fresh = Graph()
    fresh.observe()
    assert fresh.tick() == {"dataset_records": {"a", "b"}}
    assert fresh.tick() == {}  # requested once, not again while the runs have not landed


def test_a_missing_partition_below_the_records_is_built_once_its_inputs_exist():
    fresh = Graph()
    fresh.observe()
    assert fresh.tick() == {"dataset_records": {"a", "b"}}
    fresh.materialise("model_weights")
    fresh.materialise("dataset_records", key="a")
    # The labels' blocking check has not run while they are missing: what is below them waits for it.
    assert fresh.tick() == {"harmonised_labels": {"a"}}
    fresh.materialise("harmonised_labels", key="a")
    assert fresh.tick() == {"probes": {"a"}, "predictions": {"a"}, "metrics": {"a"}}
    assert fresh.tick() == {}


def test_the_same_release_observed_again_requests_nothing(graph):
    graph.observe()
    assert graph.tick() == {}


def test_a_changed_release_requests_its_own_dataset_down_the_whole_chain_in_one_tick(graph):
    graph.state.release["a"] = "r2"
    graph.observe()
    assert graph.tick() == {"dataset_records": {"a"}, "harmonised_labels": {"a"}, "probes": {"a"},
                            "predictions": {"a"}, "metrics": {"a"}}
    assert graph.tick() == {}  # handled: not requested again on the next tick


def test_records_materialised_again_on_unchanged_data_request_nothing(graph):
    graph.materialise("dataset_records", key="a")
    assert graph.tick() == {}


@pytest.mark.parametrize("passes", [True, False])
def test_changed_records_are_followed_only_once_their_blocking_check_passed(graph, passes):
    graph.state.content["dataset_records"]["b"] = "v2"
    graph.state.passes["records_ok"] = passes
    graph.materialise("dataset_records", key="b")
    expected = {"harmonised_labels": {"b"}, "probes": {"b"}, "predictions": {"b"}, "metrics": {"b"}}
    assert graph.tick() == (expected if passes else {})


def test_a_changed_input_waits_while_anything_upstream_of_the_target_is_still_to_recompute(graph):
    """New labels for `a` while the model's check fails: the probes owe an update and cannot run, so the
    metrics (whose direct inputs, the labels and the unchanged predictions, look ready) wait too, through the
    predictions, which are pending because their probes are. Once the model's check passes, all follow."""
    graph.state.passes["weights_ok"] = False
    graph.materialise("model_weights")
    graph.state.content["harmonised_labels"]["a"] = "v2"
    graph.materialise("harmonised_labels", key="a")
    assert graph.tick() == {}
    assert graph.tick() == {}  # still owed, still held
    graph.state.passes["weights_ok"] = True
    graph.materialise("model_weights")  # the same weights, now passing their check: no change of their own
    assert graph.tick() == {"probes": {"a"}, "predictions": {"a"}, "metrics": {"a"}}
    assert graph.tick() == {}


def test_an_input_materialised_by_a_run_that_planned_the_target_is_not_a_change_to_follow(graph):
    """Labels and probes of `b` recomputed together by hand: the probes already read the new labels, so they owe
    nothing; what the new probes feed still follows."""
    graph.state.content["harmonised_labels"]["b"] = "v2"
    graph.state.content["probes"]["b"] = "v2"
    graph.materialise("harmonised_labels", "probes", key="b")
    assert graph.tick() == {"predictions": {"b"}, "metrics": {"b"}}


def test_a_step_that_failed_in_the_run_that_planned_it_is_not_retried_and_holds_what_is_below_it(graph):
    """New labels and their probes planned in one run, the probes failing: the refresh does not retry the probes
    (the run that planned them saw the new labels; a failure is for the researcher to look at), and the metrics,
    whose labels changed, wait for the probes upstream of them. The probes run again by hand: everything follows."""
    graph.state.content["harmonised_labels"]["b"] = "v2"
    graph.state.fails.add("probes")
    graph.materialise("harmonised_labels", "probes", key="b")
    assert graph.tick() == {}
    graph.state.fails.clear()
    assert graph.tick() == {}
    graph.state.content["probes"]["b"] = "v2"
    graph.materialise("probes", key="b")
    assert graph.tick() == {"predictions": {"b"}, "metrics": {"b"}}


def test_a_target_requested_in_the_planned_run_does_not_hold_back_what_depends_on_it(graph):
    graph.state.content["probes"]["a"] = "v2"
    graph.materialise("probes", key="a")
    assert graph.tick() == {"predictions": {"a"}, "metrics": {"a"}}


def test_a_data_version_is_the_content_and_inputs_never_the_run():
    stamp = {"version": "v1", "run_id": "r1", "code_version": "c1", "inputs": {"records": {"version": "x"}}}
    assert data_version(None) is None
    assert data_version(stamp) == data_version(stamp | {"run_id": "r2", "code_version": "c2"})
    assert data_version(stamp) != data_version(stamp | {"version": "v2"})
    assert data_version(stamp) != data_version(stamp | {"inputs": {"records": {"version": "y"}}})
    assert isinstance(data_version(stamp), dg.DataVersion) and len(data_version(stamp).value) == 20


def test_one_sensor_evaluates_every_asset_and_check_at_the_refresh_interval():
    [sensor] = definitions(refresh_seconds=45).sensors
    assert sensor.name == "focus_refresh" and sensor.minimum_interval_seconds == 45
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    graph = build(State()).resolve_asset_graph()
    assert {key.to_user_string() for key in sensor.asset_selection.resolve(graph)} == set(ORDER)
    assert {key.name for key in sensor.asset_selection.resolve_checks(graph)} == {"records_ok", "labels_ok",
                                                                                  "weights_ok"}
    assert sensor.emit_backfills is False
    assert sensor.description == ("Evaluates the automation conditions: a changed dataset release refreshes its own "
                                  "records and, once their blocking checks pass, everything below them.")


def _labels(condition) -> set[str]:
    found = {condition.get_label()} - {None}
    for child in condition.children:
        found |= _labels(child)
    return found


def test_the_conditions_carry_the_labels_the_ui_shows():
    assert RELEASE_CHANGED.get_label() == "release changed or never read"
    assert GATED_EAGER.get_label() == ("input data changed, their blocking checks passed, nothing upstream "
                                       "pending")
    assert {"eager on changed data", "input data changed", "nothing upstream still to recompute"} <= _labels(
        GATED_EAGER)


DEPTH = 8  # the longest path of the platform's graph: release -> records -> ... -> metrics -> leaderboard


def chain_graph() -> tuple[dg.Definitions, dict, dict]:
    """A straight chain `link_8 -> link_7 -> ... -> link_1 -> target` below a `source`, which `link_8` and
    `target` read; `link_8` also reads `weights`, whose blocking check fails when told to."""
    versions = {"source": "v1"}
    passes = {"weights": True}

    def materialised(context):
        return dg.MaterializeResult(data_version=dg.DataVersion(versions.get(context.asset_key.to_user_string(),
                                                                             "v1")))

    @dg.asset(automation_condition=GATED_EAGER)
    def source(context):
        return materialised(context)

    @dg.asset(automation_condition=GATED_EAGER)
    def weights(context):
        return materialised(context)

    @dg.asset_check(asset=weights, blocking=True)
    def weights_ok():
        return dg.AssetCheckResult(passed=passes["weights"])

    links = []
    for level in range(DEPTH, 0, -1):
        deps = ["source", "weights"] if level == DEPTH else [f"link_{level + 1}"]
        links.append(dg.asset(name=f"link_{level}", deps=deps, automation_condition=GATED_EAGER)(materialised))

    @dg.asset(deps=["link_1", "source"], automation_condition=GATED_EAGER)
    def target(context):
        return materialised(context)

    every = dg.AssetSelection.all() | dg.AssetSelection.all_asset_checks()
    defs = dg.Definitions(assets=[source, weights, *links, target], asset_checks=[weights_ok],
                          jobs=[dg.define_asset_job("every", selection=every)])
    return defs, versions, passes


def test_an_input_waits_for_an_update_owed_as_far_up_as_the_longest_path_of_the_graph():
    """The source changes while the weights' check fails: `link_8`, eight levels above the target, owes an update
    it cannot make; the target, whose input `source` changed and whose direct inputs look settled, waits for it."""
    defs, versions, passes = chain_graph()
    instance = dg.DagsterInstance.ephemeral()
    job = defs.resolve_job_def("every")
    assert job.execute_in_process(instance=instance).success
    cursor = dg.evaluate_automation_conditions(defs=defs, instance=instance).cursor
    passes["weights"] = False
    job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("weights")], raise_on_error=False)
    versions["source"] = "v2"
    job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("source")])
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    assert result.total_requested == 0
