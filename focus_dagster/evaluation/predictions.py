"""The per-sample predictions table: one row per image, task, model and method, whatever the interface.

Every method ends in the same columns, so every metric is computed one way:

    dataset, image_id, task, model, interface, method, train_dataset, score, score_reference, threshold,
    label, split

`method` is linear_probe (vision and dual encoders), zero_shot (dual encoders) or yes_no (multimodal LLMs);
`train_dataset` is the dataset a probe was fit on (the evaluated dataset itself in-domain, another one in
the cross-dataset matrix; empty for methods without training); `score_reference` is the reference
benchmark's form of the score where it differs (yes/no: the raw max-over-variants p_yes); `threshold` is
the Youden threshold of the method's scores on the dataset's training split (threshold metrics use it and
0.5). Rows whose score is not a finite number are rejected and counted, never kept and never dropped
silently; predictions for images the labels do not know are an error naming the count and examples.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from focus_dagster.errors import FocusError
from focus_dagster.labels import TASKS

KEY_COLUMNS = ["dataset", "image_id", "task", "model", "interface", "method", "train_dataset"]
PREDICTION_COLUMNS = [*KEY_COLUMNS, "score", "score_reference", "threshold", "label", "split"]
CONFIG_COLUMNS = ["model", "dataset", "task", "method", "train_dataset"]
# Where each row came from, taken from the lineage stamps of the inputs the step read (focus_dagster/lineage.py):
# filled in by the step that assembles the table, carried on into every metric row. `lineage_id` names the whole
# recorded chain (table lineage.stamps); `train_labels_version` is the labels a cross-dataset probe was fit on.
LINEAGE_COLUMNS = ["release_version", "labels_version", "model_revision", "model_snapshot", "weights_sha256",
                   "source_asset", "source_run_id", "train_labels_version", "lineage_id", "predictions_version",
                   "code_version", "run_id"]


class PredictionsError(FocusError):
    """Predictions that cannot be matched to the labels they claim to predict."""


@dataclass
class Assembled:
    frame: pd.DataFrame
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> rows
    rejected_examples: list[dict] = field(default_factory=list)


def with_labels(scores: pd.DataFrame, labels: pd.DataFrame, source: str) -> pd.DataFrame:
    """Attach label and split from the harmonised labels; every predicted image must be a labelled one."""
    unknown = sorted(set(scores["image_id"]) - set(labels["image_id"]))
    if unknown:
        raise PredictionsError(
            f"{source}: {len(unknown)} predicted image id(s) are not in the harmonised labels of "
            f"{labels['dataset'].iloc[0] if len(labels) else 'this dataset'} (e.g. {unknown[:5]}). The model output "
            "is stale or from another dataset: rematerialise it from the current labels."
        )
    tasks = [task for task in TASKS if task in labels]
    long = labels.melt(id_vars=["image_id", "split"], value_vars=tasks, var_name="task", value_name="label")
    long = long[long["label"].notna()]
    merged = scores.drop(columns=[c for c in ("label", "split") if c in scores]).merge(
        long, on=["image_id", "task"], how="inner")
    return merged


def train_youden(frame: pd.DataFrame) -> pd.DataFrame:
    """Add `threshold`: per task, the Youden threshold of the scores on the training split (None if undefined)."""
    from focus_dagster.evaluation.metrics import youden_threshold

    thresholds = {}
    for task, rows in frame[frame["split"] == "train"].groupby("task"):
        thresholds[task] = youden_threshold(rows["label"].to_numpy(dtype=int), rows["score"].to_numpy()).value
    return frame.assign(threshold=frame["task"].map(thresholds).astype(float))


def finite_scores(frame: pd.DataFrame, source: str) -> Assembled:
    """Keep rows with a finite score in [0, 1]; count the others by reason, with examples."""
    score = pd.to_numeric(frame["score"], errors="coerce")
    bad_nan = ~np.isfinite(score)
    bad_range = ~bad_nan & ((score < 0) | (score > 1))
    rejected = {}
    examples = []
    for reason, mask in (("score is NaN or infinite", bad_nan), ("score outside [0, 1]", bad_range)):
        if mask.any():
            rejected[f"{source}: {reason}"] = int(mask.sum())
            examples += frame.loc[mask, ["image_id", "task"]].head(5).assign(reason=reason).to_dict("records")
    return Assembled(frame[~(bad_nan | bad_range)].reset_index(drop=True), rejected, examples)


def finish(frame: pd.DataFrame, **constants) -> pd.DataFrame:
    """The table's columns in order, constants filled in (dataset, model, interface, method, ...)."""
    out = frame.assign(**constants)
    for column in PREDICTION_COLUMNS:
        if column not in out:
            out[column] = None
    out["label"] = out["label"].astype(int)
    out["score"] = out["score"].astype(float)
    for column in ("score_reference", "threshold"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
    return out[PREDICTION_COLUMNS + [c for c in out.columns if c not in PREDICTION_COLUMNS]]


def frame_version(frame: pd.DataFrame) -> str:
    """A content hash of the predictions (the lineage columns, which name the run, left out)."""
    columns = [c for c in PREDICTION_COLUMNS if c in frame]
    data = frame[columns].sort_values(KEY_COLUMNS).to_csv(index=False) if len(frame) else ""
    return hashlib.sha256(data.encode()).hexdigest()[:20]


def empty_predictions() -> pd.DataFrame:
    """A table with no rows and every column typed, so that the stored table keeps its schema."""
    frame = pd.DataFrame({c: pd.Series(dtype=float if c in ("score", "score_reference", "threshold") else object)
                          for c in PREDICTION_COLUMNS + LINEAGE_COLUMNS})
    frame["label"] = frame["label"].astype("int64")
    return frame


def with_lineage(rows: pd.DataFrame, samples: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """Each metric row with the lineage columns of the predictions it was computed from."""
    if rows.empty:
        return rows.assign(**{c: pd.Series(dtype=object) for c in LINEAGE_COLUMNS}, predictions_run_id=None)
    keys = [c for c in CONFIG_COLUMNS if c != "train_dataset"] + ["_train"]
    lineage = keyed_by_training(samples).groupby(keys)[LINEAGE_COLUMNS].first().reset_index()
    lineage = lineage.rename(columns={"run_id": "predictions_run_id"})
    merged = keyed_by_training(rows).merge(lineage, on=keys, how="left").drop(columns="_train")
    return merged.assign(run_id=run_id)


def keyed_by_training(frame: pd.DataFrame) -> pd.DataFrame:
    """`train_dataset` as text in `_train`, for joins (empty for methods without training: never NaN against None)."""
    return frame.assign(_train=frame["train_dataset"].astype(object).where(frame["train_dataset"].notna(), ""))
