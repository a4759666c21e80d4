"""Robustness to image quality: a configuration's scores on degraded test images against its clean scores.

For one configuration (model x dataset x task x method) the same test images are scored clean and under each
degradation at each severity (focus_dagster/degradations). A row per (degradation, severity, metric) gives:
- `clean` and `degraded`: the metric on the whole test set (AUROC, accuracy at the probe's Youden threshold from
  its clean training split, ECE with 10 bins; scores and thresholds as the clean metrics use them);
- `ci_low`/`ci_high`: the degraded metric's 95% percentile bootstrap interval (label-stratified resamples);
- `delta` = degraded - clean with its paired interval (`delta_low`/`delta_high`) and two-sided p-value: both
  score vectors on the same resamples (evaluation/paired.py), so what the images share cancels and the interval
  is about the degradation alone;
- `relative_drop` = (clean - degraded) / clean for AUROC (the quality axis' unit), null for the other metrics;
- `metric_id`: the number's id (`focus trace ID`), from its configuration, the axis `robustness`, the metric and
  `<degradation>@<severity>` as its group.
The resamples are seeded from the configuration's identity, the same for every degradation, so two degradations'
deltas are measured on the same draws.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from focus_dagster.evaluation.bootstrap import resample_counts
from focus_dagster.evaluation.intervals import percentile
from focus_dagster.evaluation.metrics import as_arrays
from focus_dagster.evaluation.paired import paired_delta, side_points, side_replicates
from focus_dagster.evaluation.probes import PROBE_METHOD, Probe
from focus_dagster.evaluation.tables import configuration_seed, metric_id

ROBUSTNESS_METRICS = ("auroc", "accuracy@youden", "ece")
ROBUSTNESS_COLUMNS = ["degradation", "severity", "metric", "clean", "degraded", "ci_low", "ci_high", "delta",
                      "delta_low", "delta_high", "p_value", "relative_drop", "n", "n_pos", "reason"]
CONFIGURATION_COLUMNS = ["model", "dataset", "task", "method"]
ROBUSTNESS_AXIS = "robustness"  # the axis of robustness metric ids
QUALITY_AXIS_METRIC = "quality_axis"  # the metric id of a summary row names this metric
PROVENANCE_COLUMNS = ["registry", "parameters"]
N_RESAMPLES = 1000


def robustness_rows(y_true, clean, degraded: dict[tuple[str, int], np.ndarray], threshold: float | None, *,
                    seed: int, n_resamples: int = N_RESAMPLES, alpha: float = 0.05) -> pd.DataFrame:
    """The rows of one configuration: `clean` scores and, per (degradation, severity), the `degraded` scores of
    the same images in the same order; `threshold` the probe's Youden threshold (None: no accuracy).

    One set of label-stratified resamples serves every degradation: the clean side's point values and replicates
    are computed once, each degraded side's once, and a delta's replicates are their difference per resample (as
    `paired.paired_deltas` computes them for two score vectors)."""
    y = np.asarray(y_true, dtype=int)
    _, clean_scores = as_arrays(y, clean)
    youden = threshold if threshold is not None and np.isfinite(threshold) else None
    counts = resample_counts(y, n_resamples, seed)
    clean_side = _side(y, clean_scores, youden, counts, "clean")
    rows = []
    for (name, severity), scores in degraded.items():
        if len(scores) != len(y):
            raise ValueError(f"{name} at severity {severity}: {len(scores)} degraded scores for {len(y)} images")
        degraded_side = _side(y, as_arrays(y, scores)[1], youden, counts, "degraded")
        rows += [_row(name, severity, metric, clean_side, degraded_side, len(y), int(y.sum()), alpha)
                 for metric in ROBUSTNESS_METRICS]
    return pd.DataFrame(rows, columns=ROBUSTNESS_COLUMNS)


def _side(y: np.ndarray, scores: np.ndarray, youden: float | None, counts: np.ndarray, side: str) -> tuple:
    """One score vector's point values and replicates of the robustness metrics (those it has a value of)."""
    points = side_points(y, scores, youden, side, ROBUSTNESS_METRICS)
    defined = [name for name in ROBUSTNESS_METRICS if points[name].defined]
    return points, side_replicates(y, scores, counts, youden, defined) if defined else {}


