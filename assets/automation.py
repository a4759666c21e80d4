"""Automation conditions shared by the graph's assets, and the data version they compare.

The refresh reacts to changed data, not to new materialisations: each partition reports a data version built from
its lineage stamp (`data_version`), and an asset follows its inputs when the data version of one of them changed.
A partition materialised again on unchanged data (from the UI, say) keeps its data version, so nothing below it
runs again.
"""

import dagster as dg

from focus_dagster import lineage
from resources import layout

# The conditions are built by functions, called once at import (below): `make mutate` mutates function bodies
# only, and runs this module's mutants each in a new interpreter so that the import builds the mutated condition.


def _release_changed() -> dg.AutomationCondition:
    """Re-read a dataset when its release version changes (a new observation with the same version does not
    count, so the daily observation refreshes nothing unless something changed) or when it was never read."""
    return (
        (
            dg.AutomationCondition.any_deps_match(dg.AutomationCondition.data_version_changed())
            | dg.AutomationCondition.missing().newly_true()
        )
        & ~dg.AutomationCondition.any_deps_missing()
        & ~dg.AutomationCondition.in_progress()
    ).with_label("release changed or never read")


RELEASE_CHANGED = _release_changed()

# Observing a release is not an update to wait for: a changed version requests the records (above).
_RELEASE = dg.AssetSelection.assets(layout.DATASET_RELEASE)
# Deep enough for the longest path of the graph (release -> records -> labels -> embeddings -> probes ->
# predictions -> metrics -> leaderboard).
_GRAPH_DEPTH = 8


def data_version(stamp: dict | None) -> dg.DataVersion | None:
    """The data version a partition reports with its materialisation (lineage.data_version of its stamp): what it
    holds and what it was computed from, the same whichever run wrote it."""
    version = lineage.data_version(stamp)
    return dg.DataVersion(version) if version else None


def _input_changed() -> dg.AutomationCondition:
    """An input has a new data version since the previous tick, written by a run that did not also plan the target,
    or it will be requested this tick into the target's run. Dagster's `any_deps_updated` with the data version in
    place of any update: a materialisation that reproduced the data it replaced is no change."""
    return dg.AutomationCondition.any_deps_match(
        (dg.AutomationCondition.data_version_changed() & ~dg.AutomationCondition.executed_with_root_target())
        | dg.AutomationCondition.will_be_requested()
    ).with_label("input data changed")


def _owes_an_update() -> dg.AutomationCondition:
    """The data of an input of the target changed after the target was last requested or updated."""
    return _input_changed().ignore(_RELEASE).since_last_handled()


def _pending(depth: int) -> dg.AutomationCondition:
    """The target is being recomputed, or will be recomputed but not in the run being planned: it is running,
    it owes an update, or something upstream of it is pending. A target requested into the same run counts as
    fresh (the run orders it), whatever is upstream of it."""
    stale = _owes_an_update()
    if depth > 1:
        stale = stale | dg.AutomationCondition.any_deps_match(_pending(depth - 1)).ignore(_RELEASE)
    return dg.AutomationCondition.in_progress() | (~dg.AutomationCondition.will_be_requested() & stale)


def _upstream_settled() -> dg.AutomationCondition:
    """Nothing computes from an input that is about to change: with eager alone, the predictions of a dataset were
    recomputed in the same tick as its new labels, against the old probes."""
    return (
        ~dg.AutomationCondition.any_deps_match(_pending(_GRAPH_DEPTH)).ignore(_RELEASE)
    ).with_label("nothing upstream still to recompute")

def _gated_eager() -> dg.AutomationCondition:
    """Everything below the records follows the data of its inputs (eager, on a changed data version rather than
    on any new materialisation: a records partition materialised again on unchanged data re-ran the labels and the
    whole GPU chain below them) once every blocking check on them has passed (blocking checks gate only within a
    run; across ticks the gate is in the condition) and once nothing upstream is still to be recomputed, so a
    refresh reaches every affected partition in order. A missing partition is still built."""
    return (
        dg.AutomationCondition.eager().replace("any_deps_updated", _input_changed()).with_label(
            "eager on changed data")
        & dg.AutomationCondition.all_deps_blocking_checks_passed()
        & _upstream_settled()
    ).with_label("input data changed, their blocking checks passed, nothing upstream pending")


GATED_EAGER = _gated_eager()


def definitions(refresh_seconds: int) -> dg.Definitions:
    """The sensor that evaluates the conditions above on every asset and check of the graph."""
    refresh = dg.AutomationConditionSensorDefinition(
        "focus_refresh",
        target=dg.AssetSelection.all() | dg.AssetSelection.all_asset_checks(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=refresh_seconds,
        # One run per partition, each with the checks it requests: a backfill's runs carry no check selection,
        # and a model output cannot run without the checkpoint audit computed in the same step.
        emit_backfills=False,
        description="Evaluates the automation conditions: a changed dataset release refreshes its own records "
        "and, once their blocking checks pass, everything below them.",
    )
    return dg.Definitions(sensors=[refresh])
