"""Metric point estimates against scikit-learn / torchmetrics, undefined cases, and the vectorised bootstrap."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    brier_score_loss,
    f1_score,
    recall_score,
    roc_auc_score,
    roc_curve,
)

from focus_dagster.evaluation import bootstrap as B
from focus_dagster.evaluation import metrics as M

SEEDS = (0, 1, 2, 3)


def sample(seed: int, n: int = 400, prevalence: float = 0.3, ties: bool = False):
    """Labels and informative scores in [0, 1]; with ties, scores rounded to 2 decimals. Edge scores 0 and 1
    and values on the 10- and 15-bin boundaries are always included."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < prevalence).astype(int)
    y[:2] = [0, 1]
    s = np.clip(rng.normal(0.35 + 0.3 * y, 0.2), 0, 1)
    if ties:
        s = np.round(s, 2)
    s[2:8] = [0.0, 1.0, 0.0, 1.0, 0.6, 0.2]
    s[8:20] = M.bin_edges(15)[rng.integers(0, 16, 12)]
    s[20:32] = M.bin_edges(10)[rng.integers(0, 11, 12)]
    return y, s


CASES = [(seed, ties) for seed in SEEDS for ties in (False, True)]


@pytest.mark.parametrize("seed,ties", CASES)
def test_ranking_and_brier_equal_sklearn(seed, ties):
    y, s = sample(seed, ties=ties)
    assert M.auroc(y, s).value == pytest.approx(roc_auc_score(y, s), abs=1e-9)
    assert M.auprc(y, s).value == pytest.approx(average_precision_score(y, s), abs=1e-9)
    assert M.brier(y, s).value == pytest.approx(brier_score_loss(y, s), abs=1e-12)


@pytest.mark.parametrize("seed,ties", CASES)
@pytest.mark.parametrize("threshold", (0.5, 0.35, 0.6))
def test_threshold_metrics_equal_sklearn(seed, ties, threshold):
    y, s = sample(seed, ties=ties)
    predicted = (s >= threshold).astype(int)
    assert M.accuracy(y, s, threshold).value == pytest.approx(accuracy_score(y, predicted), abs=1e-9)
    assert M.sensitivity(y, s, threshold).value == pytest.approx(recall_score(y, predicted), abs=1e-9)
    assert M.specificity(y, s, threshold).value == pytest.approx(recall_score(y, predicted, pos_label=0), abs=1e-9)
    assert M.f1(y, s, threshold).value == pytest.approx(f1_score(y, predicted), abs=1e-9)


@pytest.mark.parametrize("seed,ties", CASES)
def test_ece_equals_torchmetrics(seed, ties):
    torch = pytest.importorskip("torch")
    from torchmetrics.functional.classification import binary_calibration_error

    y, s = sample(seed, ties=ties)
    for n_bins in (15, 10):
        expected = binary_calibration_error(torch.tensor(s, dtype=torch.float64), torch.tensor(y), n_bins=n_bins,
                                            norm="l1").item()
        assert M.ece(y, s, n_bins=n_bins).value == pytest.approx(expected, abs=1e-9)
    assert M.ece_15(y, s).value == M.ece(y, s, n_bins=15).value


def test_bin_edges_are_torch_linspace():
    torch = pytest.importorskip("torch")
    for n_bins in (1, 2, 3, 7, 10, 15, 20, 35, 100):
        expected = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64).numpy()
        assert np.array_equal(M.bin_edges(n_bins), expected), n_bins


def test_bins_left_closed_and_one_in_its_own_bin():
    edges = M.bin_edges(10)
    values = np.array([0.0, edges[3], np.nextafter(edges[3], 0), 0.999, 1.0])
    assert M.bin_index(values, 10).tolist() == [0, 3, 2, 9, 10]
    table = M.ece_bins([0, 1, 1], [0.05, 1.0, 1.0], n_bins=10)
    assert len(table["count"]) == 11 and table["count"][0] == 1 and table["count"][10] == 2
    assert table["mean_score"][10] == 1.0 and table["mean_label"][0] == 0.0 and table["mean_score"][5] is None
    assert table["lower"][10] == table["upper"][10] == 1.0


