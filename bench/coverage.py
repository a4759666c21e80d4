"""Empirical coverage of 95% bootstrap intervals per metric and method, on simulated data with KNOWN truth.

Usage: .venv/bin/python bench/coverage.py [--quick] [--datasets 500] [--resamples 1000] [--sizes 30,100,300,1000]
                                          [--prevalences 0.05,0.2,0.5] [--scenarios ...] [--out FILE.md]
                                          [--merge-into FILE.json]

Each cell (scenario x test-set size n x prevalence) draws ``--datasets`` seeded datasets with fixed class
counts (``n_pos = round(prevalence * n)``; the design prevalence used for the truth is ``n_pos / n``), computes
the point with ``metrics.call_metric``, ``--resamples`` label-stratified resamples with
``bootstrap.resample_indices`` / ``replicates_many`` (as the platform does), the leave-one-out values with
``intervals.jackknife_*``, and the 95% interval by each method of ``intervals.METHODS`` (percentile, basic,
shifted, bc, bca). Coverage = share of datasets with a defined point whose interval contains the truth
(``low <= truth <= high``); datasets with an undefined point are counted as undefined, and a cell where every
point is undefined is reported "undefined". Monte-Carlo standard error of a 95% coverage with 500 datasets:
about 1 point.

Scenarios and their truths:

- ``binormal``: negatives N(0, 1), positives N(d, 1), d = sqrt(2) Phi^-1(0.8), so AUROC = Phi(d / sqrt(2))
  = 0.8; threshold d / 2, so sensitivity = specificity = Phi(d / 2); accuracy and F1 from those at the design
  prevalence; AUPRC = the integral of precision over recall (numerical, 200k-point grid). Metrics: auroc,
  auprc, accuracy, sensitivity, specificity, f1.
- ``calibrated``: true probability p ~ Beta(k pi, k (1 - pi)) (k = 4), label ~ Bernoulli(p) (drawn as fixed
  class counts from the class conditionals Beta(k pi + 1, k (1 - pi)) and Beta(k pi, k (1 - pi) + 1)), score
  s = p. ``overconfident``: the same with s = sigmoid(2 logit p) (temperature 1/2). Metrics: ece (10 bins),
  ece_15, ece_top_label, brier. True ECE = sum over the platform's bins of |E[(s - p) 1{s in bin}]|,
  computed on 2,000,000 draws of p with the expected label p in place of a drawn label (a drawn label would
  add the very upward bias under study); 0 exactly for ``calibrated``. True Brier = E[s^2 - 2 s p + p].
- ``groups_equal`` / ``groups_diff``: two groups of n / 2 images (each with round(prevalence * n / 2)
  positives), negatives N(-1, 1), positives N(m_g, 1), threshold 0: TPR_A = 0.8 and TPR_B = 0.8 (equal) or
  0.65 (diff), FPR = 1 - Phi(1) in both. Resampled as the platform does (``tables``' design): the whole set
  (both groups) is resampled once per dataset, stratified by label only (``resample_indices`` on the
  concatenated labels, ``resample_weights``), and a group's replicate r is its metric on the images of the
  group that resample r drew, with multiplicities (``bootstrap.group_replicates``; scores passed through
  expit with threshold 0.5, the same predictions as threshold 0 on the raw scores), so both groups share
  every resample and a group's size and positives vary across replicates. A gap's replicate is the gap on
  that replicate (NaN when TPR/FPR is undefined in a group there: left out by every method). BCa of a gap:
  ``intervals.group_jackknife`` of the groups' closed-form leave-one-out TPR/FPR, acceleration strata
  ``intervals.label_strata`` of the whole set's labels (the strata the resampling used).
  Metrics: tpr_gap (max - min, truth 0 or 0.15), tpr_diff (signed A - B, truth 0 or 0.15), eo_gap
  (max(tpr gap, fpr gap), truth 0 or 0.15). (Before, each group was resampled on its own; those results
  are in git history.)

``--merge-into FILE.json`` (with ``--scenarios``): recompute only the given scenarios and take every other
scenario's rows (and timings) from FILE.json, then rewrite FILE.json and its .md (unless ``--out``) with the
full table; the header records what was recomputed and what was reused.

The chosen method per metric is the one with the most cells in the 92-98% band (ties: the smaller largest
distance to 95%); the cells where no method reaches the band are listed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from scipy.special import expit, log_ndtr, logit, ndtr, ndtri

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from focus_dagster.evaluation import intervals as iv  # noqa: E402
from focus_dagster.evaluation.bootstrap import (  # noqa: E402
    group_replicates,
    replicates_many,
    resample_indices,
    resample_weights,
)
from focus_dagster.evaluation.metrics import bin_index, call_metric  # noqa: E402

METHODS = ("percentile", "basic", "shifted", "bc", "bca")
BAND = (0.92, 0.98)
AUROC_TRUE = 0.8
D = float(np.sqrt(2) * ndtri(AUROC_TRUE))
KAPPA = 4.0
TRUTH_DRAWS = 2_000_000
SCENARIOS = {
    "binormal": ("auroc", "auprc", "accuracy", "sensitivity", "specificity", "f1"),
    "calibrated": ("ece", "ece_15", "ece_top_label", "brier"),
    "overconfident": ("ece", "ece_15", "ece_top_label", "brier"),
    "groups_equal": ("tpr_gap", "tpr_diff", "eo_gap"),
    "groups_diff": ("tpr_gap", "tpr_diff", "eo_gap"),
}
BOUNDS = {"tpr_diff": (-1.0, 1.0)}  # every other metric lives in [0, 1]
TPR_A, TPR_B_DIFF, FPR_GROUPS = 0.8, 0.65, float(1 - ndtr(1.0))


# -------------------------------------------------------------------------------------------------- truths


def binormal_truth(prevalence: float) -> dict:
    sens = spec = float(ndtr(D / 2))
    t = np.linspace(-9, 9 + D, 200_001)  # thresholds, ascending: recall falls from 1 to 0
    tpr = 1 - ndtr(t - D)
    fpr_over_tpr = np.exp(log_ndtr(-t) - log_ndtr(D - t))  # stable where both underflow (precision -> 1)
    precision = 1 / (1 + (1 - prevalence) / prevalence * fpr_over_tpr)
    auprc = float(np.sum(-np.diff(tpr) * 0.5 * (precision[1:] + precision[:-1])))
    tp, fp, fn = prevalence * sens, (1 - prevalence) * (1 - spec), prevalence * (1 - sens)
    return {"auroc": AUROC_TRUE, "auprc": auprc, "sensitivity": sens, "specificity": spec,
            "accuracy": prevalence * sens + (1 - prevalence) * spec, "f1": 2 * tp / (2 * tp + fp + fn)}


def _score(p: np.ndarray, scenario: str) -> np.ndarray:
    if scenario == "calibrated":
        return p
    return expit(2.0 * logit(np.clip(p, 1e-12, 1 - 1e-12)))


def calibration_truth(prevalence: float, scenario: str, seed: int = 12345) -> dict:
    rng = np.random.default_rng(seed)
    p = rng.beta(KAPPA * prevalence, KAPPA * (1 - prevalence), TRUTH_DRAWS)
    s = _score(p, scenario)

    def ece(confidence, expected, n_bins):
        bins = bin_index(confidence, n_bins)
        return float(np.abs(np.bincount(bins, confidence - expected, n_bins + 1)).sum() / len(p))

    confidence = np.maximum(s, 1 - s)
    correct = np.where(s >= 0.5, p, 1 - p)
    return {"ece": ece(s, p, 10), "ece_15": ece(s, p, 15), "ece_top_label": ece(confidence, correct, 10),
            "brier": float(np.mean(s**2 - 2 * s * p + p))}


def groups_truth(scenario: str) -> dict:
    gap = 0.0 if scenario == "groups_equal" else TPR_A - TPR_B_DIFF
    return {"tpr_gap": gap, "tpr_diff": gap, "eo_gap": gap}


# ------------------------------------------------------------------------------------------------ datasets


def draw(scenario: str, n: int, prevalence: float, rng) -> tuple:
    n_pos = int(round(prevalence * n))
    y = np.r_[np.ones(n_pos, dtype=int), np.zeros(n - n_pos, dtype=int)]
    if scenario == "binormal":
        return y, np.where(y == 1, rng.normal(D, 1, n), rng.normal(0, 1, n))
    pi = n_pos / n
    a, b = KAPPA * pi, KAPPA * (1 - pi)
    p = np.where(y == 1, rng.beta(a + 1, b, n) if n_pos else 0.0, rng.beta(a, b + 1, n))
    return y, _score(p, scenario)


def group_draw(scenario: str, n: int, prevalence: float, rng) -> list:
    out = []
    tprs = (TPR_A, TPR_A if scenario == "groups_equal" else TPR_B_DIFF)
    for tpr in tprs:
        size = n // 2
        n_pos = int(round(prevalence * size))
        y = np.r_[np.ones(n_pos, dtype=int), np.zeros(size - n_pos, dtype=int)]
        out.append((y, np.where(y == 1, rng.normal(ndtri(tpr), 1, size), rng.normal(-1, 1, size))))
    return out


# ------------------------------------------------------------------------------------------------- one set


def intervals_for(point, replicates, jackknife, strata, bounds) -> dict:
    return {"percentile": iv.percentile(point, replicates),
            "basic": iv.basic(point, replicates, bounds=bounds),
            "shifted": iv.shifted(point, replicates, bounds=bounds),
            "bc": iv.bc(point, replicates, bounds=bounds),
            "bca": iv.bca(point, replicates, jackknife, strata=strata, bounds=bounds)}


def single(scenario: str, metrics: tuple, y, s, resamples: int, seed: int) -> dict:
    threshold = D / 2 if scenario == "binormal" else 0.5
    idx = resample_indices(y, resamples, seed)
    reps = replicates_many(metrics, y, s, idx, threshold=threshold)
    out = {}
    for name in metrics:
        point = call_metric(name, y, s, threshold=threshold)
        if not point.defined:
            out[name] = (None, None)
            continue
        jack = iv.jackknife_values(name, y, s, threshold=threshold)
        out[name] = (point.value, intervals_for(point, reps[name], jack, y, (0.0, 1.0)))
    return out


def grouped(groups: list, resamples: int, seed: int) -> dict:
    """The platform's design: one label-stratified resampling of the whole set, shared by the groups."""
    y = np.concatenate([g[0] for g in groups])
    s = expit(np.concatenate([g[1] for g in groups]))  # probabilities for group_replicates; >= 0.5 iff raw >= 0
    group = np.repeat(np.arange(len(groups)), [len(g[0]) for g in groups])
    weights = resample_weights(resample_indices(y, resamples, seed), len(y))
    points, reps, jacks = {"tpr": [], "fpr": []}, {"tpr": [], "fpr": []}, {"tpr": [], "fpr": []}
    for g in range(len(groups)):
        member = group == g
        replicates = group_replicates(y, s, weights, member, threshold=0.5)
        ym, sm = y[member], s[member]
        tpr = call_metric("sensitivity", ym, sm, threshold=0.5).value
        specificity = call_metric("specificity", ym, sm, threshold=0.5).value
        for metric, value in (("tpr", tpr), ("fpr", None if specificity is None else 1 - specificity)):
            points[metric].append(value)
            reps[metric].append(replicates[metric])
            jacks[metric].append(iv.jackknife_confusion(metric, ym, sm, 0.5))
    strata = iv.label_strata(y)  # images in group order, as group_jackknife concatenates them
    out = {}

    def maxmin(v):  # NaN in a group -> NaN gap (as tables.gap_rows)
        return v.max(axis=1) - v.min(axis=1)

    stats = {"tpr_gap": maxmin, "tpr_diff": lambda v: v[:, 0] - v[:, 1]}
    for name, combine in stats.items():
        if any(v is None for v in points["tpr"]):
            out[name] = (None, None)
            continue
        point = float(combine(np.array([points["tpr"]]))[0])
        replicates = combine(np.vstack(reps["tpr"]).T)
        jack = iv.group_jackknife(combine, points["tpr"], jacks["tpr"])
        out[name] = (point, intervals_for(point, replicates, jack, strata, BOUNDS.get(name, (0.0, 1.0))))
    if any(v is None for v in points["tpr"] + points["fpr"]):
        out["eo_gap"] = (None, None)
    else:
        def eo(v):  # v: [m, groups, 2 (tpr, fpr)]
            return np.maximum(v[:, :, 0].max(1) - v[:, :, 0].min(1), v[:, :, 1].max(1) - v[:, :, 1].min(1))
        base = np.array([[points["tpr"][g], points["fpr"][g]] for g in range(len(groups))])
        point = float(eo(base[None])[0])
        replicates = eo(np.stack([np.vstack(reps["tpr"]).T, np.vstack(reps["fpr"]).T], axis=2))
        jack = iv.group_jackknife(eo, list(base), [np.c_[jacks["tpr"][g], jacks["fpr"][g]]
                                                   for g in range(len(groups))])
        out["eo_gap"] = (point, intervals_for(point, replicates, jack, strata, (0.0, 1.0)))
    return out


