"""Binary-classification metrics on a positive-class score: plain numpy, no Dagster, no torch.

Every metric is ``f(y_true, y_score, ...) -> Value``: ``y_true`` holds 0/1 labels (1 = the positive
class), ``y_score`` the model's positive-class score per image (a probability in [0, 1] for the
calibration metrics and the Brier score; any finite number for the ranking and threshold metrics).

``Value(value, reason)``: ``value`` is a float, or ``None`` when the metric is undefined on this sample,
and then ``reason`` says why (never 0 or NaN in its place). Undefined cases:

- empty input (every metric);
- only one class in ``y_true``: AUROC, AUPRC and the Youden threshold, which compare the two classes;
- fewer than ``min_positives`` positives or negatives (default ``MIN_POSITIVES = 5``): AUROC, AUPRC,
  whose value on a handful of one class is mostly noise;
- sensitivity without positives, specificity without negatives, F1 with neither positives nor predicted
  positives (0/0).

Accuracy, the calibration errors and the Brier score stay defined on a single-class sample (a subgroup
with only negatives still has an accuracy and a calibration).

Non-finite scores (NaN, inf) are the caller's business: it rejects and counts them beforehand, and a
metric that meets one raises ``ValueError`` naming how many there are and where the first one is.

Threshold convention: an image is predicted positive when ``score >= threshold`` (the same as
scikit-learn's ``roc_curve``); its comparisons use ``(score >= t).astype(int)``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

MIN_POSITIVES = 5  # the fewest positives (and negatives) for which AUROC / AUPRC are reported


@dataclass(frozen=True)
class Value:
    """A metric's value, or ``None`` with the reason it is undefined on this sample."""

    value: float | None
    reason: str | None = None

    @property
    def defined(self) -> bool:
        return self.value is not None


# --------------------------------------------------------------------------------------------- inputs


def as_labels(y_true) -> np.ndarray:
    """0/1 labels (or booleans) as a 1-D bool array; ValueError for anything else."""
    y = np.asarray(y_true)
    if y.ndim != 1:
        raise ValueError(f"y_true must be 1-D, got shape {y.shape}")
    if y.dtype == bool:
        return y
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"y_true must hold only 0 and 1, got {np.unique(y)[:10].tolist()}")
    return y == 1