def _row(name: str, severity: int, metric: str, clean_side: tuple, degraded_side: tuple, n: int, n_pos: int,
         alpha: float) -> dict:
    (clean_points, clean_reps), (degraded_points, degraded_reps) = clean_side, degraded_side
    both = metric in clean_reps and metric in degraded_reps
    delta = paired_delta(metric, clean_points[metric], degraded_points[metric],
                         degraded_reps[metric] - clean_reps[metric] if both else None, n, n_pos, alpha)
    low, high = (percentile(degraded_points[metric].value, degraded_reps[metric], alpha) if metric in degraded_reps
                 else (None, None))
    relative = (None if metric != "auroc" or delta.delta is None or not delta.base else -delta.delta / delta.base)
    return {"degradation": name, "severity": severity, "metric": metric, "clean": delta.base,
            "degraded": delta.adapted, "ci_low": low, "ci_high": high, "delta": delta.delta,
            "delta_low": delta.low, "delta_high": delta.high, "p_value": delta.p_value, "relative_drop": relative,
            "n": n, "n_pos": n_pos, "reason": delta.reason}


def probe_robustness(model: str, dataset: str, probes: dict[str, Probe], clean: pd.DataFrame, degraded: pd.DataFrame,
                     labels: pd.DataFrame, degradations: list[dict], n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """The robustness rows of every in-domain probe of one encoder on one dataset: each probe's clean test scores
    (`clean`, the probe step's) against its scores of the degraded test embeddings (`degraded`: image_id,
    degradation, severity, embedding), on the test images both have. `degradations`: the registry's description
    of each (degradation, severity), written into every row (`registry`, `parameters`)."""
    parts = []
    for task, probe in sorted(probes.items()):
        variants = {(name, int(severity)): pd.DataFrame({
            "image_id": variant["image_id"],
            "score": probe.score(np.stack(variant["embedding"].to_numpy()).astype(np.float64))})
            for (name, severity), variant in degraded.groupby(["degradation", "severity"], sort=False)}
        parts.append(_configuration_rows(model, dataset, task, PROBE_METHOD, dataset, clean, variants, labels,
                                         probe.threshold, n_resamples))
    return _finished(parts, degradations)


def prompt_robustness(model: str, dataset: str, method: str, clean: pd.DataFrame,
                      degraded: dict[tuple[str, int], pd.DataFrame], labels: pd.DataFrame, degradations: list[dict],
                      n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """The robustness rows of a prompted model on one dataset (`method`: a dual encoder's `zero_shot` prompts, a
    multimodal LLM's `yes_no` questions): its clean scores (`clean`: image_id, task, score) against the scores of
    the same prompts on each degraded variant (`degraded`: (degradation, severity) -> image_id, task, score); an
    image without a score (a yes/no answer with neither token) is left out of both sides. Neither method fits a
    threshold on training images, so accuracy at a Youden threshold is undefined, with its reason; AUROC and ECE
    are defined."""
    parts = []
    for task in sorted(set(clean["task"])):
        variants = {key: frame.loc[frame["task"] == task, ["image_id", "score"]].dropna()
                    for key, frame in degraded.items()}
        parts.append(_configuration_rows(model, dataset, task, method, None, clean.dropna(subset=["score"]), variants,
                                         labels, None, n_resamples))
    return _finished(parts, degradations)


def _configuration_rows(model: str, dataset: str, task: str, method: str, train_dataset: str | None,
                        clean: pd.DataFrame, variants: dict[tuple[str, int], pd.DataFrame], labels: pd.DataFrame,
                        threshold: float | None, n_resamples: int) -> pd.DataFrame | None:
    """One configuration's rows: its clean test scores of `task` against each variant's scores (image_id, score),
    on the labelled test images both have; variants over the same images share one clean side."""
    truth = labels.loc[(labels["split"] == "test") & labels[task].notna(), ["image_id", task]]
    scored = clean[clean["task"] == task][["image_id", "score"]].merge(truth, on="image_id")
    config = {"model": model, "dataset": dataset, "task": task, "method": method, "train_dataset": train_dataset}
    groups: dict[tuple, dict] = {}
    for key, variant in variants.items():
        both = scored[["image_id"]].merge(variant, on="image_id")
        if len(both):
            groups.setdefault(tuple(both["image_id"]), {})[key] = both["score"].to_numpy()
    parts = []
    for images, by_variant in groups.items():
        common = scored.set_index("image_id").loc[list(images)]
        rows = robustness_rows(common[task].astype(int), common["score"].to_numpy(), by_variant, threshold,
                               seed=configuration_seed(config, 0), n_resamples=n_resamples)
        parts.append(rows.assign(model=model, dataset=dataset, task=task, method=method, train_dataset=train_dataset))
    return pd.concat(parts, ignore_index=True) if parts else None


def _finished(parts: list[pd.DataFrame | None], degradations: list[dict]) -> pd.DataFrame:
    """The rows with each degradation's description and each number's metric id, in the table's columns."""
    described = {(d["degradation"], d["severity"]): d for d in degradations}
    parts = [part for part in parts if part is not None]
    frame = (pd.concat(parts, ignore_index=True) if parts
             else pd.DataFrame(columns=CONFIGURATION_COLUMNS + ["train_dataset"] + ROBUSTNESS_COLUMNS))
    keys = list(zip(frame["degradation"], frame["severity"]))
    frame["registry"] = [described[key]["registry"] for key in keys]
    frame["parameters"] = [json.dumps(described[key], sort_keys=True) for key in keys]
    frame.insert(0, "metric_id", [
        robustness_metric_id(model, dataset, task, method, train, metric, f"{name}@{severity}")
        for model, dataset, task, method, train, metric, name, severity in zip(
            frame["model"], frame["dataset"], frame["task"], frame["method"], frame["train_dataset"], frame["metric"],
            frame["degradation"], frame["severity"])])
    columns = ["metric_id"] + CONFIGURATION_COLUMNS + ["train_dataset"] + ROBUSTNESS_COLUMNS + PROVENANCE_COLUMNS
    return frame.reindex(columns=columns)


def robustness_metric_id(model: str, dataset: str, task: str, method: str, train_dataset: str | None, metric: str,
                         group: str = "") -> str:
    """The id of a robustness number: its configuration, the axis `robustness`, the metric, and the group
    (`<degradation>@<severity>` for a row; none for a configuration's summary)."""
    config = {"model": model, "dataset": dataset, "task": task, "method": method, "train_dataset": train_dataset}
    return metric_id(config, ROBUSTNESS_AXIS, metric, group)


# ------------------------------------------------------------------------------------------------- summary

SUMMARY_COLUMNS = ["metric_id", "model", "dataset", "task", "method", "train_dataset", "variants", "n", "n_pos", "mean_relative_drop",
                   "quality_axis", "worst_degradation", "worst_severity", "worst_relative_drop", "ce_baseline", "mce",
                   "mce_reason", "lineage_id"]


def robustness_summary(rows: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """One row per configuration from its robustness rows (AUROC only):
    - `mean_relative_drop`: the mean of AUROC's relative drop over every degradation and severity it has, and
      `quality_axis` = 1 - that (the arena's quality axis where no publisher graded quality);
    - the worst (degradation, severity) and its relative drop;
    - `metric_id`: the quality axis' id; `lineage_id`: the lineage stamp of the robustness rows it was formed from
      (one step writes every row of a configuration);
    - `mce`: ImageNet-C's mean corruption error (Hendrycks & Dietterich 2019) with AUROC's complement as the error:
      for each degradation, the configuration's summed 1 - AUROC over the severities both have, divided by the same
      sum of the `baseline` model's configuration on the same dataset, task and method; then the mean over the
      degradations. Below 1: more robust than the baseline. Null, with the reason, when the baseline has no such
      configuration or no degradation in common (`mce_reason`)."""
    auroc = rows[(rows["metric"] == "auroc") & rows["degraded"].notna()]
    keys = ["model", "dataset", "task", "method"]
    out = [_summary_row(config, group, _baseline_rows(auroc, config, baseline), baseline)
           for config, group in auroc.groupby(keys, sort=True)]
    return pd.DataFrame(out, columns=SUMMARY_COLUMNS)


def _baseline_rows(auroc: pd.DataFrame, config: tuple, baseline: str | None) -> pd.DataFrame | None:
    if baseline is None:
        return None
    _, dataset, task, method = config
    rows = auroc[(auroc["model"] == baseline) & (auroc["dataset"] == dataset) & (auroc["task"] == task)
                 & (auroc["method"] == method)]
    return rows if len(rows) else None


def _summary_row(config: tuple, group: pd.DataFrame, base: pd.DataFrame | None, baseline: str | None) -> dict:
    drops = group["relative_drop"].astype(float)
    worst = group.loc[drops.idxmax()] if drops.notna().any() else None
    mean_drop = float(drops.mean()) if drops.notna().any() else None
    mce, reason = _mce(group, base, baseline)
    model, dataset, task, method = config
    lineage_ids = group["lineage_id"].dropna().unique() if "lineage_id" in group else []
    # as its rows recorded it (one value per configuration; rows written before they recorded it: unknown)
    trained_on = group["train_dataset"].dropna().unique() if "train_dataset" in group else []
    train_dataset = str(trained_on[0]) if len(trained_on) == 1 else None
    return dict(zip(["model", "dataset", "task", "method"], config), train_dataset=train_dataset,
                metric_id=robustness_metric_id(model, dataset, task, method, train_dataset, QUALITY_AXIS_METRIC),
                variants=len(group), n=int(group["n"].max()), n_pos=int(group["n_pos"].max()),
                lineage_id=lineage_ids[0] if len(lineage_ids) == 1 else None,
                mean_relative_drop=mean_drop, quality_axis=None if mean_drop is None else 1 - mean_drop,
                worst_degradation=None if worst is None else worst["degradation"],
                worst_severity=None if worst is None else int(worst["severity"]),
                worst_relative_drop=None if worst is None else float(worst["relative_drop"]),
                ce_baseline=baseline, mce=mce, mce_reason=reason)


def _mce(group: pd.DataFrame, base: pd.DataFrame | None, baseline: str | None) -> tuple[float | None, str | None]:
    if baseline is None:
        return None, "no baseline model stated"
    if base is None:
        return None, f"the baseline {baseline} has no robustness rows for this dataset, task and method"
    errors = group.assign(error=1 - group["degraded"]).set_index(["degradation", "severity"])["error"]
    base_errors = base.assign(error=1 - base["degraded"]).set_index(["degradation", "severity"])["error"]
    shared = errors.index.intersection(base_errors.index)
    ratios = []
    for degradation in sorted(set(shared.get_level_values(0))):
        severities = shared[shared.get_level_values(0) == degradation]
        denominator = float(base_errors.loc[severities].sum())
        if denominator > 0:
            ratios.append(float(errors.loc[severities].sum()) / denominator)
    if not ratios:
        return None, (f"no degradation in common with the baseline {baseline}, or the baseline's AUROC is 1 under "
                      "each (its error sums to 0)")
    return float(np.mean(ratios)), None
