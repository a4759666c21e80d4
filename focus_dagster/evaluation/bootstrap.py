"""Seeded, stratified, vectorised bootstrap: the replicates of the metrics in ``metrics`` on R resamples at once.

Resamples. A resample draws, with replacement, as many images as the sample has; stratified (the default),
it draws the positives from the positives and the negatives from the negatives, so every resample keeps the
sample's class counts. The draws come from ``numpy.random.Generator(PCG64(seed))``, class by class (positives
first), the R x n_class positions of a class in one stream (drawn in blocks of BLOCK resamples, which gives
the same numbers as one ``integers`` call): the same seed gives the same resamples, hence the same intervals.
They are used as an index matrix [R, n] (``resample_indices``: column j keeps image j's label) or, what every
kernel here works on, as the resamples' weights W [R, n], how often resample r drew image i
(``resample_weights`` of an index matrix, or ``resample_counts`` straight from the same draws).

Kernels. Every metric of ``metrics`` is a function of sums over the images a resample drew, i.e. of sums over
all images weighted by W, so all R replicates come from a few array operations, without a loop over
resamples; and a group's replicates (the images of the group that each resample drew, with their
multiplicities) are the same sums restricted to the group's images. ``Resamples`` holds one sample's W and
computes the metrics of the whole sample (``Resamples.metrics``), or the group metrics of every group of one
attribute (``Resamples.groups``) or of several attributes at once (``Resamples.attributes``: their groups are
the columns of the same products and cumulative sums):

- counts (size, positives, predicted positives, true and false positives): one matrix product of W with the
  groups' indicator columns, in float32 where every sum stays below 2**24 (exact), float64 otherwise;
  accuracy, sensitivity (TPR), specificity, FPR, F1 and the positive rate are ratios of these integers;
- AUROC: the Mann-Whitney U (ties count one half) from one integer cumulative sum of W over the negatives of
  all groups in (group, score) order, read at each positive's tie block (the negatives of its group below
  its score, and through it), weighted by the positive's multiplicity and summed per group (``_Ranking``);
  U / (positives * negatives);
- AUPRC (whole sample): integer cumulative sums of W over all images and over the positives in ascending
  score order, read where each distinct score holding positives starts and ends: per step its drawn
  positives pos_g, the positives TP_g and the images D_g drawn at or above its score, and
  AP = sum_g pos_g * TP_g / D_g / P (a step per distinct score, as scikit-learn);
- ECE (each form): one float64 product of W with per-(group, bin) columns of the image's gap (score - label,
  or top-label confidence - correctness), giving every S_b - Y_b: sum_b |S_b - Y_b| / N;
- Brier: one float64 product of W with the squared errors, over N.

Integer sums are done in integers (int32 where they fit): exact, and cumulative sums in integers are several
times faster than in floats. The kernels run on blocks of BLOCK resamples, so that their temporaries are
[BLOCK, n] arrays, reused by the allocator and held in the caches, where [R, n] ones would be fresh memory
each time (page faults: about twice the time).

Each replicate equals the point function of ``metrics`` applied to the same resample: the count-based metrics
and AUROC exactly (integer sums), the others to float rounding. Undefined replicates are NaN (no image of a
group drawn, TPR without positives, AUROC / AUPRC with fewer than ``min_positives`` drawn positives or
negatives, counted with multiplicity).

``bootstrap`` adds the point and the 95% percentile interval (``alpha / 2`` and ``1 - alpha / 2`` quantiles,
numpy's linear interpolation) of the defined replicates; an undefined point has no interval
(``low = high = None``; the point's ``reason`` says why). The tables choose the interval method per metric
(``intervals``).
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

DEFAULT_METRICS = tuple(METRICS)
GROUP_METRICS = ("positive_rate", "accuracy", "tpr", "fpr", "auroc", "ece")  # what ``Resamples.groups`` gives


@dataclass(frozen=True, eq=False)
class Interval:
    """A point estimate with its bootstrap interval and the replicates behind it.

    ``low``/``high`` are None when the point is undefined (see ``point.reason``) or no replicate is defined;
    ``replicates`` holds the R resampled values, NaN where the metric is undefined in a resample.
    """

    point: Value
    low: float | None
    high: float | None
    replicates: np.ndarray = field(repr=False)


# --------------------------------------------------------------------------------------------- resamples


BLOCK = 250  # resamples per block: the draws and the kernels' temporaries are [BLOCK, n] arrays


def _class_draws(y: np.ndarray, n_resamples: int, seed: int, stratified: bool):
    """``(members, rows, draws)`` in the generator's order: ``draws`` [len(rows), len(members)] are positions in
    ``members`` (the images of one class, or all images when not stratified) for the resamples ``rows``.

    One class after the other, in blocks of BLOCK resamples: the blocks of one class consume the generator's
    stream exactly as one ``integers`` call for all R would (the same numbers), in a [BLOCK, n] buffer rather
    than fresh [R, n] memory.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    if stratified:
        classes = [members for members in (np.flatnonzero(y), np.flatnonzero(~y)) if len(members)]
    else:
        classes = [np.arange(len(y))] if len(y) else []
    for members in classes:
        for start in range(0, n_resamples, BLOCK):
            rows = slice(start, min(start + BLOCK, n_resamples))
            yield members, rows, rng.integers(0, len(members), size=(rows.stop - rows.start, len(members)))


