"""Benchmark: the vectorised bootstrap of the metric suite vs a plain loop over scikit-learn calls.

Usage: .venv/bin/python bench/metrics.py [--configs 500] [--samples 700] [--resamples 1000] [--loop-configs 5]
                                         [--json FILE]

Each configuration is a synthetic evaluation set (seeded): ``--samples`` images, a prevalence drawn in
[0.05, 0.5], binormal scores with a target AUROC drawn in [0.6, 0.95], mapped to probabilities by a
sigmoid of random slope and offset (so calibration varies too), and rounded to 3 decimals in every
other configuration (ties, as with low-precision outputs). For each, the full suite (AUROC, AUPRC,
accuracy, sensitivity, specificity, F1 at 0.5, ECE with 10 and 15 bins, top-label ECE, Brier) gets a
point estimate and a 95% percentile interval from ``--resamples`` stratified resamples, two ways on the
same resample indices:

  vectorised  ``focus_dagster.evaluation.bootstrap.bootstrap``: all resamples of a metric at once;
  loop        one resample at a time: scikit-learn's roc_auc_score, average_precision_score,
              accuracy_score, recall_score (twice), f1_score, brier_score_loss, and a plain-numpy ECE
              (a loop over bins) for the three ECE forms; points from the same calls on the full sample.

The loop takes seconds per configuration, so it runs on the first ``--loop-configs`` configurations only,
timed against the vectorised path on the same ones (the ratio, target >= 20x); the vectorised path is then
timed on all ``--configs``, next to the loop's time extrapolated linearly from its per-configuration mean
(labelled as such: not measured). Also printed: the largest absolute difference between the two paths on
the point estimates (must be <= 1e-9) and on the interval bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from statistics import NormalDist

import numpy as np

SUITE = ("auroc", "auprc", "accuracy", "sensitivity", "specificity", "f1", "ece", "ece_15", "ece_top_label", "brier")
THRESHOLD = 0.5


def configuration(i: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Labels and probability scores of synthetic configuration ``i`` (see the module docstring)."""
    rng = np.random.default_rng([seed, i])
    prevalence = rng.uniform(0.05, 0.5)
    target_auroc = rng.uniform(0.6, 0.95)
    n_pos = max(10, round(prevalence * n))
    y = np.zeros(n, dtype=int)
    y[rng.choice(n, n_pos, replace=False)] = 1
    separation = np.sqrt(2) * NormalDist().inv_cdf(target_auroc)  # binormal, unit variances: AUROC = Phi(d / sqrt 2)
    latent = rng.normal(separation * y, 1.0)
    slope, offset = rng.uniform(0.5, 2.0), rng.uniform(-1.0, 1.0)
    s = 1.0 / (1.0 + np.exp(-(slope * (latent - separation / 2) + offset)))
    if i % 2:
        s = np.round(s, 3)
    return y, s


def loop_ece(outcome: np.ndarray, confidence: np.ndarray, n_bins: int) -> float:
    """ECE by a plain loop over the bins (same bin convention as the library: torchmetrics')."""
    from focus_dagster.evaluation.metrics import bin_edges

    bins = np.searchsorted(bin_edges(n_bins), confidence, side="right") - 1
    total = 0.0
    for b in range(n_bins + 1):
        in_bin = bins == b
        if in_bin.any():
            total += in_bin.mean() * abs(confidence[in_bin].mean() - outcome[in_bin].mean())
    return total


def sklearn_suite(y: np.ndarray, s: np.ndarray) -> list[float]:
    """The suite on one sample by scikit-learn calls (and the plain ECE loop), in ``SUITE`` order."""
    from sklearn.metrics import (
        accuracy_score,
        average_precision_score,
        brier_score_loss,
        f1_score,
        recall_score,
        roc_auc_score,
    )

    predicted = (s >= THRESHOLD).astype(int)
    confidence, correct = np.maximum(s, 1 - s), (predicted == y).astype(float)
    return [roc_auc_score(y, s), average_precision_score(y, s), accuracy_score(y, predicted),
            recall_score(y, predicted), recall_score(y, predicted, pos_label=0), f1_score(y, predicted),
            loop_ece(y, s, 10), loop_ece(y, s, 15), loop_ece(correct, confidence, 10), brier_score_loss(y, s)]


