"""Benchmark: what the larger BRSET and mBRSET look-alikes add to `make demo`, measured side by side in one run.

Usage: .venv/bin/python bench/demo_sizes.py [--rounds 2] [--json FILE]

Runs `focus demo` (what `make demo` runs) alternately with every look-alike at 80 images (`synthetic: {per_dataset:
80}`, the earlier default) and with the default sizes (80, BRSET and mBRSET 160: config_schema.DEFAULT_IMAGES), each in
a fresh FOCUS_HOME (bench/demo_robustness.py). Prints each demo's wall time and stage times, the means and their
ratio. Target (issue 32, part 4: the demo fills every axis): within +30% of the demo at 80 images each.
"""

from __future__ import annotations

from demo_robustness import compare

PLANS = {"80 images each": "synthetic: {per_dataset: 80}\n", "default sizes": ""}
TARGET = 1.30

if __name__ == "__main__":
    compare(__doc__.splitlines()[0], PLANS, TARGET)