def resample_indices(y_true, n_resamples: int = 1000, seed: int = 0, stratified: bool = True) -> np.ndarray:
    """Bootstrap indices ``[n_resamples, n]`` into the sample, drawn with ``Generator(PCG64(seed))``.

    Stratified: column j draws among the images of image j's class, so each resample has the sample's
    positives and negatives counts. Unstratified: every column draws among all n images.
    """
    y = as_labels(y_true)
    idx = np.empty((n_resamples, len(y)), dtype=np.intp)
    for members, rows, draws in _class_draws(y, n_resamples, seed, stratified):
        idx[rows, members] = members[draws]
    return idx


def resample_counts(y_true, n_resamples: int = 1000, seed: int = 0, stratified: bool = True) -> np.ndarray:
    """``resample_weights(resample_indices(...))`` from the same draws, without the index matrix: [R, n]
    integers (int32)."""
    y = as_labels(y_true)
    counts = np.zeros((n_resamples, len(y)), dtype=np.int32)
    for members, rows, draws in _class_draws(y, n_resamples, seed, stratified):
        counts[rows, members] = _row_counts(draws, len(members))
    return counts


def resample_weights(idx, n: int) -> np.ndarray:
    """``[R, n]`` integers: how often resample r (row r of the index matrix ``idx``) drew image i."""
    return _row_counts(_check_indices(idx, n), n)


def _row_counts(keys: np.ndarray, n_keys: int) -> np.ndarray:
    """``bincount`` of each row of ``keys`` [r, m] (values < n_keys) at once: [r, n_keys] int64. Row i's keys
    are shifted by ``i * n_keys`` so that a single flat bincount keeps the rows apart."""
    rows = keys.shape[0]
    shifted = keys + (n_keys * np.arange(rows))[:, None]
    return np.bincount(shifted.ravel(), minlength=rows * n_keys).reshape(rows, n_keys)


def _check_indices(idx, n: int) -> np.ndarray:
    idx = np.asarray(idx)
    if idx.ndim != 2 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"idx must be a 2-D integer array [resamples, size], got {idx.dtype} {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"idx has values outside [0, {n})")
    return idx


