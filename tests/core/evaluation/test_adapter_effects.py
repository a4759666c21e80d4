"""The LoRA comparison on literal scores: each side classified at its own Youden threshold (the one its own
training split gave), counted by hand."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from focus_dagster.evaluation.adapter_effects import effect_rows

LABELS = [1, 1, 1, 1, 0, 0, 0, 0] * 2
BASE = [0.9, 0.6, 0.4, 0.3, 0.5, 0.2, 0.1, 0.35] * 2  # at its threshold 0.35: 10 of 16 right
ADAPTED = [0.8, 0.7, 0.65, 0.2, 0.6, 0.3, 0.55, 0.1] * 2  # at its threshold 0.62: 14 of 16 right
# Swapped (base at 0.62, adapted at 0.35) both would get 10 of 16: a delta of 0 instead of +0.25.


def _samples(method: str, scores: list[float], threshold: float) -> pd.DataFrame:
    return pd.DataFrame({
        "model": "tiny_llava", "dataset": "idrid", "task": "any_dr", "method": method,
        "train_dataset": "idrid" if method == "yes_no_lora" else None, "split": "test",
        "image_id": [f"img{k}" for k in range(len(scores))], "label": LABELS, "score": scores,
        "threshold": threshold, "lineage_id": f"stamp-{method}"})


def test_each_side_is_classified_at_its_own_youden_threshold():
    samples = pd.concat([_samples("yes_no", BASE, 0.35), _samples("yes_no_lora", ADAPTED, 0.62)], ignore_index=True)
    rows, _ = effect_rows(samples, pd.DataFrame(), n_resamples=200)
    youden = rows[rows["metric"] == "accuracy@youden"].iloc[0]
    assert youden["base"] == pytest.approx(10 / 16) and youden["adapted"] == pytest.approx(14 / 16)
    assert youden["delta"] == pytest.approx(4 / 16)
    at_half = rows[rows["metric"] == "accuracy@0.5"].iloc[0]  # both at 0.5: 10 of 16 right each
    assert (at_half["base"], at_half["adapted"], at_half["delta"]) == (10 / 16, 10 / 16, 0.0)
    assert youden["domain"] == "in_domain" and youden["adapted_lineage_id"] == "stamp-yes_no_lora"


# ------------------------------------------------------------------------------------- the whole table, literal


def _config_samples(method: str, dataset: str, train_dataset, scores, ids, lineage: str) -> pd.DataFrame:
    labels = [LABELS[int(i[3:]) % len(LABELS)] for i in ids]
    return pd.DataFrame({"model": "tiny_llava", "dataset": dataset, "task": "any_dr", "method": method,
                         "train_dataset": train_dataset, "split": "test", "image_id": ids, "label": labels,
                         "score": scores, "threshold": 0.5, "lineage_id": lineage})


@pytest.fixture(scope="module")
def table():
    """Three adapted configurations on two datasets (one trained on each: in- and out-of-domain), the base scores
    of IDRiD only (an image the adapter did not score among them, and validation rows, both to be left out), and
    one adapter the predictions could not score."""
    ids = [f"img{k}" for k in range(16)]
    frames = [
        _config_samples("yes_no", "idrid", None, BASE + [0.99], ids + ["img17"], "base-idrid"),
        _config_samples("yes_no", "idrid", None, [0.1] * 4, ids[:4], "base-idrid").assign(split="validation"),
        _config_samples("yes_no_lora", "idrid", "idrid", ADAPTED, ids, "lora-idrid-on-idrid"),
        _config_samples("yes_no_lora", "idrid", "messidor2", list(reversed(ADAPTED)), ids, "lora-idrid-on-m2"),
        _config_samples("yes_no_lora", "messidor2", "messidor2", ADAPTED, ids, "lora-m2-on-m2"),
    ]
    unavailable = pd.DataFrame([{"model": "tiny_llava", "dataset": "papila", "task": "any_dr", "method": "yes_no_lora",
                                 "train_dataset": "papila", "reason": "one class in its training split"},
                                {"model": "tiny_llava", "dataset": "refuge", "task": "any_dr", "method": "yes_no",
                                 "train_dataset": None, "reason": "not an adapter: no row here"}])
    return effect_rows(pd.concat(frames, ignore_index=True), unavailable, n_resamples=300)[0]


def _row(rows, dataset, train_dataset, metric):
    found = rows[(rows["dataset"] == dataset) & (rows["train_dataset"] == train_dataset) & (rows["metric"] == metric)]
    assert len(found) == 1, found
    return found.iloc[0]


def test_every_adapted_configuration_has_a_row_per_metric_with_its_domain(table):
    expected = {("idrid", "idrid", "in_domain"), ("idrid", "messidor2", "out_of_domain"),
                ("messidor2", "messidor2", "in_domain"), ("papila", "papila", "in_domain")}
    assert set(zip(table["dataset"], table["train_dataset"], table["domain"])) == expected
    assert table.groupby(["dataset", "train_dataset"]).size().to_dict() == {
        (d, t): 5 for d, t, _ in expected}  # auroc, accuracy@0.5, accuracy@youden, ece, brier
    assert table["metric_id"].is_unique


def test_deltas_are_paired_on_the_images_both_sides_scored(table):
    from sklearn.metrics import roc_auc_score

    row = _row(table, "idrid", "idrid", "auroc")
    assert row["n"] == 16 and row["n_pos"] == 8  # img17 (base only) and the validation rows left out
    assert row["base"] == pytest.approx(roc_auc_score(LABELS, BASE))
    assert row["adapted"] == pytest.approx(roc_auc_score(LABELS, ADAPTED))
    assert row["delta"] == pytest.approx(roc_auc_score(LABELS, ADAPTED) - roc_auc_score(LABELS, BASE))
    assert row["ci_low"] < row["delta"] < row["ci_high"] and 0 <= row["p_value"] <= 1
    out = _row(table, "idrid", "messidor2", "auroc")
    assert out["adapted"] == pytest.approx(roc_auc_score(LABELS, list(reversed(ADAPTED))))
    assert (row["adapted_lineage_id"], row["base_lineage_id"]) == ("lora-idrid-on-idrid", "base-idrid")
    assert out["adapted_lineage_id"] == "lora-idrid-on-m2"


def test_a_missing_side_is_a_row_with_its_reason_never_a_number(table):
    no_base = _row(table, "messidor2", "messidor2", "auroc")
    assert pd.isna(no_base["delta"]) and pd.isna(no_base["p_value"]) and no_base["base_lineage_id"] is None
    assert no_base["reason"].startswith("no base yes/no scores of tiny_llava on messidor2 for any_dr")
    assert no_base["adapted_lineage_id"] == "lora-m2-on-m2"
    no_adapter = _row(table, "papila", "papila", "brier")
    assert pd.isna(no_adapter["delta"]) and no_adapter["reason"] == "no adapted scores: one class in its training split"


def test_q_values_are_benjamini_hochberg_within_a_metric_and_domain(table):
    from scipy.stats import false_discovery_control

    for (metric, domain), family in table.groupby(["metric", "domain"]):
        defined = family[family["p_value"].notna()]
        if len(defined):
            expected = false_discovery_control(defined["p_value"].astype(float).to_numpy(), method="bh")
            assert defined["q_value"].to_numpy() == pytest.approx(expected), (metric, domain)
        assert family.loc[family["p_value"].isna(), "q_value"].isna().all()


def test_the_same_inputs_give_the_same_intervals(table):
    """Resamples are seeded from each configuration's identity: a second computation is identical."""
    ids = [f"img{k}" for k in range(16)]
    alone = [_config_samples("yes_no", "idrid", None, BASE, ids, "base-idrid"),
             _config_samples("yes_no_lora", "idrid", "idrid", ADAPTED, ids, "lora-idrid-on-idrid")]
    again = effect_rows(pd.concat(alone, ignore_index=True), pd.DataFrame(), n_resamples=300)[0]
    first = table[(table["dataset"] == "idrid") & (table["train_dataset"] == "idrid")].set_index("metric")
    for row in again.to_dict("records"):
        assert (row["ci_low"], row["ci_high"], row["p_value"]) == tuple(first.loc[row["metric"],
                                                                                   ["ci_low", "ci_high", "p_value"]])


