"""Seeded, stratified, vectorised bootstrap: 95% percentile intervals for the metrics in ``metrics``.

A resample draws, with replacement, as many images as the sample has; stratified (the default), it draws
the positives from the positives and the negatives from the negatives, so every resample keeps the
sample's class counts (and column j of the index matrix keeps image j's label). Indices come from
``numpy.random.Generator(PCG64(seed))``: the same seed gives the same resamples, hence the same intervals.

The interval is the percentile interval (``alpha / 2`` and ``1 - alpha / 2`` quantiles, numpy's linear
interpolation) of the replicates where the metric is defined; a replicate where it is undefined (say an
unstratified resample with one class) is NaN and left out. When the point estimate itself is undefined,
so is the interval (``low = high = None``; the point's ``reason`` says why).

Vectorised: all R resamples of a metric are computed at once, without a Python loop over resamples. A
resample is represented by how often it draws each image: per-row ``bincount`` of the indices (each row
offset by its number so that one ``bincount`` serves the whole [R, n] matrix) of a key precomputed per
image, then sums. Which key:

- AUROC / AUPRC: the image's distinct-score rank (the tie group, from one sort of the sample) and label.
  Per resample this gives the positives and negatives at each distinct score in ascending order, from
  which AUROC = sum over groups of pos_g * (neg below g + neg_g / 2) / (P * N) (midranks: a tie counts
  one half), and AP = sum_g pos_g / P * TP_g / count_g over the groups from the top down (a step per
  distinct score, as scikit-learn).
- accuracy, sensitivity, specificity, F1: label and prediction (the confusion matrix per resample).
- ECE (each form): the bin, with the score (or confidence) and the label (or correctness) as bincount
  weights: per-bin sums S_b and Y_b give ECE = sum_b |S_b - Y_b| / N.
- Brier: the mean of the per-image squared error over the drawn indices.

Each replicate equals the point function of ``metrics`` applied to the same resample (to float rounding).
Resamples are processed in chunks of ``CHUNK`` rows so that memory stays small (1000 x 5000 images: tens
of MB).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from focus_dagster.evaluation.metrics import (
    METRICS,
    MIN_POSITIVES,
    THRESHOLD_METRICS,
    Value,
    as_arrays,
    as_labels,
    as_probabilities,
    bin_index,
    call_metric,
    top_label,
)

CHUNK = 200  # resamples per vectorised block: bounds the temporary [CHUNK, n] arrays
DEFAULT_METRICS = tuple(METRICS)
CALIBRATION_METRICS = ("ece", "ece_15", "ece_top_label", "brier")


@dataclass(frozen=True, eq=False)
class Interval:
    """A point estimate with its bootstrap percentile interval and the replicates behind it.

    ``low``/``high`` are None when the point is undefined (see ``point.reason``) or no replicate is defined;
    ``replicates`` holds the R resampled values, NaN where the metric is undefined in a resample.
    """

    point: Value
    low: float | None
    high: float | None
    replicates: np.ndarray = field(repr=False)


def resample_indices(y_true, n_resamples: int = 1000, seed: int = 0, stratified: bool = True) -> np.ndarray:
    """Bootstrap indices ``[n_resamples, n]`` into the sample, drawn with ``Generator(PCG64(seed))``.

    Stratified: column j draws among the images of image j's class, so each resample has the sample's
    positives and negatives counts. Unstratified: every column draws among all n images.
    """
    y = as_labels(y_true)
    rng = np.random.Generator(np.random.PCG64(seed))
    n = len(y)
    if n == 0:
        return np.empty((n_resamples, 0), dtype=np.intp)
    if not stratified:
        return rng.integers(0, n, size=(n_resamples, n))
    idx = np.empty((n_resamples, n), dtype=np.intp)
    for members in (np.flatnonzero(y), np.flatnonzero(~y)):  # the two classes, each drawn at once
        if len(members):
            idx[:, members] = members[rng.integers(0, len(members), size=(n_resamples, len(members)))]
    return idx


def row_bincount(keys: np.ndarray, n_keys: int, weights: np.ndarray | None = None) -> np.ndarray:
    """``bincount`` of each row of ``keys`` [r, m] (values < n_keys) at once: [r, n_keys], float64.

    Row i's keys are shifted by ``i * n_keys`` so that a single flat bincount keeps the rows apart.
    """
    rows = keys.shape[0]
    shifted = keys + (n_keys * np.arange(rows))[:, None]
    flat = np.bincount(shifted.ravel(), None if weights is None else weights.ravel(), minlength=rows * n_keys)
    return flat.reshape(rows, n_keys).astype(np.float64, copy=False)


class _Sample:
    """Per-image keys computed once for the whole bootstrap, gathered per resample by index."""

    def __init__(self, y: np.ndarray, s: np.ndarray, threshold: float, n_bins: int, min_positives: int):
        self.y, self.s = y, s
        self.threshold, self.n_bins, self.min_positives = threshold, n_bins, min_positives

    @cached_property
    def ranking_key(self) -> tuple[np.ndarray, int]:
        """``2 * tie group + label`` (groups = distinct scores, ascending) and the number of groups."""
        distinct, group = np.unique(self.s, return_inverse=True)
        return group * 2 + self.y, len(distinct)

    @cached_property
    def confusion_key(self) -> np.ndarray:
        """``2 * label + prediction``: 0 = TN, 1 = FP, 2 = FN, 3 = TP."""
        return 2 * self.y + (self.s >= self.threshold)

    @cached_property
    def squared_error(self) -> np.ndarray:
        return (self.s - self.y) ** 2

    def calibration(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """``(bin, confidence, outcome, n_bins)`` per image for ``ece``, ``ece_15`` or ``ece_top_label``."""
        return self._calibration[name]

    def calibration_gap(self, name: str) -> np.ndarray:
        """``confidence - outcome`` per image for the calibration form ``name``."""
        return self._calibration_gaps[name]

    @cached_property
    def _calibration_gaps(self) -> dict:
        return {name: confidence - outcome for name, (_, confidence, outcome, _) in self._calibration.items()}

    @cached_property
    def _calibration(self) -> dict:
        reliability = (self.s, self.y.astype(np.float64))
        forms = {"ece": (reliability, self.n_bins), "ece_15": (reliability, 15),
                 "ece_top_label": (top_label(self.y, self.s), self.n_bins)}
        return {name: (bin_index(values[0], n_bins), *values, n_bins) for name, (values, n_bins) in forms.items()}


class _Chunk:
    """A block of resamples (``idx`` [r, m]) of a ``_Sample``, with the per-resample counts the kernels share."""

    def __init__(self, sample: _Sample, idx: np.ndarray):
        self.sample, self.idx = sample, idx
        self.size = idx.shape[1]

    @cached_property
    def ranking(self) -> tuple[np.ndarray, np.ndarray]:
        """Negatives and positives drawn at each distinct score, ascending: two [r, groups] arrays."""
        key, n_groups = self.sample.ranking_key
        counts = row_bincount(key[self.idx], 2 * n_groups).reshape(len(self.idx), n_groups, 2)
        return counts[:, :, 0], counts[:, :, 1]

    @cached_property
    def confusion(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(tn, fp, fn, tp)`` per resample."""
        counts = row_bincount(self.sample.confusion_key[self.idx], 4)
        return counts[:, 0], counts[:, 1], counts[:, 2], counts[:, 3]

    def ranking_defined(self, n_pos: np.ndarray, n_neg: np.ndarray) -> np.ndarray:
        return np.minimum(n_pos, n_neg) >= max(self.sample.min_positives, 1)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, NaN where the denominator is 0 (undefined, never 0)."""
    out = np.full(np.shape(numerator), np.nan)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def _auroc(chunk: _Chunk) -> np.ndarray:
    neg, pos = chunk.ranking
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    neg_below = np.cumsum(neg, axis=1) - neg
    u = np.sum(pos * (neg_below + 0.5 * neg), axis=1)  # Mann-Whitney U, ties counting one half
    return np.where(chunk.ranking_defined(n_pos, n_neg), _ratio(u, n_pos * n_neg), np.nan)


def _auprc(chunk: _Chunk) -> np.ndarray:
    neg, pos = chunk.ranking
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    pos_down = pos[:, ::-1]  # highest score first: thresholds in the order the PR curve takes them
    tp = np.cumsum(pos_down, axis=1)
    drawn = np.cumsum((pos + neg)[:, ::-1], axis=1)
    precision = np.zeros_like(tp)
    np.divide(tp, drawn, out=precision, where=drawn > 0)  # drawn = 0 only before any image: pos_down is 0 there
    ap = _ratio(np.sum(pos_down * precision, axis=1), n_pos)
    return np.where(chunk.ranking_defined(n_pos, n_neg), ap, np.nan)


def _accuracy(chunk: _Chunk) -> np.ndarray:
    tn, _, _, tp = chunk.confusion
    return _ratio(tp + tn, np.full(len(tp), float(chunk.size)))


def _sensitivity(chunk: _Chunk) -> np.ndarray:
    _, _, fn, tp = chunk.confusion
    return _ratio(tp, tp + fn)


def _specificity(chunk: _Chunk) -> np.ndarray:
    tn, fp, _, _ = chunk.confusion
    return _ratio(tn, tn + fp)


def _f1(chunk: _Chunk) -> np.ndarray:
    _, fp, fn, tp = chunk.confusion
    return _ratio(2 * tp, 2 * tp + fp + fn)


def _calibration_kernel(name: str):
    def kernel(chunk: _Chunk) -> np.ndarray:
        bins, confidence, outcome, n_bins = chunk.sample.calibration(name)
        # S_b - Y_b as one weighted count of the per-image gap (equal to float rounding to the two counts' difference)
        gap = np.abs(row_bincount(bins[chunk.idx], n_bins + 1, chunk.sample.calibration_gap(name)[chunk.idx]))
        return _ratio(gap.sum(axis=1), np.full(len(gap), float(chunk.size)))  # sum_b |S_b - Y_b| / N

    kernel.__name__ = f"_{name}"
    return kernel


def _brier(chunk: _Chunk) -> np.ndarray:
    if chunk.size == 0:
        return np.full(len(chunk.idx), np.nan)
    return chunk.sample.squared_error[chunk.idx].mean(axis=1)


KERNELS = {
    "auroc": _auroc,
    "auprc": _auprc,
    "accuracy": _accuracy,
    "sensitivity": _sensitivity,
    "specificity": _specificity,
    "f1": _f1,
    "ece": _calibration_kernel("ece"),
    "ece_15": _calibration_kernel("ece_15"),
    "ece_top_label": _calibration_kernel("ece_top_label"),
    "brier": _brier,
}
assert set(KERNELS) == set(METRICS) and set(THRESHOLD_METRICS) <= set(KERNELS)


def _check_indices(idx, n: int) -> np.ndarray:
    idx = np.asarray(idx)
    if idx.ndim != 2 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"idx must be a 2-D integer array [resamples, size], got {idx.dtype} {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"idx has values outside [0, {n})")
    return idx


def replicates_many(metrics, y_true, y_score, idx, *, threshold: float = 0.5, n_bins: int = 10,
                    min_positives: int = MIN_POSITIVES, chunk: int = CHUNK) -> dict[str, np.ndarray]:
    """``bootstrap_replicates`` for several metrics at once, sharing the per-resample counts between them."""
    unknown = [name for name in metrics if name not in KERNELS]
    if unknown:
        raise KeyError(f"unknown metric(s) {unknown}; known: {', '.join(KERNELS)}")
    needs_probabilities = any(name in CALIBRATION_METRICS for name in metrics)
    y, s = (as_probabilities if needs_probabilities else as_arrays)(y_true, y_score)
    idx = _check_indices(idx, len(y))
    sample = _Sample(y, s, threshold, n_bins, min_positives)
    out = {name: np.empty(len(idx)) for name in metrics}
    for start in range(0, len(idx), chunk):
        block = _Chunk(sample, idx[start : start + chunk])
        for name in metrics:
            out[name][start : start + chunk] = KERNELS[name](block)
    return out


def bootstrap_replicates(metric: str, y_true, y_score, idx, **kw) -> np.ndarray:
    """The metric on each resample ``idx[r]`` (rows of indices into the sample), all at once: [R] floats,
    NaN where undefined. Options: ``threshold``, ``n_bins``, ``min_positives``, ``chunk``.

    For a gap between two groups, resample each group separately with the same R (and the group's own
    ``resample_indices``) and difference the two replicate arrays.
    """
    return replicates_many((metric,), y_true, y_score, idx, **kw)[metric]


def percentile_interval(point: Value, replicates: np.ndarray, alpha: float = 0.05) -> Interval:
    """The ``1 - alpha`` percentile interval of the finite replicates around ``point``."""
    finite = replicates[np.isfinite(replicates)]
    if not point.defined or finite.size == 0:
        return Interval(point, None, None, replicates)
    low, high = np.percentile(finite, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return Interval(point, float(low), float(high), replicates)


def bootstrap(y_true, y_score, metrics=DEFAULT_METRICS, n_resamples: int = 1000, seed: int = 0,
              threshold: float = 0.5, n_bins: int = 10, alpha: float = 0.05, *,
              min_positives: int = MIN_POSITIVES, stratified: bool = True) -> dict[str, Interval]:
    """Point estimate and ``1 - alpha`` bootstrap percentile interval for each metric name in ``metrics``
    (names of ``metrics.METRICS``; default the full suite), from ``n_resamples`` seeded resamples
    (stratified by label unless ``stratified=False``)."""
    y, s = as_arrays(y_true, y_score)
    options = {"threshold": threshold, "n_bins": n_bins, "min_positives": min_positives}
    idx = resample_indices(y, n_resamples, seed, stratified)
    replicates = replicates_many(tuple(metrics), y, s, idx, **options)
    return {name: percentile_interval(call_metric(name, y, s, **options), replicates[name], alpha)
            for name in metrics}


# ------------------------------------------------------------------------------------------------ groups
#
# Groups (sex, age, quality, ...) are measured on the configuration's own resamples: replicate r of a group
# metric is the metric on the images of the group that resample r drew, with their multiplicities. So a
# group's size varies across replicates as it does between real samples, every group and the whole set share
# each replicate, and a gap's replicate is the gap on that replicate. A resample is represented by its
# weights (how often it drew each image, ``resample_weights``); a group's kernels are weighted sums.


def resample_weights(idx: np.ndarray, n: int) -> np.ndarray:
    """``[R, n]`` float64: how often resample r drew image i (``row_bincount`` of the index matrix)."""
    return row_bincount(_check_indices(idx, n), n)


def group_replicates(y_true, y_score, weights: np.ndarray, member, *, threshold: float = 0.5, n_bins: int = 10,
                     min_positives: int = MIN_POSITIVES) -> dict[str, np.ndarray]:
    """Replicates of the group metrics (positive_rate, accuracy, tpr, fpr, auroc, ece) of the images where
    ``member`` is True, on each resample given by ``weights`` [R, n] (``resample_weights``): [R] floats each,
    NaN where undefined in that resample (no image of the group drawn; TPR without positives; AUROC with
    fewer than ``min_positives`` drawn positives or negatives, counted with multiplicity as the unweighted
    kernels count them). One group of ``GroupResamples``."""
    resamples = GroupResamples(y_true, y_score, weights, threshold=threshold, n_bins=n_bins,
                               min_positives=min_positives)
    codes = np.where(np.asarray(member, dtype=bool), 0, -1)
    return {name: values[:, 0] for name, values in resamples.replicates(codes, 1).items()}


class GroupResamples:
    """One configuration's resamples (``weights`` [R, n], ``resample_weights``) prepared once for the group
    kernels of all its attributes: ``replicates(groups, n_groups)`` gives ``group_replicates`` of every group
    of an attribute at once, as [R, n_groups] arrays (column k = the images whose code is k; code -1 = in no
    group).

    The counts (size, positives, predictions, the confusion cells) and the AUROC's Mann-Whitney U are integer
    (U: half-integer) sums, computed exactly (in float32 where every partial sum stays below 2**24, float64
    otherwise), so the rates and AUROC are the floats a group-by-group computation gives; the ECE is a
    float64 weighted sum. How: one matrix product of the weights
    against the groups' indicator columns for all counts, one against the (group, bin) columns of ``s - y`` for
    the ECE, and for the AUROC one cumulative sum of the drawn negatives in (group, score) order, read at each
    positive's tie block (negatives of its group below its score, and through its score), weighted by the
    positive's multiplicity and summed per group by a product with the groups' indicator.
    """

    def __init__(self, y_true, y_score, weights: np.ndarray, *, threshold: float = 0.5, n_bins: int = 10,
                 min_positives: int = MIN_POSITIVES):
        self.y, self.s = as_probabilities(y_true, y_score)
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.weights.ndim != 2 or self.weights.shape[1] != len(self.y):
            raise ValueError(f"weights must be [resamples, {len(self.y)}], got {self.weights.shape}")
        self.threshold, self.n_bins, self.min_positives = threshold, n_bins, min_positives
        n = len(self.y)
        # integer sums are exact in float32 below 2**24: counts <= n, 2U <= n**2 / 2 (every row draws n images)
        self.exact_dtype = np.float32 if n * n // 2 < 2**24 else np.float64

    @cached_property
    def counts_weights(self) -> np.ndarray:
        return self.weights.astype(self.exact_dtype)

    @cached_property
    def rank(self) -> tuple[np.ndarray, int]:
        distinct, inverse = np.unique(self.s, return_inverse=True)
        return inverse.astype(np.int64), len(distinct)

    @cached_property
    def bins(self) -> np.ndarray:
        return bin_index(self.s, self.n_bins)

    def replicates(self, groups, n_groups: int) -> dict[str, np.ndarray]:
        codes = np.asarray(groups, dtype=np.intp)
        y, s, w = self.y, self.s, self.counts_weights
        n_res, n = self.weights.shape
        if codes.shape != (n,) or (codes >= n_groups).any():
            raise ValueError(f"groups must be {n} codes in [-1, {n_groups})")
        rows = np.flatnonzero(codes >= 0)
        g, ym = codes[rows], y[rows]
        predicted = s[rows] >= self.threshold
        indicator = np.zeros((n, 5, n_groups), dtype=self.exact_dtype)
        for k, column in enumerate((np.ones(len(rows), bool), ym, predicted, predicted & ym, predicted & ~ym)):
            indicator[rows, k, g] = column
        counts = (w @ indicator.reshape(n, 5 * n_groups)).astype(np.float64).reshape(n_res, 5, n_groups)
        size, positives, predicted_n, true_pos, false_pos = (counts[:, k] for k in range(5))
        negatives = size - positives
        return {
            "positive_rate": _ratio(predicted_n, size),
            "accuracy": _ratio(true_pos + (negatives - false_pos), size),
            "tpr": _ratio(true_pos, positives),
            "fpr": _ratio(false_pos, negatives),
            "auroc": self._auroc(rows, g, ym, n_groups, positives, negatives),
            "ece": self._ece(rows, g, ym, n_groups, size),
        }

    def _auroc(self, rows, g, ym, n_groups, positives, negatives) -> np.ndarray:
        w = self.counts_weights
        rank, n_distinct = self.rank
        key = g.astype(np.int64) * (n_distinct + 1) + rank[rows]
        neg_rows, neg_keys = rows[~ym], key[~ym]
        order = np.argsort(neg_keys, kind="stable")
        neg_rows, neg_keys = neg_rows[order], neg_keys[order]
        pos_rows, pos_keys, pos_groups = rows[ym], key[ym], g[ym]
        cum = np.zeros((w.shape[0], len(neg_rows) + 1), dtype=w.dtype)
        np.cumsum(w[:, neg_rows], axis=1, out=cum[:, 1:])
        lo = np.searchsorted(neg_keys, pos_keys, "left")  # negatives of the group below the score (+ start)
        hi = np.searchsorted(neg_keys, pos_keys, "right")  # ... through the score
        start = np.searchsorted(neg_keys, pos_groups.astype(np.int64) * (n_distinct + 1), "left")
        twice = cum[:, lo] + cum[:, hi]
        twice -= 2 * cum[:, start]  # 2 * (below + half the tied), per drawn copy of each positive
        onehot = np.zeros((len(pos_rows), n_groups), dtype=w.dtype)
        onehot[np.arange(len(pos_rows)), pos_groups] = 1
        u = ((w[:, pos_rows] * twice) @ onehot).astype(np.float64) * 0.5
        defined = np.minimum(positives, negatives) >= max(self.min_positives, 1)
        return np.where(defined, _ratio(u, positives * negatives), np.nan)

    def _ece(self, rows, g, ym, n_groups, size) -> np.ndarray:
        n_bins = self.n_bins + 1
        gap_columns = np.zeros((len(self.y), n_groups * n_bins))
        gap_columns[rows, g * n_bins + self.bins[rows]] = self.s[rows] - ym
        gap = np.abs(self.weights @ gap_columns).reshape(-1, n_groups, n_bins)
        return _ratio(gap.sum(axis=2), size)
