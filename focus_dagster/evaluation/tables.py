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
  groups below 10 images are skipped with the reason, attributes without metadata are a row with the reason,
  and an attribute whose coverage check failed keeps every row it would have (same groups, n and ids), each
  without a value and with the check's reason (`withheld`);
- quality: the same per-group metrics on adequate vs inadequate images and their gap adequate - inadequate
  (groups of at least 5).

The resampling design (one per configuration). The configuration's test images are resampled once: R
resamples, stratified by label (each keeps the test split's positives and negatives counts), drawn from a
seed derived from the configuration's identity (`configuration_seed`: its model, dataset, task, method and
train dataset, and `Settings.seed`), so a number does not depend on which configurations were computed
before it. Every metric of every axis is computed on the same R replicates: replicate r of a group metric
is the metric on the images of the group that resample r drew, with their multiplicities (the group's size
varies across replicates as between real samples), and a gap's replicate r is the gap computed on
replicate r (max - min over the groups, or the signed difference, or the minimum group AUROC), undefined
when the metric is undefined in any group in that replicate. The 95% interval comes from the defined
replicates by the method the coverage simulation chose for the metric (`intervals.CHOICE`, evidence in
`bench/results/coverage_cpu_2core.md`): BCa for AUROC, AUPRC, accuracy, sensitivity, specificity, Brier and
the group rates and the signed two-group differences (`intervals.signed_difference`: each group's
leave-one-out values); the basic (reflected) interval, clipped to [0, 1], for F1 and the ECEs (biased upward;
no method reaches 95% coverage for them at these sizes); percentile for the max-min gaps and the worst-group
AUROC; the bias-shifted percentile for the equalized-odds gap. A number that
is not defined is null with a reason, never 0, and its interval is null too.

