"""The intervals the metric tables give the fairness gaps, scored on a small seeded simulation with known truth.

Two groups of equal size, each with the same share of positives; negatives N(-1, 1) and positives N(Phi^-1(TPR), 1)
in both, threshold 0 on the raw score (0.5 after the logistic the tables read): group a's TPR is 0.8, group b's
0.65 (a true TPR gap and equalized-odds gap of 0.15) or 0.8 (true gaps 0), and both groups' FPR is 1 - Phi(1). The
truth follows from the design, with nothing computed by the platform. The whole set is resampled by label once per
dataset and shared by the groups, as `tables` does; the rows come from `tables.gap_rows`, the code the fairness
tables run, so what is scored is the method `intervals.CHOICE` names through `intervals.gap_interval`.

bench/coverage.py (500 datasets x 1000 resamples; bench/results/coverage_cpu_2core.md) at n = 300, prevalence 0.2:
with a true gap of 0.15 the TPR gap covers 95.2% by percentile, 68.8% basic, 93.8% shifted, 78.2% BC, 79.0% BCa,
and the equalized-odds gap 95.2%, 70.8%, 94.4%, 78.2%, 79.0%; with no gap the equalized-odds gap covers 0.0% by
percentile, 91.8% basic, 65.8% shifted. Only the shifted percentile holds in both for the equalized-odds gap; for
the TPR gap percentile and shifted are within the simulation's noise of each other (11 vs 9 cells in band).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, ndtri

from focus_dagster.evaluation import intervals as iv
from focus_dagster.evaluation.bootstrap import resample_indices, resample_weights
from focus_dagster.evaluation.tables import gap_rows, group_values

N, PREVALENCE, DATASETS, RESAMPLES = 300, 0.2, 150, 400
TPR_A = 0.8
CHOSEN = "tables"  # the row gap_rows writes
OTHERS = ("percentile", "basic")


def _two_groups(rng, tpr_b: float):
    labels, scores = [], []
    for tpr in (TPR_A, tpr_b):
        size = N // 2
        positives = round(PREVALENCE * size)
        y = np.r_[np.ones(positives, int), np.zeros(size - positives, int)]
        labels.append(y)
        scores.append(np.where(y == 1, rng.normal(ndtri(tpr), 1, size), rng.normal(-1, 1, size)))
    return np.concatenate(labels), expit(np.concatenate(scores)), np.repeat([0, 1], N // 2)


def _coverage(tpr_b: float) -> dict:
    """Per gap metric and method, the share of datasets whose 95% interval holds the true gap."""
    truth = TPR_A - tpr_b  # the FPRs are equal, so the equalized-odds gap is the TPR gap
    hits = {}
    for k in range(DATASETS):
        y, s, group = _two_groups(np.random.default_rng([11, k]), tpr_b)
        weights = resample_weights(resample_indices(y, RESAMPLES, k), N)
        fitted = {name: group_values(y, s, group == g, weights) for g, name in enumerate("ab")}
        samples = {name: (y[group == g], s[group == g]) for g, name in enumerate("ab")}
        rows = {r["metric"]: r for r in gap_rows({}, "fairness", "sex", fitted, samples, None, N, {"label": y})
                if r["group"] == "sex:max-min"}
        replicates = _gap_replicates(fitted)
        for metric in ("tpr_gap", "equalized_odds_gap"):
            row = rows[metric]
            found = {CHOSEN: (row["ci_low"], row["ci_high"]),
                     "percentile": iv.percentile(row["value"], replicates[metric]),
                     "basic": iv.basic(row["value"], replicates[metric], bounds=(0, 1))}
            for method, (low, high) in found.items():
                hits.setdefault((metric, method), []).append(low <= truth <= high)
    return {key: float(np.mean(v)) for key, v in hits.items()}


def _gap_replicates(fitted: dict) -> dict:
    """The gaps on each shared resample, from the two groups' replicates (|a - b| of TPR and of FPR)."""
    tpr = np.abs(fitted["a"]["tpr"][2] - fitted["b"]["tpr"][2])
    fpr = np.abs(fitted["a"]["fpr"][2] - fitted["b"]["fpr"][2])
    return {"tpr_gap": tpr, "equalized_odds_gap": np.maximum(tpr, fpr)}


def test_gap_intervals_cover_a_true_gap():
    """A true gap of 0.15: the tables' TPR and equalized-odds gap intervals hold it about 95% of the time, where the
    reflected (basic) interval, the one that suits a zero gap, falls to about 70%."""
    coverage = _coverage(tpr_b=0.65)
    assert coverage[("tpr_gap", CHOSEN)] >= 0.88, coverage
    assert coverage[("equalized_odds_gap", CHOSEN)] >= 0.88, coverage
    assert coverage[("tpr_gap", "basic")] <= 0.82 and coverage[("equalized_odds_gap", "basic")] <= 0.82, coverage


def test_equalized_odds_gap_interval_can_reach_a_zero_gap():
    """No gap: every resample's gap is above 0, so a percentile interval never holds the truth; the tables'
    equalized-odds interval (shifted by the bootstrap bias) holds it in about two datasets of three."""
    coverage = _coverage(tpr_b=TPR_A)
    assert coverage[("equalized_odds_gap", "percentile")] <= 0.15, coverage
    assert coverage[("equalized_odds_gap", CHOSEN)] >= 0.45, coverage


def test_a_gap_without_a_jackknife_refuses_bca_and_names_the_methods_it_can_have(monkeypatch):
    monkeypatch.setitem(iv.CHOICE, "equalized_odds_gap", "bca")
    with pytest.raises(ValueError, match=r"CHOICE\['equalized_odds_gap'\] is 'bca'.*no jackknife") as raised:
        iv.gap_interval("equalized_odds_gap", 0.1, np.linspace(0.05, 0.2, 50))
    assert str(raised.value).endswith("choose one of ['basic', 'bc', 'percentile', 'shifted']")


def test_a_shifted_gap_interval_is_clipped_at_zero():
    """A gap of 0 whose resampled gaps all lie above it (the bias of a max-min gap): moved down by the bias, the
    interval would reach below 0, which no gap can; it stops at 0. Reference: numpy's quantiles and the bias."""
    point, replicates = 0.0, np.linspace(0.05, 0.25, 41)
    low, high = np.quantile(replicates, [0.025, 0.975]) - (replicates.mean() - point)
    assert low < 0 < high
    assert iv.gap_interval("equalized_odds_gap", point, replicates) == (0.0, pytest.approx(high, abs=1e-12))
