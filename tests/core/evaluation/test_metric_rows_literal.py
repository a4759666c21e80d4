"""The metric table of a small literal predictions table, row by row, against scikit-learn and values written
out by hand: thresholds per configuration, the Youden rows without a threshold, which configurations get fairness
rows, age bands at their boundaries, a group of exactly the minimum size and one below it, the signed quality
difference, withheld attributes, unavailable configurations and the progress lines."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, f1_score, recall_score, roc_auc_score

from focus_dagster.evaluation import tables as T

R = 200
N = 40
rng = np.random.default_rng(7)
LABELS = np.r_[np.ones(16, int), np.zeros(24, int)]
rng.shuffle(LABELS)
SCORES = np.clip(rng.random(N) * 0.75 + 0.22 * LABELS, 0, 1).round(3)
IDS = [f"img{k:02d}" for k in range(N)]
# ages: the band boundaries (49 / 50, 64 / 65), a missing one and one that is not a number; the 37 numeric ages
# of the images with metadata (img39 has none) have median 58 (the 19th of them sorted)
AGES = ([49, 50, 64, 65, None, "n/a"] + [40, 45, 52, 55, 57, 58, 60, 62, 66, 70, 72, 75] * 3)[:N]
SEX = ["F", "M"] * 20
SEEN = np.arange(N) < N - 1  # img39 has no metadata row (below): in no group
CAMERA = ["A"] * 6 + ["B"] * 10 + ["C"] * 24  # A below 10 images (skipped, and sorted first), B exactly 10
QUALITY = ["adequate"] * 30 + ["inadequate"] * 10
YOUDEN = 0.42


def _predictions():
    zero_shot = pd.DataFrame({"model": "vit", "dataset": "idrid", "task": "any_dr", "method": "probe",
                              "train_dataset": None, "split": "test", "image_id": IDS, "label": LABELS,
                              "score": SCORES, "threshold": YOUDEN})
    # the same images from a probe trained elsewhere whose training split had one class: no Youden threshold
    transfer = zero_shot.assign(train_dataset="messidor_2", threshold=np.nan, score=1 - SCORES)
    validation = zero_shot.head(5).assign(split="validation", score=0.99)  # never counted
    return pd.concat([zero_shot, transfer, validation], ignore_index=True)


def _metadata(ids=IDS):
    frame = pd.DataFrame({"image_id": IDS, "age": AGES, "sex": SEX, "camera": CAMERA, "quality": QUALITY})
    return frame[frame["image_id"].isin(ids)]


COVERAGE = {"age": True, "sex": True, "camera": True, "quality": True}


@pytest.fixture  # per test, so that a mutation run maps every function it calls to each test using it
def table():
    lines = []
    # img39 has no metadata row: it still counts for performance (a left join), in no group
    out = T.metric_rows(_predictions(), _metadata(IDS[:-1]), COVERAGE, T.Settings(n_resamples=R), say=lines.append)
    return out, lines


def _one(table, **where):
    found = table
    for column, value in where.items():
        found = found[found[column] == value]
    assert len(found) == 1, (where, found)
    return found.iloc[0]


def test_performance_rows_equal_scikit_learn_at_both_thresholds(table):
    rows, _ = table
    zero_shot = rows[rows["train_dataset"].isna() & (rows["axis"] == "performance")]
    # the id written out by hand: SHA-256 of the sorted JSON {configuration (no training dataset: ""), axis,
    # metric, group ""}, first 16 hex digits; a report quoting it must find the same number after a refresh
    assert _one(zero_shot, metric="auroc")["metric_id"] == "m-5391f1b64dc64d7a"
    assert _one(zero_shot, metric="auroc")["value"] == pytest.approx(roc_auc_score(LABELS, SCORES))
    for threshold, suffix in ((0.5, "@0.5"), (YOUDEN, "@youden")):
        predicted = (SCORES >= threshold).astype(int)
        expected = {"accuracy": accuracy_score(LABELS, predicted), "sensitivity": recall_score(LABELS, predicted),
                    "specificity": recall_score(1 - LABELS, 1 - predicted), "f1": f1_score(LABELS, predicted)}
        for name, value in expected.items():
            row = _one(zero_shot, metric=name + suffix)
            assert row["value"] == pytest.approx(value), name + suffix
            assert row["ci_low"] <= row["value"] <= row["ci_high"] and row["reason"] is None, name + suffix
            assert (row["group"], row["n"], row["n_pos"], row["axis"]) == ("", N, 16, "performance")
    assert (predicted != (SCORES >= 0.5)).any()  # the two thresholds classify some image differently


def test_without_a_youden_threshold_the_youden_rows_say_why(table):
    rows, _ = table
    transfer = rows[rows["train_dataset"] == "messidor_2"]
    youden = transfer[transfer["metric"].str.endswith("@youden")]
    assert sorted(youden["metric"]) == ["accuracy@youden", "f1@youden", "sensitivity@youden", "specificity@youden"]
    assert youden["value"].isna().all() and youden["ci_low"].isna().all() and youden["metric_id"].is_unique
    assert set(youden["reason"]) == {"no Youden threshold: the training split's scores had one class"}
    assert set(youden["n"]) == {N} and set(youden["n_pos"]) == {16} and set(youden["group"]) == {""}
    at_half = _one(transfer, metric="accuracy@0.5")
    assert at_half["value"] == pytest.approx(accuracy_score(LABELS, (1 - SCORES) >= 0.5))


def test_only_the_in_domain_configuration_has_fairness_and_quality_rows(table):
    rows, _ = table
    assert set(rows.loc[rows["train_dataset"] == "messidor_2", "axis"]) == {"performance", "calibration"}
    assert set(rows.loc[rows["train_dataset"].isna(), "axis"]) == {"performance", "calibration", "fairness",
                                                                    "quality"}
    only = T.metric_rows(_predictions(), _metadata(), COVERAGE, T.Settings(n_resamples=20), axes=("performance",))
    assert set(only["axis"]) == {"performance", "calibration"}  # calibration comes with performance
    for axis in ("fairness", "quality"):
        alone = T.metric_rows(_predictions(), _metadata(), COVERAGE, T.Settings(n_resamples=20), axes=(axis,))
        assert set(alone["axis"]) == {axis} and set(alone["train_dataset"].isna()) == {True}, axis


def _group(rows, tag, metric="accuracy"):
    return _one(rows[rows["train_dataset"].isna()], group=tag, metric=metric)


def _subset(mask):
    mask = np.asarray(mask) & SEEN
    return LABELS[mask], SCORES[mask]


def test_groups_at_the_band_boundaries_and_the_minimum_size(table):
    rows, _ = table
    ages = pd.to_numeric(pd.Series(AGES[:-1] + [None]), errors="coerce").to_numpy()  # img39: no metadata
    bands = {"<50": ages < 50, "50-64": (ages >= 50) & (ages < 65), ">=65": ages >= 65}
    assert [AGES[k] for k in range(4)] == [49, 50, 64, 65]  # one image each side of each boundary
    for band, mask in bands.items():
        y, s = _subset(mask)
        if len(y) < 10:  # skipped, with its size
            row = _one(rows, group=f"age_band={band}", metric="group")
        else:
            row = _group(rows, f"age_band={band}")
            assert row["value"] == pytest.approx(accuracy_score(y, s >= 0.5)), band
        assert (row["n"], row["n_pos"]) == (len(y), int(y.sum())), band
    assert {len(_subset(mask)[0]) >= 10 for mask in bands.values()} == {True, False}
    below = _group(rows, "age_median=below")
    above = _group(rows, "age_median=above")
    assert (below["group_detail"], above["group_detail"]) == ("age < 58 (the test set's median)",
                                                              "age >= 58 (the test set's median)")
    assert below["n"] == np.sum(ages < 58) == 17 and above["n"] == np.sum(ages >= 58) == 20
    skipped = _one(rows, group="camera=A", metric="group")
    assert (skipped["n"], skipped["reason"]) == (6, "group has 6 images; at least 10 are needed")
    y, s = _subset(np.array(CAMERA) == "B")
    assert _group(rows, "camera=B")["value"] == pytest.approx(accuracy_score(y, s >= 0.5))  # exactly 10: kept
    assert _group(rows, "camera=C")["n"] == 23  # C after a skipped group still measured (img39: no camera)


def test_group_rows_have_intervals_from_their_own_replicates(table):
    from focus_dagster.evaluation.bootstrap import resample_counts
    from focus_dagster.evaluation.intervals import interval
    from focus_dagster.evaluation.metrics import call_metric

    rows, _ = table
    groups = rows[(rows["axis"] == "fairness") & (rows["metric"] != "group") & rows["value"].notna()
                  & ~rows["metric"].str.endswith("_gap") & (rows["metric"] != "worst_group_auroc")]
    assert len(groups) > 20
    assert (groups["ci_low"] <= groups["value"] + 1e-12).all() and (groups["value"] <= groups["ci_high"] + 1e-12).all()
    config = {"model": "vit", "dataset": "idrid", "task": "any_dr", "method": "probe", "train_dataset": None}
    counts = resample_counts(LABELS.astype(bool), R, T.configuration_seed(config, 0))
    member = (np.array(SEX) == "M") & SEEN
    y, s = _subset(member)
    replicates = []
    for row in counts:
        drawn = np.repeat(np.arange(N), row)
        drawn = drawn[member[drawn]]
        replicates.append(call_metric("accuracy", LABELS[drawn], SCORES[drawn]).value)
    point = call_metric("accuracy", y, s)
    low, high = interval("accuracy", point, np.array(replicates, dtype=float), y, s)
    row = _group(rows, "sex=M")
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=1e-12)


def test_the_table_has_its_columns_and_types(table):
    rows, _ = table
    assert list(rows.columns) == ["metric_id", "model", "dataset", "task", "method", "train_dataset", "axis",
                                  "metric", "group", "value", "ci_low", "ci_high", "n", "n_pos", "reason",
                                  "group_detail", "degenerate", "degenerate_reason"]
    assert rows["degenerate"].dtype == bool and rows["value"].dtype == float and rows["metric_id"].is_unique


def test_gaps_max_min_and_signed(table):
    rows, _ = table
    gaps = rows[rows["metric"].str.endswith("_gap") & rows["value"].notna()]
    assert len(gaps) > 20  # every defined gap (max-min, signed, equalized odds) lies inside its own interval
    assert (gaps["ci_low"] <= gaps["value"] + 1e-12).all() and (gaps["value"] <= gaps["ci_high"] + 1e-12).all()
    auroc = {sex: roc_auc_score(*_subset(np.array(SEX) == sex)) for sex in ("F", "M")}
    worst = _group(rows, "sex", "worst_group_auroc")
    assert worst["value"] == pytest.approx(min(auroc.values())) and worst["reason"] is None
    assert worst["ci_low"] <= worst["value"] <= worst["ci_high"]
    accuracy = {}
    for sex in ("F", "M"):
        y, s = _subset(np.array(SEX) == sex)
        accuracy[sex] = accuracy_score(y, s >= 0.5)
    assert _group(rows, "sex:max-min", "accuracy_gap")["value"] == pytest.approx(abs(accuracy["F"] - accuracy["M"]))
    assert _group(rows, "sex:F-M", "accuracy_gap")["value"] == pytest.approx(accuracy["F"] - accuracy["M"])
    assert _group(rows, "sex:F-M", "accuracy_gap")["reason"] is None
    assert _group(rows, "sex:max-min", "equalized_odds_gap")["reason"] is None
    quality = {}
    for level in ("adequate", "inadequate"):
        y, s = _subset(np.array(QUALITY) == level)
        quality[level] = accuracy_score(y, s >= 0.5)
    signed = _one(rows, group="quality:adequate-inadequate", metric="accuracy_gap")
    assert signed["value"] == pytest.approx(quality["adequate"] - quality["inadequate"])
    assert not (rows["group"] == "quality:max-min").any()  # quality reports the signed difference only


def test_a_withheld_attribute_keeps_its_rows_without_values():
    reason = "metadata_coverage failed for age: 40% of images have one"
    rows = T.metric_rows(_predictions(), _metadata(), COVERAGE, T.Settings(n_resamples=20), axes=("fairness",),
                         withheld={"age": reason})
    age = rows[rows["group"].str.startswith("age_")]
    assert len(age) > 10 and set(age["reason"]) == {reason}
    assert age[["value", "ci_low", "ci_high"]].isna().all().all() and (age["n"] > 0).all()
    sex = rows[rows["group"].str.startswith("sex")]
    assert sex["value"].notna().any() and reason not in set(sex["reason"])


def test_a_missing_column_gets_the_reason_given():
    rows = T.metric_rows(_predictions(), _metadata(), {**COVERAGE, "camera": False, "age": False},
                         T.Settings(n_resamples=20), axes=("fairness",),
                         reasons={"camera": "no camera column in this release", "age": "ages withheld by the site"})
    assert _one(rows, group="camera", metric="attribute")["reason"] == "no camera column in this release"
    for attribute in ("age_median", "age_band"):
        assert _one(rows, group=attribute, metric="attribute")["reason"] == "ages withheld by the site"
    default = T.metric_rows(_predictions(), _metadata(), {**COVERAGE, "age": False}, T.Settings(n_resamples=20),
                            axes=("fairness",))
    assert _one(default, group="age_band", metric="attribute")["reason"] == (
        "metadata_coverage: no image of this dataset has a age value")


def test_the_seed_comes_from_the_configuration():
    """Two configurations with the same predictions resample differently (each its own seed), and Settings.seed
    moves both."""
    predictions = _predictions()
    twin = predictions[predictions["train_dataset"].isna()].assign(model="vit_twin")
    rows = T.metric_rows(pd.concat([predictions, twin]), _metadata(), COVERAGE, T.Settings(n_resamples=50),
                         axes=("performance",))
    zero_shot = rows[rows["train_dataset"].isna()]
    one, two = (_one(zero_shot, model=model, metric="auroc") for model in ("vit", "vit_twin"))
    assert one["value"] == two["value"] and (one["ci_low"], one["ci_high"]) != (two["ci_low"], two["ci_high"])
    other = T.metric_rows(predictions, _metadata(), COVERAGE, T.Settings(n_resamples=50, seed=1), axes=("performance",))
    moved = _one(other[other["train_dataset"].isna()], metric="auroc")
    assert (moved["ci_low"], moved["ci_high"]) != (one["ci_low"], one["ci_high"])


def test_progress_names_the_step_and_counts_configurations(table):
    _, lines = table
    assert len(lines) == 1 and "metric rows: 2/2 configurations in " in lines[0]


def test_unavailable_configurations_are_one_auroc_row_with_the_id_the_number_will_have(table):
    rows, _ = table
    unavailable = pd.DataFrame([
        {"model": "vit", "dataset": "idrid", "task": "any_dr", "method": "probe", "train_dataset": np.nan,
         "reason": "no embeddings"},
        {"model": "vit", "dataset": "idrid", "task": "any_dr", "method": "probe", "train_dataset": "",
         "reason": "no embeddings either"},
    ])
    extra = T.unavailable_metric_rows(unavailable, "r-metrics")
    first = extra.iloc[0]
    performance = rows[rows["train_dataset"].isna() & (rows["axis"] == "performance")]
    assert first["metric_id"] == _one(performance, metric="auroc")["metric_id"]
    assert first["train_dataset"] is None and extra.iloc[1]["train_dataset"] is None
    assert (first["axis"], first["metric"], first["group"], first["n"], first["n_pos"]) == (
        "performance", "auroc", "", 0, 0)
    assert pd.isna(first["value"]) and first["reason"] == "no embeddings" and first["run_id"] == "r-metrics"
    assert first["degenerate"] is False or first["degenerate"] == False  # noqa: E712 (numpy bool)
    assert first["degenerate_reason"] is None
    assert "index" not in extra.columns and list(extra.index) == [0, 1]
    lineage_columns = {c: None for c in extra.columns if c not in rows.columns and c != "run_id"}
    table = rows.head(3).assign(run_id="r-metrics", **lineage_columns)
    both = T.with_unavailable(table[extra.columns], unavailable, "r-metrics")
    assert list(both.index) == list(range(5)) and list(both["run_id"]) == ["r-metrics"] * 5


@pytest.mark.parametrize(("others", "listed"), [([0.6], "2 different threshold values (0.42, 0.6)"),
                                               ([0.6, 0.7, 0.8], "4 different threshold values (0.42, 0.6, 0.7)")])
def test_a_configuration_with_two_thresholds_is_refused(others, listed):
    predictions = _predictions()
    predictions.loc[[3 + k for k in range(len(others))], "threshold"] = others  # rows of other computations
    config = "{'model': 'vit', 'dataset': 'idrid', 'task': 'any_dr', 'method': 'probe', 'train_dataset': None}"
    message = (f"predictions rows of {config} carry {listed}: the table mixes two computations of it; "
               "materialise predictions again for that dataset")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        T.metric_rows(predictions, _metadata(), COVERAGE, T.Settings(n_resamples=20), axes=("performance",))


def test_youden_rows_resample_at_the_youden_threshold():
    """The @youden interval: replicates and jackknife at the configuration's threshold, not at 0.5."""
    from focus_dagster.evaluation.bootstrap import resample_counts
    from focus_dagster.evaluation.intervals import interval
    from focus_dagster.evaluation.metrics import call_metric

    rows = T.metric_rows(_predictions(), _metadata(), COVERAGE, T.Settings(n_resamples=R), axes=("performance",))
    config = {"model": "vit", "dataset": "idrid", "task": "any_dr", "method": "probe", "train_dataset": None}
    counts = resample_counts(LABELS.astype(bool), R, T.configuration_seed(config, 0))
    for name in ("accuracy", "sensitivity"):
        replicates = [call_metric(name, LABELS[np.repeat(np.arange(N), row)], SCORES[np.repeat(np.arange(N), row)],
                                  threshold=YOUDEN).value for row in counts]
        point = call_metric(name, LABELS, SCORES, threshold=YOUDEN)
        low, high = interval(name, point, np.array(replicates, dtype=float), LABELS, SCORES, threshold=YOUDEN)
        row = _one(rows[rows["train_dataset"].isna()], metric=f"{name}@youden")
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=1e-12), name