# ---------------------------------------------------------------------------------------------- kernels


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, NaN where the denominator is 0 (undefined, never 0)."""
    out = np.full(np.shape(numerator), np.nan)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


@dataclass(frozen=True)
class Counts:
    """Per resample and group ([R, groups] float64, exact integers): images drawn, positives among them,
    predicted positives, true positives and false positives at one threshold."""

    size: np.ndarray
    positives: np.ndarray
    predicted: np.ndarray
    true_pos: np.ndarray
    false_pos: np.ndarray

    @property
    def negatives(self) -> np.ndarray:
        return self.size - self.positives

    def rate(self, name: str) -> np.ndarray:
        """``name`` (accuracy, sensitivity / tpr, specificity, fpr, f1, positive_rate), NaN where undefined."""
        true_neg, false_neg = self.negatives - self.false_pos, self.positives - self.true_pos
        if name == "accuracy":
            return _ratio(self.true_pos + true_neg, self.size)
        if name in ("sensitivity", "tpr"):
            return _ratio(self.true_pos, self.positives)
        if name == "specificity":
            return _ratio(true_neg, self.negatives)
        if name == "fpr":
            return _ratio(self.false_pos, self.negatives)
        if name == "f1":
            return _ratio(2 * self.true_pos, 2 * self.true_pos + self.false_pos + false_neg)
        if name == "positive_rate":
            return _ratio(self.predicted, self.size)
        raise KeyError(f"no count-based rate {name!r}")


class Resamples:
    """One sample's resamples, given by their weights (``counts`` [R, n]: how often resample r drew image i),
    for the kernels of the module docstring: ``metrics`` for the whole sample, ``groups`` / ``attributes`` for
    the groups of attributes. Options per call: ``threshold`` (predicted positive at ``score >= threshold``)
    and ``n_bins`` (ECE); ``min_positives`` for AUROC / AUPRC.

    A call first prepares what depends on the images only (indicator and gap columns, orders, where to read
    the cumulative sums), then runs the kernels block by block (``_Block``: BLOCK resamples).
    """

    def __init__(self, y_true, y_score, counts, *, min_positives: int = MIN_POSITIVES):
        self.y, self.s = as_arrays(y_true, y_score)
        counts = np.asarray(counts)
        if counts.ndim != 2 or counts.shape[1] != len(self.y) or not np.issubdtype(counts.dtype, np.integer):
            raise ValueError(f"counts must be integer [resamples, {len(self.y)}], got {counts.dtype} {counts.shape}")
        self.drawn = int(counts.sum(axis=1).max(initial=0))  # the most images a resample drew: bounds every sum
        # counts in int32 (half the memory traffic of int64 in the cumulative sums); count sums in float32 below
        # 2**24, where it is exact (and a faster product)
        counts = counts.astype(np.int32 if self.drawn < 2**31 else np.int64, copy=False)
        self.exact_type = np.float32 if self.drawn < 2**24 else np.float64
        self.blocks = [_Block(counts[start : start + BLOCK], self.exact_type) for start in range(0, len(counts), BLOCK)]
        self.min_positives = min_positives

    @cached_property
    def probabilities(self) -> np.ndarray:
        """The scores, checked to be probabilities (the calibration kernels compare them with frequencies)."""
        return as_probabilities(self.y, self.s)[1]

    # ---------------------------------------------------------------------------------------- entry points

    def metrics(self, names, *, threshold: float = 0.5, n_bins: int = 10) -> dict[str, np.ndarray]:
        """The replicates [R] of each metric of ``metrics.METRICS`` in ``names`` on the whole sample."""
        unknown = [name for name in names if name not in METRICS]
        if unknown:
            raise KeyError(f"unknown metric(s) {unknown}; known: {', '.join(METRICS)}")
        images, whole = np.arange(len(self.y)), np.zeros(len(self.y), dtype=np.intp)  # one group: every image
        indicator = self._indicator(images, whole, 1, threshold)
        ranking = self._ranking(images, whole, 1) if "auroc" in names else None
        steps = self._precision_steps() if "auprc" in names else None
        # One product per ECE form, never one over the forms' columns side by side: BLAS sums a column in an order
        # that depends on the matrix's width, and a form's replicates must not depend on which others are asked for.
        gaps = {name: self._gap_columns(name, images, whole, 1, n_bins)
                for name in names if name in ("ece", "ece_15", "ece_top_label")}
        squared_error = (self.probabilities - self.y) ** 2 if "brier" in names else None
        out = {name: [] for name in names}
        for block in self.blocks:
            counts = block.counts_at(indicator, 1)
            values = {name: counts.rate(name) for name in THRESHOLD_METRICS if name in names}
            for name, columns in gaps.items():
                values[name] = _calibration_error((block.float_counts @ columns)[:, None, :], counts.size)
            if squared_error is not None:
                values["brier"] = _ratio((block.float_counts @ squared_error)[:, None], counts.size)
            if ranking is not None:
                values["auroc"] = self._auroc(block, ranking, counts)
            if steps is not None:
                values["auprc"] = self._average_precision(block, steps, counts)
            for name in names:
                out[name].append(values[name].reshape(-1))
        return {name: np.concatenate(parts) if parts else np.empty(0) for name, parts in out.items()}

    def groups(self, codes, n_groups: int, *, threshold: float = 0.5, n_bins: int = 10) -> dict[str, np.ndarray]:
        """The group metrics (``GROUP_METRICS``: positive_rate, accuracy, tpr, fpr, auroc, ece) of every group
        of an attribute, [R, n_groups] each: column k = the images whose code is k (code -1 = in no group)."""
        return self.attributes([(codes, n_groups)], threshold=threshold, n_bins=n_bins)[0]

    def attributes(self, attributes, *, threshold: float = 0.5, n_bins: int = 10) -> list[dict[str, np.ndarray]]:
        """``groups`` of several attributes (``[(codes, n_groups)]``) at once: the groups of all of them as the
        columns of one product for their counts, one for their ECE and one cumulative sum for their AUROC."""
        if not attributes:
            return []
        memberships = [self._memberships(codes, n_groups) for codes, n_groups in attributes]
        widths = [n_groups for _, n_groups in attributes]
        offsets = np.cumsum([0, *widths])
        images = np.concatenate([images for images, _ in memberships]).astype(np.intp)
        groups = np.concatenate([group + offset for (_, group), offset in zip(memberships, offsets)]).astype(np.intp)
        n_groups = int(offsets[-1])
        indicator = self._indicator(images, groups, n_groups, threshold)
        ranking = self._ranking(images, groups, n_groups)
        gaps = self._gap_columns("ece", images, groups, n_groups, n_bins)
        out = {name: [] for name in GROUP_METRICS}
        for block in self.blocks:
            counts = block.counts_at(indicator, n_groups)
            values = {name: counts.rate(name) for name in ("positive_rate", "accuracy", "tpr", "fpr")}
            values["auroc"] = self._auroc(block, ranking, counts)
            sums = (block.float_counts @ gaps).reshape(len(block.counts), n_groups, n_bins + 1)
            values["ece"] = _calibration_error(sums, counts.size)
            for name in GROUP_METRICS:
                out[name].append(values[name])
        stacked = {name: np.concatenate(parts) if parts else np.empty((0, n_groups)) for name, parts in out.items()}
        return [{name: values[:, start:stop] for name, values in stacked.items()}
                for start, stop in zip(offsets[:-1], offsets[1:])]

    def _memberships(self, codes, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
        """``(images, groups)``: the images in a group of the attribute ``codes`` and their group."""
        codes = np.asarray(codes, dtype=np.intp)
        if codes.shape != self.y.shape or (codes >= n_groups).any():
            raise ValueError(f"groups must be {len(self.y)} codes in [-1, {n_groups})")
        images = np.flatnonzero(codes >= 0)
        return images, codes[images]

    # ------------------------------------------------------------------------------- what the images give
    #
    # A group is given by its memberships: ``(images, groups)`` pairs, an image in at most one group of an
    # attribute but in one group of every attribute computed together.

    def _indicator(self, images: np.ndarray, groups: np.ndarray, n_groups: int, threshold: float) -> np.ndarray:
        """[n, 5 * n_groups] columns whose product with W gives ``Counts``: per group, its images, its
        positives, its predicted positives, true positives, false positives (1 where the image is one)."""
        y, predicted = self.y[images], self.s[images] >= threshold
        indicator = np.zeros((len(self.y), 5, n_groups), dtype=self.exact_type)
        for k, column in enumerate((np.ones(len(images), bool), y, predicted, predicted & y, predicted & ~y)):
            indicator[images, k, groups] = column
        return indicator.reshape(len(self.y), 5 * n_groups)  # explicit: -1 cannot be inferred for no images

    def _gap_columns(self, name: str, images: np.ndarray, groups: np.ndarray, n_groups: int, n_bins: int
                     ) -> np.ndarray:
        """[n, n_groups * (bins + 1)] float64: the image's gap (confidence - outcome of ECE form ``name``) in the
        column of its (group, bin), 0 elsewhere; W times it gives every S_b - Y_b."""
        s, y = self.probabilities, self.y
        confidence, outcome = top_label(y, s) if name == "ece_top_label" else (s, y.astype(np.float64))
        n_bins = _bins(name, n_bins)
        width = n_bins + 1  # the bins of bin_index, score 1.0 in a bin of its own
        columns = np.zeros((len(y), n_groups * width))
        columns[images, groups * width + bin_index(confidence[images], n_bins)] = (confidence - outcome)[images]
        return columns

    @cached_property
    def _rank(self) -> np.ndarray:
        """The distinct-score rank of every image (ties share one), ascending."""
        return np.unique(self.s, return_inverse=True)[1].astype(np.int64).reshape(-1)

    def _ranking(self, images: np.ndarray, groups: np.ndarray, n_groups: int) -> _Ranking:
        """Where the AUROC kernel reads its cumulative sum, for the groups' memberships."""
        width = int(self._rank.max(initial=0)) + 2
        key = groups * width + self._rank[images]  # (group, score) order
        negative = ~self.y[images]
        negatives = np.flatnonzero(negative)
        negatives = negatives[np.argsort(key[negatives], kind="stable")]
        positives = np.flatnonzero(~negative)
        positives = positives[np.argsort(groups[positives], kind="stable")]  # contiguous per group
        neg_keys, pos_keys = key[negatives], key[positives]
        layers = int(np.bincount(images).max(initial=0))
        return _Ranking(layers, images[negatives], images[positives], np.searchsorted(neg_keys, pos_keys, "left"),
                        np.searchsorted(neg_keys, pos_keys, "right"),
                        np.searchsorted(neg_keys, np.arange(n_groups) * width, "left"),
                        np.searchsorted(groups[positives], np.arange(n_groups + 1), "left"))

    def _precision_steps(self) -> _Steps:
        """Where the AUPRC kernel reads its cumulative sums: at each distinct score that holds positives."""
        order = np.argsort(self.s, kind="stable")
        positives = order[self.y[order]]  # ascending score, as ``order``
        scores = np.unique(self.s[positives])
        return _Steps(order, positives, np.searchsorted(self.s[positives], scores, "left"),
                      np.searchsorted(self.s[positives], scores, "right"),
                      np.searchsorted(self.s[order], scores, "left"))

    # -------------------------------------------------------------------------------------------- kernels

    def _auroc(self, block: _Block, ranking: _Ranking, counts: Counts) -> np.ndarray:
        """AUROC of every group ([r, n_groups]): U / (positives * negatives), U exact (``_Ranking``)."""
        # the largest integer here, the cumulative sum over all positives' terms, is at most twice the drawn
        # positive memberships times the drawn negative ones: below 2 (layers * drawn)**2 (an image drawn counts
        # once per attribute, ``layers``)
        fits = 2 * (ranking.layers * self.drawn) ** 2 < 2**31
        weights = block.counts.astype(np.int32 if fits else np.int64, copy=False)
        cumulative = _cumulative(_columns(weights, ranking.negatives))
        twice = _columns(cumulative, ranking.below) + _columns(cumulative, ranking.through)  # + 2 * earlier
        twice *= _columns(weights, ranking.positives)  # each drawn copy of a positive counts
        per_positive = _cumulative(twice)
        bounds = ranking.bounds
        sums = (per_positive[:, bounds[1:]] - per_positive[:, bounds[:-1]]).astype(np.float64)
        u = 0.5 * (sums - 2 * _columns(cumulative, ranking.group_start) * counts.positives)
        positives, negatives = counts.positives, counts.negatives
        return np.where(self._ranking_defined(positives, negatives), _ratio(u, positives * negatives), np.nan)

    def _average_precision(self, block: _Block, steps: _Steps, counts: Counts) -> np.ndarray:
        """AUPRC of the whole sample ([r]): a step per distinct score, highest first (module docstring)."""
        pos_cumulative = _cumulative(_columns(block.counts, steps.positives))
        drawn_below = _columns(_cumulative(_columns(block.counts, steps.order)), steps.drawn_below)
        pos_below = _columns(pos_cumulative, steps.positives_below)
        pos_through = _columns(pos_cumulative, steps.positives_through)
        n_pos, size = counts.positives, counts.size  # [r, 1]
        true_pos, drawn = n_pos - pos_below, size - drawn_below  # at or above each step's score
        precision = np.zeros(true_pos.shape)
        np.divide(true_pos, drawn, out=precision, where=drawn > 0)  # drawn = 0: no positive drawn there either
        ap = _ratio(np.sum((pos_through - pos_below)[:, ::-1] * precision[:, ::-1], axis=1), n_pos[:, 0])
        return np.where(self._ranking_defined(n_pos[:, 0], size[:, 0] - n_pos[:, 0]), ap, np.nan)

    def _ranking_defined(self, positives: np.ndarray, negatives: np.ndarray) -> np.ndarray:
        return np.minimum(positives, negatives) >= max(self.min_positives, 1)