Groups and ids: `group` names what is measured, never a value of the data: the age median split is
`age_median=below` / `age_median=above`, and the median itself is in `group_detail` (`age < 57`), so the id
stays when the test set's median moves. A configuration whose test split has fewer than MIN_POSITIVES
positives or negatives is flagged on every one of its rows (`degenerate`, `degenerate_reason`): its numbers
exist but rest on a handful of images (RFMiD's CME, RFMiD 2.0's ME). `metric_id` is a hash of what the
number measures (not of its value or versions), so the same measurement keeps its id across refreshes and a
report can cite it. A configuration without predictions (a
row of the predictions' unavailable table) is one row too: its AUROC, null, with the reason.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from focus_dagster.evaluation.bootstrap import GROUP_METRICS
from focus_dagster.evaluation.predictions import CONFIG_COLUMNS, LINEAGE_COLUMNS

AXES = ("performance", "calibration", "fairness", "quality")
RANKING = ("auroc", "auprc")
THRESHOLDED = ("accuracy", "sensitivity", "specificity", "f1")
CALIBRATION = ("ece", "ece_15", "ece_top_label", "brier")  # ECE: 10 bins (reference); ece_15: torchmetrics' form
FAIRNESS_MIN_GROUP = 10
QUALITY_MIN_GROUP = 5
AGE_BANDS = ((None, 50, "<50"), (50, 65, "50-64"), (65, None, ">=65"))
METRIC_COLUMNS = [
    "metric_id", *CONFIG_COLUMNS, "axis", "metric", "group", "value", "ci_low", "ci_high", "n", "n_pos", "reason",
    "group_detail", "degenerate", "degenerate_reason",
]


@dataclass(frozen=True)
class Settings:
    n_resamples: int = 1000
    seed: int = 0


def _identity(config: dict, **what) -> str:
    """16 hex digits naming a configuration (its CONFIG_COLUMNS) and `what` of it, whatever its values."""
    key = {**{c: config.get(c) or "" for c in CONFIG_COLUMNS}, **what}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def configuration_seed(config: dict, seed: int) -> int:
    """The resampling seed of one configuration: from what it is (and `seed`), not from when it is computed."""
    return int(_identity(config, seed=int(seed)), 16)


def metric_id(config: dict, axis: str, metric: str, group: str = "") -> str:
    """A stable id of what a number measures: configuration, axis, metric and group."""
    return "m-" + _identity(config, axis=axis, metric=metric, group=group)


def _row(config: dict, axis: str, metric: str, group: str, value, low, high, n: int, n_pos: int, reason,
         detail: str | None = None) -> dict:
    """One number. A null value never carries an interval."""
    defined = _num(value) is not None
    return {
        "metric_id": metric_id(config, axis, metric, group), **{c: config.get(c) for c in CONFIG_COLUMNS},
        "axis": axis, "metric": metric, "group": group, "value": _num(value),
        "ci_low": _num(low) if defined else None, "ci_high": _num(high) if defined else None,
        "n": int(n), "n_pos": int(n_pos), "reason": reason, "group_detail": detail,
    }


def shared_value(frame: pd.DataFrame, column: str, config: dict):
    """The one value of `column` that every row of a configuration carries (its Youden threshold, its lineage id;
    a missing threshold stays NaN). Two values mean the predictions table mixes two computations of the
    configuration: refused, rather than computing from whichever row comes first."""
    values = frame[column].drop_duplicates()
    if len(values) > 1:
        raise ValueError(f"predictions rows of {config} carry {len(values)} different {column} values "
                         f"({', '.join(map(str, values.head(3)))}): the table mixes two computations of it; "
                         "materialise predictions again for that dataset")
    return values.iloc[0]


def _num(value):
    return None if value is None or not np.isfinite(value) else float(value)


# ------------------------------------------------------------------------------------ performance + calibration


def configuration_rows(config: dict, y: np.ndarray, s: np.ndarray, youden: float | None, resamples) -> list:
    """Performance and calibration rows of one configuration on its test images, from its resamples
    (`bootstrap.Resamples`)."""
    n, n_pos = len(y), int(y.sum())
    at_half = _intervals(y, s, RANKING + THRESHOLDED + CALIBRATION, resamples, threshold=0.5)
    rows = [_interval_row(config, "performance", name, at_half[name], n, n_pos) for name in RANKING]
    rows += [_interval_row(config, "performance", f"{name}@0.5", at_half[name], n, n_pos) for name in THRESHOLDED]
    if youden is None or not np.isfinite(youden):
        rows += [_row(config, "performance", f"{name}@youden", "", None, None, None, n, n_pos,
                      "no Youden threshold: the training split's scores had one class") for name in THRESHOLDED]
    else:
        at_youden = _intervals(y, s, THRESHOLDED, resamples, threshold=youden)
        rows += [_interval_row(config, "performance", f"{name}@youden", at_youden[name], n, n_pos)
                 for name in THRESHOLDED]
    rows += [_interval_row(config, "calibration", name, at_half[name], n, n_pos) for name in CALIBRATION]
    return rows


def _intervals(y: np.ndarray, s: np.ndarray, metrics: tuple, resamples, threshold: float) -> dict:
    """Point and interval of each metric (by the metric's chosen method), on the configuration's resamples."""
    from focus_dagster.evaluation.bootstrap import Interval
    from focus_dagster.evaluation.intervals import interval
    from focus_dagster.evaluation.metrics import call_metric

    replicates = resamples.metrics(metrics, threshold=threshold)
    out = {}
    for name in metrics:
        point = call_metric(name, y, s, threshold=threshold)
        low, high = interval(name, point, replicates[name], y, s, threshold=threshold)
        out[name] = Interval(point, low, high, replicates[name])
    return out


def _interval_row(config: dict, axis: str, metric: str, interval, n: int, n_pos: int, group: str = "") -> dict:
    return _row(config, axis, metric, group, interval.point.value, interval.low, interval.high, n, n_pos,
                interval.point.reason)


# ----------------------------------------------------------------------------------------- group comparisons


def group_values(y: np.ndarray, s: np.ndarray, member: np.ndarray, weights: np.ndarray,
                 threshold: float = 0.5) -> dict:
    """`{metric: (point, reason, replicates)}` of every group metric for the images where `member` is True:
    the point on the group's images, the replicates on the group's share of each of the configuration's
    resamples (`weights`, see the module docstring)."""
    from focus_dagster.evaluation.bootstrap import group_replicates

    replicates = group_replicates(y, s, weights, member, threshold=threshold)
    return _group_points(y[member], s[member], replicates, threshold)


def _group_points(ym: np.ndarray, sm: np.ndarray, replicates: dict, threshold: float = 0.5) -> dict:
    """`group_values` from the group's images and its replicates (`{metric: [R]}`)."""
    from focus_dagster.evaluation.metrics import call_metric

    points = {key: call_metric(name, ym, sm, threshold=threshold)
              for key, name in (("accuracy", "accuracy"), ("tpr", "sensitivity"), ("auroc", "auroc"), ("ece", "ece"))}
    specificity = call_metric("specificity", ym, sm, threshold=threshold)
    out = {key: (value.value, value.reason, replicates[key]) for key, value in points.items()}
    out["fpr"] = (None if specificity.value is None else 1.0 - specificity.value, specificity.reason,
                  replicates["fpr"])
    out["positive_rate"] = (float((sm >= threshold).mean()) if len(ym) else None, None, replicates["positive_rate"])
    return {metric: out[metric] for metric in GROUP_METRICS}


@dataclass(frozen=True, eq=False)
class Attribute:
    """An attribute analysed on a configuration's test images: its axis, name, group label per image (None: in
    no group), the fewest images a group needs, the signed pair (`signed=(a, b)` reports a - b instead of
    max - min) and what each group is (`details`: group -> `group_detail`)."""

    axis: str
    name: str
    groups: pd.Series
    min_group: int
    signed: tuple[str, str] | None = None
    details: dict | None = None

    @cached_property
    def names(self) -> list:
        """The groups, sorted as text."""
        return sorted(self.groups.dropna().unique(), key=str)

    @cached_property
    def members(self) -> dict[str, np.ndarray]:
        labels = self.groups.to_numpy()
        return {name: labels == name for name in self.names}

    @cached_property
    def usable(self) -> list:
        """The groups of at least `min_group` images, in order."""
        return [name for name in self.names if self.members[name].sum() >= self.min_group]

    @cached_property
    def codes(self) -> np.ndarray:
        """Per image, the position of its group in `usable`, -1 when in none."""
        codes = np.full(len(self.groups), -1, dtype=np.intp)
        for k, name in enumerate(self.usable):
            codes[self.members[name]] = k
        return codes


def group_rows(config: dict, attribute: Attribute, frame: pd.DataFrame, resamples, replicates: dict) -> list:
    """Per-group rows and gap rows for one attribute, from its groups' replicates on the configuration's
    resamples (`replicates`: `bootstrap.Resamples.attributes`' entry for `attribute.codes`; `resamples`: the
    configuration's `bootstrap.Resamples`)."""
    from focus_dagster.evaluation.intervals import interval

    rows, fitted, samples = [], {}, {}
    y_all, s_all = resamples.y, resamples.s  # the frame's labels (bool) and scores
    axis, min_group = attribute.axis, attribute.min_group
    for name in attribute.names:
        member = attribute.members[name]
        y = y_all[member]
        tag, detail = f"{attribute.name}={name}", (attribute.details or {}).get(name)
        if len(y) < min_group:
            rows.append(_row(config, axis, "group", tag, None, None, None, len(y), int(y.sum()),
                             f"group has {len(y)} images; at least {min_group} are needed", detail))
            continue
        k = attribute.usable.index(name)
        s = s_all[member]
        values = _group_points(y, s, {m: r[:, k] for m, r in replicates.items()})
        fitted[name], samples[name] = values, (y, s)
        for metric, (point, reason, reps) in values.items():
            low, high = interval(metric, point, reps, y, s)
            rows.append(_row(config, axis, metric, tag, point, low, high, len(y), int(y.sum()), reason, detail))
    rows += gap_rows(config, axis, attribute.name, fitted, samples, attribute.signed, attribute.groups.notna().sum(),
                     frame)
    return rows


def gap_rows(config, axis, attribute, fitted: dict, samples: dict, signed, n_total, frame) -> list:
    """The gap rows of an attribute from its usable groups' values (`fitted`: group -> `_group_points`) and
    images (`samples`: group -> (labels, scores))."""
    from focus_dagster.evaluation.intervals import gap_interval

    n_pos = int(frame["label"].sum())
    if signed is not None:
        if not all(g in fitted for g in signed):
            missing = [g for g in signed if g not in fitted]
            return [_row(config, axis, f"{m}_gap", f"{attribute}:{signed[0]}-{signed[1]}", None, None, None,
                         n_total, n_pos, f"no usable group {missing}") for m in GROUP_METRICS]
        return [_difference_row(config, axis, m, attribute, signed, fitted, samples, n_total, n_pos)
                for m in GROUP_METRICS]
    if len(fitted) < 2:
        reason = f"{len(fitted)} usable group(s) for {attribute}: a gap needs two"
        return [_row(config, axis, f"{m}_gap", f"{attribute}:max-min", None, None, None, n_total, n_pos, reason)
                for m in (*GROUP_METRICS, "equalized_odds")] + [
            _row(config, axis, "worst_group_auroc", attribute, None, None, None, n_total, n_pos, reason)]
    rows, gaps = [], {}
    for metric in GROUP_METRICS:
        points = [fitted[g][metric][0] for g in fitted]
        stack = np.vstack([fitted[g][metric][2] for g in fitted])
        replicates = stack.max(axis=0) - stack.min(axis=0)  # undefined in a group: undefined gap (NaN)
        gaps[metric] = replicates
        defined = [p for p in points if p is not None]
        point = max(defined) - min(defined) if len(defined) == len(points) else None
        reason = None if point is not None else f"{metric} undefined in some group"
        low, high = gap_interval("max_min_gap", point, replicates)
        rows.append(_row(config, axis, f"{metric}_gap", f"{attribute}:max-min", point, low, high, n_total, n_pos,
                         reason))
    tpr_gap, fpr_gap = rows[GROUP_METRICS.index("tpr")]["value"], rows[GROUP_METRICS.index("fpr")]["value"]
    eo = max(tpr_gap, fpr_gap) if tpr_gap is not None and fpr_gap is not None else None
    low, high = gap_interval("equalized_odds_gap", eo, np.maximum(gaps["tpr"], gaps["fpr"]))
    rows.append(_row(config, axis, "equalized_odds_gap", f"{attribute}:max-min", eo, low, high, n_total, n_pos,
                     None if eo is not None else "TPR or FPR undefined in some group"))
    aurocs = [fitted[g]["auroc"][0] for g in fitted]
    worst = min(aurocs) if all(a is not None for a in aurocs) else None
    worst_replicates = np.vstack([fitted[g]["auroc"][2] for g in fitted]).min(axis=0)
    low, high = gap_interval("worst_group_auroc", worst, worst_replicates)
    rows.append(_row(config, axis, "worst_group_auroc", attribute, worst, low, high, n_total, n_pos,
                     None if worst is not None else "AUROC undefined in some group"))
    if len(fitted) == 2:  # two groups: the signed difference too, whose interval can tell "no effect" (0 inside)
        pair = tuple(sorted(fitted, key=str))
        rows += [_difference_row(config, axis, m, attribute, pair, fitted, samples, n_total, n_pos)
                 for m in GROUP_METRICS]
    return rows


def _difference_row(config, axis, metric, attribute, pair, fitted, samples, n_total, n_pos) -> dict:
    """The signed difference `metric` of group pair[0] minus group pair[1], with its BCa interval
    (`intervals.signed_difference`)."""
    from focus_dagster.evaluation.intervals import signed_difference

    (a, _, a_replicates), (b, _, b_replicates) = (fitted[g][metric] for g in pair)
    point = a - b if a is not None and b is not None else None
    low, high = signed_difference(metric, (a, b), a_replicates - b_replicates, [samples[g] for g in pair])
    return _row(config, axis, f"{metric}_gap", f"{attribute}:{pair[0]}-{pair[1]}", point, low, high, n_total,
                n_pos, None if point is not None else f"{metric} undefined in a group")


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
        out["age_median"] = _labelled(age, [(age < median, "below"), (age >= median, "above")])
        out["age_band"] = _labelled(age, [(_within(age, low, high), name) for low, high, name in AGE_BANDS])
    else:
        out["age_median"] = out["age_band"] = reasons.get("age", _no_metadata("age"))
    return out


def age_median_details(frame: pd.DataFrame) -> dict[str, str]:
    """What `age_median=below` / `above` mean on this test set (the median goes in `group_detail`)."""
    age = pd.to_numeric(frame["age"], errors="coerce")
    if not age.notna().any():
        return {}
    median = float(age.median())
    return {"below": f"age < {median:g} (the test set's median)", "above": f"age >= {median:g} (the test set's median)"}


def _no_metadata(column: str) -> str:
    return f"metadata_coverage: no image of this dataset has a {column} value"


def _within(values: pd.Series, low, high) -> pd.Series:
    """``low <= value < high`` (None: no bound), False for a missing value."""
    inside = values.notna()
    if low is not None:
        inside &= values >= low
    if high is not None:
        inside &= values < high
    return inside


def _labelled(values: pd.Series, conditions: list) -> pd.Series:
    """Per row, the label of the first ``(condition, label)`` that holds, None where none does (a missing
    value satisfies no comparison)."""
    labels = np.full(len(values), None, dtype=object)
    for condition, label in reversed(conditions):
        labels[condition.to_numpy()] = label
    return pd.Series(labels, index=values.index, dtype=object)


def metric_rows(predictions: pd.DataFrame, metadata: pd.DataFrame, coverage: dict[str, bool],
                settings: Settings = Settings(), axes: tuple[str, ...] = AXES,
                reasons: dict[str, str] | None = None, say=None, what: str = "metric rows",
                withheld: dict[str, str] | None = None) -> pd.DataFrame:
    """The metric rows of the predictions' test split on the chosen axes (metadata: image_id + age, sex,
    quality, camera; coverage: column -> whether the axes group by it; reasons: column -> why not; withheld:
    column -> why the rows grouped by it carry no value). `say` gets progress lines over the configurations,
    named `what` (focus_dagster/progress.py)."""
    with _single_threaded_blas():
        return _metric_rows(predictions, metadata, coverage, settings, axes, reasons, say, what, withheld)


def _single_threaded_blas():
    """The products here are small ([R, n] x [n, tens]): BLAS threads cost more than they save, and on a loaded
    machine far more (a context that limits them to one thread)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1, user_api="blas")


def _metric_rows(predictions, metadata, coverage, settings, axes, reasons, say=None, what="metric rows",
                 withheld=None) -> pd.DataFrame:
    from focus_dagster.evaluation.bootstrap import Resamples, resample_counts
    from focus_dagster.evaluation.metrics import as_labels
    from focus_dagster.progress import Progress

    test = predictions[predictions["split"] == "test"].merge(metadata, on="image_id", how="left")
    rows = []
    configurations = test.groupby(CONFIG_COLUMNS, dropna=False, sort=True)
    progress = Progress(what, configurations.ngroups, "configurations", say)
    for key, frame in configurations:
        config = {c: (None if pd.isna(v) else v) for c, v in zip(CONFIG_COLUMNS, key)}
        frame = frame.reset_index(drop=True)
        y, s = as_labels(frame["label"].to_numpy(dtype=int)), frame["score"].to_numpy(dtype=float)
        threshold = shared_value(frame, "threshold", config)
        # The configuration's resamples, shared by every metric of every axis (module docstring).
        counts = resample_counts(y, settings.n_resamples, configuration_seed(config, settings.seed))
        resamples = Resamples(y, s, counts)
        found = []
        if "performance" in axes:
            found += configuration_rows(config, y, s, None if pd.isna(threshold) else float(threshold), resamples)
        if _in_domain(config) and {"fairness", "quality"} & set(axes):
            found += _group_axes(config, frame, y, coverage, resamples, axes, reasons or {}, withheld or {})
        rows += _flag_degenerate(found, y)
        progress.advance()
    return typed(pd.DataFrame(rows, columns=METRIC_COLUMNS))


def _flag_degenerate(rows: list, y: np.ndarray) -> list:
    """Every row of a configuration whose test split has too few positives or negatives, flagged with why."""
    from focus_dagster.evaluation.metrics import MIN_POSITIVES

    positives, negatives = int(y.sum()), int(len(y) - y.sum())
    degenerate = min(positives, negatives) < MIN_POSITIVES
    reason = (f"degenerate: the test split has {positives} positive and {negatives} negative images "
              f"(fewer than {MIN_POSITIVES} of one class); its numbers rest on a handful of images"
              if degenerate else None)
    return [{**row, "degenerate": degenerate, "degenerate_reason": reason} for row in rows]


def _group_axes(config, frame, y, coverage, resamples, axes, reasons, withheld) -> list:
    """The fairness and quality rows of one in-domain configuration (those of the chosen axes): the replicates
    of every group of every attribute at once (`bootstrap.Resamples.attributes`), then the rows in order, those
    of a withheld column without their values."""
    found = []  # a row, or an Attribute whose rows go there
    if "fairness" in axes:
        for attribute, groups in fairness_attributes(frame, coverage, reasons).items():
            if isinstance(groups, str):
                found.append(_row(config, "fairness", "attribute", attribute, None, None, None, len(y),
                                  int(y.sum()), groups))
            else:
                details = age_median_details(frame) if attribute == "age_median" else None
                found.append(Attribute("fairness", attribute, groups.reset_index(drop=True), FAIRNESS_MIN_GROUP,
                                       details=details))
    if "quality" in axes and coverage.get("quality"):
        found.append(Attribute("quality", "quality", frame["quality"].reset_index(drop=True), QUALITY_MIN_GROUP,
                               signed=("adequate", "inadequate")))
    elif "quality" in axes:
        found.append(_row(config, "quality", "attribute", "quality", None, None, None, len(y), int(y.sum()),
                          reasons.get("quality", _no_metadata("quality"))))
    attributes = [item for item in found if isinstance(item, Attribute)]
    replicates = iter(resamples.attributes([(a.codes, len(a.usable)) for a in attributes]))  # in that order
    rows = []
    for item in found:
        if isinstance(item, Attribute):
            rows += _withhold(group_rows(config, item, frame, resamples, next(replicates)),
                              withheld.get(_column(item.name)))
        else:
            rows.append(item)
    return rows


def _column(attribute: str) -> str:
    """The metadata column an analysed attribute groups by (both age splits read `age`)."""
    return "age" if attribute.startswith("age_") else attribute


def _withhold(rows: list, reason: str | None) -> list:
    """The rows of an attribute whose coverage check failed: computed as any other attribute's, so that the same
    rows (groups, n, ids) exist, then emptied of their values, each with the check's reason instead."""
    if reason is None:
        return rows
    return [{**row, "value": None, "ci_low": None, "ci_high": None, "reason": reason} for row in rows]


# A configuration without predictions is one row: its test AUROC, null, with the reason. AUROC because every
# configuration has it and it is what the leaderboard ranks (a null value keeps the row off the board); the
# id is the one the number gets once predictions exist, so a report can cite the gap and later the number.
UNAVAILABLE_AXIS, UNAVAILABLE_METRIC = "performance", "auroc"


def unavailable_metric_rows(unavailable: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """One metric row per unavailable configuration (a row of the predictions' unavailable table): value,
    interval, n and n_pos empty, the reason, and the lineage the unavailable row recorded."""
    rows = [{**_row({c: _text(record.get(c)) for c in CONFIG_COLUMNS}, UNAVAILABLE_AXIS, UNAVAILABLE_METRIC, "",
                    None, None, None, 0, 0, record["reason"]), "degenerate": False, "degenerate_reason": None}
            for record in unavailable.to_dict("records")]
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


TEXT_COLUMNS = ("metric_id", *CONFIG_COLUMNS, "axis", "metric", "group", "reason", "group_detail", "degenerate_reason")


def typed(table: pd.DataFrame) -> pd.DataFrame:
    """Text columns as text even when every value is null (so the table's column types never depend on data)."""
    out = table.copy()
    for column in TEXT_COLUMNS:
        out[column] = out[column].astype(object).where(out[column].notna(), None)
    for column in ("value", "ci_low", "ci_high"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
    out["degenerate"] = out["degenerate"].fillna(False).astype(bool)
    return out


def _in_domain(config: dict) -> bool:
    return not config.get("train_dataset") or config["train_dataset"] == config["dataset"]
