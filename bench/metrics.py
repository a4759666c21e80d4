"""Benchmark: the vectorised bootstrap of the metric suite vs a plain loop over scikit-learn calls.

Usage: .venv/bin/python bench/metrics.py [--configs 500] [--samples 700] [--resamples 1000] [--loop-configs 5]
                                         [--json FILE]
       .venv/bin/python bench/metrics.py --axes all [--configs 532] [--samples 700] [--resamples 1000]
                                         [--reference-configs 12] [--repeats 3] [--json FILE]

``--axes all``: ``tables.metric_rows`` on the four axes (performance, calibration, fairness by sex, age median
and age bands, quality groups) for ``--configs`` synthetic configurations of ``--samples`` test images (four
datasets with metadata: ties in scores and ages, a small and an undefined group, a degenerate configuration,
configurations without a Youden threshold), printed as ms per configuration. Next to it, on the first
``--reference-configs`` configurations, the pre-change implementation: ``bootstrap``, ``intervals`` and
``tables`` as committed at ``--reference`` (default HEAD, ``git show``), loaded as separate modules; the two
are timed interleaved in the same process (``--repeats`` rounds, medians), and the largest differences of
value / ci_low / ci_high between them are printed (targets 1e-12 / 1e-9 / 1e-9); the intervals of the signed
two-group differences are left out of that comparison (BCa, where revisions before it used the percentile
interval), their values are not.

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
import os
import platform
import sys
import time
from pathlib import Path
from statistics import NormalDist

import numpy as np

from figures import save

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


REFERENCE_MODULES = {"focus_dagster.evaluation.bootstrap": "_reference_bootstrap",
                     "focus_dagster.evaluation.intervals": "_reference_intervals",
                     "focus_dagster.evaluation.tables": "_reference_tables"}


def reference_tables(rev: str = "HEAD"):
    """``tables`` (with the ``bootstrap`` and ``intervals`` it imports) as committed at ``rev``, as separate modules."""
    import subprocess
    import types

    root = Path(__file__).resolve().parents[1]
    sources = {}
    for full, short in REFERENCE_MODULES.items():
        text = subprocess.run(["git", "show", f"{rev}:{full.replace('.', '/')}.py"], cwd=root, capture_output=True,
                              text=True, check=True).stdout
        for name, alias in REFERENCE_MODULES.items():
            text = text.replace(name, alias)
        module = types.ModuleType(short)
        module.__file__ = f"<{rev}:{full}>"
        sys.modules[short] = module
        sources[short] = text
    for short, text in sources.items():
        exec(compile(text, sys.modules[short].__file__, "exec"), sys.modules[short].__dict__)
    return sys.modules["_reference_tables"]


def axes_data(n_configs: int, n: int, seed: int = 0):
    """Predictions and metadata of ``n_configs`` synthetic configurations on four datasets (``--axes all``)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    metas = []
    n_datasets = max(1, min(4, n_configs))
    for d in range(n_datasets):
        age = rng.uniform(20, 90, n)
        age[rng.random(n) < 0.1] = np.nan
        if d == 1:
            age = np.round(age)  # ties at the median
        sex = rng.choice(np.array(["F", "M", None], dtype=object), n, p=[0.48, 0.48, 0.04])
        quality = rng.choice(np.array(["adequate", "inadequate", None], dtype=object), n, p=[0.85, 0.12, 0.03])
        if d == 2:  # small groups (some below the minimum)
            quality = np.where(rng.random(n) < 0.995, "adequate", "inadequate").astype(object)
            sex = np.where(rng.random(n) < 0.99, "F", "M").astype(object)
        metas.append(pd.DataFrame({"image_id": [f"d{d}-{k}" for k in range(n)], "age": age, "sex": sex,
                                   "quality": quality, "camera": None}))
    predictions = []
    for i in range(n_configs):
        d = i % n_datasets
        r = np.random.default_rng([seed, i])
        y = (r.random(n) < r.uniform(0.05, 0.5)).astype(int)
        if i == 3:  # degenerate: 3 positives
            y[:] = 0
            y[:3] = 1
        if i % 5 == 4:  # a group with one class: AUROC and TPR undefined there
            y[(metas[d]["sex"] == "M").to_numpy()] = 0
        latent = r.normal(1.2 * y, 1.0)
        s = 1 / (1 + np.exp(-(r.uniform(0.5, 2) * latent + r.uniform(-1, 1))))
        if i % 2:
            s = np.round(s, 2 if i % 4 == 1 else 3)  # ties
        if i % 7 == 6:
            s[:50], s[50:80] = 1.0, 0.0
        predictions.append(pd.DataFrame({
            "dataset": f"ds{d}", "image_id": metas[d]["image_id"], "task": "any_dr", "model": f"m{i:04d}",
            "interface": "vm", "method": "linear_probe", "train_dataset": f"ds{d}", "score": s,
            "score_reference": np.nan, "threshold": np.nan if i % 9 == 8 else r.uniform(0.2, 0.8), "label": y,
            "split": "test"}))
    return pd.concat(predictions, ignore_index=True), pd.concat(metas, ignore_index=True)


AXES_COVERAGE = {"sex": True, "age": True, "quality": True, "camera": False}


