"""Fairness / quality point values of `metric_rows` against an independent reference (scikit-learn + numpy).

Nothing here uses the module's own metric functions or constants: every per-group number is recomputed
from its definition with scikit-learn (`roc_auc_score`, `confusion_matrix`, `recall_score`,
`accuracy_score`) or numpy (positive rate, ECE), and compared with the row `metric_rows` wrote.

Conventions the reference follows (read from focus_dagster/evaluation/metrics.py and tables.py):

- predicted positive at ``score >= 0.5`` (the data holds scores exactly 0.5 to pin this);
- AUROC undefined (null, with a reason) with fewer than 5 positives or fewer than 5 negatives;
  TPR undefined without positives, FPR without negatives;
- ECE, 10 bins: edges 0, 0.1, ..., 1; bin k holds ``edges[k] <= s < edges[k+1]`` (left-closed), and a
  score of exactly 1.0 sits in an eleventh bin of its own (torchmetrics' ``bucketize(right=True) - 1``);
  ECE = sum over non-empty bins of (bin share) * |mean score - mean label|. The data holds scores exactly
  0.0, 0.5 and 1.0, which are exact edges in every float representation of the edges; no other score
  lies on an edge;
- fairness groups need at least 10 images, quality groups at least 5 (smaller: one `group` row, null, with
  the reason); gaps are max - min over usable groups, the equalized-odds gap max(TPR gap, FPR gap), the
  worst-group AUROC the minimum group AUROC; two-group attributes also get the signed difference
  `<attribute>:<first>-<second>` (groups sorted as text; quality: adequate - inadequate).

A number that is undefined is null, and then its interval is null too (ci_low and ci_high): an interval
around nothing is not a number a report can cite. Intervals are otherwise not under test here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, confusion_matrix, recall_score, roc_auc_score

from focus_dagster.evaluation.tables import Settings, metric_rows
from focus_dagster.labels.splits import seeded_split

SETTINGS = Settings(n_resamples=50, seed=0)
THRESHOLD = 0.5
FAIRNESS_MIN, QUALITY_MIN, AUROC_MIN_CLASS = 10, 5, 5  # the documented rules, restated (not imported)
METRICS = ("positive_rate", "accuracy", "tpr", "fpr", "auroc", "ece")
N = 600


# ------------------------------------------------------------------------------------------------ data


def _data():
    """Deterministic test-split predictions of one configuration, with metadata of known group sizes.

    sex: F 290, M 290, X 8 (too small: skipped), 12 without (never grouped) -> two usable groups (signed F-M).
    camera: A 300, B 276, C 12 with 2 positives (usable, AUROC undefined), D 12 with no positive (usable,
    AUROC and TPR undefined) -> every camera gap touching AUROC or TPR is undefined.
    age: uniform 30-85 (all present) -> age_median (two groups) and age_band (three groups), all defined.
    quality: adequate 540, inadequate 40 with 3 positives (AUROC undefined), 20 without.
    """
    rng = np.random.default_rng(20240611)
    sex = np.array(["F"] * 290 + ["M"] * 290 + ["X"] * 8 + [None] * 12, dtype=object)
    camera = np.array(["A"] * 300 + ["B"] * 276 + ["C"] * 12 + ["D"] * 12, dtype=object)
    quality = np.array(["adequate"] * 540 + ["inadequate"] * 40 + [None] * 20, dtype=object)
    sex, quality = rng.permutation(sex), rng.permutation(quality)
    # camera C / D and inadequate quality must not overlap, so that their planted label counts hold
    special = np.isin(camera, ["C", "D"])
    while (special & (quality == "inadequate")).any():
        quality = rng.permutation(quality)
    age = np.round(rng.uniform(30, 85, N), 1)

    label = (rng.random(N) < 0.3).astype(int)
    label[camera == "D"] = 0
    for name, k in (("C", 2), ("inadequate", 3)):
        member = np.flatnonzero((camera == name) | (quality == name))
        label[member] = 0
        label[rng.choice(member, k, replace=False)] = 1

    # scores: informative, differently calibrated per sex, in [0, 1]
    base = rng.beta(2, 5, N) + 0.35 * label + np.where(sex == "F", 0.08, 0.0)
    score = np.clip(base, 0.0, 1.0)
    exact = rng.choice(N, 30, replace=False)
    score[exact[:10]], score[exact[10:20]], score[exact[20:]] = 0.5, 0.0, 1.0

    image_id = [f"img{k:04d}" for k in range(N)]
    predictions = pd.DataFrame({
        "dataset": "brset", "image_id": image_id, "task": "any_dr", "model": "m", "interface": "vm",
        "method": "linear_probe", "train_dataset": "brset", "score": score, "score_reference": np.nan,
        "threshold": 0.5, "label": label, "split": "test"})
    metadata = pd.DataFrame({"image_id": image_id, "age": age, "sex": sex, "quality": quality, "camera": camera})
    return predictions, metadata


@pytest.fixture(scope="module")
def world():
    predictions, metadata = _data()
    table = metric_rows(predictions, metadata, coverage={"sex": True, "camera": True, "age": True, "quality": True},
                        settings=SETTINGS)
    return predictions, metadata, table


def _median_name(age):
    """The age-median groups by what they are, not by the median's value (which moves with the test set)."""
    median = float(np.median(age))
    return np.where(age < median, "below", "above")


