"""Paired bootstrap deltas of ``evaluation.paired``: identical scores, known-truth and null simulations, why pairing
matters, point deltas against scikit-learn, replicates against a per-resample loop, undefined cases, and the
Benjamini-Hochberg q-values and the summary against scipy and hand-worked examples."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from sklearn.metrics import accuracy_score, brier_score_loss, roc_auc_score

from focus_dagster.evaluation.bootstrap import replicates_many, resample_indices
from focus_dagster.evaluation.paired import (
    PAIRED_METRICS,
    benjamini_hochberg,
    bootstrap_p_value,
    paired_deltas,
    sign_flip_p_value,
    summarise,
)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def binormal_pair(seed: int, n: int = 200, prevalence: float = 0.3, separation: float = 1.0, shift: float = 0.0,
                  shared: float = 1.0, noise: float = 0.5):
    """Labels and two score vectors on the same images: a latent ``separation * y + shared * N(0, 1)`` common to
    both models plus each model's own ``noise * N(0, 1)``; the adapted one separates the classes by ``shift``
    more. ``shift = 0``: the two are draws of the same distribution (true delta 0 for every metric)."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < prevalence
    common = separation * y + shared * rng.normal(size=n)
    base = _sigmoid(common + noise * rng.normal(size=n))
    adapted = _sigmoid(common + shift * y + noise * rng.normal(size=n))
    return y, base, adapted


def deltas(y, base, adapted, **kw):
    options = {"base_threshold": 0.5, "adapted_threshold": 0.5, "seed": 0, "n_resamples": 300} | kw
    return paired_deltas(y, base, adapted, **options)


# --------------------------------------------------------------------------------------------- deltas


def test_identical_scores_give_zero_deltas_zero_intervals_and_p_one():
    y, base, _ = binormal_pair(0)
    result = deltas(y, base, base.copy(), base_threshold=0.42, adapted_threshold=0.42)
    assert set(result) == set(PAIRED_METRICS)
    for name, d in result.items():
        assert (d.delta, d.low, d.high, d.p_value) == (0.0, 0.0, 0.0, 1.0), name
        assert d.reason is None and d.n == len(y) and d.n_pos == int(y.sum()) and d.n_replicates == 300


def test_a_clear_shift_in_separation_is_found():
    y, base, adapted = binormal_pair(1, n=300, shift=1.5)
    d = deltas(y, base, adapted, n_resamples=1000)["auroc"]
    assert d.delta > 0.05
    assert 0 < d.low <= d.delta <= d.high
    assert d.p_value == pytest.approx(1 / 1001)  # no replicate at or below 0: the floor 1 / (R + 1)


def test_null_simulation_rejects_about_alpha():
    """100 datasets where adapted and base are draws of the same distribution, R = 300: the share of p < 0.05
    stays near 0.05 (a loose band: the binomial sd over 100 datasets is 0.022)."""
    p = {name: [] for name in PAIRED_METRICS}
    for seed in range(100):
        y, base, adapted = binormal_pair(1000 + seed, n=150)
        result = deltas(y, base, adapted, seed=seed)
        for name in p:
            p[name].append(result[name].p_value)
    for name, values in p.items():
        share = np.mean(np.array(values) < 0.05)
        assert share <= 0.12, (name, share)
    assert np.mean(np.array(p["auroc"]) > 0.5) > 0.3  # p-values spread over (0, 1], not piled at the floor


def test_pairing_narrows_the_interval_of_correlated_scores():
    """Base and adapted share most of their score (shared sd 1, own noise 0.2): the paired interval of the AUROC
    delta is much narrower than the one from independent resamples of the two (reference: the percentile
    interval of the difference of ``replicates_many`` on two independently seeded index matrices)."""
    y, base, adapted = binormal_pair(2, n=300, shift=0.2, noise=0.2)
    paired = deltas(y, base, adapted, n_resamples=1000, seed=3)["auroc"]
    unpaired_replicates = (replicates_many(["auroc"], y, adapted, resample_indices(y, 1000, 11))["auroc"]
                           - replicates_many(["auroc"], y, base, resample_indices(y, 1000, 12))["auroc"])
    unpaired_low, unpaired_high = np.percentile(unpaired_replicates, [2.5, 97.5])
    assert paired.high - paired.low < 0.4 * (unpaired_high - unpaired_low)


