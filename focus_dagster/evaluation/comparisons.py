"""Model A against model B on the same test images: paired bootstrap deltas of every axis, with q-values.

Two configurations are comparable when they are the same evaluation of two models: one dataset, task, method
and training dataset (``PAIRED_ON``). Their test predictions are joined on ``image_id``; the comparison runs
only when both scored exactly the same test images with the same labels (``n`` counts them), and every delta is
``A - B`` on one set of label-stratified resamples shared by both (``paired.paired_deltas``, the machinery of the
LoRA comparison, seeded from the pair's identity so the same inputs give the same bytes):

- performance: ``auroc``, ``auprc``, ``accuracy@0.5``, ``accuracy@youden`` (each model at its own Youden threshold
  from its own training split);
- calibration: ``ece`` (10 bins) and ``brier`` (a positive delta: A is worse calibrated);
- fairness and quality: the max - min gap of ``GAP_METRICS`` across the groups of ``sex``, ``age_median`` (the
  fairness axis' median split) and ``quality`` (adequate vs inadequate), each side's gap computed on its groups'
  share of the same resamples (``tables.group_values``) as the fairness and quality tables do; a negative delta:
  A's gap is smaller. An attribute is compared only where the fairness axis would group by it (its coverage
  passed, the dataset publishes it) and only groups of at least the axis' minimum size count.

Interval and p-value: the percentile interval and the two-sided bootstrap p-value of ``paired`` (its docstring
says why percentile). q-values: Benjamini-Hochberg within one family, one pair of models and one metric (and
group) over every dataset, task, method and training dataset compared; a reason row has no p and does not count.

Nothing is dropped silently: a configuration only one side has, test images that differ, labels that differ, or
a metric undefined on either side, is a row with a null delta and the reason. Each row has a ``metric_id`` (the
pair, the configuration, the metric and group) and the lineage ids of both prediction sets (and, for a gap, of
the group attributes), which ``focus trace`` follows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from focus_dagster.errors import FocusError

AXIS = "comparison"
PAIRED_ON = ["dataset", "task", "method", "train_dataset"]
METRICS = {"performance": ("auroc", "auprc", "accuracy@0.5", "accuracy@youden"), "calibration": ("ece", "brier")}
GAP_METRICS = ("auroc", "accuracy", "tpr", "fpr", "ece")
# attribute -> (axis, minimum group size); the groups are those of the fairness and quality tables.
GAP_ATTRIBUTES = {"sex": "fairness", "age_median": "fairness", "quality": "quality"}
COLUMNS = [
    "metric_id", "model_a", "model_b", *PAIRED_ON, "axis", "metric", "group", "a", "b", "delta", "ci_low", "ci_high",
    "p_value", "q_value", "n", "n_pos", "n_replicates", "reason", "a_lineage_id", "b_lineage_id",
    "attributes_lineage_id",
]


class ComparisonError(FocusError):
    """A comparison that cannot be asked for (the same model twice, a model without predictions)."""


def comparison_rows(samples: pd.DataFrame, a: str, b: str, *, attributes: pd.DataFrame | None = None,
                    usable: dict[str, bool] | None = None, reasons: dict[str, str] | None = None,
                    n_resamples: int = 1000, seed: int = 0, alpha: float = 0.05) -> pd.DataFrame:
    """Every delta of model ``a`` minus model ``b`` (``COLUMNS``; module docstring), with q-values.

    ``samples``: predictions.samples rows (any models, methods, splits). ``attributes``: labels.attributes rows
    (dataset, image_id, sex, age, quality, camera; with ``attributes_lineage_id`` per row if known);
    ``usable``: ``{dataset: {attribute column: bool}}`` as ``attribute_coverage`` judged them; ``reasons``:
    ``{dataset: {column: why not}}`` for the columns that are not usable.
    """
    if a == b:
        raise ComparisonError(f"compare two different models, not {a!r} with itself")
    test = samples[samples["split"] == "test"]
    present = set(test["model"])
    absent = [model for model in (a, b) if model not in present]
    if absent:
        known = ", ".join(sorted(present)) or "none"
        raise ComparisonError(f"no test predictions of {' nor '.join(map(repr, absent))} (models with predictions: "
                              f"{known}): materialise predictions for it, or check the model id")
    sides = {model: {key: frame for key, frame in test[test["model"] == model].groupby(PAIRED_ON, dropna=False)}
             for model in (a, b)}
    rows = []
    for key in sorted(set(sides[a]) | set(sides[b]), key=lambda k: tuple("" if pd.isna(v) else str(v) for v in k)):
        config = dict(zip(PAIRED_ON, ("" if pd.isna(v) else v for v in key)))
        pair = _Pair(a, b, config, sides[a].get(key), sides[b].get(key))
        rows += pair.rows(_attributes_of(attributes, config["dataset"]), (usable or {}).get(config["dataset"], {}),
                          (reasons or {}).get(config["dataset"], {}), n_resamples, seed, alpha)
    return with_q_values(pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "q_value"]))


def with_q_values(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``q_value``: Benjamini-Hochberg per family (pair x metric x group; module docstring)."""
    from focus_dagster.evaluation.paired import benjamini_hochberg

    out = rows.copy()
    out["q_value"] = np.nan
    for column in ("delta", "p_value", "a", "b", "ci_low", "ci_high"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
    for column in ("n", "n_pos", "n_replicates"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype("Int64")  # null on a reason row
    for _, family in out.groupby(["model_a", "model_b", "metric", "group"], sort=False, dropna=False):
        out.loc[family.index, "q_value"] = benjamini_hochberg(family["p_value"].to_numpy(dtype=np.float64))
    return out[COLUMNS]


def _attributes_of(attributes: pd.DataFrame | None, dataset: str) -> pd.DataFrame | None:
    if attributes is None or attributes.empty or "dataset" not in attributes:
        return None
    return attributes[attributes["dataset"] == dataset]


class _Pair:
    """One configuration of both models: its joined test images and the rows of its deltas."""

    def __init__(self, a: str, b: str, config: dict, frame_a: pd.DataFrame | None, frame_b: pd.DataFrame | None):
        self.a, self.b, self.config = a, b, config
        self.frames = {"a": frame_a, "b": frame_b}

    def rows(self, attributes, usable: dict, reasons: dict, n_resamples: int, seed: int, alpha: float) -> list:
        lineage = {f"{side}_lineage_id": _lineage_of(frame) for side, frame in self.frames.items()}
        why = self._not_comparable()
        if why is not None:
            return [self._row(axis, metric, group, reason=why, **lineage) for axis, metric, group in self._all(usable)]
        joined = self.frames["a"].merge(self.frames["b"], on="image_id", suffixes=("_a", "_b"))
        y = joined["label_a"].to_numpy(dtype=int)
        scores = {side: joined[f"score_{side}"].to_numpy(dtype=float) for side in ("a", "b")}
        thresholds = {side: _threshold(self.frames[side]) for side in ("a", "b")}
        pair_seed = _pair_seed(self.a, self.b, self.config, seed)
        out = self._metric_rows(y, scores, thresholds, pair_seed, n_resamples, alpha, lineage)
        if not self.config["train_dataset"] or self.config["train_dataset"] == self.config["dataset"]:
            out += self._gap_rows(joined, y, scores, attributes, usable, reasons, pair_seed, n_resamples, alpha,
                                  lineage)
        return out

    def _not_comparable(self) -> str | None:
        """Why this configuration cannot be compared, or None."""
        where = f"{self.config['method']} on {self.config['dataset']} for {self.config['task']}"
        for side, model in (("a", self.a), ("b", self.b)):
            if self.frames[side] is None:
                return f"no test predictions of {model} ({where}): materialise its predictions to compare"
        ids = {side: set(frame["image_id"]) for side, frame in self.frames.items()}
        if ids["a"] != ids["b"]:
            return (f"the two models scored different test images ({where}): {self.a} {len(ids['a'])}, "
                    f"{self.b} {len(ids['b'])}, {len(ids['a'] & ids['b'])} shared; rematerialise both from the "
                    "same labels")
        joined = self.frames["a"].merge(self.frames["b"], on="image_id", suffixes=("_a", "_b"))
        if (joined["label_a"] != joined["label_b"]).any():
            versions = {side: sorted(set(self.frames[side]["labels_version"].dropna().astype(str)))
                        if "labels_version" in self.frames[side] else [] for side in ("a", "b")}
            return (f"the two models' predictions carry different labels for the same images ({where}; labels "
                    f"versions {versions['a']} vs {versions['b']}): rematerialise the older predictions")
        return None

    def _metric_rows(self, y, scores, thresholds, pair_seed, n_resamples, alpha, lineage) -> list:
        from focus_dagster.evaluation.paired import paired_deltas

        names = tuple(metric for metrics in METRICS.values() for metric in metrics)
        deltas = paired_deltas(y, scores["b"], scores["a"], base_threshold=thresholds["b"],
                               adapted_threshold=thresholds["a"], seed=pair_seed, n_resamples=n_resamples,
                               alpha=alpha, metrics=names, sides=(self.b, self.a))
        return [self._row(axis, metric, "", **_values(deltas[metric]), **lineage)
                for axis, metrics in METRICS.items() for metric in metrics]

    def _gap_rows(self, joined, y, scores, attributes, usable, reasons, pair_seed, n_resamples, alpha,
                  lineage) -> list:
        from focus_dagster.evaluation.bootstrap import resample_counts

        groups, attributes_lineage = _groups(joined, attributes, usable, reasons)
        lineage = {**lineage, "attributes_lineage_id": attributes_lineage}
        counts = None
        out = []
        for attribute, axis in GAP_ATTRIBUTES.items():
            labels = groups.get(attribute)
            if isinstance(labels, str) or labels is None:
                reason = labels or f"no group attributes of {self.config['dataset']}: materialise group_attributes"
                out += [self._row(axis, f"{m}_gap", f"{attribute}:max-min", reason=reason, **lineage)
                        for m in GAP_METRICS]
                continue
            if counts is None:  # the resamples of paired_deltas: resample_counts(y, R, seed) draws the same
                counts = resample_counts(y, n_resamples, pair_seed)
            out += self._attribute_rows(attribute, axis, labels, y, scores, counts, alpha, lineage)
        return out

    def _attribute_rows(self, attribute, axis, labels: np.ndarray, y, scores, counts, alpha, lineage) -> list:
        from focus_dagster.evaluation.paired import paired_delta
        from focus_dagster.evaluation.tables import FAIRNESS_MIN_GROUP, QUALITY_MIN_GROUP

        minimum = QUALITY_MIN_GROUP if axis == "quality" else FAIRNESS_MIN_GROUP
        names = sorted({label for label in labels if label is not None and label == label}, key=str)  # NaN: no group
        kept = [name for name in names if (labels == name).sum() >= minimum]
        group = f"{attribute}:max-min"
        if len(kept) < 2:
            reason = (f"{len(kept)} group(s) of {attribute} with at least {minimum} test images "
                      f"({', '.join(f'{n}: {int((labels == n).sum())}' for n in names) or 'none'}): a gap needs two")
            return [self._row(axis, f"{m}_gap", group, reason=reason, **lineage) for m in GAP_METRICS]
        gaps = {side: _gaps(y, scores[side], labels, kept, counts) for side in ("a", "b")}
        out = []
        for metric in GAP_METRICS:
            (point_a, reps_a), (point_b, reps_b) = gaps["a"][metric], gaps["b"][metric]
            delta = paired_delta(f"{metric}_gap", point_b, point_a,
                                 reps_a - reps_b if point_a.defined and point_b.defined else None,
                                 len(y), int(y.sum()), alpha)
            out.append(self._row(axis, f"{metric}_gap", group, **_values(delta), **lineage))
        return out

    def _all(self, usable: dict) -> list[tuple[str, str, str]]:
        """(axis, metric, group) of every row this configuration has when compared."""
        found = [(axis, metric, "") for axis, metrics in METRICS.items() for metric in metrics]
        if not self.config["train_dataset"] or self.config["train_dataset"] == self.config["dataset"]:
            found += [(axis, f"{m}_gap", f"{attribute}:max-min") for attribute, axis in GAP_ATTRIBUTES.items()
                      for m in GAP_METRICS]
        return found

    def _row(self, axis: str, metric: str, group: str, **values) -> dict:
        from focus_dagster.evaluation.tables import metric_id

        identity = {"model": f"{self.a} - {self.b}", **self.config}
        row = {"metric_id": metric_id(identity, AXIS, f"{metric}_delta", group), "model_a": self.a,
               "model_b": self.b, **self.config, "axis": axis, "metric": metric, "group": group}
        row.update(values)
        return {column: row.get(column) for column in COLUMNS if column != "q_value"}


def _values(delta) -> dict:
    """A ``paired.PairedDelta`` as the columns of a comparison row (``adapted`` is A, ``base`` is B)."""
    return {"a": delta.adapted, "b": delta.base, "delta": delta.delta, "ci_low": delta.low, "ci_high": delta.high,
            "p_value": delta.p_value, "n": delta.n, "n_pos": delta.n_pos, "n_replicates": delta.n_replicates,
            "reason": delta.reason}


def _gaps(y: np.ndarray, s: np.ndarray, labels: np.ndarray, kept: list, counts: np.ndarray) -> dict:
    """``{metric: (point Value, replicates [R])}`` of the max - min gap of one side over the groups ``kept``."""
    from focus_dagster.evaluation.metrics import Value
    from focus_dagster.evaluation.tables import group_values

    per_group = [group_values(y, s, labels == name, counts) for name in kept]
    out = {}
    for metric in GAP_METRICS:
        points = [values[metric][0] for values in per_group]
        stack = np.vstack([values[metric][2] for values in per_group])
        replicates = stack.max(axis=0) - stack.min(axis=0)  # NaN in a group: NaN gap, as in the fairness table
        if any(point is None for point in points):
            reasons = "; ".join(str(values[metric][1]) for values in per_group if values[metric][0] is None)
            out[metric] = (Value(None, f"{metric} undefined in a group: {reasons}"), replicates)
        else:
            out[metric] = (Value(max(points) - min(points)), replicates)
    return out


def _groups(joined: pd.DataFrame, attributes: pd.DataFrame | None, usable: dict, reasons: dict
            ) -> tuple[dict, str | None]:
    """Per gap attribute, the group label of each joined image (an array) or the reason it is not compared; and
    the lineage id of the attributes read."""
    from focus_dagster.evaluation.tables import fairness_attributes

    if attributes is None or attributes.empty:
        return {}, None
    frame = joined[["image_id"]].merge(attributes, on="image_id", how="left")
    lineage = _lineage_of(attributes, "attributes_lineage_id")
    found = fairness_attributes(frame, usable, reasons)
    out = {name: found[name] for name in ("sex", "age_median")}
    out["quality"] = frame["quality"] if usable.get("quality") else reasons.get(
        "quality", "metadata_coverage: no image of this dataset has a quality value")
    return {name: value if isinstance(value, str) else value.to_numpy(dtype=object) for name, value in out.items()}, \
        lineage


def _lineage_of(frame: pd.DataFrame | None, column: str = "lineage_id") -> str | None:
    if frame is None or column not in frame or frame[column].dropna().empty:
        return None
    return str(frame[column].dropna().iloc[0])


def _threshold(frame: pd.DataFrame) -> float | None:
    value = frame["threshold"].iloc[0]
    return None if pd.isna(value) else float(value)


def _pair_seed(a: str, b: str, config: dict, seed: int) -> int:
    """The resampling seed of one compared configuration: from the pair and what it evaluates."""
    from focus_dagster.evaluation.tables import configuration_seed

    return configuration_seed({"model": f"{a} - {b}", **config}, seed)


def selected(samples: pd.DataFrame, *, datasets=None, tasks=None, methods=None) -> pd.DataFrame:
    """The predictions of the chosen datasets, tasks and methods (None: all); a value with no predictions is an
    error listing those there are. Fewer configurations also make a smaller q-value family."""
    out = samples
    for column, wanted in (("dataset", datasets), ("task", tasks), ("method", methods)):
        if not wanted:
            continue
        known = sorted(set(samples[column].dropna().astype(str)))
        unknown = [value for value in wanted if value not in known]
        if unknown:
            raise ComparisonError(f"no predictions for {column} {unknown}; there are predictions for: "
                                  f"{', '.join(known) or 'none'}")
        out = out[out[column].isin(wanted)]
    return out


def format_comparison(table: pd.DataFrame) -> str:
    """The rows as an aligned text table, one block per compared configuration."""
    if table.empty:
        return "nothing to compare"
    a, b = table["model_a"].iloc[0], table["model_b"].iloc[0]
    lines = [f"{a} (A) vs {b} (B): delta = A - B on the same test images; 95% paired bootstrap interval; q: "
             "Benjamini-Hochberg per metric over the configurations below"]
    for key, block in table.groupby(PAIRED_ON, sort=False, dropna=False):
        config = dict(zip(PAIRED_ON, key))
        trained = f", trained on {config['train_dataset']}" if config["train_dataset"] else ""
        lines.append(f"\n{config['dataset']} · {config['task']} · {config['method']}{trained}"
                     f"  (n {_count(block['n'])}, positives {_count(block['n_pos'])})")
        lines.append(f"  {'metric':<34}{'A':>8}{'B':>8}{'delta':>9}  {'95% CI':<19}{'p':>7}{'q':>7}  metric_id")
        for row in block.itertuples():
            name = f"{row.metric} [{row.group}]" if row.group else row.metric
            if pd.isna(row.delta):
                lines.append(f"  {name:<34}{_num(row.a):>8}{_num(row.b):>8}{'-':>9}  {row.reason}")
                continue
            interval = f"{row.ci_low:+.3f} to {row.ci_high:+.3f}"
            lines.append(f"  {name:<34}{_num(row.a):>8}{_num(row.b):>8}{row.delta:>+9.3f}  {interval:<19}"
                         f"{row.p_value:>7.3f}{row.q_value:>7.3f}  {row.metric_id}")
    return "\n".join(lines)


def _num(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.3f}"


def _count(values: pd.Series) -> str:
    known = values.dropna()
    return str(int(known.iloc[0])) if len(known) else "-"