@dataclass(frozen=True)
class _Ranking:
    """Where the AUROC kernel reads one cumulative sum C of W over the negatives of all groups, in (group, score)
    order (the groups of every attribute computed together: an image is in up to ``layers`` of them).

    Each positive (``positives``, contiguous per group, between ``bounds``) reads C at its tie block
    (``below``, ``through``: twice the negatives of its group below it plus those tied, plus twice the
    negatives of the groups before its own); those earlier negatives, C at the group's first negative
    (``group_start``), are the same for all of a group's positives, so they are subtracted once per group,
    times the group's drawn positives."""

    layers: int
    negatives: np.ndarray
    positives: np.ndarray
    below: np.ndarray
    through: np.ndarray
    group_start: np.ndarray
    bounds: np.ndarray


@dataclass(frozen=True)
class _Steps:
    """Where the AUPRC kernel reads the cumulative sums of W over the positives (``positives``, ascending
    score) and over all images (``order``): per distinct score holding positives, the positives below it and
    through it, and the images below it."""

    order: np.ndarray
    positives: np.ndarray
    positives_below: np.ndarray
    positives_through: np.ndarray
    drawn_below: np.ndarray


class _Block:
    """A block of resamples (``counts`` [r, n] integers) and its float copies for the products."""

    def __init__(self, counts: np.ndarray, exact_type):
        self.counts = counts
        self.exact_counts = counts.astype(exact_type)

    @cached_property
    def float_counts(self) -> np.ndarray:
        return self.counts.astype(np.float64)

    def counts_at(self, indicator: np.ndarray, n_groups: int) -> Counts:
        """The ``Counts`` of every group: one product of W with the groups' indicator columns."""
        sums = (self.exact_counts @ indicator).astype(np.float64)
        return Counts(*sums.reshape(len(self.counts), 5, n_groups).transpose(1, 0, 2))