# --------------------------------------------------------------------------------------------------- cells


def run_cell(scenario: str, n: int, prevalence: float, datasets: int, resamples: int, truth: dict) -> dict:
    metrics = SCENARIOS[scenario]
    tally = {m: {"undefined": 0, "defined": 0, **{k: {"cover": 0, "below": 0, "above": 0, "width": 0.0}
                                                   for k in METHODS}} for m in metrics}
    base_seed = int(np.random.SeedSequence([list(SCENARIOS).index(scenario), n, int(prevalence * 1000)])
                    .generate_state(1)[0])
    for k in range(datasets):
        rng = np.random.default_rng([base_seed, k])
        if scenario.startswith("groups"):
            result = grouped(group_draw(scenario, n, prevalence, rng), resamples, k)
        else:
            y, s = draw(scenario, n, prevalence, rng)
            result = single(scenario, metrics, y, s, resamples, k)
        for name, (point, by_method) in result.items():
            t = tally[name]
            if point is None:
                t["undefined"] += 1
                continue
            t["defined"] += 1
            for method, (low, high) in by_method.items():
                cell = t[method]
                if low is None:
                    cell["above"] += 1  # no interval: a miss (never happens with a defined point here)
                    continue
                cell["cover"] += low <= truth[name] <= high
                cell["below"] += high < truth[name]
                cell["above"] += low > truth[name]
                cell["width"] += high - low
    out = {}
    for name, t in tally.items():
        row = {"scenario": scenario, "metric": name, "n": n, "prevalence": prevalence, "truth": truth[name],
               "datasets": datasets, "defined": t["defined"], "undefined": t["undefined"]}
        for method in METHODS:
            c = t[method]
            d = t["defined"]
            row[method] = None if d == 0 else c["cover"] / d
            row[f"{method}_miss_low"] = None if d == 0 else c["below"] / d  # interval entirely below the truth
            row[f"{method}_miss_high"] = None if d == 0 else c["above"] / d
            row[f"{method}_width"] = None if d == 0 else c["width"] / d
        out[name] = row
    return out


