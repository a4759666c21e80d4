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


# ------------------------------------------------------------------------- edges, written out by hand


def test_bad_input_is_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match=r"^y_true must be 1-D, got shape \(2, 2\)$"):
        M.accuracy([[0, 1], [1, 0]], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"^y_true must hold only 0 and 1, got \[0, 1, 2, 3, 4, 5, 6, 7, 8, 9\]$"):
        M.accuracy(list(range(12)), [0.5] * 12)  # at most the ten smallest distinct values are listed
    for scores, shape in (([[0.1], [0.2], [0.3]], r"\(3, 1\)"), ([0.1, 0.2], r"\(2,\)")):
        with pytest.raises(ValueError, match=r"^y_true and y_score must be 1-D and of equal length, got shapes "
                                             rf"\(3,\) and {shape}$"):
            M.auroc([0, 1, 1], scores)
    with pytest.raises(ValueError, match=r"^y_score has 2 value\(s\) outside \[0, 1\], e\.g\. -0\.5 at index 1: "
                                         "calibration metrics need probabilities$"):
        M.brier([0, 1, 0], [0.2, -0.5, 1.5])
    for n_bins in (0, 2.5):
        with pytest.raises(ValueError, match=rf"^n_bins must be a positive integer, got {n_bins}$"):
            M.ece([0, 1], [0.2, 0.7], n_bins=n_bins)
    with pytest.raises(KeyError, match="unknown metric 'aurox'; known: auroc, auprc, accuracy, sensitivity, "
                                       "specificity, f1, ece, ece_15, ece_top_label, brier"):
        M.call_metric("aurox", [0, 1], [0.2, 0.7])


def test_true_false_scores_rank_like_one_and_zero():
    """A hard classifier's yes/no answers (booleans) are scores 1.0 / 0.0, as scikit-learn reads them."""
    y = np.array([1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0])
    hard = np.array([True, True, True, False, True, False, False, True, False, False, False, False])
    assert M.auroc(y, hard).value == pytest.approx(roc_auc_score(y, hard.astype(float)))
    assert M.auprc(y, hard).value == pytest.approx(average_precision_score(y, hard.astype(float)))
    assert M.youden_threshold(y, hard).value == 1.0


def test_too_few_of_a_class_names_which_and_the_metric():
    y = [1] * 5 + [0] * 3
    s = np.linspace(0, 1, 8)
    assert M.auroc(y, s).reason == "too few negatives for auroc: 3 < minimum 5 (n=8, positives=5)"
    assert M.auprc(1 - np.array(y), s).reason == "too few positives for auprc: 3 < minimum 5 (n=8, positives=3)"


def test_youden_threshold_edges_against_roc_curve():
    assert M.youden_threshold([], []) == M.Value(None, "empty input")
    assert M.youden_threshold([1], [0.3]) == M.Value(None, "only one class in y_true (n=1, positives=1)")
    one_negative = ([1, 1, 0, 1, 1], [0.9, 0.7, 0.6, 0.4, 0.2])
    assert M.youden_threshold(*one_negative).value == sklearn_youden(*one_negative) == 0.7
    # a scorer ranking every negative first: every J < 0 but the lowest score's (TPR = FPR = 1, J = 0)
    inverted = ([0, 0, 1, 1], [0.9, 0.8, 0.3, 0.1])
    assert M.youden_threshold(*inverted).value == sklearn_youden(*inverted) == 0.1


def test_f1_is_zero_not_undefined_when_no_positive_is_found():
    # tp 0, fp 1, fn 1: 2 * 0 / (0 + 1 + 1) = 0, defined
    assert M.f1([1, 0, 0], [0.2, 0.7, 0.1]) == M.Value(0.0)
    assert f1_score([1, 0, 0], [0, 1, 0]) == 0.0


def test_top_label_counts_a_score_of_one_half_as_a_positive_prediction():
    # p = 0.5 and 0.55, both labelled 1: predicted positive (p >= 0.5), both right; confidences .5 and .55 in
    # bin 5: |1.05 - 2| / 2 = 0.475 (if 0.5 were a negative prediction: |1.05 - 1| / 2 = 0.025)
    assert M.ece_top_label([1, 1], [0.5, 0.55]).value == pytest.approx(0.475, abs=1e-12)


def test_ece_bins_lists_every_bin_even_the_empty_top_ones():
    table = M.ece_bins([0, 1, 1], [0.05, 0.15, 0.15])  # 10 bins by default: 11 entries
    assert {k: table[k] for k in ("n_bins", "n", "count", "mean_label")} == {
        "n_bins": 10, "n": 3, "count": [1, 2] + [0] * 9, "mean_label": [0.0, 1.0] + [None] * 9}
    assert table["mean_score"][:2] == pytest.approx([0.05, 0.15]) and table["mean_score"][2:] == [None] * 9
    assert table["upper"] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0])


def test_compute_all_passes_its_options_and_defaults_to_one_half_and_ten_bins():
    torch = pytest.importorskip("torch")
    from torchmetrics.functional.classification import binary_calibration_error

    y, s = sample(3)

    def torchmetrics_ece(n_bins):
        return binary_calibration_error(torch.tensor(s), torch.tensor(y), n_bins=n_bins, norm="l1").item()

    default = M.compute_all(y, s)
    assert default["accuracy"].value == pytest.approx(accuracy_score(y, s >= 0.5))
    assert default["ece"].value == pytest.approx(torchmetrics_ece(10), abs=1e-9)
    assert M.compute_all(y, s, n_bins=4)["ece"].value == pytest.approx(torchmetrics_ece(4), abs=1e-9)
    few = ([1, 1, 1, 0, 0, 0, 0, 0], [0.9, 0.4, 0.6, 0.5, 0.1, 0.2, 0.3, 0.45])
    assert M.compute_all(*few)["auroc"].value is None
    assert M.compute_all(*few, min_positives=3)["auroc"].value == pytest.approx(roc_auc_score(*few))
