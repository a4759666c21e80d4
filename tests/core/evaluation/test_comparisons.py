"""Model A against model B (focus_dagster/evaluation/comparisons.py): checked against a paired bootstrap written
here from scikit-learn and torchmetrics, and on simulations with a planted difference and with none."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

from focus_dagster.evaluation.comparisons import ComparisonError, comparison_rows, format_comparison, selected
from focus_dagster.evaluation.tables import configuration_seed

R = 200


def scores(rng, y: np.ndarray, separation: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(rng.normal(size=len(y)) + separation * y - 0.6)))


def predictions(model: str, y: np.ndarray, s: np.ndarray, *, dataset="papila", task="gon", method="linear_probe",
                threshold=0.4, ids=None) -> pd.DataFrame:
    ids = ids if ids is not None else [f"img{k:04d}" for k in range(len(y))]
    return pd.DataFrame({"dataset": dataset, "image_id": ids, "task": task, "model": model, "interface": "vm",
                         "method": method, "train_dataset": dataset if method == "linear_probe" else "",
                         "score": s, "score_reference": np.nan, "threshold": threshold, "label": y.astype(int),
                         "split": "test", "lineage_id": f"stamp-{model}-{dataset}", "labels_version": "v1"})


def draws(y: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Label-stratified resample indices [R, n] as documented: positives first, then negatives, each class one
    `integers` call of a PCG64 generator."""
    rng = np.random.Generator(np.random.PCG64(seed))
    parts = []
    for members in (np.flatnonzero(y == 1), np.flatnonzero(y == 0)):
        parts.append(members[rng.integers(0, len(members), size=(n_resamples, len(members)))])
    return np.hstack(parts)


def ece10(y: np.ndarray, s: np.ndarray) -> float:
    import torch
    from torchmetrics.functional.classification import binary_calibration_error

    return float(binary_calibration_error(torch.tensor(s), torch.tensor(y), n_bins=10, norm="l1"))


REFERENCE = {
    "auroc": lambda y, s, t: roc_auc_score(y, s),
    "auprc": lambda y, s, t: average_precision_score(y, s),
    "accuracy@0.5": lambda y, s, t: float(np.mean((s >= 0.5) == y)),
    "accuracy@youden": lambda y, s, t: float(np.mean((s >= t) == y)),
    "ece": lambda y, s, t: ece10(y, s),
    "brier": lambda y, s, t: brier_score_loss(y, s),
}


def reference_deltas(y, a, b, thresholds, idx) -> dict:
    """Point delta, percentile interval and two-sided p of every metric, resample by resample."""
    out = {}
    for name, metric in REFERENCE.items():
        point = metric(y, a, thresholds[0]) - metric(y, b, thresholds[1])
        reps = np.array([metric(y[i], a[i], thresholds[0]) - metric(y[i], b[i], thresholds[1]) for i in idx])
        smaller = min((reps <= 0).sum(), (reps >= 0).sum())
        p = max(min(1.0, 2 * smaller / len(reps)), 1 / (len(reps) + 1))
        out[name] = (point, *np.quantile(reps, [0.025, 0.975]), p)
    return out


@pytest.fixture(scope="module")
def pair():
    rng = np.random.default_rng(7)
    y = (rng.random(160) < 0.35).astype(int)
    a, b = scores(rng, y, 1.6), scores(rng, y, 1.0)
    samples = pd.concat([predictions("v2", y, a, threshold=0.45), predictions("v1", y, b, threshold=0.38)])
    sex = np.where(rng.random(len(y)) < 0.5, "F", "M")
    attributes = pd.DataFrame({"dataset": "papila", "image_id": samples["image_id"].iloc[:len(y)], "sex": sex,
                               "age": np.nan, "quality": None, "camera": None, "attributes_lineage_id": "stamp-groups"})
    usable = {"papila": {"sex": True, "age": False, "quality": False}}
    rows = comparison_rows(samples, "v2", "v1", attributes=attributes, usable=usable, n_resamples=R)
    return y, a, b, sex, rows


