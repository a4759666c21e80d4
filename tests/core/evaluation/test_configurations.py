"""Which configurations a selection implies, why one has no predictions, and its metric row."""

from __future__ import annotations

import numpy as np
import pandas as pd

from focus_dagster.evaluation.configurations import (
    Configuration,
    by_pair,
    cross_dataset_configurations,
    in_domain_configurations,
    unavailable_frame,
    unavailable_rows,
)
from focus_dagster.evaluation.predictions import LINEAGE_COLUMNS
from focus_dagster.evaluation.probes import in_domain_probes, skipped_frame, skipped_tasks
from focus_dagster.evaluation.tables import metric_id, unavailable_metric_rows, with_unavailable


def labels(dataset: str, **tasks) -> pd.DataFrame:
    """Four images; a task given as a list of labels (None = undefined), every other task undefined."""
    columns = {t: pd.array(tasks.get(t, [None] * 4), dtype="Int8") for t in ("any_dr", "referable_dr", "gon")}
    return pd.DataFrame({"dataset": dataset, "image_id": [f"{dataset}/{k}" for k in range(4)],
                         "split": ["train", "train", "test", "test"], **columns})


def as_tuples(configs) -> set[tuple]:
    return {(c.model, c.dataset, c.task, c.method, c.train_dataset) for c in configs}


def test_in_domain_configurations_are_model_x_method_of_its_interface_x_defined_task():
    # RFMiD-like: any_dr and referable_dr defined (referable_dr by a single label), glaucoma not.
    rfmid = labels("rfmid", any_dr=[0, 1, 0, 1], referable_dr=[None, None, 0, None])
    configs = in_domain_configurations("rfmid", rfmid, {"vit": "vm", "clip": "vlm", "llava": "mllm"})
    assert as_tuples(configs) == {
        ("vit", "rfmid", "any_dr", "linear_probe", "rfmid"),
        ("vit", "rfmid", "referable_dr", "linear_probe", "rfmid"),
        ("clip", "rfmid", "any_dr", "linear_probe", "rfmid"),
        ("clip", "rfmid", "referable_dr", "linear_probe", "rfmid"),
        ("clip", "rfmid", "any_dr", "zero_shot", None),
        ("clip", "rfmid", "referable_dr", "zero_shot", None),
        ("llava", "rfmid", "any_dr", "yes_no", None),
        ("llava", "rfmid", "referable_dr", "yes_no", None),
    }
    assert len(configs) == 8  # no duplicates
    assert in_domain_configurations("rfmid", labels("rfmid"), {"vit": "vm"}) == []  # no task, nothing expected


def test_cross_dataset_configurations_are_ordered_pairs_with_the_task_on_both_sides():
    by_dataset = {"a": labels("a", any_dr=[0, 1, 0, 1], gon=[0, 1, 0, 1]),
                  "b": labels("b", any_dr=[1, 0, 1, 0]),
                  "c": labels("c", gon=[0, 0, 1, 1])}
    configs = cross_dataset_configurations(["vit", "clip"], by_dataset)
    expected = set()
    for model in ("vit", "clip"):
        expected |= {(model, "b", "any_dr", "linear_probe", "a"), (model, "c", "gon", "linear_probe", "a"),
                     (model, "a", "any_dr", "linear_probe", "b"), (model, "a", "gon", "linear_probe", "c")}
    assert as_tuples(configs) == expected and len(configs) == len(expected)
    pairs = [key for key, _ in by_pair(configs)]
    assert len(pairs) == len(set(pairs)) == 8  # each (model, train, evaluated) pair comes once


def scored(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["image_id", "task", "split", "score"])


def test_each_configuration_without_test_predictions_gets_its_reason():
    configs = [Configuration("vit", "rfmid", task, "linear_probe", "rfmid")
               for task in ("any_dr", "referable_dr", "gon")]
    frame = scored([("i1", "any_dr", "test", 0.4), ("i2", "gon", "test", np.nan)])
    kept = frame[frame["score"].notna()]
    skipped = {"referable_dr": "train split has 0 positive and 3 negative images for referable_dr"}
    rows = unavailable_rows(configs, frame, kept, "probe_predictions vit/rfmid", skipped)
    reasons = {row["task"]: row["reason"] for row in rows}
    assert set(reasons) == {"referable_dr", "gon"}
    assert reasons["referable_dr"].startswith("no linear probe of vit trained on rfmid for referable_dr: train split "
                                              "has 0 positive")
    assert reasons["gon"].startswith("all 1 test-split gon scores from probe_predictions vit/rfmid were rejected")
    assert rows[0]["train_dataset"] == "rfmid" and rows[0]["method"] == "linear_probe"


