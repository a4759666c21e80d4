"""Asset checks guarding the lineage graph."""

from checks.labels import build_label_checks
from checks.records import build_record_checks

__all__ = ["build_label_checks", "build_record_checks"]