def test_p_values_count_over_the_resamples_asked_for(table):
    """300 resamples asked for: every two-sided p-value is a share of 300 (2k / 300) or its floor 1 / 301."""
    p = table["p_value"].dropna().astype(float)
    assert len(p) and all(v == pytest.approx(1 / 301) or v * 300 == pytest.approx(round(v * 300)) for v in p), p


def test_nothing_to_compare_gives_empty_tables_with_their_columns():
    rows, summary = effect_rows(pd.DataFrame(columns=["model", "dataset", "task", "method", "train_dataset", "split",
                                                      "image_id", "label", "score", "threshold", "lineage_id"]),
                                pd.DataFrame(), n_resamples=100)
    assert rows.empty and list(rows.columns) == [
        "metric_id", "model", "dataset", "task", "method", "train_dataset", "domain", "metric", "base", "adapted",
        "delta", "ci_low", "ci_high", "p_value", "q_value", "n", "n_pos", "reason", "adapted_lineage_id",
        "base_lineage_id"]
    assert summary.empty and list(summary.columns) == ["model", "domain", "metric", "n", "mean_delta", "p_value",
                                                       "q_value"]
    assert rows["q_value"].dtype == "float64"  # as a non-empty table's: a stored empty table keeps the schema


def test_metric_ids_name_the_adapted_configuration_axis_and_delta(table):
    """The id reports and `focus trace` use, written out once by hand: the first 16 hex digits of the SHA-256 of
    the sorted JSON {configuration, axis "lora_effect", metric "auroc_delta", group ""}. An id may never change
    between versions, or a number quoted from an old report no longer traces."""
    assert _row(table, "idrid", "messidor2", "auroc")["metric_id"] == "m-5171243e37483e7a"


