"""Linear probes on frozen embeddings: one logistic regression per task, fit on a dataset's training split.

The protocol's probe: embeddings L2-normalised, scikit-learn `LogisticRegression(class_weight="balanced",
max_iter=1000)`, fit on the train split, scored on the test split; score = P(positive). The Youden threshold
(max TPR - FPR) of the probe's own training-split scores is kept with it, so threshold metrics on test
images never look at test labels. A fitted probe is kept as plain arrays (coefficients, intercept,
threshold), so that it can score any other dataset's test split: the cross-dataset matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from focus_dagster import lineage
from focus_dagster.labels import defined_tasks

PROBE_METHOD = "linear_probe"
MIN_TRAIN_PER_CLASS = 2  # logistic regression needs both classes; fewer than this per class is no probe


@dataclass(frozen=True)
class Probe:
    """A fitted probe: P(positive) = sigmoid(normalised embedding . coef + intercept)."""

    task: str
    coef: np.ndarray
    intercept: float
    threshold: float | None  # Youden threshold on the training split (None when undefined)
    n_train: int
    n_train_positive: int

    def score(self, embeddings: np.ndarray) -> np.ndarray:
        logits = l2_normalise(embeddings) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-logits))


def l2_normalise(embeddings: np.ndarray) -> np.ndarray:
    matrix = np.asarray(embeddings, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def fit_probe(task: str, embeddings: np.ndarray, labels: np.ndarray) -> Probe | str:
    """A probe for one task, or the reason there is none (a training split without both classes)."""
    from sklearn.linear_model import LogisticRegression

    from focus_dagster.evaluation.metrics import youden_threshold

    labels = np.asarray(labels, dtype=int)
    positives = int(labels.sum())
    if min(positives, len(labels) - positives) < MIN_TRAIN_PER_CLASS:
        return (f"train split has {positives} positive and {len(labels) - positives} negative images for {task}; "
                f"a probe needs at least {MIN_TRAIN_PER_CLASS} of each")
    model = LogisticRegression(class_weight="balanced", max_iter=1000)
    model.fit(l2_normalise(embeddings), labels)
    probe = Probe(task, model.coef_[0].copy(), float(model.intercept_[0]), None, len(labels), positives)
    threshold = youden_threshold(labels, probe.score(embeddings))
    return Probe(task, probe.coef, probe.intercept, threshold.value, len(labels), positives)


@dataclass
class ProbeRun:
    """In-domain probe results of one model on one dataset."""

    predictions: pd.DataFrame  # image_id, task, split, score, threshold, train_dataset
    probes: dict[str, Probe]
    skipped: dict[str, str]  # task -> reason


def in_domain_probes(dataset: str, embeddings: pd.DataFrame, labels: pd.DataFrame) -> ProbeRun:
    """Fit a probe per task on the train split and score the test split of the same dataset.

    embeddings: image_id + embedding (one vector per image); labels: the harmonised label table.
    """
    joined = labels.merge(embeddings[["image_id", "embedding"]], on="image_id", how="inner")
    rows, probes, skipped = [], {}, {}
    for task in defined_tasks(labels):
        defined = joined[joined[task].notna()]
        train, test = defined[defined["split"] == "train"], defined[defined["split"] == "test"]
        if test.empty:
            skipped[task] = "no test images with this label"
            continue
        fitted = fit_probe(task, _matrix(train), train[task].to_numpy(dtype=int))
        if isinstance(fitted, str):
            skipped[task] = fitted
            continue
        probes[task] = fitted
        rows.append(_scored(test, fitted, dataset))
    frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=PROBE_COLUMNS)
    return ProbeRun(frame, probes, skipped)


PROBE_COLUMNS = ["image_id", "task", "split", "score", "threshold", "train_dataset"]
SKIPPED_COLUMNS = ["task", "reason"]


def skipped_frame(skipped: dict[str, str]) -> pd.DataFrame:
    """The tasks a probe run could not fit, with the reason: kept beside the scores so that the predictions
    step can say why a configuration has no rows (the reason lives in the data, not only in the UI)."""
    return pd.DataFrame(sorted(skipped.items()), columns=SKIPPED_COLUMNS).astype(object)


def skipped_tasks(frame: pd.DataFrame) -> dict[str, str]:
    """task -> reason, from `skipped_frame`'s table."""
    return dict(zip(frame["task"], frame["reason"]))


def cross_dataset_scores(probe: Probe, train_dataset: str, embeddings: pd.DataFrame, labels: pd.DataFrame):
    """A probe trained on `train_dataset` scored on another dataset's test images that carry its task."""
    joined = labels.merge(embeddings[["image_id", "embedding"]], on="image_id", how="inner")
    test = joined[(joined["split"] == "test") & joined[probe.task].notna()]
    return _scored(test, probe, train_dataset)


def _scored(test: pd.DataFrame, probe: Probe, train_dataset: str) -> pd.DataFrame:
    return pd.DataFrame({
        "image_id": test["image_id"].to_numpy(),
        "task": probe.task,
        "split": test["split"].to_numpy(),
        "score": probe.score(_matrix(test)) if len(test) else np.zeros(0),
        "threshold": probe.threshold,
        "train_dataset": train_dataset,
    })


def _matrix(frame: pd.DataFrame) -> np.ndarray:
    if frame.empty:
        return np.zeros((0, 1))
    return np.stack(frame["embedding"].to_numpy()).astype(np.float64)


_LINEAGE = "__lineage__"


def save_probes(path, probes: dict[str, Probe], stamp: dict | None = None) -> None:
    """Probes as one .npz (written atomically by the caller's temp + rename), with their lineage stamp."""
    arrays = {}
    for task, probe in probes.items():
        arrays[f"{task}.coef"] = probe.coef
        arrays[f"{task}.meta"] = np.array([probe.intercept, np.nan if probe.threshold is None else probe.threshold,
                                          probe.n_train, probe.n_train_positive])
    if stamp is not None:
        arrays[_LINEAGE] = np.array(lineage.dumps(stamp))
    np.savez(path, **arrays)


def load_probes(path) -> dict[str, Probe]:
    return load_stamped_probes(path)[0]


def load_stamped_probes(path) -> tuple[dict[str, Probe], dict | None]:
    """The probes of an .npz and the lineage stamp saved with them (None for files saved without one)."""
    with np.load(path) as data:
        tasks = sorted({name.split(".")[0] for name in data.files if name != _LINEAGE})
        out = {}
        for task in tasks:
            intercept, threshold, n_train, n_pos = data[f"{task}.meta"]
            out[task] = Probe(task, data[f"{task}.coef"], float(intercept),
                              None if np.isnan(threshold) else float(threshold), int(n_train), int(n_pos))
        return out, (lineage.loads(str(data[_LINEAGE])) if _LINEAGE in data.files else None)
