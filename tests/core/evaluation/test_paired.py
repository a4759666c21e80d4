"""Paired bootstrap deltas of ``evaluation.paired``: identical scores, known-truth and null simulations, why pairing
matters, point deltas against scikit-learn, replicates against a per-resample loop, undefined cases, and the
Benjamini-Hochberg q-values and the summary against scipy and hand-worked examples."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from sklearn.metrics import accuracy_score, brier_score_loss, roc_auc_score

from focus_dagster.evaluation.bootstrap import replicates_many, resample_indices
from focus_dagster.evaluation.metrics import Value
from focus_dagster.evaluation.paired import (
    PAIRED_METRICS,
    SUMMARY_COLUMNS,
    benjamini_hochberg,
    bootstrap_p_value,
    paired_delta,
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


# ------------------------------------------------------------------------- edges the mutation run found open


def test_accuracy_at_youden_replicates_use_each_sides_own_threshold():
    """Replicate r of accuracy@youden: each side at its own threshold on resample r, counted with scikit-learn
    (a side scored at 0.5 instead gives other replicates)."""
    y, base, adapted = binormal_pair(6, n=80, shift=0.5)
    result = deltas(y, base, adapted, n_resamples=20, seed=3, base_threshold=0.35, adapted_threshold=0.62)
    idx = resample_indices(y, 20, 3)
    for r in range(20):
        i = idx[r]
        expected = accuracy_score(y[i], adapted[i] >= 0.62) - accuracy_score(y[i], base[i] >= 0.35)
        assert result["accuracy@youden"].replicates[r] == pytest.approx(expected, abs=1e-12)


def test_alpha_sets_the_interval_and_an_unknown_metric_is_refused():
    y, base, adapted = binormal_pair(8, n=150, shift=0.4)
    wide = deltas(y, base, adapted, alpha=0.05)["auroc"]
    every = deltas(y, base, adapted, alpha=0.5)
    narrow = every["auroc"]
    assert wide.low < narrow.low < narrow.high < wide.high
    reps = np.sort(narrow.replicates)  # the middle half of 300 replicates, give or take one order statistic
    assert reps[73] <= narrow.low <= reps[76] and reps[223] <= narrow.high <= reps[226]
    assert [delta.metric for delta in every.values()] == list(every) == list(PAIRED_METRICS)
    with pytest.raises(ValueError, match="unknown paired metric"):
        deltas(y, base, adapted, metrics=("auroc", "sensitivity"))


def test_a_delta_undefined_in_every_resample_keeps_its_replicates_and_says_why():
    nan = np.full(4, np.nan)
    out = paired_delta("auroc", Value(0.6), Value(0.7), nan, 10, 3)
    assert (out.metric, out.delta, out.low, out.high, out.p_value) == ("auroc", None, None, None, None)
    assert out.reason == "the delta is undefined in every resample" and out.replicates is nan
    assert (out.base, out.adapted, out.n, out.n_pos, out.n_replicates) == (0.6, 0.7, 10, 3, 0)
    none = paired_delta("auroc", Value(None, "base: one class"), Value(0.7), None, 10, 3)
    assert (none.metric, none.delta, none.p_value, none.reason) == ("auroc", None, None, "base: one class")
    one = paired_delta("auroc", Value(0.6), Value(0.7), np.array([np.nan, 0.2, np.nan]), 10, 3)
    assert one.delta == pytest.approx(0.1) and one.n_replicates == 1
    assert one.p_value == pytest.approx(0.5)  # the floor 1 / (R + 1), R = 1 finite


def test_as_row_names_every_column_of_the_long_table():
    row = paired_delta("brier", Value(0.2), Value(0.15), np.array([-0.06, -0.04, np.nan]), 12, 5).as_row()
    assert row == {"metric": "brier", "base": 0.2, "adapted": 0.15, "delta": pytest.approx(-0.05),
                   "ci_low": row["ci_low"], "ci_high": row["ci_high"], "p_value": pytest.approx(1 / 3), "n": 12,
                   "n_pos": 5, "n_replicates": 2, "reason": None}
    assert -0.06 <= row["ci_low"] < row["ci_high"] <= -0.04
    assert list(row) == ["metric", "base", "adapted", "delta", "ci_low", "ci_high", "p_value", "n", "n_pos",
                         "n_replicates", "reason"]


def test_benjamini_hochberg_edges_equal_scipy():
    for p in ([0.3], [0.0, 0.5, 1.0], [0.0, 0.0, 0.02]):
        np.testing.assert_allclose(benjamini_hochberg(p), scipy.stats.false_discovery_control(p, method="bh"))
    for bad in ([0.2, -0.1], [0.2, 1.5]):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            benjamini_hochberg(bad)


def _all_sign_flips(values) -> float:
    """Share of the 2**n sign patterns whose |mean| reaches the observed one, enumerated one by one."""
    observed = abs(np.mean(values))
    hits = [abs(np.mean(np.multiply(signs, values))) >= observed - 1e-12
            for signs in itertools.product((-1.0, 1.0), repeat=len(values))]
    return float(np.mean(hits))


def test_sign_flip_p_value_exact_and_sampled_against_enumeration():
    values = np.random.default_rng(4).normal(0.03, 0.05, size=13)  # 8192 patterns: still exact
    assert sign_flip_p_value(values) == pytest.approx(_all_sign_flips(values), abs=1e-15)
    values = np.random.default_rng(5).normal(0.01, 0.05, size=15)  # 32768 patterns: 10,000 sampled
    exact = _all_sign_flips(values)
    sampled = sign_flip_p_value(values)
    assert 0.05 < exact < 0.95 and sampled == pytest.approx(exact, abs=0.02)  # 4.6 Monte-Carlo SEs at most
    assert sign_flip_p_value(values) == sampled  # seeded: the same p every time
    ties = np.array([0.1] * 9 + [-0.1] * 6)  # |mean| 0.02: every pattern of 9 or 6 plus signs ties with it
    assert sign_flip_p_value(ties) == pytest.approx(_all_sign_flips(ties), abs=0.02)
    assert round(sampled * 10_001) == pytest.approx(sampled * 10_001, abs=1e-9)  # (1 + hits) / (1 + 10,000)


def test_summary_adds_only_q_values_and_copes_with_no_rows():
    rows = comparisons()
    assert list(summarise(rows).rows.columns) == [*rows.columns, "q_value"]
    with pytest.raises(KeyError, match="rows lack column"):
        summarise(rows.drop(columns="task"))  # a column the summary does not read is still required
    empty = summarise(rows.iloc[:0])
    assert empty.rows.empty and empty.means.empty and list(empty.means.columns) == SUMMARY_COLUMNS