def _band(age):
    return np.where(age < 50, "<50", np.where(age < 65, "50-64", ">=65"))


def _memberships(metadata):
    """attribute -> (axis, group label per image (None: not grouped), minimum group size)."""
    age = metadata["age"].to_numpy(dtype=float)
    return {
        "sex": ("fairness", metadata["sex"].to_numpy(dtype=object), FAIRNESS_MIN),
        "camera": ("fairness", metadata["camera"].to_numpy(dtype=object), FAIRNESS_MIN),
        "age_median": ("fairness", _median_name(age).astype(object), FAIRNESS_MIN),
        "age_band": ("fairness", _band(age).astype(object), FAIRNESS_MIN),
        "quality": ("quality", metadata["quality"].to_numpy(dtype=object), QUALITY_MIN),
    }


# ------------------------------------------------------------------------------------------- reference


def reference_ece(y, s, n_bins=10):
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bins = np.searchsorted(edges, s, side="right") - 1  # left-closed; s == 1.0 -> bin n_bins, alone
    total = 0.0
    for b in np.unique(bins):
        inside = bins == b
        total += inside.mean() * abs(s[inside].mean() - y[inside].mean())
    return total


def reference(y, s):
    """metric -> value, or None where undefined (sklearn / numpy only)."""
    y, s = np.asarray(y, dtype=int), np.asarray(s, dtype=float)
    predicted = (s >= THRESHOLD).astype(int)
    tn, fp, fn, tp = confusion_matrix(y, predicted, labels=[0, 1]).ravel()
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    return {
        "positive_rate": float(np.mean(predicted)),
        "accuracy": accuracy_score(y, predicted),
        "tpr": recall_score(y, predicted) if n_pos else None,
        "fpr": fp / (fp + tn) if n_neg else None,
        "auroc": roc_auc_score(y, s) if min(n_pos, n_neg) >= AUROC_MIN_CLASS else None,
        "ece": reference_ece(y, s),
    }


def _groups(predictions, metadata, attribute):
    """(axis, {group: (y, s)} of the usable groups, {group: size} of the skipped ones)."""
    axis, member, minimum = _memberships(metadata)[attribute]
    y, s = predictions["label"].to_numpy(), predictions["score"].to_numpy()
    usable, skipped = {}, {}
    for name in sorted({g for g in member if g is not None}):
        inside = member == name
        if inside.sum() < minimum:
            skipped[name] = int(inside.sum())
        else:
            usable[name] = (y[inside], s[inside])
    return axis, usable, skipped


def _cell(table, axis, metric, group):
    hit = table[(table["axis"] == axis) & (table["metric"] == metric) & (table["group"] == group)]
    assert len(hit) == 1, f"expected one row {axis}/{metric}/{group}, found {len(hit)}"
    return hit.iloc[0]


def _assert_value(row, expected):
    if expected is None:
        assert pd.isna(row["value"]), f"{row['metric']} {row['group']}: expected null, got {row['value']}"
        assert isinstance(row["reason"], str) and row["reason"], f"{row['metric']} {row['group']}: null without reason"
    else:
        assert row["value"] == pytest.approx(expected, abs=1e-12), f"{row['metric']} {row['group']}"


