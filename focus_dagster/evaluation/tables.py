"""Metric tables: one row per number, on four axes, each with its 95% bootstrap interval and a stable id.

For every configuration (model, dataset, task, method, train dataset) on the test split:

- performance: AUROC, AUPRC, and accuracy / sensitivity / specificity / F1 at 0.5 and at the training
  split's Youden threshold (`@0.5`, `@youden`);
- calibration: ECE (10 bins, the reference), ECE with 15 bins (torchmetrics' number), Guo's top-label ECE,
  Brier score;
- fairness, per attribute (sex; age split at the evaluated set's median and in fixed bands <50 / 50-64 / >=65;
  camera): per group n, positive rate (share predicted positive at 0.5), accuracy, TPR, FPR, AUROC, ECE, then
  the gaps (max - min over groups), the equalized-odds gap max(TPR gap, FPR gap) and the worst-group AUROC,
  and for two-group attributes the signed difference (e.g. `sex:F-M`), whose interval says whether there is
  an effect at all (a max - min gap is never below zero, so its interval cannot contain it);
  groups below 10 images are skipped with the reason, attributes without metadata are a row with the reason;
- quality: the same per-group metrics on adequate vs inadequate images and their gap adequate - inadequate
  (groups of at least 5).

Intervals: stratified by label, seeded; a gap's interval comes from resampling each group on its own (same
number of resamples) and differencing the replicates. A number that is not defined is null with a reason,
never 0. `metric_id` is a hash of what the number measures (not of its value or versions), so the same
measurement keeps its id across refreshes and a report can cite it. A configuration without predictions (a
row of the predictions' unavailable table) is one row too: its AUROC, null, with the reason.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from focus_dagster.evaluation.predictions import CONFIG_COLUMNS, LINEAGE_COLUMNS

AXES = ("performance", "calibration", "fairness", "quality")
RANKING = ("auroc", "auprc")
THRESHOLDED = ("accuracy", "sensitivity", "specificity", "f1")
CALIBRATION = ("ece", "ece_15", "ece_top_label", "brier")  # ECE: 10 bins (reference); ece_15: torchmetrics' form
GROUP_METRICS = ("positive_rate", "accuracy", "tpr", "fpr", "auroc", "ece")
FAIRNESS_MIN_GROUP = 10
QUALITY_MIN_GROUP = 5
AGE_BANDS = ((None, 50, "<50"), (50, 65, "50-64"), (65, None, ">=65"))
METRIC_COLUMNS = [
    "metric_id", *CONFIG_COLUMNS, "axis", "metric", "group", "value", "ci_low", "ci_high", "n", "n_pos", "reason",
]


@dataclass(frozen=True)
class Settings:
    n_resamples: int = 1000
    seed: int = 0


def metric_id(config: dict, axis: str, metric: str, group: str = "") -> str:
    """A stable id of what a number measures: configuration, axis, metric and group."""
    key = {**{c: config.get(c) or "" for c in CONFIG_COLUMNS}, "axis": axis, "metric": metric, "group": group}
    return "m-" + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _row(config: dict, axis: str, metric: str, group: str, value, low, high, n: int, n_pos: int, reason) -> dict:
    return {
        "metric_id": metric_id(config, axis, metric, group), **{c: config.get(c) for c in CONFIG_COLUMNS},
        "axis": axis, "metric": metric, "group": group, "value": _num(value), "ci_low": _num(low),
        "ci_high": _num(high), "n": int(n), "n_pos": int(n_pos), "reason": reason,
    }


def _num(value):
    return None if value is None or not np.isfinite(value) else float(value)


# ------------------------------------------------------------------------------------ performance + calibration


def configuration_rows(config: dict, y: np.ndarray, s: np.ndarray, youden: float | None, settings: Settings) -> list:
    """Performance and calibration rows of one configuration on its test images."""
    from focus_dagster.evaluation.bootstrap import bootstrap

    n, n_pos = len(y), int(y.sum())
    options = {"n_resamples": settings.n_resamples, "seed": settings.seed}
    at_half = bootstrap(y, s, metrics=RANKING + THRESHOLDED + CALIBRATION, threshold=0.5, **options)
    rows = [_interval_row(config, "performance", name, at_half[name], n, n_pos) for name in RANKING]
    rows += [_interval_row(config, "performance", f"{name}@0.5", at_half[name], n, n_pos) for name in THRESHOLDED]
    if youden is None or not np.isfinite(youden):
        rows += [_row(config, "performance", f"{name}@youden", "", None, None, None, n, n_pos,
                      "no Youden threshold: the training split's scores had one class") for name in THRESHOLDED]
    else:
        at_youden = bootstrap(y, s, metrics=THRESHOLDED, threshold=youden, **options)
        rows += [_interval_row(config, "performance", f"{name}@youden", at_youden[name], n, n_pos)
                 for name in THRESHOLDED]
    rows += [_interval_row(config, "calibration", name, at_half[name], n, n_pos) for name in CALIBRATION]
    return rows


def _interval_row(config: dict, axis: str, metric: str, interval, n: int, n_pos: int, group: str = "") -> dict:
    return _row(config, axis, metric, group, interval.point.value, interval.low, interval.high, n, n_pos,
                interval.point.reason)


# ----------------------------------------------------------------------------------------- group comparisons


def group_replicates(y: np.ndarray, s: np.ndarray, settings: Settings, threshold: float = 0.5) -> dict:
    """Point values (with reasons) and bootstrap replicates of every group metric for one group of images,
    all replicates computed on one set of resamples."""
    from focus_dagster.evaluation.bootstrap import replicates_many, resample_indices
    from focus_dagster.evaluation.metrics import call_metric

    idx = resample_indices(y, settings.n_resamples, settings.seed)
    names = {"accuracy": "accuracy", "tpr": "sensitivity", "specificity": "specificity", "auroc": "auroc", "ece": "ece"}
    replicates = replicates_many(tuple(names.values()), y, s, idx, threshold=threshold)
    out = {}
    for key, name in names.items():
        point = call_metric(name, y, s, threshold=threshold)
        out[key] = (point.value, point.reason, replicates[name])
    predicted = (s >= threshold).astype(float)
    out["positive_rate"] = (float(predicted.mean()) if len(y) else None, None, predicted[idx].mean(axis=1))
    specificity = out.pop("specificity")
    out["fpr"] = (None if specificity[0] is None else 1.0 - specificity[0], specificity[1], 1.0 - specificity[2])
    return {metric: out[metric] for metric in GROUP_METRICS}


def group_rows(config: dict, axis: str, attribute: str, frame: pd.DataFrame, groups: pd.Series, settings: Settings,
               min_group: int, signed: tuple[str, str] | None = None) -> list:
    """Per-group rows and gap rows for one attribute. `signed=(a, b)` reports a - b instead of max - min."""
    rows, fitted = [], {}
    for name in sorted(groups.dropna().unique(), key=str):
        member = (groups == name).to_numpy()
        y, s = frame["label"].to_numpy()[member].astype(int), frame["score"].to_numpy()[member].astype(float)
        tag = f"{attribute}={name}"
        if len(y) < min_group:
            rows.append(_row(config, axis, "group", tag, None, None, None, len(y), int(y.sum()),
                             f"group has {len(y)} images; at least {min_group} are needed"))
            continue
        values = group_replicates(y, s, settings)
        fitted[name] = values
        for metric, (point, reason, replicates) in values.items():
            low, high = _percentiles(replicates)
            rows.append(_row(config, axis, metric, tag, point, low, high, len(y), int(y.sum()), reason))
    rows += gap_rows(config, axis, attribute, fitted, signed, groups.notna().sum(), frame)
    return rows


def gap_rows(config, axis, attribute, fitted: dict, signed, n_total, frame) -> list:
    n_pos = int(frame["label"].sum())
    if signed is not None:
        if not all(g in fitted for g in signed):
            missing = [g for g in signed if g not in fitted]
            return [_row(config, axis, f"{m}_gap", f"{attribute}:{signed[0]}-{signed[1]}", None, None, None,
                         n_total, n_pos, f"no usable group {missing}") for m in GROUP_METRICS]
        return [_difference_row(config, axis, m, attribute, fitted[signed[0]][m], fitted[signed[1]][m],
                                f"{attribute}:{signed[0]}-{signed[1]}", n_total, n_pos) for m in GROUP_METRICS]
    if len(fitted) < 2:
        reason = f"{len(fitted)} usable group(s) for {attribute}: a gap needs two"
        return [_row(config, axis, f"{m}_gap", f"{attribute}:max-min", None, None, None, n_total, n_pos, reason)
                for m in (*GROUP_METRICS, "equalized_odds")] + [
            _row(config, axis, "worst_group_auroc", attribute, None, None, None, n_total, n_pos, reason)]
    rows, gaps = [], {}
    for metric in GROUP_METRICS:
        points = [fitted[g][metric][0] for g in fitted]
        stack = np.vstack([fitted[g][metric][2] for g in fitted])
        replicates = np.nanmax(stack, axis=0) - np.nanmin(stack, axis=0)
        gaps[metric] = replicates
        defined = [p for p in points if p is not None]
        point = max(defined) - min(defined) if len(defined) == len(points) else None
        reason = None if point is not None else f"{metric} undefined in some group"
        low, high = _percentiles(replicates)
        rows.append(_row(config, axis, f"{metric}_gap", f"{attribute}:max-min", point, low, high, n_total, n_pos,
                         reason))
    tpr_gap, fpr_gap = rows[GROUP_METRICS.index("tpr")]["value"], rows[GROUP_METRICS.index("fpr")]["value"]
    eo = max(tpr_gap, fpr_gap) if tpr_gap is not None and fpr_gap is not None else None
    low, high = _percentiles(np.fmax(gaps["tpr"], gaps["fpr"]))
    rows.append(_row(config, axis, "equalized_odds_gap", f"{attribute}:max-min", eo, low, high, n_total, n_pos,
                     None if eo is not None else "TPR or FPR undefined in some group"))
    aurocs = [fitted[g]["auroc"][0] for g in fitted]
    worst = min(aurocs) if all(a is not None for a in aurocs) else None
    low, high = _percentiles(np.nanmin(np.vstack([fitted[g]["auroc"][2] for g in fitted]), axis=0))
    rows.append(_row(config, axis, "worst_group_auroc", attribute, worst, low, high, n_total, n_pos,
                     None if worst is not None else "AUROC undefined in some group"))
    if len(fitted) == 2:  # two groups: the signed difference too, whose interval can tell "no effect" (0 inside)
        first, second = sorted(fitted, key=str)
        rows += [_difference_row(config, axis, m, attribute, fitted[first][m], fitted[second][m],
                                 f"{attribute}:{first}-{second}", n_total, n_pos) for m in GROUP_METRICS]
    return rows


def _difference_row(config, axis, metric, attribute, a, b, group, n_total, n_pos) -> dict:
    point = a[0] - b[0] if a[0] is not None and b[0] is not None else None
    low, high = _percentiles(a[2] - b[2])
    return _row(config, axis, f"{metric}_gap", group, point, low, high, n_total, n_pos,
                None if point is not None else f"{metric} undefined in a group")


def _percentiles(replicates: np.ndarray, alpha: float = 0.05):
    finite = np.asarray(replicates, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return None, None
    return float(np.quantile(finite, alpha / 2)), float(np.quantile(finite, 1 - alpha / 2))


# ------------------------------------------------------------------------------------------------- attributes


def fairness_attributes(frame: pd.DataFrame, available: dict[str, bool],
                        reasons: dict[str, str] | None = None) -> dict[str, pd.Series | str]:
    """Attribute -> group labels per row, or the reason the attribute cannot be analysed here (`reasons`:
    column -> why, for the columns not available; a generic reason otherwise)."""
    reasons = reasons or {}
    out: dict[str, pd.Series | str] = {}
    for attribute, column in (("sex", "sex"), ("camera", "camera")):
        out[attribute] = frame[column] if available.get(column) else reasons.get(column, _no_metadata(column))
    if available.get("age"):
        age = pd.to_numeric(frame["age"], errors="coerce")
        median = float(age.median()) if age.notna().any() else float("nan")
        out["age_median"] = age.map(lambda a: None if pd.isna(a) else (f"<{median:g}" if a < median else f">={median:g}"))
        out["age_band"] = age.map(_age_band)
    else:
        out["age_median"] = out["age_band"] = reasons.get("age", _no_metadata("age"))
    return out


def _no_metadata(column: str) -> str:
    return f"metadata_coverage: no image of this dataset has a {column} value"


def _age_band(age) -> str | None:
    if pd.isna(age):
        return None
    for low, high, name in AGE_BANDS:
        if (low is None or age >= low) and (high is None or age < high):
            return name
    return None


def metric_rows(predictions: pd.DataFrame, metadata: pd.DataFrame, coverage: dict[str, bool],
                settings: Settings = Settings(), axes: tuple[str, ...] = AXES,
                reasons: dict[str, str] | None = None) -> pd.DataFrame:
    """The metric rows of the predictions' test split on the chosen axes (metadata: image_id + age, sex,
    quality, camera; coverage: column -> whether the axes group by it; reasons: column -> why not)."""
    test = predictions[predictions["split"] == "test"].merge(metadata, on="image_id", how="left")
    rows = []
    for key, frame in test.groupby(CONFIG_COLUMNS, dropna=False, sort=True):
        config = {c: (None if pd.isna(v) else v) for c, v in zip(CONFIG_COLUMNS, key)}
        y, s = frame["label"].to_numpy(dtype=int), frame["score"].to_numpy(dtype=float)
        threshold = frame["threshold"].iloc[0]
        if "performance" in axes:  # performance and calibration come from one bootstrap
            rows += configuration_rows(config, y, s, None if pd.isna(threshold) else float(threshold), settings)
        if _in_domain(config):
            rows += _group_axes(config, frame, y, coverage, settings, axes, reasons or {})
    return typed(pd.DataFrame(rows, columns=METRIC_COLUMNS))


def _group_axes(config, frame, y, coverage, settings, axes, reasons) -> list:
    """The fairness and quality rows of one in-domain configuration (those of the chosen axes)."""
    rows = []
    if "fairness" in axes:
        for attribute, groups in fairness_attributes(frame, coverage, reasons).items():
            if isinstance(groups, str):
                rows.append(_row(config, "fairness", "attribute", attribute, None, None, None, len(y), int(y.sum()),
                                 groups))
            else:
                rows += group_rows(config, "fairness", attribute, frame, groups.reset_index(drop=True),
                                   settings, FAIRNESS_MIN_GROUP)
    if "quality" not in axes:
        return rows
    if coverage.get("quality"):
        rows += group_rows(config, "quality", "quality", frame, frame["quality"].reset_index(drop=True),
                           settings, QUALITY_MIN_GROUP, signed=("adequate", "inadequate"))
    else:
        rows.append(_row(config, "quality", "attribute", "quality", None, None, None, len(y), int(y.sum()),
                         reasons.get("quality", _no_metadata("quality"))))
    return rows


# A configuration without predictions is one row: its test AUROC, null, with the reason. AUROC because every
# configuration has it and it is what the leaderboard ranks (a null value keeps the row off the board); the
# id is the one the number gets once predictions exist, so a report can cite the gap and later the number.
UNAVAILABLE_AXIS, UNAVAILABLE_METRIC = "performance", "auroc"


def unavailable_metric_rows(unavailable: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """One metric row per unavailable configuration (a row of the predictions' unavailable table): value,
    interval, n and n_pos empty, the reason, and the lineage the unavailable row recorded."""
    rows = [_row({c: _text(record.get(c)) for c in CONFIG_COLUMNS}, UNAVAILABLE_AXIS, UNAVAILABLE_METRIC, "",
                 None, None, None, 0, 0, record["reason"]) for record in unavailable.to_dict("records")]
    lineage = unavailable.reindex(columns=LINEAGE_COLUMNS).rename(columns={"run_id": "predictions_run_id"})
    table = typed(pd.DataFrame(rows, columns=METRIC_COLUMNS))
    return pd.concat([table, lineage.reset_index(drop=True).astype(object)], axis=1).assign(run_id=run_id)


def with_unavailable(table: pd.DataFrame, unavailable: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """The metric table (with lineage) and a row for every unavailable configuration after it."""
    extra = unavailable_metric_rows(unavailable, run_id)
    if extra.empty:
        return table
    if table.empty:
        return extra
    return pd.concat([table, extra[table.columns]], ignore_index=True)


def _text(value):
    return None if value is None or pd.isna(value) or value == "" else value


TEXT_COLUMNS = ("metric_id", *CONFIG_COLUMNS, "axis", "metric", "group", "reason")


def typed(table: pd.DataFrame) -> pd.DataFrame:
    """Text columns as text even when every value is null (so the table's column types never depend on data)."""
    out = table.copy()
    for column in TEXT_COLUMNS:
        out[column] = out[column].astype(object).where(out[column].notna(), None)
    for column in ("value", "ci_low", "ci_high"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
    return out


def _in_domain(config: dict) -> bool:
    return not config.get("train_dataset") or config["train_dataset"] == config["dataset"]
