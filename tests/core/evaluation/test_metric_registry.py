"""Common tests over the metric registry (`evaluation.metrics.METRICS`): every metric the suite computes is held to
the properties its definition implies, so a metric added to the registry is tested the day it is added.

Each metric is classified below by what it is (ranking, thresholded, calibration, squared error); a metric the
table does not classify fails `test_every_registered_metric_is_classified`. The properties follow from the
definitions, not from the code: an area under a curve depends on the order of the scores only; a metric at the
0.5 threshold depends on which side of it each score falls; reflecting labels and scores (y -> 1 - y,
s -> 1 - s) leaves symmetric definitions unchanged and swaps sensitivity with specificity.
"""

from __future__ import annotations

import numpy as np
import pytest

from focus_dagster.evaluation.metrics import METRICS, call_metric

RANKING, THRESHOLD, CALIBRATION, SQUARED = "ranking", "threshold", "calibration", "squared"
KIND = {"auroc": RANKING, "auprc": RANKING, "accuracy": THRESHOLD, "sensitivity": THRESHOLD,
        "specificity": THRESHOLD, "f1": THRESHOLD, "ece": CALIBRATION, "ece_15": CALIBRATION,
        "ece_top_label": CALIBRATION, "brier": SQUARED}
# Unchanged when labels and scores are both reflected (y -> 1 - y, s -> 1 - s), scores off the 0.5 threshold.
REFLECTION_INVARIANT = {"auroc", "accuracy", "ece", "ece_15", "ece_top_label", "brier"}
# A perfect prediction (scores equal to the labels) reaches this value.
PERFECT = {"auroc": 1.0, "auprc": 1.0, "accuracy": 1.0, "sensitivity": 1.0, "specificity": 1.0, "f1": 1.0,
           "ece": 0.0, "ece_15": 0.0, "ece_top_label": 0.0, "brier": 0.0}
SEEDS = range(20)


def _sample(seed: int, n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Labels with both classes well represented and probability scores that carry some signal, none of them at
    0.5 nor on a bin edge (multiples of 1/30 cover the 10- and 15-bin edges), where reflection is exact."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < rng.uniform(0.2, 0.8)
    s = np.clip(rng.normal(0.35 + 0.3 * y, 0.2), 0.001, 0.999)
    on_edge = np.isclose((s * 30) % 1, 0, atol=1e-6) | np.isclose((s * 30) % 1, 1, atol=1e-6)
    s[on_edge] += 1e-4
    return y.astype(int), s


def _value(name: str, y, s) -> float:
    found = call_metric(name, y, s)
    assert found.defined, f"{name} undefined on a sample with both classes: {found.reason}"
    return found.value


def _increasing_through_half(s: np.ndarray) -> np.ndarray:
    """A strictly increasing map of [0, 1] onto itself that keeps 0.5 where it is (cubic on each half)."""
    return np.where(s < 0.5, 0.5 * (2 * s) ** 3, 1 - 0.5 * (2 * (1 - s)) ** 3)


def test_every_registered_metric_is_classified():
    assert set(METRICS) == set(KIND) == set(PERFECT), (
        f"classify the metric(s) {sorted(set(METRICS) ^ set(KIND))} in this file's tables")


@pytest.mark.parametrize("name", sorted(METRICS))
def test_values_lie_in_the_unit_interval(name):
    for seed in SEEDS:
        assert 0.0 <= _value(name, *_sample(seed)) <= 1.0


@pytest.mark.parametrize("name", sorted(METRICS))
def test_the_order_of_the_images_does_not_matter(name):
    for seed in SEEDS:
        y, s = _sample(seed)
        order = np.random.default_rng(seed + 100).permutation(len(y))
        assert _value(name, y[order], s[order]) == pytest.approx(_value(name, y, s), abs=1e-12)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_a_perfect_prediction_reaches_the_best_value(name):
    y = np.array([0, 1] * 20)
    assert _value(name, y, y.astype(float)) == PERFECT[name]


@pytest.mark.parametrize("name", sorted(METRICS))
def test_an_empty_sample_is_undefined_with_a_reason_not_an_error(name):
    found = call_metric(name, np.array([], dtype=int), np.array([], dtype=float))
    assert found.value is None and found.reason


@pytest.mark.parametrize("name", sorted(n for n, kind in KIND.items() if kind == RANKING))
def test_a_ranking_metric_depends_on_the_order_of_the_scores_only(name):
    for seed in SEEDS:
        y, s = _sample(seed)
        for transformed in (s ** 3, np.sqrt(s), 0.2 + 0.5 * s, np.log(s / (1 - s))):
            assert _value(name, y, transformed) == pytest.approx(_value(name, y, s), abs=1e-12)


@pytest.mark.parametrize("name", sorted(n for n, kind in KIND.items() if kind == THRESHOLD))
def test_a_thresholded_metric_depends_on_the_side_of_the_threshold_only(name):
    for seed in SEEDS:
        y, s = _sample(seed)
        assert _value(name, y, _increasing_through_half(s)) == _value(name, y, s)


@pytest.mark.parametrize("name", sorted(n for n, kind in KIND.items() if kind in (CALIBRATION, SQUARED)))
def test_a_calibration_metric_sees_a_monotone_distortion(name):
    """Unlike ranking metrics, calibration and Brier score move when the scores are distorted, even in order."""
    y, s = _sample(0)
    assert _value(name, y, s ** 3) != pytest.approx(_value(name, y, s), abs=1e-6)


@pytest.mark.parametrize("name", sorted(REFLECTION_INVARIANT))
def test_reflecting_labels_and_scores_leaves_a_symmetric_metric_unchanged(name):
    for seed in SEEDS:
        y, s = _sample(seed)
        assert _value(name, 1 - y, 1 - s) == pytest.approx(_value(name, y, s), abs=1e-9)


def test_reflection_swaps_sensitivity_and_specificity():
    for seed in SEEDS:
        y, s = _sample(seed)
        assert _value("sensitivity", 1 - y, 1 - s) == pytest.approx(_value("specificity", y, s), abs=1e-12)


def test_flipping_the_labels_alone_mirrors_auroc():
    for seed in SEEDS:
        y, s = _sample(seed)
        assert _value("auroc", 1 - y, s) == pytest.approx(1 - _value("auroc", y, s), abs=1e-12)
