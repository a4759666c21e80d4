"""Automation conditions shared by the graph's assets."""

import dagster as dg

# Re-read a dataset when its release version changes (a new observation with the same version does not
# count, so the daily observation refreshes nothing unless something changed) or when it was never read.
RELEASE_CHANGED = (
    (
        dg.AutomationCondition.any_deps_match(dg.AutomationCondition.data_version_changed())
        | dg.AutomationCondition.missing().newly_true()
    )
    & ~dg.AutomationCondition.any_deps_missing()
    & ~dg.AutomationCondition.in_progress()
).with_label("release changed or never read")

# Everything below the records follows its inputs, but only once every blocking check on them has passed:
# Dagster's blocking checks gate only within a run, so across automation ticks the gate is in the condition.
GATED_EAGER = (
    dg.AutomationCondition.eager() & dg.AutomationCondition.all_deps_blocking_checks_passed()
).with_label("inputs updated and their blocking checks passed")


def definitions() -> dg.Definitions:
    """The sensor that evaluates the conditions above on every asset of the graph."""
    refresh = dg.AutomationConditionSensorDefinition(
        "focus_refresh",
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=60,
        description="Evaluates the automation conditions: a changed dataset release refreshes its own records "
        "and, once their blocking checks pass, everything below them.",
    )
    return dg.Definitions(sensors=[refresh])
