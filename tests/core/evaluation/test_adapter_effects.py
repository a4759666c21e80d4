"""The LoRA comparison on literal scores: each side classified at its own Youden threshold (the one its own
training split gave), counted by hand."""

from __future__ import annotations

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