def test_point_deltas_equal_scikit_learn():
    y, base, adapted = binormal_pair(4, shift=0.7)
    t_base, t_adapted = 0.37, 0.58
    result = deltas(y, base, adapted, base_threshold=t_base, adapted_threshold=t_adapted)
    expected = {
        "auroc": roc_auc_score(y, adapted) - roc_auc_score(y, base),
        "accuracy@0.5": accuracy_score(y, adapted >= 0.5) - accuracy_score(y, base >= 0.5),
        "accuracy@youden": accuracy_score(y, adapted >= t_adapted) - accuracy_score(y, base >= t_base),
        "ece": reference_ece(y, adapted) - reference_ece(y, base),
        "brier": brier_score_loss(y, adapted) - brier_score_loss(y, base),
    }
    for name, value in expected.items():
        assert result[name].delta == pytest.approx(value, abs=1e-12), name
    assert result["auroc"].base == pytest.approx(roc_auc_score(y, base), abs=1e-12)


def reference_ece(y, s, n_bins: int = 10) -> float:
    """Reliability ECE over 10 equal-width bins, written out (continuous scores: no score sits on an edge)."""
    bins = np.minimum((s * n_bins).astype(int), n_bins - 1)
    return sum(abs(s[bins == b].mean() - y[bins == b].mean()) * np.mean(bins == b)
               for b in range(n_bins) if np.any(bins == b))


def test_replicates_are_the_deltas_on_the_platforms_shared_resamples():
    """Replicate r is the metric of adapted minus that of base on resample r of ``resample_indices(y, R, seed)``,
    recomputed image by image with scikit-learn."""
    y, base, adapted = binormal_pair(5, n=80, shift=0.5)
    result = deltas(y, base, adapted, n_resamples=20, seed=7)
    idx = resample_indices(y, 20, 7)
    for r in range(20):
        i = idx[r]
        auroc = roc_auc_score(y[i], adapted[i]) - roc_auc_score(y[i], base[i])
        brier = brier_score_loss(y[i], adapted[i]) - brier_score_loss(y[i], base[i])
        assert result["auroc"].replicates[r] == pytest.approx(auroc, abs=1e-12)
        assert result["brier"].replicates[r] == pytest.approx(brier, abs=1e-12)


def test_one_class_in_the_test_labels_leaves_auroc_undefined_with_a_reason():
    rng = np.random.default_rng(6)
    y = np.zeros(50, dtype=int)
    base, adapted = rng.random(50), rng.random(50)
    result = deltas(y, base, adapted)
    auroc = result["auroc"]
    assert (auroc.base, auroc.delta, auroc.low, auroc.high, auroc.p_value) == (None, None, None, None, None)
    assert "one class" in auroc.reason
    assert result["brier"].delta is not None and result["brier"].p_value is not None  # defined on one class


@pytest.mark.parametrize("missing", [None, float("nan")])
def test_a_missing_youden_threshold_leaves_accuracy_at_youden_undefined(missing):
    y, base, adapted = binormal_pair(8)
    d = deltas(y, base, adapted, base_threshold=missing, adapted_threshold=0.5)["accuracy@youden"]
    assert (d.delta, d.low, d.high, d.p_value) == (None, None, None, None)
    assert d.base is None and d.adapted == pytest.approx(accuracy_score(y, adapted >= 0.5))
    assert "Youden" in d.reason and "base" in d.reason


def test_p_value_definition_by_hand():
    # 10 replicates: 2 at or below 0, 8 at or above 0 (one exactly 0 counts on both sides) -> 2 * 2 / 10
    assert bootstrap_p_value([-0.1, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]) == pytest.approx(0.4)
    assert bootstrap_p_value([0.1, 0.2, np.nan, 0.3]) == pytest.approx(1 / 4)  # floor 1 / (R + 1), R = 3 finite
    assert bootstrap_p_value([np.nan, np.nan]) is None


# ------------------------------------------------------------------------------------------- q-values