def test_every_delta_equals_an_independent_paired_bootstrap(pair):
    y, a, b, _, rows = pair
    seed = configuration_seed({"model": "v2 - v1", "dataset": "papila", "task": "gon", "method": "linear_probe",
                               "train_dataset": "papila"}, 0)
    expected = reference_deltas(y, a, b, (0.45, 0.38), draws(y, R, seed))
    found = rows[rows["group"] == ""].set_index("metric")
    assert set(found.index) == set(REFERENCE)
    for name, (delta, low, high, p) in expected.items():
        row = found.loc[name]
        assert row["delta"] == pytest.approx(delta, abs=1e-9), name
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=1e-9), name
        assert row["p_value"] == pytest.approx(p), name
        assert row["a"] - row["b"] == pytest.approx(delta, abs=1e-12) and row["n"] == len(y)
    assert rows["a_lineage_id"].eq("stamp-v2-papila").all() and rows["b_lineage_id"].eq("stamp-v1-papila").all()


def test_a_fairness_gap_delta_equals_the_gap_of_each_side_on_the_same_resamples(pair):
    y, a, b, sex, rows = pair
    seed = configuration_seed({"model": "v2 - v1", "dataset": "papila", "task": "gon", "method": "linear_probe",
                               "train_dataset": "papila"}, 0)
    idx = draws(y, R, seed)

    def gap(s, i):
        values = [roc_auc_score(y[i][sex[i] == g], s[i][sex[i] == g]) for g in ("F", "M")]
        return max(values) - min(values)

    everything = np.arange(len(y))
    reps = np.array([gap(a, i) - gap(b, i) for i in idx])
    row = rows[(rows["metric"] == "auroc_gap") & (rows["group"] == "sex:max-min")].iloc[0]
    assert row["delta"] == pytest.approx(gap(a, everything) - gap(b, everything), abs=1e-9)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(tuple(np.quantile(reps, [0.025, 0.975])), abs=1e-9)
    assert row["attributes_lineage_id"] == "stamp-groups"
    # an attribute the coverage check did not pass, or without values, is compared nowhere: rows with the reason
    age = rows[rows["group"] == "age_median:max-min"]
    assert len(age) == 5 and age["delta"].isna().all() and age["reason"].notna().all()


def test_q_values_are_benjamini_hochberg_within_one_metric_over_the_configurations():
    from scipy.stats import false_discovery_control

    rng = np.random.default_rng(3)
    frames = []
    for task, separation in (("any_dr", 0.0), ("referable_dr", 0.4), ("gon", 1.2)):
        y = (rng.random(150) < 0.3).astype(int)
        frames += [predictions("a", y, scores(rng, y, 1.0 + separation), task=task),
                   predictions("b", y, scores(rng, y, 1.0), task=task)]
    rows = comparison_rows(pd.concat(frames), "a", "b", n_resamples=R)
    auroc = rows[(rows["metric"] == "auroc") & (rows["group"] == "")]
    assert len(auroc) == 3
    assert auroc["q_value"].to_numpy() == pytest.approx(false_discovery_control(auroc["p_value"], method="bh"))


def test_a_planted_difference_is_found_and_none_is_rarely_declared():
    """A with a better separation than B on the same images: AUROC delta found (q < 0.05) in nearly every seed.
    A and B two draws of one score model: AUROC q < 0.05 in at most 5% of seeds (BH over three tasks)."""
    planted, null = [], []
    for seed in range(40):
        rng = np.random.default_rng(100 + seed)
        frames = {"planted": [], "null": []}
        for task in ("any_dr", "referable_dr", "gon"):
            y = (rng.random(150) < 0.3).astype(int)
            frames["planted"] += [predictions("a", y, scores(rng, y, 2.2), task=task),
                                  predictions("b", y, scores(rng, y, 1.0), task=task)]
            frames["null"] += [predictions("a", y, scores(rng, y, 1.2), task=task),
                               predictions("b", y, scores(rng, y, 1.2), task=task)]
        for kind, found in (("planted", planted), ("null", null)):
            rows = comparison_rows(pd.concat(frames[kind]), "a", "b", n_resamples=R, seed=seed)
            auroc = rows[(rows["metric"] == "auroc") & (rows["group"] == "")]
            found.append(bool((auroc["q_value"] < 0.05).any()))
    assert np.mean(planted) >= 0.95, np.mean(planted)
    assert np.mean(null) <= 0.05, np.mean(null)


