"""Bootstrap confidence intervals from a point estimate and its replicates, and cheap jackknife values.

Every interval function takes the point estimate (a float, a ``metrics.Value``, or None) and the bootstrap
replicates (``bootstrap.replicates_many``: an array, NaN where the metric is undefined in a resample, left
out) and returns ``(low, high)`` floats, or ``(None, None)`` when the point is undefined (None, an undefined
``Value``, NaN) or no replicate is finite. A null point always gives a null interval.

Methods (alpha = 0.05 gives the 95% interval; q(p) = the p-quantile of the finite replicates, numpy's linear
interpolation; z_p = Phi^-1(p)):

- ``percentile``: ``(q(alpha/2), q(1 - alpha/2))``; what ``bootstrap.percentile_interval`` returns.
- ``basic`` (reverse percentile): ``(2 point - q(1 - alpha/2), 2 point - q(alpha/2))``: reflects the
  replicates around the point, hence corrects a bias the bootstrap reproduces (``bounds`` clips it into the
  metric's range: an ECE interval that would reach below 0 starts at 0).
- ``shifted``: the percentile interval moved by the bootstrap bias estimate ``mean(replicates) - point``,
  i.e. centred on the bias-corrected point ``2 point - mean(replicates)`` (``debiased``), also clipped.
- ``bc`` (bias-corrected percentile): quantiles at ``Phi(2 z0 + z_{alpha/2})``, ``Phi(2 z0 + z_{1-alpha/2})``
  with ``z0 = Phi^-1(share of replicates below the point, ties counting one half)``.
- ``bca`` (bias-corrected and accelerated, Efron 1987): quantiles at
  ``Phi(z0 + (z0 + z_p) / (1 - a (z0 + z_p)))`` for p = alpha/2 and 1 - alpha/2, with the acceleration
  ``a = sum d^3 / (6 (sum d^2)^1.5)`` from the jackknife (leave-one-out) values of the statistic, d = the
  empirical influence (``acceleration``; with ``strata``, as for the label-stratified bootstrap, the influence
  of each stratum is scaled by its own size: the multi-sample form of Efron & Tibshirani 1993, ch. 14.3).

Degenerate cases (documented fall-backs, never an exception):

- all finite replicates equal (a metric that cannot move, e.g. sensitivity 1.0 with every positive found):
  every method returns ``(min(point, c), max(point, c))`` for that common value c;
- ``bc``/``bca`` with z0 infinite (every replicate strictly on one side of the point, so the quantile
  adjustment would pick the most extreme replicate or beyond): fall back to ``basic`` (same ``bounds``); the
  bootstrap then says the estimator is biased by at least the distance to the nearest replicate and the
  reflected interval is the one that corrects it;
- ``bca`` with fewer than 3 finite jackknife values, or all equal (no skewness information): ``a = 0`` (BC);
  ``1 - a (z0 + z_p) <= 0`` (absurd acceleration): the adjusted level is taken as 0 or 1 (the extreme
  replicate), as the limit of the formula.

Jackknife helpers (leave-one-out values of the statistic, O(n) or O(n log n), equal to calling the point
metric of ``metrics`` on the sample without image i, to float rounding; tested):
``jackknife_auroc`` (from ranks: leaving out a positive removes the negatives it outscores from U),
``jackknife_auprc`` (prefix and suffix sums over the distinct scores, O(n log n)),
``jackknife_confusion`` (accuracy, sensitivity, specificity, f1, closed form from the confusion matrix),
``jackknife_calibration`` (ece / ece_15 / ece_top_label from per-bin sums), ``jackknife_brier``;
``jackknife_values(name, ...)`` dispatches and falls back to n calls of the point metric (``metric_jackknife``
also knows the group metrics positive_rate, tpr, fpr);
``group_jackknife`` combines the groups' values for a gap (max-min, signed difference, equalized odds).
Leave-one-out AUROC ignores ``min_positives`` (a value is needed for the acceleration even when a group
drops to 4 positives).

The tables' intervals: ``interval(name, point, replicates, y, s)`` by the metric's chosen method (below),
``signed_difference`` for the signed two-group difference and ``gap_interval`` for the max-min gaps, the
equalized-odds gap and the worst-group AUROC.

Choice per metric (``CHOICE``). Evidence: ``bench/coverage.py`` (results and the full table in
``bench/results/coverage_cpu_2core.md`` / ``.json``): known truth, 500 datasets per cell, 1000 stratified
resamples, n = 30/100/300/1000, prevalence 5/20/50%; rule = the method with the most cells in the 92-98% band.
Coverage below as "mean over the defined cells (cells in band / defined cells)":

- AUROC: ``bca`` (93.4%, 9/11; percentile 92.0%, 8/11). Undefined at n = 30, 5% (< 5 positives); no method
  reaches the band at n = 100, 5% (5 positives; best bca 84.4%, percentile 81.2%).
- AUPRC: ``bca`` (92.1%, 6/11; the rule's tie-break picked ``shifted``, 91.3%, 6/11; percentile 90.8%, 5/11).
- accuracy ``bca`` (94.8%, 12/12), sensitivity ``bca`` (88.2%, 9/12; the misses are 2-5 positives, where
  every method is equal), specificity ``bca`` (94.8%, 12/12, tied with bc), Brier ``bca`` (90.7%, 18/24).
- F1: ``basic`` (93.6%, 11/12; percentile 91.0%, 9/12: F1 is biased at low prevalence).
- ECE, ECE-15, top-label ECE: ``basic``. The plug-in ECE is biased upward; on calibrated scores (truth 0)
  every replicate is > 0, so percentile, BC and BCa cover 0-0.6% at every n; ``basic`` (clipped at 0) covers
  26-76% there and 55-93% on overconfident scores (truth 0.03-0.10), where percentile covers 8-94%. Means:
  ece basic 69.7% vs percentile 26.8% / bca 37.7%; ece_15 56.7% vs 17.2% / 31.8%; top-label 77.4% vs
  36.3% / 40.7% (the rule picked ``shifted`` for top-label, 4/24 cells vs 3/24, but with mean 49.0%).
  NO method reaches the band for ECE except at n = 1000 on overconfident scores: an ECE interval is
  optimistic (too narrow / too high) and should be read as such.
- max-min gaps (simulated with the tables' design: the whole test set resampled once by label, each group's
  metric on its drawn images): no method is reliable, since the right one depends on the unknown truth.
  When the groups are equal (truth 0, on the boundary) percentile covers 0-10% at n >= 100 (its interval almost
  never contains 0, so it cannot show "no gap") and ``basic`` 92-97%; when they differ (truth 0.15) percentile
  covers 94-96% and ``basic`` 76-94%. Rule: TPR gap ``percentile`` (11/24, tied with basic), equalized-odds gap
  ``shifted`` (10/24; 56-84% when the groups are equal). For inference on "is there a gap" use the signed
  two-group difference.
- signed two-group difference: ``bca`` 19/24, bc 18/24, percentile and basic 17/24, with the same mean (86.6%
  vs 86.9%); the misses are groups with 1-3 positives (TPR in steps of 1/3 or coarser), where no method can
  cover. ``signed_difference`` (used by ``tables._difference_row``): each group's leave-one-out values on its
  own images, combined by ``group_jackknife``, label strata, basic fall-back clipped to [-1, 1].
- worst-group AUROC: not simulated; ``percentile`` (unchanged).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.special import ndtr, ndtri

from focus_dagster.evaluation.metrics import (
    Value,
    as_arrays,
    as_labels,
    as_probabilities,
    bin_index,
    call_metric,
    top_label,
)

Pair = tuple[float | None, float | None]
NULL: Pair = (None, None)

# The method per metric of ``tables``' rows (metric name -> interval function name); see the module docstring.
CHOICE = {
    "auroc": "bca", "auprc": "bca", "accuracy": "bca", "sensitivity": "bca", "specificity": "bca",
    "f1": "basic", "brier": "bca", "ece": "basic", "ece_15": "basic", "ece_top_label": "basic",
    "max_min_gap": "percentile", "equalized_odds_gap": "shifted", "signed_gap": "bca",
    "worst_group_auroc": "percentile",
}


# ------------------------------------------------------------------------------------------------ inputs


def point_value(point) -> float | None:
    """The point as a float, or None when it is undefined (None, an undefined ``Value``, NaN / inf)."""
    if isinstance(point, Value):
        point = point.value
    if point is None:
        return None
    point = float(point)
    return point if math.isfinite(point) else None


def sorted_finite(replicates) -> np.ndarray:
    """The finite replicates, ascending, as a 1-D float array (NaN = undefined in that resample: left out)."""
    values = np.asarray(replicates, dtype=np.float64).ravel()
    return np.sort(values[np.isfinite(values)])


def _prepare(point, replicates) -> tuple[float | None, np.ndarray]:
    """``(point as a float, sorted finite replicates)``; the point is None when undefined or nothing is finite."""
    theta = point_value(point)
    finite = sorted_finite(replicates)
    return (theta, finite) if theta is not None and finite.size else (None, finite)


def _clip(low: float, high: float, bounds) -> Pair:
    if bounds is not None:
        low, high = min(max(low, bounds[0]), bounds[1]), min(max(high, bounds[0]), bounds[1])
    return float(low), float(high)


def _constant(theta: float, finite: np.ndarray) -> Pair | None:
    """The interval when every finite replicate is the same value c: ``(min(point, c), max(point, c))``."""
    if finite.min() == finite.max():
        c = float(finite[0])
        return min(theta, c), max(theta, c)
    return None


# ---------------------------------------------------------------------------------------------- methods


def linear_quantiles(ordered: np.ndarray, q) -> list[float]:
    """``np.quantile(values, q)`` (linear interpolation) of the values sorted ascending in ``ordered``, for a few
    levels ``q``: numpy's arithmetic step by step on Python floats (the same IEEE operations, hence the same
    numbers), without numpy's per-call sort and its overhead on two-element arrays (``ordered`` finite and
    not empty)."""
    last = ordered.size - 1
    out = []
    for level in q:
        virtual = last * float(level)
        if virtual >= last:  # numpy's clipping at the ends
            out.append(float(ordered[last]))
            continue
        if virtual < 0:
            out.append(float(ordered[0]))
            continue
        lower = math.floor(virtual)
        gamma = virtual - lower
        a, b = float(ordered[lower]), float(ordered[lower + 1])
        diff = b - a
        out.append(b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma)
    return out


def _quantiles(point, replicates, alpha: float):
    """``(settled, (theta, finite, q(alpha/2), q(1 - alpha/2)))``: ``settled`` is the final interval when the
    point is undefined or the replicates are constant (then the second item is None)."""
    theta, finite = _prepare(point, replicates)
    if theta is None:
        return NULL, None
    if (constant := _constant(theta, finite)) is not None:
        return constant, None
    low, high = linear_quantiles(finite, [alpha / 2, 1 - alpha / 2])
    return None, (theta, finite, float(low), float(high))


def percentile(point, replicates, alpha: float = 0.05) -> Pair:
    """``(q(alpha/2), q(1 - alpha/2))`` of the finite replicates; ``(None, None)`` for an undefined point."""
    settled, found = _quantiles(point, replicates, alpha)
    return settled if found is None else found[2:]


def basic(point, replicates, alpha: float = 0.05, bounds: tuple[float, float] | None = None) -> Pair:
    """Reverse percentile ``(2 point - q(1 - alpha/2), 2 point - q(alpha/2))``, clipped into ``bounds``."""
    settled, found = _quantiles(point, replicates, alpha)
    if found is None:
        return settled
    theta, _, low, high = found
    return _clip(2 * theta - high, 2 * theta - low, bounds)


def debiased(point, replicates) -> float | None:
    """The bootstrap bias-corrected point ``2 point - mean(replicates)`` (None for an undefined point)."""
    theta, finite = _prepare(point, replicates)
    return None if theta is None else float(2 * theta - finite.mean())


def shifted(point, replicates, alpha: float = 0.05, bounds: tuple[float, float] | None = None) -> Pair:
    """The percentile interval moved by the bootstrap bias ``mean(replicates) - point``, clipped into ``bounds``."""
    settled, found = _quantiles(point, replicates, alpha)
    if found is None:
        return settled
    theta, finite, low, high = found
    bias = finite.mean() - theta
    return _clip(low - bias, high - bias, bounds)


def bias_z0(point, replicates) -> float | None:
    """``Phi^-1(share of finite replicates below the point, ties counting one half)``; +-inf when every
    replicate lies strictly on one side; None for an undefined point."""
    theta, finite = _prepare(point, replicates)
    return None if theta is None else _z0(theta, finite)


def _z0(theta: float, finite: np.ndarray) -> float:
    """z0 from the finite replicates sorted ascending (``_prepare``): the counts below and equal by bisection."""
    below, through = np.searchsorted(finite, theta, "left"), np.searchsorted(finite, theta, "right")
    share = (below + 0.5 * (through - below)) / finite.size
    return float(ndtri(share))


def acceleration(jackknife, strata=None) -> float:
    """BCa acceleration ``sum u^3 / (6 (sum u^2)^1.5)`` from leave-one-out values of the statistic.

    ``u_i = (mean_k - jackknife_i) / n_k`` within the stratum k of image i (``strata``: a label per value;
    None = one stratum); the factor (n_k - 1) of the influence cancels in one stratum and is omitted.
    Non-finite jackknife values are left out; 0 when fewer than 3 remain or they are all equal.
    """
    values = np.asarray(jackknife, dtype=np.float64).ravel()
    if strata is None:
        groups = np.zeros(values.size, dtype=np.intp)
    else:
        groups = np.asarray(strata).ravel()
        if not (np.issubdtype(groups.dtype, np.integer) and groups.size and 0 <= groups.min() and groups.max() < 64):
            groups = np.unique(groups, return_inverse=True)[1]
    keep = np.isfinite(values)
    values, groups = values[keep], groups[keep]
    if values.size < 3:
        return 0.0
    n_k = np.bincount(groups)
    mean_k = np.bincount(groups, values) / np.maximum(n_k, 1)
    n_i = n_k[groups]
    u = np.where(n_i > 1, (n_i - 1) * (mean_k[groups] - values) / n_i.astype(np.float64) ** 2, 0.0)
    denominator = np.sum(u**2)
    if denominator <= 0:
        return 0.0
    return float(np.sum(u**3) / (6.0 * denominator**1.5))


def _adjusted_quantiles(finite: np.ndarray, z0: float, a: float, alpha: float) -> Pair:
    levels = []
    for p in (alpha / 2, 1 - alpha / 2):
        z = z0 + ndtri(p)
        denominator = 1 - a * z
        if denominator <= 0:
            levels.append(1.0 if z > 0 else 0.0)
        else:
            levels.append(float(ndtr(z0 + z / denominator)))
    low, high = linear_quantiles(finite, levels)  # finite: sorted (``_prepare``)
    return float(low), float(high)


def bc(point, replicates, alpha: float = 0.05, bounds: tuple[float, float] | None = None) -> Pair:
    """Bias-corrected percentile interval (BCa with a = 0); falls back to ``basic`` when z0 is infinite."""
    return bca(point, replicates, None, alpha, bounds=bounds)


def bca(point, replicates, jackknife, alpha: float = 0.05, *, strata=None,
        bounds: tuple[float, float] | None = None) -> Pair:
    """Bias-corrected and accelerated interval; ``jackknife`` = leave-one-out values of the statistic
    (None: a = 0, i.e. ``bc``), ``strata`` = their strata for the acceleration. Falls back to ``basic``
    (clipped into ``bounds``) when every replicate lies strictly on one side of the point."""
    theta, finite = _prepare(point, replicates)
    if theta is None:
        return NULL
    if (constant := _constant(theta, finite)) is not None:
        return constant
    z0 = _z0(theta, finite)
    if not math.isfinite(z0):
        return basic(theta, finite, alpha, bounds)
    a = 0.0 if jackknife is None else acceleration(jackknife, strata)
    return _adjusted_quantiles(finite, z0, a, alpha)


METHODS: dict[str, Callable] = {"percentile": percentile, "basic": basic, "shifted": shifted, "bc": bc, "bca": bca}

# A group metric of ``tables`` and the metric whose evidence (and jackknife) it shares.
GROUP_METRIC_AS = {"tpr": "sensitivity", "fpr": "specificity", "positive_rate": "accuracy"}
UNIT_RANGE = (0.0, 1.0)  # every metric of the tables lies in [0, 1]: a reflected interval is clipped to it
SIGNED_RANGE = (-1.0, 1.0)  # so a difference of two of them lies in [-1, 1]


def interval(name: str, point, replicates, y_true, y_score, *, threshold: float = 0.5, alpha: float = 0.05) -> Pair:
    """The interval of metric ``name`` (a ``metrics.METRICS`` name, or a group metric: positive_rate, tpr, fpr)
    by its chosen method (``CHOICE``) on the sample ``y_true``/``y_score`` its replicates were drawn from
    (label-stratified): BCa takes the jackknife values and the label strata from it."""
    def influence():
        return metric_jackknife(name, y_true, y_score, threshold), label_strata(y_true)

    return _by_method(CHOICE[GROUP_METRIC_AS.get(name, name)], point, replicates, alpha, UNIT_RANGE, influence)


def signed_difference(name: str, points, replicates, samples, *, threshold: float = 0.5, alpha: float = 0.05
                      ) -> Pair:
    """The interval of group a's metric ``name`` minus group b's (``points``: the two groups' values;
    ``replicates``: the difference on each of the shared resamples) by the method of ``CHOICE["signed_gap"]``.
    ``samples``: the two groups' ``(y_true, y_score)``. BCa: leaving out an image changes only its own
    group's metric (``group_jackknife`` of the groups' leave-one-out values), with the images' labels as the
    strata (the whole set is resampled by label), as in the coverage simulation."""
    a, b = (point_value(p) for p in points)
    point = None if a is None or b is None else a - b

    def influence():
        jackknives = [metric_jackknife(name, y, s, threshold) for y, s in samples]
        strata = label_strata(np.concatenate([as_labels(y) for y, _ in samples]))
        return group_jackknife(lambda v: v[:, 0] - v[:, 1], [a, b], jackknives), strata

    return _by_method(CHOICE["signed_gap"], point, replicates, alpha, SIGNED_RANGE, influence)


def gap_interval(name: str, point, replicates, *, alpha: float = 0.05) -> Pair:
    """The interval of a gap over groups (``max_min_gap``, ``equalized_odds_gap``, ``worst_group_auroc``) by the
    method of ``CHOICE[name]`` from its ``replicates`` (the gap on each shared resample, NaN where undefined).
    These gaps have no jackknife here, so a CHOICE of BCa for one of them is refused."""
    def influence():
        raise ValueError(f"intervals.CHOICE[{name!r}] is 'bca', but a gap over groups has no jackknife: "
                         f"choose one of {sorted(set(METHODS) - {'bca'})}")

    return _by_method(CHOICE[name], point, replicates, alpha, UNIT_RANGE, influence)


def _by_method(method: str, point, replicates, alpha: float, bounds: tuple[float, float],
               influence: Callable[[], tuple[np.ndarray, np.ndarray]]) -> Pair:
    """The interval by ``method``; BCa asks ``influence()`` for its jackknife values and strata (only then, and
    only for a defined point: they cost more than the rest)."""
    if method == "bca":
        if point_value(point) is None:
            return NULL
        jackknife, strata = influence()
        return bca(point, replicates, jackknife, alpha, strata=strata, bounds=bounds)
    if method == "percentile":
        return percentile(point, replicates, alpha)
    return METHODS[method](point, replicates, alpha, bounds)


def metric_jackknife(name: str, y_true, y_score, threshold: float = 0.5) -> np.ndarray:
    """Leave-one-out values of metric ``name`` as ``interval`` names it (group metrics included)."""
    if name in GROUP_METRIC_AS:
        return jackknife_confusion(name, y_true, y_score, threshold)
    return jackknife_values(name, y_true, y_score, threshold=threshold)


# -------------------------------------------------------------------------------------------- jackknife


def jackknife_auroc(y_true, y_score) -> np.ndarray:
    """Leave-one-out AUROC (Mann-Whitney, ties one half) for every image, O(n log n); NaN where the sample
    without that image has one class. ``min_positives`` is not applied."""
    y, s = as_arrays(y_true, y_score)
    pos, neg = np.sort(s[y]), np.sort(s[~y])
    n_pos, n_neg = len(pos), len(neg)
    out = np.full(len(y), np.nan)
    if n_pos == 0 or n_neg == 0:
        return out
    # for a positive: negatives it outscores (ties one half); for a negative: positives that outscore it
    beats = np.where(y, np.searchsorted(neg, s, "left") + 0.5 * (np.searchsorted(neg, s, "right")
                                                                  - np.searchsorted(neg, s, "left")),
                     n_pos - np.searchsorted(pos, s, "right") + 0.5 * (np.searchsorted(pos, s, "right")
                                                                       - np.searchsorted(pos, s, "left")))
    u = beats[y].sum()
    remaining = np.where(y, (n_pos - 1) * n_neg, n_pos * (n_neg - 1)).astype(np.float64)
    np.divide(u - beats, remaining, out=out, where=remaining > 0)
    return out


def _ratio(numerator, denominator) -> np.ndarray:
    numerator, denominator = np.broadcast_arrays(np.asarray(numerator, float), np.asarray(denominator, float))
    out = np.full(numerator.shape, np.nan)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def jackknife_confusion(name: str, y_true, y_score, threshold: float = 0.5) -> np.ndarray:
    """Leave-one-out accuracy / sensitivity / specificity / f1 (closed form); NaN where undefined."""
    y, s = as_arrays(y_true, y_score)
    cell = 2 * y + (s >= threshold)  # 0 = TN, 1 = FP, 2 = FN, 3 = TP
    # the count without image i: one less where image i is in that cell
    loo = np.bincount(cell, minlength=4).astype(np.float64)[:, None] - (cell == np.arange(4)[:, None])
    tn, fp, fn, tp = loo
    if name == "accuracy":
        return _ratio(tp + tn, tp + tn + fp + fn)
    if name in ("sensitivity", "tpr"):
        return _ratio(tp, tp + fn)
    if name == "specificity":
        return _ratio(tn, tn + fp)
    if name == "fpr":
        return _ratio(fp, tn + fp)
    if name == "f1":
        return _ratio(2 * tp, 2 * tp + fp + fn)
    if name == "positive_rate":
        return _ratio(tp + fp, tp + tn + fp + fn)
    raise KeyError(f"no closed-form jackknife for {name!r}")


def jackknife_calibration(y_true, y_score, n_bins: int = 10, top: bool = False) -> np.ndarray:
    """Leave-one-out ECE (reliability form, or top-label with ``top``) from per-bin sums, O(n)."""
    y, s = as_probabilities(y_true, y_score)
    confidence, outcome = top_label(y, s) if top else (s, y.astype(np.float64))
    bins = bin_index(confidence, n_bins)
    gap = np.bincount(bins, confidence, n_bins + 1) - np.bincount(bins, outcome, n_bins + 1)
    total = np.abs(gap).sum()
    without = total - np.abs(gap[bins]) + np.abs(gap[bins] - (confidence - outcome))
    return _ratio(without, np.full(len(y), len(y) - 1.0))


def jackknife_brier(y_true, y_score) -> np.ndarray:
    """Leave-one-out Brier score."""
    y, s = as_probabilities(y_true, y_score)
    error = (s - y) ** 2
    return _ratio(error.sum() - error, np.full(len(y), len(y) - 1.0))


def jackknife_auprc(y_true, y_score) -> np.ndarray:
    """Leave-one-out average precision (``metrics.auprc``'s step-wise AP, a step per distinct score), O(n log n).

    With the distinct scores g from the highest, pos_g positives and count_g images, TP_g and D_g their
    cumulative sums: AP * P = sum_g pos_g * TP_g / D_g. Leaving out an image of label l from step h leaves
    the steps above h alone, makes step h (pos_h - l) (TP_h - l) / (D_h - 1), and every step g below h
    pos_g (TP_g - l) / (D_g - 1): a prefix sum, one term and a suffix sum (one per label), over P - l.
    NaN where no positive or no negative is left; ``min_positives`` is not applied."""
    y, s = as_arrays(y_true, y_score)
    out = np.full(len(y), np.nan)
    if len(y) < 2:
        return out
    step = np.unique(-s, return_inverse=True)[1].reshape(-1)  # step 0 = the highest score
    n_steps, label = int(step.max()) + 1, y.astype(np.float64)
    pos = np.bincount(step, label, n_steps)
    true_pos, drawn = np.cumsum(pos), np.cumsum(np.bincount(step, minlength=n_steps)).astype(np.float64)
    terms = pos * true_pos / drawn
    above = np.cumsum(terms) - terms  # the steps before each step, unchanged
    # the steps after each step, without a negative (0) or a positive (1); drawn - 1 >= 1 there
    below = [_suffix_after(_ratio(pos * (true_pos - removed), drawn - 1)) for removed in (0.0, 1.0)]
    own = _ratio((pos[step] - label) * (true_pos[step] - label), drawn[step] - 1)
    own[drawn[step] == 1] = 0.0  # the top step emptied: no step there
    total = above[step] + own + np.where(y, below[1][step], below[0][step])
    values = _ratio(total, pos.sum() - label)
    if (~y).sum() == 1:  # without the only negative one class is left: undefined, as for the point metric
        values[~y] = np.nan
    return values


def _suffix_after(values: np.ndarray) -> np.ndarray:
    """Entry h: the sum of ``values`` after h (0 for the last), NaN entries counted as 0 (only the top step's
    can be NaN, and it never lies after another)."""
    values = np.nan_to_num(values)
    return np.cumsum(values[::-1])[::-1] - values


def jackknife_values(name: str, y_true, y_score, *, threshold: float = 0.5, n_bins: int = 10) -> np.ndarray:
    """Leave-one-out values of metric ``name`` (of ``metrics.METRICS``), NaN where undefined: closed forms
    where there are some, otherwise n calls of the point metric (O(n^2))."""
    if name == "auroc":
        return jackknife_auroc(y_true, y_score)
    if name == "auprc":
        return jackknife_auprc(y_true, y_score)
    if name in ("accuracy", "sensitivity", "specificity", "f1"):
        return jackknife_confusion(name, y_true, y_score, threshold)
    if name in ("ece", "ece_15", "ece_top_label"):
        return jackknife_calibration(y_true, y_score, 15 if name == "ece_15" else n_bins, top=name == "ece_top_label")
    if name == "brier":
        return jackknife_brier(y_true, y_score)
    y, s = as_arrays(y_true, y_score)
    keep = np.ones(len(y), dtype=bool)
    out = np.full(len(y), np.nan)
    for i in range(len(y)):
        keep[i] = False
        value = call_metric(name, y[keep], s[keep], threshold=threshold, n_bins=n_bins, min_positives=1)
        out[i] = np.nan if value.value is None else value.value
        keep[i] = True
    return out


def group_jackknife(combine: Callable[[np.ndarray], np.ndarray], points: Sequence, jackknives: Sequence
                    ) -> np.ndarray:
    """Leave-one-out values of a statistic of several groups' metrics (a gap), image by image, groups in order.

    ``points[g]``: group g's metric value(s) (a float, or an array [k] for several metrics);
    ``jackknives[g]``: its leave-one-out values ([n_g] or [n_g, k]); ``combine`` maps an array
    [m, groups] (or [m, groups, k]) to [m]. Leaving out an image of group g changes only group g's values.
    E.g. max-min: ``lambda v: v.max(1) - v.min(1)``; signed: ``lambda v: v[:, 0] - v[:, 1]``.
    """
    base = np.asarray([np.asarray(p, dtype=np.float64) for p in points])
    out = []
    for g, values in enumerate(jackknives):
        values = np.asarray(values, dtype=np.float64)
        stack = np.repeat(base[None], len(values), axis=0)
        stack[:, g] = values
        out.append(np.asarray(combine(stack), dtype=np.float64))
    return np.concatenate(out) if out else np.empty(0)


def label_strata(*labels) -> np.ndarray:
    """Strata for ``acceleration`` of a (grouped) label-stratified bootstrap: ``2 * group + label``."""
    return np.concatenate([2 * g + as_labels(y).astype(np.intp) for g, y in enumerate(labels)])
