"""Which label rule a dataset key has: a published dataset's own (labels/rules.py), or the rule built from a
dataset's declaration in focus.yaml (labels/declared.py)."""

from __future__ import annotations

from focus_dagster.labels import rules
from focus_dagster.labels.rules import LabelRule


def rule_for(dataset: str) -> LabelRule:
    """The label rule of a published dataset, or the one built from its declaration in focus.yaml."""
    # Looked up on the module each time, so that a rule table replaced at run time (a planted fault) is the one used.
    if dataset in rules.RULES:
        return rules.RULES[dataset]
    from focus_dagster.datasets.registry import dataset_info, declaration
    from focus_dagster.labels.declared import declared_rule

    spec = declaration(dataset)
    if spec is None:
        dataset_info(dataset)  # raises, naming the known datasets
    return declared_rule(dataset, spec)