def test_benjamini_hochberg_by_hand():
    # m = 4 finite: sorted 0.01, 0.03, 0.04, 0.20 -> 0.04, 0.06, 0.0533, 0.20 -> running minimum from the top
    q = benjamini_hochberg([0.01, np.nan, 0.04, 0.03, 0.20, None])
    np.testing.assert_allclose(q, [0.04, np.nan, 0.16 / 3, 0.16 / 3, 0.20, np.nan])


def test_benjamini_hochberg_equals_scipy_and_is_monotone_and_capped():
    p = np.random.default_rng(9).random(40) ** 3
    q = benjamini_hochberg(p)
    np.testing.assert_allclose(q, scipy.stats.false_discovery_control(p, method="bh"), rtol=1e-12)
    order = np.argsort(p)
    assert np.all(np.diff(q[order]) >= 0) and np.all(q <= 1) and np.all(q >= p)


# -------------------------------------------------------------------------------------------- summary


def comparisons() -> pd.DataFrame:
    rows = []
    for model, offset in (("m1", 0.02), ("m2", -0.01)):
        for k, (dataset, domain) in enumerate((("a", "in_domain"), ("b", "in_domain"), ("c", "out_of_domain"))):
            for metric in ("auroc", "ece"):
                delta = offset + 0.01 * k if metric == "auroc" else -offset
                p_value = 0.01 * (k + 1) + (0.3 if model == "m2" else 0)
                rows.append({"model": model, "train_dataset": "a", "task": "dr", "dataset": dataset,
                             "domain": domain, "metric": metric, "delta": delta, "p_value": p_value})
    rows.append({"model": "m2", "train_dataset": "a", "task": "dr", "dataset": "d", "domain": "out_of_domain",
                 "metric": "auroc", "delta": np.nan, "p_value": np.nan})
    return pd.DataFrame(rows)


def test_summary_q_values_per_metric_and_domain():
    rows = comparisons()
    summary = summarise(rows)
    for (metric, domain), family in summary.rows.groupby(["metric", "domain"]):
        np.testing.assert_allclose(family["q_value"], benjamini_hochberg(family["p_value"].to_numpy()))
    assert np.isnan(summary.rows["q_value"].iloc[-1])  # an undefined delta has no q-value


def test_summary_means_counts_and_sign_flip_p_values():
    summary = summarise(comparisons()).means
    row = summary[(summary.model == "all") & (summary.domain == "in_domain") & (summary.metric == "auroc")].iloc[0]
    # in-domain AUROC deltas: m1 0.02, 0.03; m2 -0.01, 0.00 -> mean 0.01 over 4; exact sign flips (16 patterns)
    assert row.n == 4 and row.mean_delta == pytest.approx(0.01)
    flips = [abs(np.mean(np.array([0.02, 0.03, -0.01, 0.0]) * s)) >= 0.01 - 1e-12
             for s in np.array(np.meshgrid(*[[-1, 1]] * 4)).reshape(4, -1).T]
    assert row.p_value == pytest.approx(np.mean(flips)) and row.q_value == row.p_value
    out = summary[(summary.model == "m2") & (summary.domain == "out_of_domain") & (summary.metric == "auroc")].iloc[0]
    assert out.n == 1 and out.mean_delta == pytest.approx(0.01)  # the undefined delta is left out
    per_model = summary[(summary.model != "all") & (summary.domain == "in_domain") & (summary.metric == "ece")]
    np.testing.assert_allclose(per_model["q_value"], benjamini_hochberg(per_model["p_value"].to_numpy()))


def test_sign_flip_p_value_by_hand():
    # three positive deltas: of the 8 sign patterns only all-plus and all-minus reach |mean| 0.2 -> 2 / 8
    assert sign_flip_p_value([0.1, 0.2, 0.3]) == pytest.approx(0.25)
    assert np.isnan(sign_flip_p_value([np.nan]))
    many = sign_flip_p_value(np.full(40, 0.1), n_flips=999)  # random flips, +1 correction: never 0
    assert many == pytest.approx(1 / 1000)


def test_summary_rejects_an_unknown_domain():
    rows = comparisons()
    rows.loc[0, "domain"] = "cross"
    with pytest.raises(ValueError, match="domain"):
        summarise(rows)
