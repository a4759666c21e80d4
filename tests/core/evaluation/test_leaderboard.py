"""The leaderboard ranks real models above pipeline checks, whatever the checks' AUROC, and marks the checks."""

from __future__ import annotations

import pandas as pd

from focus_dagster.evaluation.leaderboard import FOOTNOTE, leaderboard_markdown, top_configurations

COLUMNS = ["model", "dataset", "task", "method", "train_dataset", "metric", "group", "value", "ci_low", "ci_high",
           "metric_id"]
# tiny_clip, a pipeline check, has the best AUROC of the linear-probe block; the zero-shot block has checks only.
ROWS = [
    ("tiny_clip", "idrid", "any_dr", "linear_probe", "idrid", "auroc", "", 0.97, 0.90, 1.00, "m-check"),
    ("tiny_clip", "idrid", "any_dr", "linear_probe", "idrid", "ece", "", 0.30, 0.20, 0.40, "e-check"),
    ("efficientnet_lite0", "idrid", "any_dr", "linear_probe", "idrid", "auroc", "", 0.71, 0.60, 0.80, "m-real"),
    ("efficientnet_lite0", "idrid", "any_dr", "linear_probe", "idrid", "ece", "", 0.10, 0.05, 0.15, "e-real"),
    ("resnet_18", "idrid", "any_dr", "linear_probe", "idrid", "auroc", "", 0.65, 0.55, 0.75, "m-real-2"),
    ("tiny_clip", "idrid", "any_dr", "zero_shot", None, "auroc", "", 0.55, 0.45, 0.65, "z-check"),
]
TABLE = pd.DataFrame(ROWS, columns=COLUMNS)
CHECKS = frozenset({"tiny_clip", "tiny_vit"})


def test_real_models_rank_above_a_better_pipeline_check_which_is_marked_with_the_footnote():
    lines = leaderboard_markdown(TABLE, top=3, pipeline_checks=CHECKS).splitlines()
    probe = [line for line in lines if "| linear_probe |" in line]
    assert [line.split(" | ")[2] for line in probe] == ["efficientnet_lite0", "resnet_18", "tiny_clip †"]
    assert "0.710 (0.600-0.800) | 0.100 | `m-real`" in probe[0] and "0.970 (0.900-1.000) | 0.300" in probe[2]
    # A block of checks only still shows its best, marked.
    assert [line.split(" | ")[2] for line in lines if "| zero_shot |" in line] == ["tiny_clip †"]
    assert lines[-1] == FOOTNOTE and lines[-2] == "" and FOOTNOTE.startswith("† pipeline check")


def test_the_best_per_block_is_the_best_real_model_and_no_mark_without_checks():
    best = top_configurations(TABLE, top=1, pipeline_checks=CHECKS)
    assert best[["method", "model", "pipeline_check"]].values.tolist() == [
        ["linear_probe", "efficientnet_lite0", False], ["zero_shot", "tiny_clip", True]]
    unmarked = leaderboard_markdown(TABLE[TABLE["model"] != "tiny_clip"], top=3, pipeline_checks=CHECKS)
    assert "†" not in unmarked and FOOTNOTE not in unmarked
