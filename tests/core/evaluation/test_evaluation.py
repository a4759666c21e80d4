"""The evaluation core: probes, the predictions table's rules, metric rows with ids and intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from focus_dagster.evaluation import predictions as P
from focus_dagster.evaluation.probes import (
    fit_probe,
    in_domain_probes,
    load_probes,
    save_probes,
)
from focus_dagster.evaluation.tables import (
    FAIRNESS_MIN_GROUP,
    Settings,
    metric_id,
    metric_rows,
)

FAST = Settings(n_resamples=200, seed=0)


def separable(n: int, seed: int = 0, shift: float = 1.5):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    embeddings = rng.normal(size=(n, 8)) + shift * labels[:, None] * np.eye(8)[0]
    return embeddings, labels


def test_a_probe_learns_a_separable_task_and_keeps_its_training_youden_threshold(tmp_path):
    x, y = separable(200)
    probe = fit_probe("any_dr", x, y)
    from sklearn.metrics import roc_auc_score

    x_test, y_test = separable(200, seed=1)
    assert roc_auc_score(y_test, probe.score(x_test)) > 0.8
    assert 0 < probe.threshold < 1 and probe.n_train == 200 and probe.n_train_positive == int(y.sum())
    save_probes(tmp_path / "p.npz", {"any_dr": probe})
    loaded = load_probes(tmp_path / "p.npz")["any_dr"]
    np.testing.assert_allclose(loaded.score(x_test), probe.score(x_test))
    assert loaded.threshold == probe.threshold


def test_no_probe_without_both_classes_in_train():
    x, _ = separable(20)
    reason = fit_probe("gon", x, np.zeros(20, dtype=int))
    assert isinstance(reason, str) and "0 positive" in reason


def test_in_domain_probes_score_only_test_images_of_defined_tasks():
    x, y = separable(60)
    labels = pd.DataFrame({"image_id": [f"i{k}" for k in range(60)], "split": ["train"] * 40 + ["test"] * 20,
                           "any_dr": pd.array(y, dtype="Int8"), "referable_dr": pd.array([pd.NA] * 60, dtype="Int8"),
                           "gon": pd.array([pd.NA] * 60, dtype="Int8")})
    embeddings = pd.DataFrame({"image_id": labels["image_id"], "embedding": list(x)})
    run = in_domain_probes("brset", embeddings, labels)
    assert set(run.predictions["task"]) == {"any_dr"} and len(run.predictions) == 20
    assert (run.predictions["split"] == "test").all() and (run.predictions["train_dataset"] == "brset").all()


def labels_frame(n=10):
    return pd.DataFrame({"dataset": "brset", "image_id": [f"i{k}" for k in range(n)], "split": ["test"] * n,
                         "any_dr": pd.array([0, 1] * (n // 2), dtype="Int8"), "referable_dr": pd.array([pd.NA] * n, dtype="Int8"),
                         "gon": pd.array([pd.NA] * n, dtype="Int8")})


def test_predictions_for_unknown_images_are_an_error_naming_count_and_examples():
    scores = pd.DataFrame({"image_id": ["i1", "x9", "x8"], "task": "any_dr", "score": 0.5})
    with pytest.raises(P.PredictionsError, match=r"2 predicted image id\(s\).*\['x8', 'x9'\]"):
        P.with_labels(scores, labels_frame(), "zero_shot_scores tiny/brset")


def test_nan_scores_are_rejected_and_counted():
    scores = pd.DataFrame({"image_id": ["i1", "i2", "i3", "i4"], "task": "any_dr",
                           "score": [0.2, np.nan, np.inf, 1.5]})
    checked = P.finite_scores(scores, "yes_no m/brset")
    assert checked.frame["image_id"].tolist() == ["i1"]
    assert checked.rejected == {"yes_no m/brset: score is NaN or infinite": 2, "yes_no m/brset: score outside [0, 1]": 1}
    assert {e["image_id"] for e in checked.rejected_examples} == {"i2", "i3", "i4"}


def predictions(n=80, seed=0, label=None, **extra):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n) if label is None else np.full(n, label)
    score = np.clip(0.3 * y + rng.uniform(0, 0.7, n), 0, 1)
    return pd.DataFrame({"dataset": "brset", "image_id": [f"i{k}" for k in range(n)], "task": "any_dr", "model": "m",
                         "interface": "vm", "method": "linear_probe", "train_dataset": "brset", "score": score,
                         "score_reference": np.nan, "threshold": 0.5, "label": y, "split": "test", **extra})


def metadata(frame, **columns):
    base = {"image_id": frame["image_id"], "age": np.nan, "sex": None, "quality": None, "camera": None}
    return pd.DataFrame({**base, **columns})


def test_every_configuration_gets_performance_and_calibration_with_intervals():
    frame = predictions()
    rows = metric_rows(frame, metadata(frame), coverage={}, settings=FAST)
    core = rows[rows["axis"].isin(["performance", "calibration"])]
    assert set(core["metric"]) >= {"auroc", "auprc", "accuracy@0.5", "f1@youden", "ece", "ece_15", "ece_top_label",
                                   "brier"}
    assert core["value"].notna().all() and core["ci_low"].notna().all() and core["ci_high"].notna().all()
    # Containment only for unbiased statistics: an ECE's bootstrap sits above its point (the bias).
    unbiased = core[~core["metric"].str.startswith("ece")]
    assert ((unbiased["ci_low"] <= unbiased["value"] + 1e-12) & (unbiased["value"] <= unbiased["ci_high"] + 1e-12)).all()
    assert rows["metric_id"].is_unique
    assert set(rows.loc[rows["axis"] == "fairness", "reason"]) == {
        f"metadata_coverage: no image of this dataset has a {c} value" for c in ("sex", "camera", "age")}


def test_one_class_in_test_is_null_with_a_reason_never_zero():
    frame = predictions(label=0)
    rows = metric_rows(frame, metadata(frame), coverage={}, settings=FAST).set_index("metric")
    assert pd.isna(rows.loc["auroc", "value"]) and "one class" in rows.loc["auroc", "reason"]
    assert pd.isna(rows.loc["sensitivity@0.5", "value"])


def test_metric_ids_are_stable_and_name_what_is_measured():
    config = {"model": "m", "dataset": "brset", "task": "gon", "method": "yes_no", "train_dataset": None}
    assert metric_id(config, "performance", "auroc") == metric_id(dict(config), "performance", "auroc")
    assert metric_id(config, "performance", "auroc") != metric_id(config, "performance", "auprc")
    assert metric_id(config, "fairness", "tpr", "sex=F") != metric_id(config, "fairness", "tpr", "sex=M")


def test_fairness_groups_gaps_and_small_groups():
    frame = predictions(n=120)
    sex = ["F"] * 60 + ["M"] * 54 + [None] * 6
    camera = ["A"] * 115 + ["B"] * 5
    rows = metric_rows(frame, metadata(frame, sex=sex, camera=camera, age=np.linspace(30, 80, 120)),
                       coverage={"sex": True, "camera": True, "age": True}, settings=FAST)
    fairness = rows[rows["axis"] == "fairness"].set_index(["metric", "group"])
    assert fairness.loc[("auroc", "sex=F"), "n"] == 60
    gap = fairness.loc[("auroc_gap", "sex:max-min")]
    aurocs = [fairness.loc[("auroc", f"sex={g}"), "value"] for g in "FM"]
    assert gap["value"] == pytest.approx(max(aurocs) - min(aurocs))
    assert 0 <= gap["ci_low"] <= gap["ci_high"] <= 1  # a max - min gap is biased: its interval need not hold it
    small = fairness.loc[("group", "camera=B")]
    assert pd.isna(small["value"]) and f"at least {FAIRNESS_MIN_GROUP}" in small["reason"]
    assert "gap needs two" in fairness.loc[("auroc_gap", "camera:max-min"), "reason"]
    bands = {g for _, g in fairness.index if g.startswith("age_band=")}
    assert bands == {"age_band=<50", "age_band=50-64", "age_band=>=65"}
    assert ("equalized_odds_gap", "sex:max-min") in fairness.index and ("worst_group_auroc", "sex") in fairness.index


def test_quality_gap_is_adequate_minus_inadequate():
    frame = predictions(n=100)
    quality = ["adequate"] * 80 + ["inadequate"] * 20
    rows = metric_rows(frame, metadata(frame, quality=quality), coverage={"quality": True}, settings=FAST)
    q = rows[rows["axis"] == "quality"].set_index(["metric", "group"])
    a, b = q.loc[("accuracy", "quality=adequate"), "value"], q.loc[("accuracy", "quality=inadequate"), "value"]
    assert q.loc[("accuracy_gap", "quality:adequate-inadequate"), "value"] == pytest.approx(a - b)