ATTRIBUTES = ("sex", "camera", "age_median", "age_band", "quality")


# ------------------------------------------------------------------------------------------------ tests


def test_the_data_has_the_planted_cases(world):
    """Guard: the synthetic data holds what the other tests rely on."""
    predictions, metadata, _ = world
    y = predictions["label"].to_numpy()
    camera, quality = metadata["camera"].to_numpy(), metadata["quality"].to_numpy()
    assert y[camera == "C"].sum() == 2 and (camera == "C").sum() == 12
    assert y[camera == "D"].sum() == 0 and (camera == "D").sum() == 12
    assert y[quality == "inadequate"].sum() == 3 and (quality == "inadequate").sum() == 40
    s = predictions["score"].to_numpy()
    assert {0.0, 0.5, 1.0} <= set(s.tolist())
    for attribute in ("sex", "age_median", "age_band"):
        _, usable, _ = _groups(predictions, metadata, attribute)
        assert all(min(yy.sum(), len(yy) - yy.sum()) >= AUROC_MIN_CLASS for yy, _ in usable.values()), attribute


@pytest.mark.parametrize("attribute", ATTRIBUTES)
def test_per_group_values_match_sklearn(world, attribute):
    predictions, metadata, table = world
    axis, usable, _ = _groups(predictions, metadata, attribute)
    assert usable
    for name, (y, s) in usable.items():
        expected = reference(y, s)
        for metric in METRICS:
            row = _cell(table, axis, metric, f"{attribute}={name}")
            assert row["n"] == len(y) and row["n_pos"] == int(y.sum())
            _assert_value(row, expected[metric])


def test_fpr_and_positive_rate_explicitly(world):
    """FPR = FP / (FP + TN) from sklearn's confusion matrix; positive rate = share with score >= 0.5."""
    predictions, metadata, table = world
    for attribute in ("sex", "camera", "quality"):
        axis, usable, _ = _groups(predictions, metadata, attribute)
        for name, (y, s) in usable.items():
            tn, fp, fn, tp = confusion_matrix(y, (s >= 0.5).astype(int), labels=[0, 1]).ravel()
            assert _cell(table, axis, "fpr", f"{attribute}={name}")["value"] == pytest.approx(fp / (fp + tn))
            assert _cell(table, axis, "positive_rate", f"{attribute}={name}")["value"] == pytest.approx(
                np.count_nonzero(s >= 0.5) / len(s))
            assert _cell(table, axis, "positive_rate", f"{attribute}={name}")["value"] == pytest.approx(
                (tp + fp) / (tn + fp + fn + tp))
    # camera D has no positive: its TPR is undefined, its FPR is defined (and its positive rate)
    d = _cell(table, "fairness", "tpr", "camera=D")
    assert pd.isna(d["value"]) and d["reason"]
    assert pd.notna(_cell(table, "fairness", "fpr", "camera=D")["value"])


def test_small_groups_are_skipped_with_their_size(world):
    predictions, metadata, table = world
    _, _, skipped = _groups(predictions, metadata, "sex")
    assert skipped == {"X": 8}
    row = _cell(table, "fairness", "group", "sex=X")
    assert pd.isna(row["value"]) and pd.isna(row["ci_low"]) and pd.isna(row["ci_high"])
    assert row["n"] == 8 and "8 images" in row["reason"] and f"at least {FAIRNESS_MIN}" in row["reason"]
    assert not ((table["group"] == "sex=X") & (table["metric"] != "group")).any()


@pytest.mark.parametrize("attribute", ("sex", "camera", "age_median", "age_band"))  # quality: signed only
def test_max_min_gaps_equalized_odds_and_worst_group(world, attribute):
    predictions, metadata, table = world
    axis, usable, _ = _groups(predictions, metadata, attribute)
    values = {name: reference(y, s) for name, (y, s) in usable.items()}
    gap = {}
    for metric in METRICS:
        per_group = [v[metric] for v in values.values()]
        gap[metric] = None if any(p is None for p in per_group) else max(per_group) - min(per_group)
        _assert_value(_cell(table, axis, f"{metric}_gap", f"{attribute}:max-min"), gap[metric])
    eo = None if gap["tpr"] is None or gap["fpr"] is None else max(gap["tpr"], gap["fpr"])
    _assert_value(_cell(table, axis, "equalized_odds_gap", f"{attribute}:max-min"), eo)
    aurocs = [v["auroc"] for v in values.values()]
    worst = None if any(a is None for a in aurocs) else min(aurocs)
    _assert_value(_cell(table, axis, "worst_group_auroc", attribute), worst)