def test_no_scores_and_training_only_scores_are_told_apart():
    configs = [Configuration("clip", "idrid", task, "zero_shot") for task in ("any_dr", "gon")]
    frame = scored([("i1", "any_dr", "train", 0.4)])
    reasons = {r["task"]: r["reason"] for r in unavailable_rows(configs, frame, frame, "zero_shot_scores clip/idrid")}
    assert "only on training images" in reasons["any_dr"]
    assert reasons["gon"].startswith("zero_shot_scores clip/idrid has no scores for gon")


def test_a_probe_run_keeps_the_reason_a_task_was_skipped():
    rng = np.random.default_rng(0)
    n = 12
    frame = pd.DataFrame({"image_id": [f"i{k}" for k in range(n)], "split": ["train"] * 8 + ["test"] * 4,
                          "any_dr": pd.array([0, 1] * 6, dtype="Int8"),
                          "referable_dr": pd.array([0] * 8 + [0, 1, 0, 1], dtype="Int8"),  # no train positive
                          "gon": pd.array([None] * n, dtype="Int8")})
    embeddings = pd.DataFrame({"image_id": frame["image_id"], "embedding": list(rng.normal(size=(n, 4)))})
    run = in_domain_probes("rfmid", embeddings, frame)
    assert set(run.skipped) == {"referable_dr"}
    stored = skipped_frame(run.skipped)
    assert list(stored.columns) == ["task", "reason"]
    assert skipped_tasks(stored) == run.skipped and "0 positive" in run.skipped["referable_dr"]
    assert skipped_tasks(skipped_frame({})) == {}


def unavailable_table() -> pd.DataFrame:
    rows = [Configuration("vit", "rfmid", "referable_dr", "linear_probe", "rfmid").unavailable("probe skipped"),
            Configuration("llava", "rfmid", "gon", "yes_no").unavailable("token_probabilities not materialised")]
    rows[0].update(weights_sha256="abc", source_asset="probe_predictions")
    return unavailable_frame(rows, release_version="r1", labels_version="l1", code_version="c1", run_id="pred-run",
                             predictions_version="v1", partition="rfmid")


def test_the_unavailable_table_keeps_the_configuration_reason_and_lineage():
    table = unavailable_table()
    assert list(table.columns) == ["dataset", "model", "method", "task", "train_dataset", "reason",
                                   *LINEAGE_COLUMNS, "partition"]
    assert table["train_dataset"].tolist() == ["rfmid", None]  # methods without training: null, not "None"
    assert table["weights_sha256"].tolist() == ["abc", None]
    assert unavailable_frame([]).empty


def test_an_unavailable_configuration_is_a_null_auroc_row_with_the_reason_and_the_id_its_number_would_get():
    rows = unavailable_metric_rows(unavailable_table(), "metrics-run")
    assert rows["metric"].tolist() == ["auroc", "auroc"] and set(rows["axis"]) == {"performance"}
    assert (rows["group"] == "").all() and rows["value"].isna().all() and rows["ci_low"].isna().all()
    assert rows["reason"].tolist() == ["probe skipped", "token_probabilities not materialised"]
    yes_no = {"model": "llava", "dataset": "rfmid", "task": "gon", "method": "yes_no", "train_dataset": None}
    assert rows["metric_id"].iloc[1] == metric_id(yes_no, "performance", "auroc")
    assert rows["predictions_run_id"].tolist() == ["pred-run", "pred-run"] and set(rows["run_id"]) == {"metrics-run"}
    assert rows["labels_version"].tolist() == ["l1", "l1"] and rows["weights_sha256"].tolist() == ["abc", None]


def test_unavailable_rows_follow_the_metric_rows_without_changing_them():
    from focus_dagster.evaluation.predictions import with_lineage
    from focus_dagster.evaluation.tables import metric_rows
    from tests.core.evaluation.test_evaluation import FAST, metadata, predictions

    frame = predictions().assign(**{c: "x" for c in LINEAGE_COLUMNS})
    table = with_lineage(metric_rows(frame, metadata(frame), coverage={}, settings=FAST), frame, "metrics-run")
    combined = with_unavailable(table, unavailable_table(), "metrics-run")
    pd.testing.assert_frame_equal(combined.iloc[: len(table)], table)
    assert len(combined) == len(table) + 2 and combined["metric_id"].is_unique
    assert list(combined.columns) == list(table.columns)
    assert with_unavailable(table, unavailable_frame([]), "metrics-run") is table
