"""The bootstrap's options reach its numbers, its refusals say what is wrong, and its sums stay exact at every size.

The reference is always the point metric (metrics.py, itself checked against scikit-learn and torchmetrics) on
each resample's drawn images, with their multiplicities, and NumPy's own percentile; the sizes at which the
kernels change integer and floating types are crossed with weights whose true sums are written out by hand.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from focus_dagster.evaluation import bootstrap as B
from focus_dagster.evaluation import metrics as M

# Not the defaults (0.5, 10 bins, 5 of each class, alpha 0.05, seed 0, stratified): an option dropped on its way
# to a kernel changes a number below.
OPTIONS = {"threshold": 0.35, "n_bins": 7, "min_positives": 2}
NAMES = ("auroc", "auprc", "accuracy", "sensitivity", "f1", "ece", "ece_15", "brier")


def _sample(n: int = 40, positives: int = 4, seed: int = 3):
    """Few positives, so that whether a resample's AUROC is defined depends on min_positives, and scores on many
    bins, so that the number of bins changes the ECE."""
    rng = np.random.default_rng(seed)
    y = np.zeros(n, dtype=int)
    y[rng.choice(n, positives, replace=False)] = 1
    s = np.clip(rng.random(n) * 0.7 + 0.25 * y, 0, 1).round(3)
    return y, s


def _point(name, y, s, **options):
    """The point metric of one resample's drawn images, NaN where undefined."""
    value = M.call_metric(name, y, s, **options).value
    return np.nan if value is None else value


def _loop(idx, y, s, names, **options):
    return {name: np.array([_point(name, y[row], s[row], **options) for row in idx]) for name in names}


@pytest.mark.parametrize("stratified", [True, False])
def test_bootstrap_uses_every_option_it_is_given(stratified):
    y, s = _sample()
    result = B.bootstrap(y, s, NAMES, n_resamples=60, seed=11, alpha=0.2, stratified=stratified, **OPTIONS)
    idx = B.resample_indices(y, 60, seed=11, stratified=stratified)
    loop = _loop(idx, y, s, NAMES, **OPTIONS)
    for name in NAMES:
        interval = result[name]
        assert interval.point == M.call_metric(name, y, s, **OPTIONS), name
        assert np.allclose(interval.replicates, loop[name], rtol=0, atol=1e-12, equal_nan=True), name
        finite = loop[name][np.isfinite(loop[name])]
        assert (interval.low, interval.high) == pytest.approx(tuple(np.percentile(finite, [10, 90])), abs=1e-12)
    if not stratified:  # some resamples draw a single positive: AUROC undefined there, at 2 positives needed
        assert np.isnan(result["auroc"].replicates).any() and np.isfinite(result["auroc"].replicates).any()


def test_the_documented_defaults():
    """bootstrap: 1000 stratified resamples of seed 0 at threshold 0.5, 10 bins, 5 of each class, alpha 0.05."""
    y, s = _sample(n=60, positives=12)
    result = B.bootstrap(y, s, ("auroc", "accuracy", "ece"))
    idx = B.resample_indices(y, 1000, seed=0, stratified=True)
    assert idx.shape == (1000, 60) and np.array_equal(B.resample_indices(y), idx)
    assert np.array_equal(B.resample_counts(y), B.resample_weights(idx, len(y)))
    loop = _loop(idx[::50], y, s, ("auroc", "accuracy", "ece"), threshold=0.5, n_bins=10)
    for name in ("auroc", "accuracy", "ece"):
        replicates = result[name].replicates
        assert np.allclose(replicates[::50], loop[name], rtol=0, atol=1e-12, equal_nan=True), name
        assert (result[name].low, result[name].high) == pytest.approx(tuple(np.percentile(replicates, [2.5, 97.5])))
    few = _sample(n=40, positives=4)  # 4 positives: below the default 5, so no AUROC anywhere
    assert B.bootstrap(*few, ("auroc",), n_resamples=20)["auroc"].low is None
    resamples = B.Resamples(y, s, B.resample_weights(idx[:40], len(y)))
    whole = _loop(idx[:40], y, s, ("accuracy", "ece"))
    for values in (resamples.metrics(("accuracy", "ece")), B.replicates_many(("accuracy", "ece"), y, s, idx[:40])):
        assert all(np.allclose(values[name], whole[name]) for name in whole)
    codes = np.where(np.arange(len(y)) % 3 == 0, 0, -1)
    expected = {name: [_point(name, y[row][codes[row] == 0], s[row][codes[row] == 0]) for row in idx[:40]]
                for name in ("accuracy", "ece")}
    for group in (resamples.groups(codes, 1), resamples.attributes([(codes, 1)])[0],
                  B.group_replicates(y, s, B.resample_weights(idx[:40], len(y)), codes == 0)):
        values = {name: np.asarray(group[name]).reshape(40, -1)[:, 0] for name in expected}
        assert all(np.allclose(values[name], expected[name], equal_nan=True) for name in expected)