def test_what_cannot_be_compared_is_a_row_with_the_reason():
    rng = np.random.default_rng(11)
    y = (rng.random(80) < 0.4).astype(int)
    ids = [f"img{k:04d}" for k in range(80)]
    samples = pd.concat([
        predictions("a", y, scores(rng, y, 1.0)), predictions("b", y, scores(rng, y, 1.0)),
        predictions("a", y, scores(rng, y, 1.0), method="zero_shot"),  # b has no zero-shot scores
        predictions("a", y, scores(rng, y, 1.0), task="any_dr"),  # b scored other images for this task
        predictions("b", y[:70], scores(rng, y[:70], 1.0), task="any_dr", ids=ids[:70]),
    ])
    rows = comparison_rows(samples, "a", "b", n_resamples=50)
    zero_shot = rows[rows["method"] == "zero_shot"]
    assert len(zero_shot) and zero_shot["delta"].isna().all()
    assert zero_shot["reason"].str.contains("no test predictions of b").all()
    other_images = rows[rows["task"] == "any_dr"]
    assert other_images["delta"].isna().all()
    assert other_images["reason"].str.contains("different test images").all()
    assert other_images["reason"].str.contains("a 80, b 70, 70 shared").all()
    assert rows.loc[rows["delta"].isna(), "p_value"].isna().all() and rows["metric_id"].is_unique
    gon = rows[(rows["task"] == "gon") & (rows["method"] == "linear_probe") & (rows["group"] == "")]
    assert gon["delta"].notna().all()
    assert "different test images" in format_comparison(rows)


def test_a_comparison_that_cannot_be_asked_for_is_refused_by_name():
    rng = np.random.default_rng(1)
    y = (rng.random(40) < 0.5).astype(int)
    samples = predictions("a", y, scores(rng, y, 1.0))
    with pytest.raises(ComparisonError, match="not 'a' with itself"):
        comparison_rows(samples, "a", "a")
    with pytest.raises(ComparisonError, match=r"no test predictions of 'nope'.*models with predictions: a"):
        comparison_rows(samples, "a", "nope")
    with pytest.raises(ComparisonError, match=r"no predictions for dataset \['brset'\].*papila"):
        selected(samples, datasets=["brset"])


def test_declared_pairs_are_checked_when_the_configuration_is_read(tmp_path):
    from focus_dagster.config import parse_config
    from focus_dagster.errors import ConfigError

    models = ["tiny_vit", "tiny_clip"]
    config = parse_config({"models": models, "compare": [["tiny_clip", "tiny_vit"]]}, tmp_path)
    assert config.compare == (("tiny_clip", "tiny_vit"),)
    assert parse_config(config.to_document(), tmp_path).compare == config.compare
    with pytest.raises(ConfigError, match=r"compare\[0\] compares 'tiny_vit' with itself"):
        parse_config({"models": models, "compare": [["tiny_vit", "tiny_vit"]]}, tmp_path)
    with pytest.raises(ConfigError, match=r"compare\[1\] \[tiny_clip, tiny_vit\] is given twice"):
        parse_config({"models": models, "compare": [["tiny_clip", "tiny_vit"], ["tiny_clip", "tiny_vit"]]}, tmp_path)
    with pytest.raises(ConfigError, match="compare"):
        parse_config({"models": models, "compare": [["tiny_clip"]]}, tmp_path)


def test_a_pair_naming_a_model_not_selected_is_refused_with_the_selected_ones():
    from assets.comparisons import check_pairs
    from focus_dagster.errors import ConfigError

    with pytest.raises(ConfigError, match=r"compare\[0\] names \['my_vit_v3'\].*selected: tiny_vit, tiny_clip"):
        check_pairs((("my_vit_v3", "tiny_vit"),), ["tiny_vit", "tiny_clip"])