def loop_bootstrap(y: np.ndarray, s: np.ndarray, idx: np.ndarray) -> dict[str, tuple[float, float, float]]:
    """``{metric: (point, low, high)}`` from one scikit-learn suite per resample."""
    points = sklearn_suite(y, s)
    replicates = np.array([sklearn_suite(y[row], s[row]) for row in idx])
    low, high = np.percentile(replicates, [2.5, 97.5], axis=0)
    return {name: (points[k], low[k], high[k]) for k, name in enumerate(SUITE)}


def vectorised(y: np.ndarray, s: np.ndarray, resamples: int, seed: int) -> dict[str, tuple[float, float, float]]:
    from focus_dagster.evaluation.bootstrap import bootstrap

    result = bootstrap(y, s, SUITE, n_resamples=resamples, seed=seed, threshold=THRESHOLD, n_bins=10)
    return {name: (iv.point.value, iv.low, iv.high) for name, iv in result.items()}


def max_differences(a: list[dict], b: list[dict]) -> tuple[float, float]:
    """Largest |a - b| over configurations and metrics: on the points, and on the interval bounds."""
    point = max(abs(x[m][0] - y[m][0]) for x, y in zip(a, b, strict=True) for m in SUITE)
    bounds = max(abs(x[m][k] - y[m][k]) for x, y in zip(a, b, strict=True) for m in SUITE for k in (1, 2))
    return point, bounds


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", type=int, default=500, help="configurations for the vectorised timing")
    parser.add_argument("--samples", type=int, default=700, help="images per configuration")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--loop-configs", type=int, default=5, help="configurations timed both ways (the loop is slow)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    from focus_dagster.evaluation.bootstrap import resample_indices

    data = [configuration(i, args.samples) for i in range(args.configs)]
    head = data[: args.loop_configs]
    vectorised(*head[0], 10, 0)  # warm-up (imports, caches)

    started = time.perf_counter()
    loop_results = [loop_bootstrap(y, s, resample_indices(y, args.resamples, seed=i)) for i, (y, s) in enumerate(head)]
    loop_seconds = time.perf_counter() - started

    started = time.perf_counter()
    fast_results = [vectorised(y, s, args.resamples, seed=i) for i, (y, s) in enumerate(head)]
    fast_head_seconds = time.perf_counter() - started

    started = time.perf_counter()
    for i, (y, s) in enumerate(data):
        vectorised(y, s, args.resamples, seed=i)
    fast_all_seconds = time.perf_counter() - started

    point_diff, bound_diff = max_differences(fast_results, loop_results)
    extrapolated = loop_seconds / len(head) * len(data)
    figures = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip() + f", {os.cpu_count()} cores",
        "metrics": list(SUITE),
        "samples": args.samples,
        "resamples": args.resamples,
        "loop_configs": len(head),
        "loop_seconds": round(loop_seconds, 2),
        "vectorised_seconds_same_configs": round(fast_head_seconds, 3),
        "speedup": round(loop_seconds / fast_head_seconds, 1),
        "configs": len(data),
        "vectorised_seconds_all_configs": round(fast_all_seconds, 2),
        "vectorised_ms_per_config": round(1000 * fast_all_seconds / len(data), 1),
        "loop_seconds_all_configs_extrapolated": round(extrapolated, 1),
        "max_abs_diff_point": point_diff,
        "max_abs_diff_interval_bounds": bound_diff,
    }
    print(f"metric suite ({len(SUITE)} metrics) + {args.resamples}-resample stratified bootstrap, "
          f"{args.samples} images per configuration; {figures['machine']}")
    print(f"  on {len(head)} configurations, same resample indices:")
    print(f"    loop (scikit-learn calls + plain-numpy ECE)  {loop_seconds:>9.2f} s "
          f"({loop_seconds / len(head):.2f} s per configuration)")
    print(f"    vectorised                                   {fast_head_seconds:>9.3f} s "
          f"({1000 * fast_head_seconds / len(head):.1f} ms per configuration)")
    print(f"    speedup                                      {figures['speedup']:>9.1f}x (target >= 20x)")
    print(f"  on all {len(data)} configurations:")
    print(f"    vectorised, measured                         {fast_all_seconds:>9.2f} s "
          f"({figures['vectorised_ms_per_config']} ms per configuration)")
    print(f"    loop, EXTRAPOLATED (not measured)            {extrapolated:>9.1f} s "
          f"(linearly, from the {len(head)} configurations above)")
    print(f"  max |vectorised - loop|: point estimates {point_diff:.2e} (must be <= 1e-9), "
          f"interval bounds {bound_diff:.2e}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