def as_arrays(y_true, y_score) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(labels as bool, scores as float64)``, both one-dimensional and of equal length.

    Raises ValueError for labels other than 0/1, mismatched shapes, or non-finite scores (with how many
    and the index of the first).
    """
    y = as_labels(y_true)
    s = np.asarray(y_score, dtype=np.float64)
    if s.ndim != 1 or len(y) != len(s):
        raise ValueError(f"y_true and y_score must be 1-D and of equal length, got shapes {y.shape} and {s.shape}")
    bad = ~np.isfinite(s)
    if bad.any():
        raise ValueError(f"y_score has {int(bad.sum())} non-finite value(s) (NaN or inf), e.g. at index "
                         f"{int(np.flatnonzero(bad)[0])}: reject and count them before computing metrics")
    return y, s


def as_probabilities(y_true, y_score) -> tuple[np.ndarray, np.ndarray]:
    """``as_arrays``, also requiring scores in [0, 1] (calibration and Brier compare them with frequencies)."""
    y, s = as_arrays(y_true, y_score)
    outside = (s < 0) | (s > 1)
    if outside.any():
        first = int(np.flatnonzero(outside)[0])
        raise ValueError(f"y_score has {int(outside.sum())} value(s) outside [0, 1], e.g. {float(s[first])} at index "
                         f"{first}: calibration metrics need probabilities")
    return y, s


def _class_counts(y: np.ndarray) -> str:
    return f"n={len(y)}, positives={int(y.sum())}"


def ranking_undefined(y: np.ndarray, min_positives: int, name: str) -> Value | None:
    """The undefined Value for a ranking metric on labels ``y``, or None when it is defined."""
    if len(y) == 0:
        return Value(None, "empty input")
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return Value(None, f"only one class in y_true ({_class_counts(y)})")
    if min(n_pos, n_neg) < min_positives:
        fewer = "positives" if n_pos < min_positives else "negatives"
        return Value(None, f"too few {fewer} for {name}: {min(n_pos, n_neg)} < minimum {min_positives} "
                           f"({_class_counts(y)})")
    return None


# ------------------------------------------------------------------------------------ ranking metrics


def midranks(s: np.ndarray) -> np.ndarray:
    """1-based ranks of ``s``, ascending, tied values sharing the mean of their ranks (midranks)."""
    order = np.argsort(s)  # ties share one rank below, so the sort need not be stable
    ordered = s[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(s)]
    ranks = np.empty(len(s))
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return ranks


def auroc(y_true, y_score, min_positives: int = MIN_POSITIVES) -> Value:
    """Area under the ROC curve: the probability that a random positive outscores a random negative,
    ties counting one half (the Mann-Whitney U statistic over n_pos * n_neg, from midranks).

    Equals scikit-learn's ``roc_auc_score`` (trapezoidal area, which scores ties the same way).
    """
    y, s = as_arrays(y_true, y_score)
    if (undefined := ranking_undefined(y, min_positives, "auroc")) is not None:
        return undefined
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    u = midranks(s)[y].sum() - n_pos * (n_pos + 1) / 2.0
    return Value(float(u / (n_pos * n_neg)))


def auprc(y_true, y_score, min_positives: int = MIN_POSITIVES) -> Value:
    """Area under the precision-recall curve as average precision (scikit-learn's step-wise AP).

    ``AP = sum_k (R_k - R_{k-1}) * P_k`` over the distinct scores taken as thresholds, highest first, where
    P_k and R_k are precision and recall when predicting positive at ``score >= threshold_k``. Images with
    equal scores enter together (one step per distinct score), so ties are never broken arbitrarily; no
    interpolation. Equals ``sklearn.metrics.average_precision_score``.
    """
    y, s = as_arrays(y_true, y_score)
    if (undefined := ranking_undefined(y, min_positives, "auprc")) is not None:
        return undefined
    order = np.argsort(-s)  # images of one score enter together (below): the order among them does not matter
    ordered = s[order]
    group_ends = np.flatnonzero(np.r_[ordered[1:] != ordered[:-1], True])  # last image of each distinct score
    tp = np.cumsum(y[order])[group_ends]
    precision = tp / (group_ends + 1.0)
    recall_steps = np.diff(np.r_[0, tp]) / tp[-1]
    return Value(float(np.sum(recall_steps * precision)))


def youden_threshold(y_true, y_score) -> Value:
    """The threshold maximising Youden's J = TPR - FPR (sensitivity + specificity - 1).

    Candidates are scikit-learn's ``roc_curve`` thresholds without its infinite first one, i.e. the distinct
    scores (predict positive at ``score >= threshold``). Among equal J the largest threshold wins; J is
    compared exactly (as the integer ``tp * n_neg - fp * n_pos``), so floating noise cannot pick the tie.
    """
    y, s = as_arrays(y_true, y_score)
    if len(y) == 0:
        return Value(None, "empty input")
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return Value(None, f"only one class in y_true ({_class_counts(y)})")
    order = np.argsort(-s)  # one candidate per distinct score (below): the order among equal scores is irrelevant
    ordered = s[order]
    group_ends = np.flatnonzero(np.r_[ordered[1:] != ordered[:-1], True])
    tp = np.cumsum(y[order])[group_ends]  # integers
    # J * n_pos * n_neg = tp n_neg - fp n_pos with fp = k + 1 - tp (k: the group's last index) = tp n - (k + 1) n_pos;
    # the constant -n_pos moves no candidate, so it is left out and the comparison stays exact
    j_scaled = tp * len(y) - group_ends * n_pos
    return Value(float(ordered[group_ends[int(np.argmax(j_scaled))]]))  # argmax: first = highest threshold


# ---------------------------------------------------------------------------------- threshold metrics


def confusion(y: np.ndarray, s: np.ndarray, threshold: float) -> tuple[int, int, int, int]:
    """``(tn, fp, fn, tp)`` predicting positive at ``score >= threshold``."""
    predicted = s >= threshold
    tp = int(np.sum(predicted & y))
    fp = int(np.sum(predicted & ~y))
    fn = int(np.sum(~predicted & y))
    return len(y) - tp - fp - fn, fp, fn, tp


def accuracy(y_true, y_score, threshold: float = 0.5) -> Value:
    """Fraction of images classified correctly, predicting positive at ``score >= threshold``."""
    y, s = as_arrays(y_true, y_score)
    if len(y) == 0:
        return Value(None, "empty input")
    tn, _, _, tp = confusion(y, s, threshold)
    return Value((tp + tn) / len(y))


def sensitivity(y_true, y_score, threshold: float = 0.5) -> Value:
    """True-positive rate (recall) TP / (TP + FN), predicting positive at ``score >= threshold``."""
    y, s = as_arrays(y_true, y_score)
    if len(y) == 0:
        return Value(None, "empty input")
    _, _, fn, tp = confusion(y, s, threshold)
    if tp + fn == 0:
        return Value(None, f"no positives: only one class in y_true ({_class_counts(y)})")
    return Value(tp / (tp + fn))


def specificity(y_true, y_score, threshold: float = 0.5) -> Value:
    """True-negative rate TN / (TN + FP), predicting positive at ``score >= threshold``."""
    y, s = as_arrays(y_true, y_score)
    if len(y) == 0:
        return Value(None, "empty input")
    tn, fp, _, _ = confusion(y, s, threshold)
    if tn + fp == 0:
        return Value(None, f"no negatives: only one class in y_true ({_class_counts(y)})")
    return Value(tn / (tn + fp))


def f1(y_true, y_score, threshold: float = 0.5) -> Value:
    """F1 = 2 TP / (2 TP + FP + FN), the harmonic mean of precision and recall, predicting positive at
    ``score >= threshold``. Undefined (0/0) with neither positives nor predicted positives; 0 when there
    are positives but none is found."""
    y, s = as_arrays(y_true, y_score)
    if len(y) == 0:
        return Value(None, "empty input")
    _, fp, fn, tp = confusion(y, s, threshold)
    denominator = 2 * tp + fp + fn
    if denominator == 0:
        return Value(None, f"no positives and no predicted positives (only one class in y_true, "
                           f"{_class_counts(y)})")
    return Value(2 * tp / denominator)


# -------------------------------------------------------------------------------------- calibration


@lru_cache(maxsize=64)
def _edges(n_bins: int) -> tuple[float, ...]:
    # torch.linspace(0, 1, n_bins + 1) bit for bit (torchmetrics' bin boundaries): step = 1 / n_bins, the
    # first half as step * i, the second as 1 - step * (n_bins - i) computed with one rounding (torch's
    # CPU kernel is compiled with fused multiply-add), emulated exactly here with a Fraction.
    step = 1.0 / n_bins
    halfway = (n_bins + 1) // 2
    return tuple(step * i if i < halfway else float(1 - Fraction(step) * (n_bins - i)) for i in range(n_bins + 1))


def bin_edges(n_bins: int) -> np.ndarray:
    """The ``n_bins + 1`` equal-width bin boundaries on [0, 1], identical to torchmetrics'."""
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    return np.array(_edges(int(n_bins)))


def bin_index(values: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin of each value in [0, 1], torchmetrics' convention: bin k holds ``edges[k] <= v < edges[k+1]``
    (left-closed), so 0.0 falls in bin 0 and a value exactly 1.0 in an extra bin ``n_bins`` of its own
    (``torch.bucketize(v, edges, right=True) - 1``). There are hence ``n_bins + 1`` bins."""
    return np.searchsorted(bin_edges(n_bins), values, side="right") - 1


def _calibration_error(confidence: np.ndarray, outcome: np.ndarray, n_bins: int) -> float:
    """``sum_b n_b / N * |mean(confidence_b) - mean(outcome_b)|`` over the non-empty bins."""
    bins = bin_index(confidence, n_bins)
    # both sums have max(bins) + 1 entries (the same bins), so they subtract bin by bin without a minlength
    gap = np.abs(np.bincount(bins, confidence) - np.bincount(bins, outcome))
    # n_b / N * |S_b / n_b - Y_b / n_b| = |S_b - Y_b| / N: empty bins contribute 0 without a division
    return float(gap.sum() / len(confidence))


def ece(y_true, y_score, n_bins: int = 10) -> Value:
    """Expected calibration error, reliability form, on the positive-class score:
    ``sum_b n_b / N * |mean(score_b) - mean(label_b)|`` over equal-width bins on [0, 1].

    Bins follow torchmetrics (see ``bin_index``: left-closed, score 1.0 in a bin of its own), so
    ``ece(..., n_bins=15)`` equals ``torchmetrics.functional.classification.binary_calibration_error(preds,
    target, n_bins=15, norm="l1")`` (whose docstring says "top-label", but on binary input it computes this
    form). The protocol's reference number is 10 bins.
    """
    y, s = as_probabilities(y_true, y_score)
    if len(y) == 0:
        return Value(None, "empty input")
    return Value(_calibration_error(s, y.astype(np.float64), n_bins))


def ece_15(y_true, y_score) -> Value:
    """``ece`` with 15 bins: torchmetrics' ``binary_calibration_error`` default, reported for comparability."""
    return ece(y_true, y_score, n_bins=15)


def ece_top_label(y_true, y_score, n_bins: int = 10) -> Value:
    """Top-label ECE (Guo et al. 2017): confidence ``max(p, 1 - p)`` against correctness of the prediction at
    0.5 (positive when ``p >= 0.5``), ``sum_b n_b / N * |mean(confidence_b) - accuracy_b|`` over the same
    equal-width bins on [0, 1] (confidences live in [0.5, 1]). A number distinct from ``ece``."""
    y, s = as_probabilities(y_true, y_score)
    if len(y) == 0:
        return Value(None, "empty input")
    confidence, correct = top_label(y, s)
    return Value(_calibration_error(confidence, correct, n_bins))


def top_label(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(confidence, correct)`` of the 0.5-threshold prediction: ``max(p, 1 - p)`` and 1.0 / 0.0."""
    return np.maximum(s, 1.0 - s), ((s >= 0.5) == y).astype(np.float64)


def ece_bins(y_true, y_score, n_bins: int = 10) -> dict:
    """Per-bin reliability table behind ``ece`` (for metadata), JSON-ready.

    Keys: ``lower`` / ``upper`` (bin bounds; the last bin is the single point [1.0, 1.0]), ``count``,
    ``mean_score`` and ``mean_label`` (None for empty bins), ``n_bins`` and ``n``. Lists have ``n_bins + 1``
    entries.
    """
    y, s = as_probabilities(y_true, y_score)
    edges = bin_edges(n_bins)
    bins = bin_index(s, n_bins)
    count = np.bincount(bins, minlength=n_bins + 1)
    sum_score = np.bincount(bins, s, n_bins + 1)
    sum_label = np.bincount(bins, y.astype(np.float64), n_bins + 1)
    return {
        "n_bins": int(n_bins),
        "n": len(y),
        "lower": edges.tolist(),
        "upper": edges[1:].tolist() + [1.0],
        "count": count.tolist(),
        "mean_score": [float(a / c) if c else None for a, c in zip(sum_score, count)],
        "mean_label": [float(a / c) if c else None for a, c in zip(sum_label, count)],
    }


def brier(y_true, y_score) -> Value:
    """Brier score: mean squared difference between the score and the 0/1 label (lower is better).
    Equals ``sklearn.metrics.brier_score_loss`` for binary input."""
    y, s = as_probabilities(y_true, y_score)
    if len(y) == 0:
        return Value(None, "empty input")
    return Value(float(np.mean((s - y) ** 2)))


# --------------------------------------------------------------------------------------------- suite

METRICS = {
    "auroc": auroc,
    "auprc": auprc,
    "accuracy": accuracy,
    "sensitivity": sensitivity,
    "specificity": specificity,
    "f1": f1,
    "ece": ece,
    "ece_15": ece_15,
    "ece_top_label": ece_top_label,
    "brier": brier,
}
THRESHOLD_METRICS = ("accuracy", "sensitivity", "specificity", "f1")


def call_metric(name: str, y_true, y_score, **options) -> Value:
    """``METRICS[name]`` given only the options it takes (of threshold, n_bins, min_positives)."""
    if name not in METRICS:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
    accepted = _parameters(name)
    return METRICS[name](y_true, y_score, **{k: v for k, v in options.items() if k in accepted})


@lru_cache(maxsize=None)
def _parameters(name: str) -> frozenset:
    """The parameter names of ``METRICS[name]`` (read once: ``inspect.signature`` is slow next to a metric)."""
    return frozenset(inspect.signature(METRICS[name]).parameters)


def compute_all(y_true, y_score, threshold: float = 0.5, n_bins: int = 10,
                min_positives: int = MIN_POSITIVES) -> dict[str, Value]:
    """The full suite ``{auroc, auprc, accuracy, sensitivity, specificity, f1, ece, ece_15, ece_top_label,
    brier}``: threshold metrics at ``threshold``, ``ece`` and ``ece_top_label`` with ``n_bins``, ``ece_15``
    always with 15 bins."""
    y, s = as_arrays(y_true, y_score)
    options = {"threshold": threshold, "n_bins": n_bins, "min_positives": min_positives}
    return {name: call_metric(name, y, s, **options) for name in METRICS}