def test_the_planted_undefined_cases_are_undefined(world):
    """camera: AUROC undefined in C (2 positives) and D (none), TPR in D -> those gaps, the equalized-odds
    gap and the worst-group AUROC are null with a reason; the FPR, accuracy, ECE, positive-rate gaps are not."""
    _, _, table = world
    for metric in ("auroc_gap", "tpr_gap", "equalized_odds_gap"):
        _assert_value(_cell(table, "fairness", metric, "camera:max-min"), None)
    _assert_value(_cell(table, "fairness", "worst_group_auroc", "camera"), None)
    for metric in ("fpr_gap", "accuracy_gap", "ece_gap", "positive_rate_gap"):
        assert pd.notna(_cell(table, "fairness", metric, "camera:max-min")["value"])
    _assert_value(_cell(table, "quality", "auroc_gap", "quality:adequate-inadequate"), None)


@pytest.mark.parametrize("attribute, first, second", [
    ("sex", "F", "M"), ("age_median", "above", "below"), ("quality", "adequate", "inadequate")])
def test_signed_two_group_difference(world, attribute, first, second):
    predictions, metadata, table = world
    axis, usable, _ = _groups(predictions, metadata, attribute)
    assert len(usable) == 2
    a, b = sorted(usable)  # groups sorted as text: the first minus the second
    assert a.startswith(first) and b.startswith(second)
    ra, rb = reference(*usable[a]), reference(*usable[b])
    for metric in METRICS:
        expected = None if ra[metric] is None or rb[metric] is None else ra[metric] - rb[metric]
        _assert_value(_cell(table, axis, f"{metric}_gap", f"{attribute}:{a}-{b}"), expected)


def test_sex_difference_is_f_minus_m_with_its_sign(world):
    """The planted +0.08 score shift for F makes F's positive rate higher: the signed row is positive and
    equals the max-min gap, and the reversed order would be negative."""
    predictions, metadata, table = world
    _, usable, _ = _groups(predictions, metadata, "sex")
    f, m = reference(*usable["F"]), reference(*usable["M"])
    assert f["positive_rate"] > m["positive_rate"]
    signed = _cell(table, "fairness", "positive_rate_gap", "sex:F-M")["value"]
    assert signed == pytest.approx(f["positive_rate"] - m["positive_rate"]) and signed > 0
    assert _cell(table, "fairness", "positive_rate_gap", "sex:max-min")["value"] == pytest.approx(signed)


NULLABLE_GAPS = [
    ("fairness", "auroc_gap", "camera:max-min"),
    ("fairness", "tpr_gap", "camera:max-min"),
    ("fairness", "equalized_odds_gap", "camera:max-min"),
    ("fairness", "worst_group_auroc", "camera"),
    ("quality", "auroc_gap", "quality:adequate-inadequate"),
]


@pytest.mark.parametrize("axis, metric, group", NULLABLE_GAPS)
def test_undefined_gap_has_null_value_and_null_interval(world, axis, metric, group):
    """A gap / worst-group number undefined because a group's metric is undefined: value, ci_low and
    ci_high all null, and a reason (an interval around no number must not be reported)."""
    _, _, table = world
    row = _cell(table, axis, metric, group)
    assert isinstance(row["reason"], str) and row["reason"]
    assert pd.isna(row["value"])
    assert pd.isna(row["ci_low"]) and pd.isna(row["ci_high"]), (
        f"{metric} {group}: value is null but the interval is [{row['ci_low']}, {row['ci_high']}]")


