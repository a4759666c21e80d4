"""Robustness rows against scikit-learn and against simulations whose truth is known: a degradation that changes
nothing has a zero delta with p = 1; one that adds noise to the scores lowers AUROC by an interval that excludes
zero; the clean and degraded points are scikit-learn's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from focus_dagster.evaluation.robustness import ROBUSTNESS_COLUMNS, robustness_rows


def binormal(n: int = 400, separation: float = 1.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(int)
    logits = rng.normal(size=n) + separation * y
    return y, 1 / (1 + np.exp(-logits))


def rows_by_metric(frame) -> dict:
    return {row["metric"]: row for row in frame.to_dict("records")}


def test_points_are_scikit_learns_and_the_delta_their_difference():
    y, clean = binormal()
    noisy = np.clip(clean + np.random.default_rng(1).normal(0, 0.3, len(y)), 0, 1)
    frame = robustness_rows(y, clean, {("sensor_noise", 3): noisy}, threshold=0.4, seed=0, n_resamples=300)
    assert list(frame.columns) == ROBUSTNESS_COLUMNS and set(frame["metric"]) == {"auroc", "accuracy@youden", "ece"}
    auroc = rows_by_metric(frame)["auroc"]
    assert auroc["clean"] == pytest.approx(roc_auc_score(y, clean), abs=1e-12)
    assert auroc["degraded"] == pytest.approx(roc_auc_score(y, noisy), abs=1e-12)
    assert auroc["delta"] == pytest.approx(auroc["degraded"] - auroc["clean"], abs=1e-12)
    assert auroc["relative_drop"] == pytest.approx((auroc["clean"] - auroc["degraded"]) / auroc["clean"])
    accuracy = rows_by_metric(frame)["accuracy@youden"]
    assert accuracy["degraded"] == pytest.approx(np.mean((noisy >= 0.4) == y))
    assert accuracy["relative_drop"] is None or np.isnan(accuracy["relative_drop"])


def test_noise_on_the_scores_is_a_drop_whose_paired_interval_excludes_zero():
    y, clean = binormal(600)
    noisy = np.clip(clean + np.random.default_rng(2).normal(0, 0.35, len(y)), 0, 1)
    auroc = rows_by_metric(robustness_rows(y, clean, {("blur", 5): noisy}, None, seed=0, n_resamples=400))["auroc"]
    assert auroc["delta_high"] < 0 and auroc["p_value"] < 0.05
    assert auroc["ci_low"] <= auroc["degraded"] <= auroc["ci_high"]
    # paired: the drop's interval is narrower than the degraded AUROC's own
    assert auroc["delta_high"] - auroc["delta_low"] < auroc["ci_high"] - auroc["ci_low"]


def test_a_degradation_that_changes_nothing_has_a_zero_delta_and_p_one():
    y, clean = binormal()
    frame = robustness_rows(y, clean, {("surround_noise", 5): clean.copy()}, threshold=0.5, seed=0, n_resamples=200)
    for row in frame.to_dict("records"):
        assert row["delta"] == 0 and row["delta_low"] == 0 and row["delta_high"] == 0 and row["p_value"] == 1


def test_without_a_threshold_accuracy_is_undefined_with_its_reason():
    y, clean = binormal()
    accuracy = rows_by_metric(robustness_rows(y, clean, {("haze", 1): clean}, None, seed=0,
                                              n_resamples=100))["accuracy@youden"]
    assert np.isnan(accuracy["delta"]) and np.isnan(accuracy["ci_low"]) and "Youden" in accuracy["reason"]


def test_scores_of_another_length_are_refused():
    y, clean = binormal()
    with pytest.raises(ValueError, match="haze at severity 2: 399 degraded scores for 400 images"):
        robustness_rows(y, clean, {("haze", 2): clean[:-1]}, None, seed=0)


def summary_rows() -> "pd.DataFrame":
    """Two models on one dataset, task and method; the baseline A. Values chosen so the figures are exact by hand."""
    import pandas as pd

    base = {"dataset": "brset", "task": "any_dr", "method": "linear_probe", "train_dataset": "brset", "metric": "auroc",
            "n": 100, "n_pos": 30}
    rows = [("A", "blur", 1, 0.90, 0.10), ("A", "blur", 3, 0.80, 0.20), ("A", "jpeg", 3, 0.85, 0.15),
            ("B", "blur", 1, 0.95, 0.02), ("B", "blur", 3, 0.90, 0.06), ("B", "jpeg", 3, 0.70, 0.22),
            ("B", "haze", 3, 0.75, 0.18)]  # haze: the baseline has none, so it is left out of B's mCE
    frame = pd.DataFrame([{**base, "model": m, "degradation": d, "severity": s, "degraded": auroc,
                           "relative_drop": drop} for m, d, s, auroc, drop in rows])
    ece = frame.assign(metric="ece", degraded=0.1, relative_drop=None)  # not AUROC: ignored by the summary
    return pd.concat([frame, ece], ignore_index=True)


def test_the_summary_is_imagenet_cs_mce_with_auroc_error_and_the_mean_relative_drop():
    from focus_dagster.evaluation.robustness import robustness_summary

    summary = robustness_summary(summary_rows(), baseline="A").set_index("model")
    # B: blur (0.05 + 0.10) / (0.10 + 0.20) = 0.5; jpeg 0.30 / 0.15 = 2.0; mean 1.25. A against itself: 1.
    assert summary.loc["B", "mce"] == pytest.approx(1.25) and summary.loc["A", "mce"] == pytest.approx(1.0)
    assert summary.loc["B", "mean_relative_drop"] == pytest.approx((0.02 + 0.06 + 0.22 + 0.18) / 4)
    assert summary.loc["B", "quality_axis"] == pytest.approx(1 - 0.12)
    assert (summary.loc["B", "worst_degradation"], summary.loc["B", "worst_severity"]) == ("jpeg", 3)
    assert summary.loc["B", "variants"] == 4 and summary.loc["B", "ce_baseline"] == "A"
    assert summary.loc["B", "train_dataset"] == "brset"  # as the rows recorded it


def test_without_the_baseline_the_mce_is_null_with_its_reason():
    from focus_dagster.evaluation.robustness import robustness_summary

    rows = summary_rows()
    summary = robustness_summary(rows[rows["model"] == "B"], baseline="A").set_index("model")
    assert summary.loc["B", "mce"] is None or np.isnan(summary.loc["B", "mce"])
    assert "baseline A has no robustness rows" in summary.loc["B", "mce_reason"]
    assert robustness_summary(rows, baseline=None)["mce_reason"].eq("no baseline model stated").all()


def test_zero_shot_rows_compare_the_prompts_scores_on_the_same_labelled_test_images():
    """Zero-shot: clean and degraded scores of the same prompts (literal), the labels' test split only, AUROC as
    scikit-learn computes it on the images both sides have; no threshold, so accuracy is undefined with its
    reason; ids apart from the probe's, and each row named by the degradation's description."""
    import pandas as pd

    from focus_dagster.evaluation.robustness import prompt_robustness

    rng = np.random.default_rng(3)
    ids = [f"i{k}" for k in range(60)]
    y = np.array([k % 3 == 0 for k in range(60)], dtype=int)
    labels = pd.DataFrame({"image_id": ids + ["train0"], "split": ["test"] * 60 + ["train"],
                           "any_dr": list(y) + [1]})
    clean_scores = np.clip(0.3 + 0.4 * y + rng.normal(0, 0.15, 60), 0, 1)
    blurred = np.clip(clean_scores + rng.normal(0, 0.2, 60), 0, 1)
    clean = pd.DataFrame({"image_id": ids + ["train0"], "task": "any_dr", "score": list(clean_scores) + [0.9]})
    degraded = {("defocus_blur", 3): pd.DataFrame({"image_id": ids[5:], "task": "any_dr", "score": blurred[5:]})}
    described = [{"registry": "r-1", "degradation": "defocus_blur", "severity": 3, "family": "blur"}]
    frame = prompt_robustness("clip", "idrid", "zero_shot", clean, degraded, labels, described, n_resamples=200)
    rows = {row["metric"]: row for row in frame.to_dict("records")}
    auroc = rows["auroc"]
    assert auroc["method"] == "zero_shot" and auroc["n"] == 55  # the 55 test images the degraded side has
    assert auroc["clean"] == pytest.approx(roc_auc_score(y[5:], clean_scores[5:]), abs=1e-12)
    assert auroc["degraded"] == pytest.approx(roc_auc_score(y[5:], blurred[5:]), abs=1e-12)
    assert rows["accuracy@youden"]["degraded"] is None or np.isnan(rows["accuracy@youden"]["degraded"])
    assert rows["accuracy@youden"]["reason"]
    assert json.loads(auroc["parameters"])["family"] == "blur" and auroc["registry"] == "r-1"
    assert frame["metric_id"].is_unique and frame["metric_id"].str.fullmatch(r"m-[0-9a-f]{16}").all()