def _bins(name: str, n_bins: int) -> int:
    """The bins of ECE form ``name``: 15 for ece_15, else ``n_bins``."""
    return 15 if name == "ece_15" else n_bins


def _calibration_error(gaps: np.ndarray, size: np.ndarray) -> np.ndarray:
    """sum_b |S_b - Y_b| / N per group from the per-(group, bin) sums ``gaps`` [r, groups, bins], ``size`` N."""
    return _ratio(np.abs(gaps).sum(axis=2), size)


def _cumulative(counts: np.ndarray) -> np.ndarray:
    """Cumulative sums along the rows, with a leading 0 (entry j = the sum of the first j): [R, m + 1], in the
    integer type of ``counts`` (integer additions: exact, and several times faster than floating ones)."""
    out = np.zeros((counts.shape[0], counts.shape[1] + 1), dtype=counts.dtype)
    np.cumsum(counts, axis=1, dtype=counts.dtype, out=out[:, 1:])
    return out


def _columns(array: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``array[:, columns]`` in row-major order (fancy indexing of columns gives a column-major array, along
    whose rows the cumulative sums and products here are several times slower)."""
    return np.take(array, columns, axis=1)


# --------------------------------------------------------------------------------------------- entry points


def replicates_many(metrics, y_true, y_score, idx, *, threshold: float = 0.5, n_bins: int = 10,
                    min_positives: int = MIN_POSITIVES) -> dict[str, np.ndarray]:
    """``bootstrap_replicates`` for several metrics at once, sharing the per-resample sums between them."""
    y, s = as_arrays(y_true, y_score)
    resamples = Resamples(y, s, resample_weights(idx, len(y)), min_positives=min_positives)
    return resamples.metrics(tuple(metrics), threshold=threshold, n_bins=n_bins)


def bootstrap_replicates(metric: str, y_true, y_score, idx, **kw) -> np.ndarray:
    """The metric on each resample ``idx[r]`` (rows of indices into the sample), all at once: [R] floats,
    NaN where undefined. Options: ``threshold``, ``n_bins``, ``min_positives``.

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
    resamples = Resamples(y, s, resample_counts(y, n_resamples, seed, stratified), min_positives=min_positives)
    replicates = resamples.metrics(tuple(metrics), threshold=threshold, n_bins=n_bins)
    return {name: percentile_interval(call_metric(name, y, s, **options), replicates[name], alpha)
            for name in metrics}


# ------------------------------------------------------------------------------------------------ groups
#
# Groups (sex, age, quality, ...) are measured on the configuration's own resamples: replicate r of a group
# metric is the metric on the images of the group that resample r drew, with their multiplicities. So a
# group's size varies across replicates as it does between real samples, every group and the whole set share
# each replicate, and a gap's replicate is the gap on that replicate (``Resamples.groups``).


def group_replicates(y_true, y_score, weights: np.ndarray, member, *, threshold: float = 0.5, n_bins: int = 10,
                     min_positives: int = MIN_POSITIVES) -> dict[str, np.ndarray]:
    """Replicates of the group metrics (positive_rate, accuracy, tpr, fpr, auroc, ece) of the images where
    ``member`` is True, on each resample given by ``weights`` [R, n] (``resample_weights``): [R] floats each,
    NaN where undefined in that resample. One group of ``Resamples.groups``."""
    resamples = Resamples(y_true, y_score, weights, min_positives=min_positives)
    codes = np.where(np.asarray(member, dtype=bool), 0, -1)
    return {name: values[:, 0] for name, values in resamples.groups(codes, 1, threshold=threshold,
                                                                     n_bins=n_bins).items()}
