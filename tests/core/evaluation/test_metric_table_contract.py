"""What every metric table promises, over a varied set of configurations (sizes 30-700, prevalence 3-50%,
ties, calibrated and not): a null value has no interval; the interval of an unbiased statistic contains its
point; the resamples do not depend on which configurations are computed with it; a configuration with too
few positives is flagged on every one of its rows.

Biased statistics (the ECEs, max - min gaps, the worst group) are exempt from containment: their bootstrap
distribution sits beside the point by the bias (bench/results/coverage_cpu_2core.md), which is why their
intervals use other methods.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from focus_dagster.evaluation.tables import Settings, metric_rows

UNBIASED = {"auroc", "accuracy@0.5", "sensitivity@0.5", "specificity@0.5", "accuracy@youden", "sensitivity@youden",
            "specificity@youden", "brier", "positive_rate", "accuracy", "tpr", "fpr"}
COVERAGE = {"sex": True, "age": True, "quality": True, "camera": False}


def configurations(seed: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Predictions of 14 configurations on one 700-image test set, and its metadata."""
    rng = np.random.default_rng(seed)
    n = 700
    ids = np.array([f"img{i:04d}" for i in range(n)])
    metadata = pd.DataFrame({"image_id": ids, "sex": rng.choice(["F", "M"], n), "age": rng.integers(20, 90, n) * 1.0,
                             "quality": rng.choice(["adequate", "inadequate"], n, p=[0.85, 0.15]), "camera": None})
    frames = []
    for c, (size, prevalence, shift) in enumerate([(30, 0.5, 1.5), (60, 0.2, 1.0), (100, 0.1, 2.0), (200, 0.3, 0.5),
                                                   (300, 0.05, 1.5), (700, 0.3, 1.0), (700, 0.5, 0.0),
                                                   (120, 0.03, 1.0), (400, 0.2, 3.0), (250, 0.4, 1.2),
                                                   (80, 0.5, 0.8), (500, 0.15, 1.4), (150, 0.25, 2.2), (40, 0.3, 1.0)]):
        take = rng.choice(n, size, replace=False)
        y = (rng.random(size) < prevalence).astype(int)
        score = 1 / (1 + np.exp(-(rng.normal(0, 1, size) + shift * y - shift * prevalence)))
        if c % 3 == 0:
            score = np.round(score, 2)  # ties
        frames.append(pd.DataFrame({
            "dataset": "d", "image_id": ids[take], "task": "any_dr", "model": f"model{c:02d}", "interface": "x",
            "method": "linear_probe", "train_dataset": "d", "score": score, "score_reference": score,
            "threshold": 0.45, "label": y, "split": "test"}))
    return pd.concat(frames, ignore_index=True), metadata


@pytest.fixture(scope="module")
def table():
    predictions, metadata = configurations()
    return predictions, metadata, metric_rows(predictions, metadata, COVERAGE, Settings(n_resamples=400, seed=0))


def test_a_null_value_never_has_an_interval(table):
    *_, rows = table
    undefined = rows[rows["value"].isna()]
    assert len(undefined) > 0  # the data has undefined numbers (AUROC on 3% prevalence, small groups)
    assert undefined["ci_low"].isna().all() and undefined["ci_high"].isna().all()
    assert undefined["reason"].notna().all()


def test_the_interval_of_an_unbiased_statistic_contains_its_point(table):
    *_, rows = table
    unbiased = rows[rows["metric"].isin(UNBIASED) & rows["value"].notna()]
    assert len(unbiased) > 300
    outside = unbiased[(unbiased["value"] < unbiased["ci_low"] - 1e-12) | (unbiased["value"] > unbiased["ci_high"] + 1e-12)]
    assert outside.empty, outside[["model", "metric", "group", "value", "ci_low", "ci_high"]].to_string()
    defined = rows[rows["value"].notna()]
    assert ((defined["ci_low"] >= -1e-12) & (defined["ci_high"] <= 1 + 1e-12) | defined["metric"].str.endswith("_gap")).all()


def test_a_configuration_gets_the_same_numbers_whatever_is_computed_with_it(table):
    """The resamples are seeded from the configuration's identity, not from the order of computation."""
    predictions, metadata, rows = table
    alone = metric_rows(predictions[predictions["model"] == "model05"], metadata, COVERAGE,
                        Settings(n_resamples=400, seed=0))
    together = rows[rows["model"] == "model05"].reset_index(drop=True)
    pd.testing.assert_frame_equal(alone.reset_index(drop=True), together)


def test_two_groups_with_the_same_images_get_independent_replicates():
    """Groups with equal positives and negatives used to be resampled with one seed each, the same seed: twins
    got identical index matrices and their gap replicates were all 0 (an interval of [0, 0]). On the shared
    resamples of the configuration, two groups holding the same (label, score) pairs are drawn independently."""
    from focus_dagster.evaluation.bootstrap import resample_indices, resample_weights
    from focus_dagster.evaluation.tables import group_values

    rng = np.random.default_rng(11)
    y_half = (rng.random(150) < 0.3).astype(int)
    s_half = np.clip(rng.normal(0.3 + 0.3 * y_half, 0.2), 0, 1)
    y, s = np.concatenate([y_half, y_half]), np.concatenate([s_half, s_half])  # group A's twin is group B
    member_a = np.arange(300) < 150
    weights = resample_weights(resample_indices(y, 500, seed=5), 300)
    a, b = group_values(y, s, member_a, weights), group_values(y, s, ~member_a, weights)
    for metric in ("accuracy", "tpr", "auroc"):
        assert a[metric][0] == b[metric][0]  # the same point: the same images
        ra, rb = a[metric][2], b[metric][2]
        assert not np.allclose(ra, rb)
        assert abs(np.corrcoef(ra, rb)[0, 1]) < 0.2, metric  # independent draws, not lockstep


def test_a_configuration_with_too_few_positives_is_flagged_on_every_row(table):
    predictions, _, rows = table
    positives = predictions.groupby("model")["label"].sum()
    negatives = predictions.groupby("model")["label"].count() - positives
    few = set(positives[(positives < 5) | (negatives < 5)].index)
    assert few  # model07: 120 images at 3% prevalence
    flagged = rows.groupby("model")["degenerate"].agg(["all", "any"])
    assert set(flagged.index[flagged["all"]]) == few and set(flagged.index[flagged["any"]]) == few
    reasons = rows[rows["degenerate"]]["degenerate_reason"]
    assert reasons.notna().all() and reasons.str.contains("positive").all()