def test_replicates_many_and_group_replicates_use_their_options():
    y, s = _sample(n=50, positives=10, seed=5)
    idx = B.resample_indices(y, 30, seed=2, stratified=False)
    many = B.replicates_many(("auroc", "accuracy", "ece"), y, s, idx, **OPTIONS)
    loop = _loop(idx, y, s, ("auroc", "accuracy", "ece"), **OPTIONS)
    for name in many:
        assert np.allclose(many[name], loop[name], rtol=0, atol=1e-12, equal_nan=True), name
    member = np.arange(len(y)) < 20  # a group of 20 images, about 4 positives: one or two in some resamples
    groups = B.group_replicates(y, s, B.resample_weights(idx, len(y)), member, **OPTIONS)
    for name, metric in (("accuracy", "accuracy"), ("tpr", "sensitivity"), ("auroc", "auroc"), ("ece", "ece")):
        expected = [_point(metric, y[row][member[row]], s[row][member[row]], **OPTIONS) for row in idx]
        assert np.allclose(groups[name], expected, rtol=0, atol=1e-12, equal_nan=True), name
    one_positive = [int(y[row][member[row]].sum()) == 1 for row in idx]
    assert any(one_positive)  # a TPR of 0 or 1 out of a single positive, not NaN
    assert np.isfinite(groups["tpr"][np.array(one_positive)]).all()


def test_a_rank_metric_needs_min_positives_of_each_class_in_the_resample():
    """min_positives 1: one positive and one negative are enough; 3 negatives with the default 5: never."""
    y, s = np.array([1, 0, 1, 0, 0, 1]), np.array([0.9, 0.2, 0.4, 0.5, 0.1, 0.7])
    idx = B.resample_indices(y, 200, seed=1, stratified=False)
    for name in ("auroc", "auprc"):
        replicates = B.replicates_many((name,), y, s, idx, min_positives=1)[name]
        assert np.allclose(replicates, _loop(idx, y, s, (name,), min_positives=1)[name], equal_nan=True), name
        assert np.isnan(B.replicates_many((name,), y, s, idx)[name]).all(), name
    y = np.r_[np.ones(12, int), np.zeros(3, int)]
    s = np.linspace(0.05, 0.95, 15)
    idx = B.resample_indices(y, 20, seed=3)
    assert np.isnan(B.replicates_many(("auprc",), y, s, idx)["auprc"]).all()  # 3 negatives < 5


def test_percentile_interval_edges():
    replicates = np.array([0.2, np.nan, 0.9, 0.4, 0.3, np.inf, 0.8])
    finite = [0.2, 0.9, 0.4, 0.3, 0.8]
    interval = B.percentile_interval(M.Value(0.5), replicates)
    assert (interval.low, interval.high) == tuple(np.percentile(finite, [2.5, 97.5]))
    interval = B.percentile_interval(M.Value(0.5), replicates, alpha=0.3)
    assert (interval.low, interval.high) == tuple(np.percentile(finite, [15, 85]))
    one = B.percentile_interval(M.Value(0.5), np.array([np.nan, 0.6, np.nan]))
    assert (one.low, one.high) == (0.6, 0.6)
    undefined = B.percentile_interval(M.Value(None, "only one class"), np.array([0.4, 0.6]))
    assert (undefined.low, undefined.high) == (None, None)


