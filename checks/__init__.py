"""Asset checks guarding the lineage graph, one module per domain. Checks with a step of their own (records,
labels) are built here as definitions; checks evaluated by their asset's step (attributes, checkpoint audit,
label leak) are declared here as specs, with the verdicts the step reports."""

from checks.labels import build_label_checks
from checks.records import build_record_checks

__all__ = ["build_label_checks", "build_record_checks"]