def test_ece_bins_match_ece():
    y, s = sample(5, ties=True)
    table = M.ece_bins(y, s, n_bins=10)
    rows = zip(table["count"], table["mean_score"], table["mean_label"], strict=True)
    value = sum(c / table["n"] * abs(ms - ml) for c, ms, ml in rows if c)
    assert value == pytest.approx(M.ece(y, s).value, abs=1e-12)
    assert sum(table["count"]) == len(y)


def test_ece_bin_count_matters():
    rng = np.random.default_rng(11)
    s = rng.random(300)
    # the true frequency oscillates around the score, so miscalibration changes sign inside the bins and the
    # bins' width decides how much of it cancels out
    y = (rng.random(300) < np.clip(s + 0.4 * np.sin(2 * np.pi * 7 * s), 0, 1)).astype(int)
    assert abs(M.ece(y, s, n_bins=10).value - M.ece(y, s, n_bins=15).value) > 1e-3


def test_ece_top_label_hand_computed():
    y = [1, 0, 0, 0]
    s = [0.95, 0.15, 0.65, 0.35]
    # confidence max(p, 1-p) = .95 .85 .65 .65, correct = 1 1 0 1; bins 9, 8, 6, 6:
    # (1 * |.95 - 1| + 1 * |.85 - 1| + 2 * |.65 - .5|) / 4 = .125
    assert M.ece_top_label(y, s).value == pytest.approx(0.125, abs=1e-12)
    # reliability form: (|.95 - 1| + |.15 - 0| + |.65 - 0| + |.35 - 0|) / 4 = .3
    assert M.ece(y, s).value == pytest.approx(0.3, abs=1e-12)


def sklearn_youden(y, s):
    fpr, tpr, thresholds = roc_curve(y, s)
    finite = np.isfinite(thresholds)
    j = (tpr - fpr)[finite]
    return thresholds[finite][j >= j.max() - 1e-12].max()


@pytest.mark.parametrize("seed,ties", CASES)
def test_youden_threshold(seed, ties):
    y, s = sample(seed, ties=ties)
    assert M.youden_threshold(y, s).value == sklearn_youden(y, s)
    assert M.youden_threshold([0, 0, 1, 1], [0.1, 0.4, 0.4, 0.8]).value == 0.8  # J ties at .8 and .4: the larger


def test_one_class_undefined():
    y, s = [0] * 20, np.linspace(0, 1, 20)
    for name in ("auroc", "auprc", "sensitivity", "f1"):
        value = M.call_metric(name, y, np.zeros(20) if name == "f1" else s)
        assert value.value is None and "one class" in value.reason, name
    assert "one class" in M.youden_threshold(y, s).reason
    assert "one class" in M.specificity([1] * 5, [0.2] * 5).reason
    assert M.accuracy(y, s).value == pytest.approx(0.5)  # defined on one class
    assert M.ece(y, s).defined and M.brier(y, s).defined


def test_too_few_positives():
    y = np.array([1] * 4 + [0] * 40)
    s = np.linspace(0, 1, 44)
    value = M.auroc(y, s)
    assert value.value is None and "positives" in value.reason and "4 < minimum 5" in value.reason
    assert M.auprc(y, s).value is None
    assert M.auroc(y, s, min_positives=4).defined
    assert "negatives" in M.auroc(1 - y, s).reason