def test_a_missing_youden_threshold_gives_a_reason_on_that_metric_only():
    """No threshold from the adapted side's training split (NaN in the table): its Youden accuracy has no number and
    says why; the other metrics are unaffected."""
    samples = pd.concat([_samples("yes_no", BASE, 0.35), _samples("yes_no_lora", ADAPTED, float("nan"))],
                        ignore_index=True)
    rows = effect_rows(samples, pd.DataFrame(), n_resamples=100)[0].set_index("metric")
    assert pd.isna(rows.loc["accuracy@youden", "delta"]) and pd.isna(rows.loc["accuracy@youden", "adapted"])
    assert "no Youden threshold for the adapted scores" in rows.loc["accuracy@youden", "reason"]
    assert rows.loc["accuracy@youden", "base"] == pytest.approx(10 / 16)
    assert rows.loc["accuracy@0.5", "delta"] == 0.0 and rows["reason"].drop("accuracy@youden").isna().all()


@pytest.mark.parametrize("column, side", [("lineage_id", "yes_no_lora"), ("lineage_id", "yes_no"),
                                          ("threshold", "yes_no_lora"), ("threshold", "yes_no")])
def test_a_configuration_mixing_two_computations_is_refused(column, side):
    """Rows of one configuration carry one threshold and one lineage id; a table mixing two computations (half the
    rows from an older run) is refused with the column and what to do, not compared against whichever came first."""
    base, adapted = _samples("yes_no", BASE, 0.35), _samples("yes_no_lora", ADAPTED, 0.62)
    mixed = base if side == "yes_no" else adapted
    mixed.loc[8:, column] = "stamp-older" if column == "lineage_id" else 0.5
    train = "None" if side == "yes_no" else "'idrid'"  # the configuration named as the predictions name it
    named = re.escape(f"predictions rows of {{'model': 'tiny_llava', 'dataset': 'idrid', 'task': 'any_dr', "
                      f"'method': '{side}', 'train_dataset': {train}}} carry 2 different {column} values")
    with pytest.raises(ValueError, match=f"^{named} .*materialise predictions again"):
        effect_rows(pd.concat([base, adapted], ignore_index=True), pd.DataFrame(), n_resamples=100)