def test_no_resamples_and_an_empty_sample():
    y, s = _sample(n=12, positives=6)
    none = B.Resamples(y, s, np.zeros((0, 12), dtype=np.int64))
    metrics = none.metrics(("auroc", "accuracy", "ece"))
    assert all(values.shape == (0,) for values in metrics.values())
    groups = none.groups(np.zeros(12, dtype=int), 1)
    assert all(values.shape == (0, 1) for values in groups.values())
    empty = B.Resamples([], [], np.zeros((3, 0), dtype=np.int64))
    assert all(np.isnan(values).all() and values.shape == (3,) for values in empty.metrics(("auroc", "ece")).values())


def test_bad_resamples_are_refused_with_what_is_wrong():
    y, s = [0, 1, 1], [0.2, 0.6, 0.7]
    for idx in ([0, 1, 2], [[0.0, 1.0, 2.0]]):
        with pytest.raises(ValueError, match=r"^idx must be a 2-D integer array \[resamples, size\], got "):
            B.resample_weights(idx, 3)
    for idx in ([[0, 1, 3]], [[-1, 1, 2]]):
        with pytest.raises(ValueError, match=r"^idx has values outside \[0, 3\)$"):
            B.resample_weights(idx, 3)
    for counts in ([1, 1, 1], [[1, 1]], [[1.0, 1.0, 1.0]]):
        with pytest.raises(ValueError, match=r"^counts must be integer \[resamples, 3\], got "):
            B.Resamples(y, s, np.asarray(counts))
    resamples = B.Resamples(y, s, [[1, 1, 1]])
    for codes, n_groups in (([0, 1], 2), ([0, 1, 2], 2)):
        with pytest.raises(ValueError, match=r"^groups must be 3 codes in \[-1, 2\)$"):
            resamples.groups(codes, n_groups)
    with pytest.raises(KeyError, match=r"unknown metric\(s\) \['aurox'\]; known: auroc, auprc, accuracy"):
        resamples.metrics(("auroc", "aurox"))
    with pytest.raises(KeyError, match="no count-based rate 'auroc'"):
        B.Counts(*(np.ones((1, 1)),) * 5).rate("auroc")


# Weights whose sums cross 2**24 (float32 no longer exact), 2**31 (int32 overflows) and, for AUROC's products,
# 2**31 with about 10**5 draws. True values from Fractions of the weights.
Y, S = np.array([1, 0, 0, 1]), np.array([0.8, 0.6, 0.3, 0.4])


def _exact(weights):
    w = [Fraction(int(v)) for v in weights]
    pos, neg = w[0] + w[3], w[1] + w[2]
    right = w[0] + w[2]  # at 0.5: image 0 (positive, 0.8) and image 2 (negative, 0.3) right
    # AUROC: positive 0 outscores both negatives; positive 3 (0.4) outscores negative 2 (0.3) only
    u = w[0] * (w[1] + w[2]) + w[3] * w[2]
    return {"accuracy": float(right / (pos + neg)), "auroc": float(u / (pos * neg)),
            "sensitivity": float(w[0] / pos)}


@pytest.mark.parametrize("weights", [
    (2**23 + 1, 2**23 + 2, 5, 3),           # drawn 2**24 + 11: float32 would round the sums
    (2**24 + 1, 2**24 - 1, 7, 2**20 + 1),   # 2**25 + 2**20 + 8
    (2**30, 2**30 - 5, 3, 2),                # exactly 2**31: one more than int32 holds
    (2**31 + 7, 2**30, 5, 2**20),            # between 2**31 and 2**32
    (50_001, 49_999, 3, 7),                  # about 10**5: AUROC's products pass 2**31
])
def test_sums_stay_exact_across_the_type_changes(weights):
    counts = np.array([weights], dtype=np.int64)
    min_positives = 1
    values = B.Resamples(Y, S, counts, min_positives=min_positives).metrics(("accuracy", "auroc", "sensitivity"))
    for name, expected in _exact(weights).items():
        assert values[name][0] == pytest.approx(expected, rel=1e-15, abs=0), (name, weights)
