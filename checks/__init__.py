"""Asset checks guarding the lineage graph."""

from checks.records import build_record_checks

__all__ = ["build_record_checks"]