def test_every_null_value_has_a_null_interval_and_a_reason(world):
    _, _, table = world
    null = table[table["value"].isna()]
    assert len(null) >= 10  # the data has undefined cases on several axes
    assert null["reason"].map(lambda r: isinstance(r, str) and bool(r)).all()
    carrying = null[null["ci_low"].notna() | null["ci_high"].notna()]
    assert carrying.empty, "null values with an interval:\n" + carrying[
        ["axis", "metric", "group", "value", "ci_low", "ci_high", "reason"]].to_string()


# --------------------------------------------------------------------------------------------- seeded split

SPLIT_N, SPLIT_POSITIVES = 1000, 200
TEST_SHARE, TEST_SHARE_TOLERANCE = 0.4, 0.05  # 1000 one-image groups: binomial sd of the test share ~0.015
# Per class: the docstring's promise, each class's test share within 0.4 +/- 0.15 (classes of >= 50 groups).
CLASS_TOLERANCE = 0.15
# Prevalence of each side vs the overall 20%: +/- 0.05 (about 2.5 binomial sd of a 400-image side's
# prevalence under an unstratified grouped draw; an exactly stratified split is within 1/400).
PREVALENCE_TOLERANCE = 0.05


def _split_labels():
    rng = np.random.default_rng(7)
    y = np.zeros(SPLIT_N, dtype=int)
    y[rng.choice(SPLIT_N, SPLIT_POSITIVES, replace=False)] = 1
    return pd.DataFrame({
        "dataset": "synthetic", "image_id": [f"img{k:04d}" for k in range(SPLIT_N)],
        "patient_id": [f"p{k:04d}" for k in range(SPLIT_N)],  # one patient per image
        "any_dr": pd.array(y, dtype="Int8"), "referable_dr": pd.array([pd.NA] * SPLIT_N, dtype="Int8"),
        "gon": pd.array([pd.NA] * SPLIT_N, dtype="Int8")})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seeded_split_keeps_the_label_mix_within_tolerance(seed):
    labels = _split_labels()
    split = seeded_split(labels, seed).split
    assert set(split) == {"train", "test"}
    test = (split == "test").to_numpy()
    y = labels["any_dr"].to_numpy(dtype=int)
    overall = y.mean()
    assert overall == pytest.approx(0.2)
    assert abs(test.mean() - TEST_SHARE) <= TEST_SHARE_TOLERANCE
    for value in (1, 0):
        in_class = y == value
        assert abs(test[in_class].mean() - TEST_SHARE) <= CLASS_TOLERANCE, f"class {value}"
    assert abs(y[test].mean() - overall) <= PREVALENCE_TOLERANCE, f"test prevalence {y[test].mean():.3f}"
    assert abs(y[~test].mean() - overall) <= PREVALENCE_TOLERANCE, f"train prevalence {y[~test].mean():.3f}"


def test_seeded_split_reports_the_observed_label_mix():
    labels = _split_labels()
    assignment = seeded_split(labels, 0)
    test = (assignment.split == "test").to_numpy()
    y = labels["any_dr"].to_numpy(dtype=int)
    classes = assignment.report["stratification"]["classes"]["any_dr"]
    for name, value in (("positive", 1), ("negative", 0)):
        observed = test[y == value].mean()
        assert classes[name]["images"] == int((y == value).sum())
        assert classes[name]["test_share"] == pytest.approx(observed, abs=1e-4)
        assert classes[name]["within_tolerance"] is bool(abs(observed - TEST_SHARE) <= CLASS_TOLERANCE)


def test_the_age_median_groups_keep_their_ids_when_the_median_moves(world):
    """`metric_id` names what is measured; the median itself is in `group_detail`."""
    predictions, metadata, table = world
    median = float(np.median(metadata["age"].dropna()))
    below = table[(table["metric"] == "auroc") & (table["group"] == "age_median=below")]
    assert len(below) == 1 and below["group_detail"].iloc[0].startswith(f"age < {median:g}")
    older = metadata.assign(age=metadata["age"] + 7)  # every patient seven years older: the median moves
    moved = metric_rows(predictions, older, coverage={"sex": True, "camera": True, "age": True, "quality": True},
                        settings=SETTINGS)
    again = moved[(moved["metric"] == "auroc") & (moved["group"] == "age_median=below")]
    assert again["metric_id"].tolist() == below["metric_id"].tolist()
    assert again["group_detail"].iloc[0].startswith(f"age < {median + 7:g}")