def choose(rows: list) -> tuple[dict, list]:
    """Chosen method per metric (most cells in the band; ties: smaller worst distance) and the cells
    where no method reaches the band."""
    chosen, misses = {}, []
    for metric in dict.fromkeys(r["metric"] for r in rows):
        cells = [r for r in rows if r["metric"] == metric and r["defined"] > 0]
        score = {}
        for method in METHODS:
            inside = sum(BAND[0] <= r[method] <= BAND[1] for r in cells)
            worst = max((abs(r[method] - 0.95) for r in cells), default=1.0)
            score[method] = (inside, -worst)
        best = max(METHODS, key=lambda m: score[m])
        chosen[metric] = {"method": best, "cells_in_band": score[best][0], "cells": len(cells),
                          "worst_distance": -score[best][1],
                          "in_band_by_method": {m: score[m][0] for m in METHODS}}
        for r in cells:
            if not any(BAND[0] <= r[m] <= BAND[1] for m in METHODS):
                misses.append(r)
    return chosen, misses


def fmt(v) -> str:
    return "undef" if v is None else f"{100 * v:5.1f}"


def table(rows: list, chosen: dict, misses: list, header: list) -> str:
    lines = header + ["", "## Coverage of the nominal 95% interval (% of datasets with a defined point)", "",
                      "| scenario | metric | n | prev | truth | defined/undef | " + " | ".join(METHODS) + " |",
                      "|---|---|---|---|---|---|" + "---|" * len(METHODS)]
    order = {s: i for i, s in enumerate(SCENARIOS)}
    for r in sorted(rows, key=lambda r: (order.get(r["scenario"], 99), SCENARIOS.get(r["scenario"], ()).index(
            r["metric"]), r["n"], r["prevalence"])):
        marks = [fmt(r[m]) + ("*" if r[m] is not None and BAND[0] <= r[m] <= BAND[1] else "") for m in METHODS]
        truth = f"{r['truth']:.4f}"
        lines.append(f"| {r['scenario']} | {r['metric']} | {r['n']} | {r['prevalence']:.2f} | {truth} | "
                     f"{r['defined']}/{r['undefined']} | " + " | ".join(marks) + " |")
    lines += ["", "`*` = inside the 92-98% band. `undef` = the point is undefined in every dataset of the cell "
              "(e.g. AUROC needs >= 5 positives and negatives).", "",
              "## Chosen method per metric (most cells in the 92-98% band)", "",
              "| metric | chosen | cells in band | defined cells | in band by method |", "|---|---|---|---|---|"]
    for metric, c in chosen.items():
        by = ", ".join(f"{m} {k}" for m, k in c["in_band_by_method"].items())
        lines.append(f"| {metric} | {c['method']} | {c['cells_in_band']} | {c['cells']} | {by} |")
    lines += ["", "## Cells where no method reaches 92-98%", ""]
    if not misses:
        lines.append("none")
    for r in misses:
        best = max(METHODS, key=lambda m: r[m])
        lines.append(f"- {r['scenario']} {r['metric']} n={r['n']} prev={r['prevalence']:.2f} (truth "
                     f"{r['truth']:.4f}): best {best} {fmt(r[best])}%; " + ", ".join(
                         f"{m} {fmt(r[m])}" for m in METHODS))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small grid: n 100, 300; prevalence 0.2; 100 datasets")
    parser.add_argument("--datasets", type=int, default=500)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--sizes", default="30,100,300,1000")
    parser.add_argument("--prevalences", default="0.05,0.2,0.5")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--out", default=None, help="markdown file for the table (a .json next to it)")
    parser.add_argument("--merge-into", default=None, metavar="FILE.json",
                        help="recompute only --scenarios; reuse every other scenario's rows from FILE.json and "
                             "rewrite it (and its .md unless --out) with the full table")
    args = parser.parse_args(argv)
    sizes = [int(v) for v in args.sizes.split(",")]
    prevalences = [float(v) for v in args.prevalences.split(",")]
    datasets = args.datasets
    if args.quick:
        sizes, prevalences, datasets = [100, 300], [0.2], min(datasets, 100)
    scenarios = args.scenarios.split(",")
    command = "python bench/coverage.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows, timings = [], {}
    reused_rows, reused_timings, reused_note = [], {}, []
    if args.merge_into:
        previous = json.loads(Path(args.merge_into).read_text())
        reused_rows = [r for r in previous["rows"] if r["scenario"] not in scenarios]
        reused_timings = {k: v for k, v in previous.get("timings_s", {}).items() if k.split()[0] not in scenarios}
        kept = list(dict.fromkeys(r["scenario"] for r in reused_rows))
        md = Path(args.merge_into).with_suffix(".md")
        earlier = previous.get("date") or next((line.split(": ", 1)[1] for line in (
            md.read_text().splitlines() if md.exists() else []) if line.startswith("- date: ")), "unknown")
        reused_note = [f"- recomputed: scenarios {scenarios}; reused unchanged from {args.merge_into}: scenarios "
                       f"{kept} ({len(reused_rows)} rows; from `{(previous.get('reused_from') or {}).get('command') or previous['command']}`, "
                       f"date {(previous.get('reused_from') or {}).get('date') or earlier})"]
        args.out = args.out or str(md)
    rows = list(reused_rows)
    start_all = time.perf_counter()
    now = datetime.now(timezone.utc).isoformat(timespec='seconds')
    header = ["# Bootstrap interval coverage (bench/coverage.py)", "",
              f"- command: `{command}`",
              f"- date: {now}",
              *reused_note,
              f"- machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
              f"Python {platform.python_version()}, numpy {np.__version__}; one process",
              f"- grid: scenarios {scenarios}, n {sizes}, prevalence {prevalences}, {datasets} datasets per cell, "
              f"{args.resamples} stratified resamples each (sizes in the outer loop: a cut run leaves whole sizes)"
              + (" [this grid: the recomputed scenarios only]" if args.merge_into else "")]

    def save(final: bool) -> None:
        total = time.perf_counter() - start_all
        state = "complete" if final else f"PARTIAL (written after each cell; {len(timings)} cells so far)"
        chosen, misses = choose(rows)
        text = table(rows, chosen, misses, header + [f"- runtime: {total:.0f} s wall ({total / 60:.1f} min), {state}"
                                                     + (" (recomputed scenarios only)" if args.merge_into else "")])
        if final:
            print(text)
        if args.out:
            Path(args.out).write_text(text)
            Path(args.out).with_suffix(".json").write_text(json.dumps(
                {"command": command, "date": now, "runtime_s": total, "state": state,
                 "recomputed_scenarios": scenarios if args.merge_into else None,
                 "reused_from": None if not args.merge_into else {
                     "file": args.merge_into, "command": (previous.get("reused_from") or {}).get("command")
                     or previous["command"], "date": (previous.get("reused_from") or {}).get("date") or earlier,
                     "scenarios": kept, "runtime_s": previous.get("runtime_s")},
                 "timings_s": {**reused_timings, **timings}, "rows": rows, "chosen": chosen}, indent=1))

    for n in sizes:
        for scenario in scenarios:
            for prevalence in prevalences:
                start = time.perf_counter()
                pi = round(prevalence * n) / n if not scenario.startswith("groups") else prevalence
                if scenario == "binormal":
                    truth = binormal_truth(pi)
                elif scenario.startswith("groups"):
                    truth = groups_truth(scenario)
                else:
                    truth = calibration_truth(pi, scenario) if round(prevalence * n) > 0 else None
                if truth is None:
                    continue
                cell = run_cell(scenario, n, prevalence, datasets, args.resamples, truth)
                rows += list(cell.values())
                timings[f"{scenario} n={n} prev={prevalence}"] = time.perf_counter() - start
                print(f"[{time.perf_counter() - start_all:7.1f}s] {scenario:14s} n={n:5d} prev={prevalence:.2f}: "
                      + "; ".join(f"{m} " + " ".join(f"{k[:4]}={fmt(r[k]).strip()}" for k in METHODS)
                                  for m, r in cell.items()), flush=True)
                save(final=False)
    save(final=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