SMALL = 16


def _small(model: str, positives: int) -> pd.DataFrame:
    labels = np.r_[np.ones(positives, int), np.zeros(SMALL - positives, int)]
    return pd.DataFrame({"model": model, "dataset": "papila", "task": "gon", "method": "probe",
                         "train_dataset": None, "split": "test", "image_id": [f"p{k}" for k in range(SMALL)],
                         "label": labels, "score": np.linspace(0.1, 0.9, SMALL).round(3), "threshold": 0.5})


SMALL_METADATA = pd.DataFrame({"image_id": [f"p{k}" for k in range(SMALL)], "age": list(range(40, 40 + SMALL)),
                               "sex": None, "camera": "Topcon", "quality": ["adequate"] * 13 + ["inadequate"] * 3})


def test_a_small_configuration_says_what_it_cannot_measure():
    """4 positives of 16 (degenerate, flagged on every row) next to 5 (not); age halves of 8 (below 10: skipped,
    each with what it means); one camera (no gap); 3 inadequate images (below 5: no signed quality difference)."""
    predictions = pd.concat([_small("vit", 4), _small("vit5", 5)], ignore_index=True)
    rows = T.metric_rows(predictions, SMALL_METADATA, {**COVERAGE, "sex": False}, T.Settings(n_resamples=20),
                         reasons={"sex": "no sex column in this release"})
    four, five = rows[rows["model"] == "vit"], rows[rows["model"] == "vit5"]
    assert set(four["degenerate_reason"]) == {
        "degenerate: the test split has 4 positive and 12 negative images (fewer than 5 of one class); its numbers "
        "rest on a handful of images"} and four["degenerate"].all()
    assert not five["degenerate"].any() and five["degenerate_reason"].isna().all()
    skipped = four[four["metric"] == "group"].set_index("group")
    assert skipped.loc["age_median=below", "group_detail"] == "age < 47.5 (the test set's median)"
    assert skipped.loc["age_median=above", "group_detail"] == "age >= 47.5 (the test set's median)"
    assert skipped.loc["age_median=below", "reason"] == "group has 8 images; at least 10 are needed"
    camera = four[four["group"].isin(["camera:max-min", "camera"]) & (four["axis"] == "fairness")
                  & (four["metric"] != "attribute")]
    assert sorted(camera["metric"]) == sorted([f"{m}_gap" for m in ("positive_rate", "accuracy", "tpr", "fpr",
                                                                    "auroc", "ece", "equalized_odds")]
                                              + ["worst_group_auroc"])
    assert set(camera["reason"]) == {"1 usable group(s) for camera: a gap needs two"}
    assert set(camera["n"]) == {SMALL} and set(camera["n_pos"]) == {4} and camera["value"].isna().all()
    quality = four[four["group"] == "quality:adequate-inadequate"]
    assert sorted(quality["metric"]) == sorted(f"{m}_gap" for m in ("positive_rate", "accuracy", "tpr", "fpr",
                                                                    "auroc", "ece"))
    assert set(quality["reason"]) == {"no usable group ['inadequate']"}
    assert set(quality["axis"]) == {"quality"} and set(quality["n"]) == {SMALL} and set(quality["n_pos"]) == {4}
    assert _one(four, group="sex", metric="attribute")["reason"] == "no sex column in this release"


