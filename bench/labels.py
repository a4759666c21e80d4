"""Benchmark: harmonise a BRSET-sized look-alike (16,266 records) and run every label check.

Usage: .venv/bin/python bench/labels.py [--rows 16266] [--out bench/out]
Reuses the look-alike written by bench/records.py (or writes it), then prints the time of each part,
measured in this one run: reading, harmonising (with and without image hashing), and each GX check.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from focus_dagster.datasets import read_dataset
from focus_dagster.labels import RULES, harmonise
from focus_dagster.labels import expectations as gx

sys.path.insert(0, str(Path(__file__).parent))
import records as records_bench  # noqa: E402  bench/records.py: the same look-alike


def timed(label: str, fn):
    started = time.perf_counter()
    value = fn()
    print(f"{label:<40} {time.perf_counter() - started:7.2f}s")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16266)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args()
    root, _ = records_bench.ensure_look_alike(args.out, args.rows)

    read = timed("read records (header check)", lambda: read_dataset("brset", root))
    timed("harmonise (no image hashing)", lambda: harmonise("brset", read.records, read.quarantine))
    result = timed("harmonise (with image hashing)", lambda: harmonise("brset", read.records, read.quarantine, root=root))
    print(result.accounting_line())
    labels = result.labels
    recomputed = RULES["brset"].task_labels(read.records)
    recomputed.insert(0, "image_id", read.records["image_id"])
    recomputed = recomputed[recomputed["image_id"].isin(set(labels["image_id"]))].reset_index(drop=True)
    timed("first GX call (imports GX, builds context)", lambda: gx.check_row_accounting(1, 1, 0))
    checks = {
        "label_values": lambda: gx.check_label_values(labels),
        "rule_consistency": lambda: gx.check_rule_consistency(labels, recomputed),
        "referable_implies_any": lambda: gx.check_referable_implies_any(labels),
        "split_leakage": lambda: gx.check_split_leakage(labels),
        "row_accounting": lambda: gx.check_row_accounting(result.records_in, len(labels), len(result.rejects)),
        "metadata_coverage": lambda: gx.check_metadata_coverage(labels),
        "patient_ids": lambda: gx.check_patient_ids(labels),
        "degenerate_tasks": lambda: gx.check_degenerate_tasks(labels),
    }
    started = time.perf_counter()
    for name, check in checks.items():
        outcome = timed(f"  check {name}", check)
        assert outcome.checked_count >= 0
    print(f"{'all eight checks':<40} {time.perf_counter() - started:7.2f}s")


if __name__ == "__main__":
    main()
