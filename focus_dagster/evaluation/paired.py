"""Adapted vs base on the same test images: paired bootstrap deltas, Benjamini-Hochberg q-values, and the summary.

A LoRA adapter (adapted) and its base model (base) score the same test images, so their difference is measured
on the same resamples: one set of label-stratified resamples (``bootstrap.resample_counts``, the same draws as
``bootstrap.resample_indices(y, n_resamples, seed)``) is applied to both score vectors, every metric is computed
on both per resample (``bootstrap.Resamples.metrics``: the vectorised kernels), and replicate r of a delta is
``metric(adapted on resample r) - metric(base on resample r)``. Whatever both models get right or wrong on the
same images then cancels within a replicate, which is why a paired interval is much narrower than one from
independent resamples when the two score vectors are correlated (as an adapter and its base are).

Metrics (``PAIRED_METRICS``): ``auroc``, ``accuracy@0.5``, ``accuracy@youden`` (each score vector at its own
Youden threshold from its own training split, passed in), ``ece`` (10 bins, ``metrics.ece``) and ``brier``.
The point values are ``metrics.call_metric`` on the whole test set; ``delta = adapted - base``.

Interval: the ``1 - alpha`` percentile interval of the finite replicate deltas (``intervals.percentile``). Why
percentile and not the per-metric ``intervals.CHOICE``: (1) the p-value below is the inversion of this same
interval, so "the interval excludes 0" and "p < alpha" say the same thing (up to the quantiles' linear
interpolation), and a table never shows one without the other; (2) on a difference of two metrics on shared
resamples, the platform's coverage evidence (``intervals`` module docstring, signed two-group difference) has
percentile and BCa with the same mean coverage (86.6% vs 86.9%), and BCa would need a paired jackknife for each
metric; (3) the upward bias of the plug-in ECE, which made ``basic`` the choice for an ECE alone, is about the
same for two similarly calibrated score vectors on the same images and then largely cancels in their
difference; when their calibration differs much it need not, so read an ECE delta's interval as approximate.
Null check (``tests/test_paired.py``'s design: two draws of one binormal score distribution, n = 150, 30%
positives, R = 300, 300 datasets): p < 0.05 in 3.3% (AUROC), 4.7% (accuracy,
threshold 0.5), 2.0% (ECE), 3.0% (Brier).

p-value (two-sided, the bootstrap test that inverts the percentile interval): over the R finite replicate
deltas, ``p = min(1, 2 * min(#{delta_r <= 0}, #{delta_r >= 0}) / R)``, without a +1 correction, floored at
``1 / (R + 1)``: with R resamples the bootstrap cannot tell a p-value below about 1/R from 0, so it never
reports 0. Replicates equal to 0 count on both sides (conservative for the discrete accuracy deltas); all
replicates 0 (identical scores) give p = 1.

Undefined: a delta whose base or adapted value is undefined (one class in the test labels for AUROC, fewer than
``metrics.MIN_POSITIVES`` of a class, a missing Youden threshold) has a null delta, a null interval, a null
p-value and a reason; so does a delta without any finite replicate.

Multiplicity: ``benjamini_hochberg`` gives q-values; ``summarise`` adds them per family (metric x domain) to a
long table of deltas and summarises the mean delta per metric, in-domain vs out-of-domain, per model and
overall, each mean with a sign-flip p-value and its q-value (see ``summarise``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from focus_dagster.evaluation.bootstrap import Resamples, resample_counts
from focus_dagster.evaluation.intervals import percentile
from focus_dagster.evaluation.metrics import Value, as_arrays, call_metric

N_BINS = 10  # the platform's ECE (the protocol's reference number of bins)
HALF = 0.5
PAIRED_METRICS = ("auroc", "accuracy@0.5", "accuracy@youden", "ece", "brier")
# The paired metric name -> the platform metric it computes; the threshold is 0.5 unless it is "@youden".
PLATFORM_METRIC = {"auroc": "auroc", "auprc": "auprc", "accuracy@0.5": "accuracy", "accuracy@youden": "accuracy",
                   "ece": "ece", "brier": "brier"}
DOMAINS = ("in_domain", "out_of_domain")


@dataclass(frozen=True, eq=False)
class PairedDelta:
    """One metric of adapted vs base on the same test images.

    ``delta = adapted - base``; ``low``/``high`` its percentile interval, ``p_value`` the two-sided bootstrap
    p-value (module docstring). ``delta`` None (see ``reason``) implies null ``low``, ``high`` and ``p_value``.
    ``n``/``n_pos``: test images and positives; ``n_replicates``: resamples where both values are defined.
    ``replicates``: the R replicate deltas, NaN where undefined.
    """

    metric: str
    base: float | None
    adapted: float | None
    delta: float | None
    low: float | None
    high: float | None
    p_value: float | None
    n: int
    n_pos: int
    n_replicates: int = 0
    reason: str | None = None
    replicates: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)

    def as_row(self) -> dict:
        """The delta as a flat dict (the replicates left out), for a long table."""
        return {"metric": self.metric, "base": self.base, "adapted": self.adapted, "delta": self.delta,
                "ci_low": self.low, "ci_high": self.high, "p_value": self.p_value, "n": self.n,
                "n_pos": self.n_pos, "n_replicates": self.n_replicates, "reason": self.reason}


# ------------------------------------------------------------------------------------------- paired deltas


def paired_deltas(y_true, base_score, adapted_score, *, base_threshold: float | None,
                  adapted_threshold: float | None, seed: int, n_resamples: int = 1000,
                  alpha: float = 0.05, metrics: tuple[str, ...] = PAIRED_METRICS,
                  sides: tuple[str, str] = ("base", "adapted")) -> dict[str, PairedDelta]:
    """Adapted minus base for each of ``metrics`` (default ``PAIRED_METRICS``; ``auprc`` may be asked too), with
    the paired bootstrap interval and p-value.

    ``base_threshold`` / ``adapted_threshold``: each score vector's Youden threshold from its own training split
    (None or NaN: ``accuracy@youden`` is undefined). Resamples: ``n_resamples`` label-stratified draws from
    ``seed``, shared by both score vectors. ``sides`` names the two score vectors in the reasons.
    """
    unknown = [name for name in metrics if name not in PLATFORM_METRIC]
    if unknown:
        raise ValueError(f"unknown paired metric(s) {unknown}; known: {sorted(PLATFORM_METRIC)}")
    y, base = as_arrays(y_true, base_score)
    _, adapted = as_arrays(y, adapted_score)  # also checks that it has one score per label
    thresholds = {"base": _usable_threshold(base_threshold), "adapted": _usable_threshold(adapted_threshold)}
    points = {side: side_points(y, s, thresholds[side], name, metrics)
              for side, s, name in (("base", base, sides[0]), ("adapted", adapted, sides[1]))}
    wanted = [name for name in metrics if points["base"][name].defined and points["adapted"][name].defined]
    replicates = _paired_replicates(y, base, adapted, thresholds, wanted, n_resamples, seed)
    n, n_pos = len(y), int(y.sum())
    return {name: paired_delta(name, points["base"][name], points["adapted"][name], replicates.get(name),
                               n, n_pos, alpha)
            for name in metrics}


def _usable_threshold(threshold) -> float | None:
    """The threshold as a float, or None when it is missing (None, NaN, inf)."""
    if threshold is None:
        return None
    threshold = float(threshold)
    return threshold if math.isfinite(threshold) else None


def side_points(y: np.ndarray, s: np.ndarray, youden: float | None, side: str, metrics: tuple[str, ...]
            ) -> dict[str, Value]:
    """The point value of each of ``metrics`` for one score vector (``side`` names it in the reasons)."""
    out = {}
    for name in metrics:
        if name == "accuracy@youden" and youden is None:
            out[name] = Value(None, f"no Youden threshold for the {side} scores (its training split gave none)")
            continue
        threshold = youden if name == "accuracy@youden" else HALF
        value = call_metric(PLATFORM_METRIC[name], y, s, threshold=threshold, n_bins=N_BINS)
        out[name] = value if value.defined else Value(None, f"{side}: {value.reason}")
    return out


def _paired_replicates(y: np.ndarray, base: np.ndarray, adapted: np.ndarray, thresholds: dict, wanted: list,
                       n_resamples: int, seed: int) -> dict[str, np.ndarray]:
    """Replicate deltas [R] of the metrics ``wanted``: one set of resample weights for both score vectors."""
    if not wanted:
        return {}
    counts = resample_counts(y, n_resamples, seed)  # the draws of resample_indices(y, n_resamples, seed)
    base_values = side_replicates(y, base, counts, thresholds["base"], wanted)
    adapted_values = side_replicates(y, adapted, counts, thresholds["adapted"], wanted)
    return {name: adapted_values[name] - base_values[name] for name in wanted}


def side_replicates(y: np.ndarray, s: np.ndarray, counts: np.ndarray, youden: float | None, wanted: list
                ) -> dict[str, np.ndarray]:
    """One score vector's replicates of the metrics ``wanted`` on the resamples ``counts``: the metrics at 0.5 in
    one pass of the kernels, accuracy at the Youden threshold in a second (a pass has one threshold)."""
    resamples = Resamples(y, s, counts)
    at_half = [name for name in wanted if name != "accuracy@youden"]
    platform = resamples.metrics(tuple(PLATFORM_METRIC[name] for name in at_half), threshold=HALF, n_bins=N_BINS)
    out = {name: platform[PLATFORM_METRIC[name]] for name in at_half}
    if "accuracy@youden" in wanted:
        out["accuracy@youden"] = resamples.metrics(("accuracy",), threshold=youden)["accuracy"]
    return out


def paired_delta(name: str, base: Value, adapted: Value, replicates: np.ndarray | None, n: int, n_pos: int,
                 alpha: float = 0.05) -> PairedDelta:
    """The ``PairedDelta`` of one metric from its two point values and its replicate deltas (``adapted - base``
    per resample; None when a point value is undefined): the percentile interval and the bootstrap p-value."""
    sides = {"base": base.value, "adapted": adapted.value, "n": n, "n_pos": n_pos}
    if replicates is None:
        reason = "; ".join(value.reason for value in (base, adapted) if not value.defined)
        return PairedDelta(name, delta=None, low=None, high=None, p_value=None, reason=reason, **sides)
    delta = adapted.value - base.value
    finite = int(np.isfinite(replicates).sum())
    if finite == 0:
        return PairedDelta(name, delta=None, low=None, high=None, p_value=None, replicates=replicates,
                           reason="the delta is undefined in every resample", **sides)
    low, high = percentile(delta, replicates, alpha)
    return PairedDelta(name, delta=delta, low=low, high=high, p_value=bootstrap_p_value(replicates),
                       n_replicates=finite, replicates=replicates, **sides)


def bootstrap_p_value(replicates) -> float | None:
    """Two-sided p-value of "delta = 0" from replicate deltas (NaN left out; None when none is finite):
    ``min(1, 2 * min(#{<= 0}, #{>= 0}) / R)``, floored at ``1 / (R + 1)`` (module docstring)."""
    values = np.asarray(replicates, dtype=np.float64).ravel()
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    on_the_smaller_side = min(int((finite <= 0).sum()), int((finite >= 0).sum()))
    p = min(1.0, 2.0 * on_the_smaller_side / finite.size)
    return max(p, 1.0 / (finite.size + 1))


# ------------------------------------------------------------------------------------------- q-values


def benjamini_hochberg(p_values) -> np.ndarray:
    """Benjamini-Hochberg q-values (adjusted p-values) of ``p_values``, in their order.

    ``q_(i) = min_{j >= i} m * p_(j) / j`` over the m finite p-values sorted ascending, capped at 1; NaN / None
    stay NaN and do not count in m. Monotone: a smaller p never gets a larger q.
    """
    p = np.array([np.nan if value is None else value for value in np.ravel(np.asarray(p_values, dtype=object))],
                 dtype=np.float64)
    q = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    if finite.size == 0:
        return q
    if (p[finite] < 0).any() or (p[finite] > 1).any():
        raise ValueError("p-values must lie in [0, 1]")
    order = finite[np.argsort(p[finite], kind="stable")]
    scaled = p[order] * finite.size / np.arange(1, finite.size + 1)
    q[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)  # the running minimum from the top
    return q


# -------------------------------------------------------------------------------------------- summary

ROW_COLUMNS = ("model", "train_dataset", "task", "dataset", "domain", "metric", "delta", "p_value")
SUMMARY_COLUMNS = ["model", "domain", "metric", "n", "mean_delta", "p_value", "q_value"]
ALL_MODELS = "all"  # the summary's ``model`` for the overall rows
SIGN_FLIPS = 10_000  # random sign patterns when the exact enumeration (2**n) is larger
SIGN_FLIP_SEED = 0


@dataclass(frozen=True)
class Summary:
    """``rows``: the input table with ``q_value`` (BH per metric x domain); ``means``: ``SUMMARY_COLUMNS``."""

    rows: pd.DataFrame
    means: pd.DataFrame


def summarise(rows: pd.DataFrame) -> Summary:
    """q-values per comparison, and the mean delta per metric, in-domain vs out-of-domain, per model and overall.

    ``rows``: one row per (adapter, evaluation dataset, metric) with at least ``ROW_COLUMNS`` (``domain``:
    "in_domain" or "out_of_domain"; ``delta`` / ``p_value`` NaN where undefined).

    - ``rows.q_value``: BH over the comparisons of one family, a metric within one domain (NaN p stays NaN).
    - ``means``: per (model, domain, metric), and per (domain, metric) over all models (``model = "all"``), the
      number ``n`` of comparisons with a defined delta and their ``mean_delta``. Its ``p_value`` tests "the mean
      delta is 0" across those comparisons by a sign-flip test: under the null each comparison's delta is as
      likely negative as positive, so the mean is compared with the means of the deltas with random signs
      (``sign_flip_p_value``; exact up to 13 comparisons, where it is at least 2 / 2**n: 0.5 for two). This
      is a test across configurations, not the paired bootstrap; it takes the comparisons as independent, which
      they are not entirely (one adapter is evaluated on several datasets, the models share test images), so
      read it as indicative. ``q_value``: BH within a family of means, the per-model means of one metric in
      one domain; an overall mean is alone in its family (q = p).
    """
    missing = [column for column in ROW_COLUMNS if column not in rows.columns]
    if missing:
        raise KeyError(f"rows lack column(s) {missing}")
    unknown = sorted(set(rows["domain"]) - set(DOMAINS))
    if unknown:
        raise ValueError(f"domain must be one of {DOMAINS}, got {unknown}")
    with_q = rows.copy()
    with_q["q_value"] = np.nan
    for _, family in with_q.groupby(["metric", "domain"], sort=False):
        with_q.loc[family.index, "q_value"] = benjamini_hochberg(family["p_value"].to_numpy(dtype=np.float64))
    return Summary(with_q, _means(with_q))


def _means(rows: pd.DataFrame) -> pd.DataFrame:
    """The mean deltas of ``summarise``, per model and overall, with their sign-flip p- and q-values."""
    per_model = [_mean_row(model, domain, metric, group["delta"])
                 for (model, domain, metric), group in rows.groupby(["model", "domain", "metric"], sort=True)]
    overall = [_mean_row(ALL_MODELS, domain, metric, group["delta"])
               for (domain, metric), group in rows.groupby(["domain", "metric"], sort=True)]
    per_model = pd.DataFrame(per_model, columns=SUMMARY_COLUMNS)
    overall = pd.DataFrame(overall, columns=SUMMARY_COLUMNS)
    for _, family in per_model.groupby(["domain", "metric"], sort=False):
        per_model.loc[family.index, "q_value"] = benjamini_hochberg(family["p_value"].to_numpy(dtype=np.float64))
    overall["q_value"] = overall["p_value"]  # a family of one
    return pd.concat([overall, per_model], ignore_index=True)


def _mean_row(model: str, domain: str, metric: str, deltas: pd.Series) -> dict:
    values = deltas.to_numpy(dtype=np.float64)
    values = values[np.isfinite(values)]
    return {"model": model, "domain": domain, "metric": metric, "n": int(values.size),
            "mean_delta": float(values.mean()) if values.size else np.nan,
            "p_value": sign_flip_p_value(values), "q_value": np.nan}


def sign_flip_p_value(deltas, n_flips: int = SIGN_FLIPS, seed: int = SIGN_FLIP_SEED) -> float:
    """Two-sided sign-flip p-value of "the mean of ``deltas`` is 0" (NaN for no delta).

    The share of sign patterns whose mean is at least as far from 0 as the observed one: every pattern when
    2**n <= ``n_flips`` (exact, the observed one included), else ``n_flips`` random ones from ``seed`` with the
    +1 correction ``(1 + hits) / (1 + n_flips)`` (the observed pattern counts as one; never 0).
    """
    values = np.asarray(deltas, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return np.nan
    observed = abs(values.mean())
    tolerance = 1e-12 * max(1.0, float(np.abs(values).max()))  # equal means must not miss by rounding
    if 2 ** values.size <= n_flips:
        signs = 1 - 2 * ((np.arange(2 ** values.size)[:, None] >> np.arange(values.size)) & 1)
        return float(np.mean(np.abs(signs @ values / values.size) >= observed - tolerance))
    signs = np.random.Generator(np.random.PCG64(seed)).choice((-1.0, 1.0), size=(n_flips, values.size))
    hits = int(np.sum(np.abs(signs @ values / values.size) >= observed - tolerance))
    return (1 + hits) / (1 + n_flips)
