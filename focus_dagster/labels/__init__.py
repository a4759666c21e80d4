"""Harmonised task labels: the rules per dataset, the splits, and the label checks (run through `gx`)."""

from focus_dagster.labels.harmonise import (
    LABEL_COLUMNS,
    REJECT_COLUMNS,
    LabelResult,
    harmonise,
)
from focus_dagster.labels.rules import RULES, TASKS, defined_tasks

__all__ = ["LABEL_COLUMNS", "REJECT_COLUMNS", "RULES", "TASKS", "LabelResult", "defined_tasks", "harmonise"]