SCORES_24 = np.r_[np.linspace(0.05, 0.95, 24)[:5].round(3), 0.5, np.linspace(0.05, 0.95, 24)[6:].round(3)]


def test_a_gap_over_a_group_without_an_auroc_says_why():
    """Two cameras of 12 images, one all positive (no FPR, no AUROC), one all negative (no TPR, no AUROC): so are
    the gaps, the equalized-odds gap and the worst-group AUROC, each with the reason. No image has an age although
    the column is covered: the age splits have no group, and nothing fails."""
    ids = [f"c{k}" for k in range(24)]
    predictions = pd.DataFrame({"model": "vit", "dataset": "brset", "task": "any_dr", "method": "probe",
                                "train_dataset": None, "split": "test", "image_id": ids,
                                "label": [1] * 12 + [0] * 12, "score": SCORES_24, "threshold": 0.5})
    metadata = pd.DataFrame({"image_id": ids, "age": None, "sex": None, "camera": ["A"] * 12 + ["B"] * 12,
                             "quality": None})
    rows = T.metric_rows(predictions, metadata, {**COVERAGE, "sex": False, "quality": False},
                         T.Settings(n_resamples=20), axes=("fairness",))
    assert _one(rows, group="camera=A", metric="positive_rate")["value"] == pytest.approx(
        np.mean(SCORES_24[:12] >= 0.5))  # a score of exactly 0.5 among them counts as predicted positive
    by_metric = rows[rows["group"] == "camera:max-min"].set_index("metric")
    for metric in ("auroc", "tpr", "fpr"):
        assert pd.isna(by_metric.loc[f"{metric}_gap", "value"])
        assert by_metric.loc[f"{metric}_gap", "reason"] == f"{metric} undefined in some group"
    assert by_metric.loc["equalized_odds_gap", "reason"] == "TPR or FPR undefined in some group"
    assert by_metric.loc["accuracy_gap", "reason"] is None and by_metric.loc["accuracy_gap", "value"] >= 0
    worst = _one(rows, group="camera", metric="worst_group_auroc")
    assert pd.isna(worst["value"]) and worst["reason"] == "AUROC undefined in some group"
    signed = rows[rows["group"] == "camera:A-B"].set_index("metric")
    assert signed.loc["auroc_gap", "reason"] == "auroc undefined in a group"
    assert pd.isna(signed.loc["auroc_gap", "value"])


def test_quality_without_metadata_is_one_row_with_the_reason():
    predictions = _small("vit", 8)
    coverage = {**COVERAGE, "quality": False}
    default = T.metric_rows(predictions, SMALL_METADATA, coverage, T.Settings(n_resamples=20), axes=("quality",))
    row = _one(default, metric="attribute")
    assert (row["axis"], row["group"], row["n"], row["n_pos"]) == ("quality", "quality", SMALL, 8)
    assert row["reason"] == "metadata_coverage: no image of this dataset has a quality value"
    given = T.metric_rows(predictions, SMALL_METADATA, coverage, T.Settings(n_resamples=20), axes=("quality",),
                          reasons={"quality": "quality flags not published"})
    assert _one(given, metric="attribute")["reason"] == "quality flags not published"


def test_no_test_images_give_an_empty_table_with_its_columns():
    only_validation = _predictions().assign(split="validation")
    rows = T.metric_rows(only_validation, _metadata(), COVERAGE, T.Settings(n_resamples=20))
    assert rows.empty and list(rows.columns) == list(T.METRIC_COLUMNS) and rows["value"].dtype == float