def signed_differences(table) -> np.ndarray:
    """The rows of the signed two-group differences (group ``attribute:A-B``; a max - min gap is ``:max-min``)."""
    group = table["group"].astype(str)
    return (group.str.contains(":") & ~group.str.endswith(":max-min")).to_numpy()


def table_differences(a, b, intervals_differ=None) -> dict[str, float]:
    """Largest |a - b| of value, ci_low, ci_high (same rows; nulls must match, and every other column);
    ``intervals_differ``: rows whose ci_low / ci_high are left out (an intended change of method)."""
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for column in a.columns.difference(["value", "ci_low", "ci_high"]):
        x, y = a[column].astype(object), b[column].astype(object)
        assert ((x == y) | (x.isna() & y.isna())).all(), f"column {column} differs"
    compared = np.ones(len(a), dtype=bool) if intervals_differ is None else ~intervals_differ
    out = {}
    for column in ("value", "ci_low", "ci_high"):
        keep = compared if column != "value" else np.ones(len(a), dtype=bool)
        x, y = a[column].to_numpy()[keep], b[column].to_numpy()[keep]
        assert (np.isnan(x) == np.isnan(y)).all(), f"nulls of {column} differ"
        both = ~np.isnan(x)
        out[column] = float(np.max(np.abs(x[both] - y[both]))) if both.any() else 0.0
    return out


def main_axes(args) -> dict:
    from statistics import median

    from focus_dagster.evaluation import tables

    predictions, metadata = axes_data(args.configs, args.samples)
    settings = tables.Settings(n_resamples=args.resamples, seed=0)
    reference = reference_tables(args.reference)
    head_models = sorted(predictions["model"].unique())[: args.reference_configs]
    head = predictions[predictions["model"].isin(head_models)]
    tables.metric_rows(head[head["model"] == head_models[0]], metadata, AXES_COVERAGE, settings)  # warm-up
    new_ms, old_ms = [], []
    for _ in range(args.repeats):  # interleaved: the same load on both
        started = time.perf_counter()
        new = tables.metric_rows(head, metadata, AXES_COVERAGE, settings)
        new_ms.append(1000 * (time.perf_counter() - started) / len(head_models))
        started = time.perf_counter()
        old = reference.metric_rows(head, metadata, AXES_COVERAGE, reference.Settings(args.resamples, 0))
        old_ms.append(1000 * (time.perf_counter() - started) / len(head_models))
    # The signed differences' intervals are BCa now, percentile at the reference: compared on every other row.
    signed = signed_differences(new)
    differences = table_differences(new, old, signed)
    started = time.perf_counter()
    rows = tables.metric_rows(predictions, metadata, AXES_COVERAGE, settings)
    all_seconds = time.perf_counter() - started
    figures = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip() + f", {os.cpu_count()} cores",
        "axes": list(tables.AXES), "samples": args.samples, "resamples": args.resamples,
        "configs": args.configs, "rows": len(rows), "seconds_all_configs": round(all_seconds, 2),
        "ms_per_config": round(1000 * all_seconds / args.configs, 1),
        "reference": args.reference, "reference_configs": len(head_models), "repeats": args.repeats,
        "ms_per_config_same_configs_median": round(median(new_ms), 1),
        "reference_ms_per_config_same_configs_median": round(median(old_ms), 1),
        "speedup": round(median(old_ms) / median(new_ms), 2),
        "max_abs_diff": differences,
        "rows_compared": len(new), "signed_difference_rows_interval_not_compared": int(signed.sum()),
    }
    print(f"metric_rows, four axes, {args.samples} test images, {args.resamples} resamples; {figures['machine']}")
    print(f"  all {args.configs} configurations ({len(rows)} rows): {all_seconds:.2f} s = "
          f"{figures['ms_per_config']} ms per configuration (target <= 30)")
    print(f"  on {len(head_models)} configurations, interleaved, median of {args.repeats}: "
          f"now {figures['ms_per_config_same_configs_median']} ms, {args.reference} "
          f"{figures['reference_ms_per_config_same_configs_median']} ms per configuration ({figures['speedup']}x)")
    print(f"  max |now - {args.reference}|: value {differences['value']:.2e} (<= 1e-12), "
          f"ci_low {differences['ci_low']:.2e}, ci_high {differences['ci_high']:.2e} (<= 1e-9); {len(new)} rows, "
          f"the intervals of the {int(signed.sum())} signed-difference rows not compared (BCa now)")
    save(args.json, figures)
    return figures


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", type=int, default=500, help="configurations for the vectorised timing")
    parser.add_argument("--samples", type=int, default=700, help="images per configuration")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--loop-configs", type=int, default=5, help="configurations timed both ways (the loop is slow)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--axes", choices=["all"], help="time tables.metric_rows on the four axes instead")
    parser.add_argument("--reference", default="HEAD", help="--axes all: the git revision to compare with")
    parser.add_argument("--reference-configs", type=int, default=12, help="--axes all: configurations timed both ways")
    parser.add_argument("--repeats", type=int, default=3, help="--axes all: interleaved rounds (medians)")
    args = parser.parse_args(argv)
    if args.axes:
        if "--configs" not in (argv if argv is not None else sys.argv[1:]):
            args.configs = 532
        return main_axes(args)

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
    save(args.json, figures)
    return figures


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