def test_empty_and_invalid_input():
    assert all(v.value is None and v.reason == "empty input" for v in M.compute_all([], []).values())
    with pytest.raises(ValueError, match=r"2 non-finite value\(s\).*index 1"):
        M.auroc([0, 1, 0, 1], [0.1, np.nan, 0.3, np.inf])
    with pytest.raises(ValueError, match="non-finite"):
        M.compute_all([0, 1], [0.1, np.nan])
    with pytest.raises(ValueError, match="only 0 and 1"):
        M.accuracy([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        M.ece([0, 1], [0.1, 1.2])


def test_compute_all_suite():
    y, s = sample(0)
    suite = M.compute_all(y, s, threshold=0.4)
    assert list(suite) == ["auroc", "auprc", "accuracy", "sensitivity", "specificity", "f1", "ece", "ece_15",
                           "ece_top_label", "brier"]
    assert suite["accuracy"] == M.accuracy(y, s, 0.4) and suite["ece_15"] == M.ece(y, s, n_bins=15)
    assert all(v.defined for v in suite.values())


# ------------------------------------------------------------------------------------------ bootstrap


def test_resample_indices_deterministic_and_stratified():
    y, _ = sample(1, n=300)
    idx = B.resample_indices(y, n_resamples=50, seed=3)
    assert idx.shape == (50, 300)
    assert np.array_equal(idx, B.resample_indices(y, n_resamples=50, seed=3))
    assert not np.array_equal(idx, B.resample_indices(y, n_resamples=50, seed=4))
    assert (y[idx].sum(axis=1) == y.sum()).all()  # every resample keeps the class counts
    assert (y[idx] == y).all()  # column j stays in image j's class
    loose = B.resample_indices(y, n_resamples=50, seed=3, stratified=False)
    assert len(set(y[loose].sum(axis=1).tolist())) > 1


@pytest.mark.parametrize("ties", (False, True))
def test_vectorised_replicates_equal_point_functions(ties):
    y, s = sample(7, n=250, ties=ties)
    for stratified in (True, False):
        idx = B.resample_indices(y, n_resamples=12, seed=1, stratified=stratified)
        replicates = B.replicates_many(tuple(M.METRICS), y, s, idx, threshold=0.45, n_bins=10)
        for name in M.METRICS:
            loop = [M.call_metric(name, y[row], s[row], threshold=0.45, n_bins=10).value for row in idx]
            assert np.allclose(replicates[name], np.array(loop, dtype=float), rtol=0, atol=1e-9), name
            assert np.array_equal(B.bootstrap_replicates(name, y, s, idx, threshold=0.45), replicates[name])


def test_replicates_undefined_are_nan():
    y = np.array([1] * 6 + [0] * 30)
    s = np.linspace(0, 1, 36)
    idx = B.resample_indices(y, n_resamples=200, seed=0, stratified=False)
    replicates = B.bootstrap_replicates("auroc", y, s, idx)
    too_few = y[idx].sum(axis=1) < M.MIN_POSITIVES
    assert too_few.any() and np.isnan(replicates[too_few]).all() and np.isfinite(replicates[~too_few]).all()


def test_bootstrap_intervals():
    y, s = sample(2, n=500, ties=True)
    first = B.bootstrap(y, s, n_resamples=300, seed=5)
    again = B.bootstrap(y, s, n_resamples=300, seed=5)
    assert set(first) == set(M.METRICS)
    for name, interval in first.items():
        assert interval.replicates.shape == (300,)
        assert np.array_equal(interval.replicates, again[name].replicates)
        assert interval.point == M.call_metric(name, y, s)
        if not name.startswith("ece"):  # ECE is biased upward: its percentile interval may lie above the point
            assert interval.low <= interval.point.value <= interval.high, name
    assert first["auroc"].high - first["auroc"].low < 0.15


def test_bootstrap_undefined_point():
    y, s = [0] * 30, np.linspace(0, 1, 30)
    result = B.bootstrap(y, s, metrics=("auroc", "sensitivity", "accuracy"), n_resamples=50)
    for name in ("auroc", "sensitivity"):
        assert result[name].low is None and result[name].high is None and "one class" in result[name].point.reason
        assert np.isnan(result[name].replicates).all()
    assert result["accuracy"].low is not None


def test_bootstrap_group_gap_by_differencing():
    a_y, a_s = sample(3, n=200)
    b_y, b_s = sample(4, n=150)
    gap = (B.bootstrap_replicates("auroc", a_y, a_s, B.resample_indices(a_y, 100, seed=1))
           - B.bootstrap_replicates("auroc", b_y, b_s, B.resample_indices(b_y, 100, seed=2)))
    assert gap.shape == (100,) and np.isfinite(gap).all()


@pytest.mark.parametrize("stratified", (True, False))
def test_resample_counts_count_the_documented_draws(stratified):
    """The draws are one ``integers`` call per class (positives first) on ``Generator(PCG64(seed))``, whatever
    blocks they are drawn in; the counts are the index matrix's per-row bincount."""
    y, _ = sample(5, n=230)
    n_resamples = 2 * B.BLOCK + 37  # blocks of BLOCK, BLOCK and a remainder
    rng = np.random.Generator(np.random.PCG64(8))
    expected = np.empty((n_resamples, len(y)), dtype=int)
    classes = (np.flatnonzero(y == 1), np.flatnonzero(y == 0)) if stratified else (np.arange(len(y)),)
    for members in classes:
        expected[:, members] = members[rng.integers(0, len(members), size=(n_resamples, len(members)))]
    idx = B.resample_indices(y, n_resamples, seed=8, stratified=stratified)
    assert np.array_equal(idx, expected)
    counts = np.array([np.bincount(row, minlength=len(y)) for row in expected])
    assert np.array_equal(B.resample_counts(y, n_resamples, seed=8, stratified=stratified), counts)
    assert np.array_equal(B.resample_weights(idx, len(y)), counts)


def test_group_replicates_equal_point_functions_on_each_resample():
    """Every group of two attributes, computed together, against a loop: the point metric of the group's drawn
    images (with multiplicity) on each resample; and the same numbers when each attribute is computed alone."""
    y, s = sample(9, n=260, ties=True)
    rng = np.random.default_rng(4)
    sex, band = rng.integers(-1, 2, len(y)), rng.integers(-1, 3, len(y))  # -1: in no group
    idx = B.resample_indices(y, n_resamples=B.BLOCK + 15, seed=2)
    resamples = B.Resamples(y, s, B.resample_weights(idx, len(y)))
    together = resamples.attributes([(sex, 2), (band, 3)], threshold=0.45)
    for codes, n_groups, replicates in ((sex, 2, together[0]), (band, 3, together[1])):
        alone = resamples.groups(codes, n_groups, threshold=0.45)
        for k in range(n_groups):
            loop = {name: [] for name in B.GROUP_METRICS}
            for row in idx[::13]:
                drawn = row[codes[row] == k]
                ym, sm = y[drawn], s[drawn]
                specificity = M.specificity(ym, sm, 0.45).value
                loop["positive_rate"].append(np.mean(sm >= 0.45) if len(ym) else None)
                loop["accuracy"].append(M.accuracy(ym, sm, 0.45).value)
                loop["tpr"].append(M.sensitivity(ym, sm, 0.45).value)
                loop["fpr"].append(None if specificity is None else 1 - specificity)
                loop["auroc"].append(M.auroc(ym, sm).value)
                loop["ece"].append(M.ece(ym, sm).value)
            for name in B.GROUP_METRICS:
                assert np.array_equal(replicates[name][:, k], alone[name][:, k], equal_nan=True), name
                assert np.allclose(replicates[name][::13, k], np.array(loop[name], dtype=float), rtol=0, atol=1e-12,
                                   equal_nan=True), name


def test_attributes_without_a_usable_group_give_empty_replicates():
    y, s = sample(2, n=120)
    resamples = B.Resamples(y, s, B.resample_counts(y, 30, seed=1))
    nobody = np.full(len(y), -1)
    alone, mixed = resamples.attributes([(nobody, 0)]), resamples.attributes([(nobody, 0), (np.zeros(len(y)), 1)])
    for name in B.GROUP_METRICS:
        assert alone[0][name].shape == mixed[0][name].shape == (30, 0)
        assert mixed[1][name].shape == (30, 1)


def test_replicates_stay_exact_when_the_sums_outgrow_int32():
    """2 (drawn)**2 above 2**31: the AUROC's integer sums move to int64 and stay exact."""
    rng = np.random.default_rng(12)
    y = (rng.random(33_000) < 0.4).astype(int)
    s = np.round(rng.random(33_000) * 0.6 + 0.3 * y, 3)
    idx = B.resample_indices(y, n_resamples=2, seed=4)
    replicates = B.replicates_many(("auroc", "auprc"), y, s, idx)
    for name in ("auroc", "auprc"):
        loop = [M.call_metric(name, y[row], s[row]).value for row in idx]
        assert np.allclose(replicates[name], loop, rtol=0, atol=1e-12), name
