"""The arena's tables: what each figure and table of the report shows, computed from the metric tables.

Every number here comes from a row of `metrics.values` (or `metrics.lora_effects`, `metrics.robustness`,
`metrics.robustness_summary`) and keeps that row's `metric_id`; an aggregate (a mean over configurations) keeps
the ids it averages, space-separated in `metric_ids`. A configuration is (model, dataset, task, method, train
dataset) evaluated on a dataset's own test split; the cross-dataset rows (probe trained on A, tested on B) feed
the transfer matrix only.

Families are the model interfaces (vision encoders, dual-encoder VLMs, multimodal LLMs). Pipeline-check
models (seeded toy weights) are kept apart: their series are labelled as such and never pooled with real
models in a mean.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from focus_dagster.evaluation.predictions import CONFIG_COLUMNS

FAMILIES = {"vm": "vision encoders", "vlm": "dual-encoder VLMs", "mllm": "multimodal LLMs"}
# A model the configuration no longer selects still has rows: its interface follows from the method.
METHOD_FAMILY = {"linear_probe": "vm", "zero_shot": "vlm", "yes_no": "mllm", "yes_no_lora": "mllm"}
TASKS = ("any_dr", "referable_dr", "gon")
PIPELINE_CHECK = "pipeline-check"
UNREGISTERED = "unregistered"  # the domain of a model the catalog does not know
CROSS_PARTITION = "cross"
TOP_PER_FAMILY = 6


@dataclass(frozen=True)
class ModelInfo:
    """What the report needs to know of a model: its interface, domain, size (billions of parameters, from
    the hub id where it states one, e.g. `google/medgemma-27b-it`) and whether it is the researcher's own (a model
    of focus.yaml that is not in the catalog: the page marks its rows)."""

    interface: str
    domain: str
    size_b: float | None = None
    own: bool = False

    @property
    def pipeline_check(self) -> bool:
        return self.domain == PIPELINE_CHECK


_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[bB](?=$|[-_/])")


def size_from_source(source: str) -> float | None:
    """Billions of parameters as a hub id states them (`Qwen/Qwen3-VL-8B-Instruct` -> 8.0), else None."""
    found = _SIZE.findall(source.split("/")[-1]) if source else []
    return float(found[-1]) if found else None


@dataclass(frozen=True)
class Axis:
    """One axis of the spider plots: which metric row it reads and how it is turned into 'higher is better'."""

    label: str
    axis: str
    metric: str
    group: str
    flip: str  # "": as is; "1-": 1 - value; "1-abs": 1 - |value|; "cap1": at most 1
    definition: str
    attribute: str = ""  # the attribute whose row says why there is no gap at all ("not applicable: ...")

    def shown(self, value: float) -> float:
        if self.flip == "1-":
            return 1.0 - value
        if self.flip == "1-abs":
            return 1.0 - abs(value)
        if self.flip == "cap1":
            return min(1.0, value)
        return value


SPIDER_AXES = (
    Axis("AUROC", "performance", "auroc", "", "", "test-split AUROC"),
    Axis("AUPRC", "performance", "auprc", "", "", "test-split AUPRC (average precision)"),
    Axis("accuracy", "performance", "accuracy@0.5", "", "", "test-split accuracy at the threshold 0.5"),
    Axis("1 - ECE", "calibration", "ece", "", "1-",
         "1 - ECE, 10 equal-width bins on [0, 1], reliability form (the reference's)"),
    Axis("fairness", "fairness", "equalized_odds_gap", "sex:max-min", "1-",
         "1 - equalized-odds gap between the sexes: max(TPR gap, FPR gap) at 0.5, groups of at least 10 images",
         "sex"),
    Axis("quality", "robustness", "quality_axis", "", "cap1",
         "1 - the mean relative AUROC drop ((clean - degraded) / clean) over the degradations and severities of "
         "`degradations:` in focus.yaml, each applied to the test images (robustness_summary; defined on every "
         "dataset, for the models the robustness assets score); capped at 1: an AUROC that rose under the "
         "degradations counts as no drop (the value column keeps it)"),
    Axis("graded quality", "quality", "accuracy_gap", "quality:adequate-inadequate", "1-abs",
         "1 - |accuracy(adequate) - accuracy(inadequate)| at 0.5 over the publisher's quality grades, groups of at "
         "least 5 images (only BRSET and mBRSET grade image quality)"),
)
MISSING_AXIS = ("Where a dataset lacks the metadata (or a group is too small) the axis has no point: the outline "
                "is open there, and the coverage section gives the reason.")


# ------------------------------------------------------------------------------------------ inputs


def with_families(metrics: pd.DataFrame, models: dict[str, ModelInfo]) -> pd.DataFrame:
    """Metric rows with `family`, `domain`, `pipeline_check`, `size_b`, `_train` (train dataset as text) and
    `in_domain` (a configuration evaluated on a dataset's test split, not a cross-dataset pair)."""
    frame = metrics.copy()
    info = {m: models.get(m) for m in frame["model"].unique()}
    frame["family"] = [(info[m].interface if info[m] else METHOD_FAMILY.get(meth, "?"))
                       for m, meth in zip(frame["model"], frame["method"])]
    frame["domain"] = [info[m].domain if info[m] else UNREGISTERED for m in frame["model"]]
    frame["pipeline_check"] = frame["domain"].eq(PIPELINE_CHECK)
    frame["size_b"] = [info[m].size_b if info[m] else None for m in frame["model"]]
    frame["_train"] = frame["train_dataset"].astype(object).where(frame["train_dataset"].notna(), "")
    frame["in_domain"] = frame["partition"].astype(str).ne(CROSS_PARTITION) if "partition" in frame else True
    return frame


def metric_rows(frame: pd.DataFrame, axis: str, metric: str, group: str = "") -> pd.DataFrame:
    """The rows of one axis, metric and group (the configuration's own number: group "")."""
    return frame[(frame["axis"] == axis) & (frame["metric"] == metric) & (frame["group"].fillna("") == group)]


KEY = ["model", "dataset", "task", "method", "_train"]


def configuration_label(row) -> str:
    """`model · method · task · dataset` (+ what a LoRA adapter was trained on, + † for a pipeline check)."""
    trained = f" (LoRA on {row['_train']})" if row["method"] == "yes_no_lora" else ""
    return (f"{row['model']} · {row['method']} · {row['task']} · {row['dataset']}{trained}"
            + (" †" if row["pipeline_check"] else ""))


def series_of(family: str, pipeline_check: bool) -> str:
    """The name a family's series carries; pipeline-check models are a series of their own."""
    return FAMILIES.get(family, family) + (" (pipeline check †)" if pipeline_check else "")


# ------------------------------------------------------------------------------------- spider plots


def top_configurations(frame: pd.DataFrame, top: int = TOP_PER_FAMILY) -> pd.DataFrame:
    """Per family, the `top` in-domain configurations with a defined test AUROC that fill the most spider axes,
    by AUROC among those that fill as many (ties by name): a polygon closed on every axis is read before a higher
    AUROC whose dataset publishes no sex or quality grade. `axes` says how many of the spider's axes each
    fills."""
    auroc = by_auroc(frame)
    auroc = auroc.assign(axes=_axes_filled(frame, auroc)).sort_values("axes", ascending=False, kind="stable")
    return auroc.groupby("family", sort=True).head(top)


def by_auroc(frame: pd.DataFrame) -> pd.DataFrame:
    """The in-domain configurations' defined test AUROC rows, highest first (ties by name)."""
    auroc = metric_rows(frame[frame["in_domain"]], "performance", "auroc")
    return auroc[auroc["value"].notna()].sort_values(["value", "model", "dataset", "task", "method"],
                                                    ascending=[False, True, True, True, True])


def _axes_filled(frame: pd.DataFrame, configurations: pd.DataFrame) -> np.ndarray:
    """For each row of `configurations`, the number of spider axes on which its configuration has a number."""
    keys = configurations[KEY].reset_index(drop=True)
    filled = np.zeros(len(keys), dtype=int)
    for axis in SPIDER_AXES:
        rows = metric_rows(frame, axis.axis, axis.metric, axis.group)
        defined = rows.loc[rows["value"].notna(), KEY].drop_duplicates().assign(_defined=1)
        filled += keys.merge(defined, on=KEY, how="left")["_defined"].fillna(0).to_numpy(dtype=int)
    return filled


def spider_table(frame: pd.DataFrame, top: int = TOP_PER_FAMILY) -> pd.DataFrame:
    """One row per (configuration of the `top` per family, axis): the value shown (higher is better), the metric row
    it comes from (value, metric_id), or the reason there is none."""
    top = top_configurations(frame, top)
    # Each top configuration's metric rows, gathered in one join over the table.
    by_config = dict(list(frame.merge(top[KEY].drop_duplicates(), on=KEY).groupby(KEY)))
    rows = []
    for rank, config in enumerate(top.to_dict("records")):
        mine = by_config[tuple(config[k] for k in KEY)]
        for axis in SPIDER_AXES:
            found = metric_rows(mine, axis.axis, axis.metric, axis.group)
            if found.empty and axis.attribute:  # no gap row: the attribute's own row says why
                found = metric_rows(mine, axis.axis, "attribute", axis.attribute)
            source = found.iloc[0] if len(found) else None
            defined = source is not None and pd.notna(source["value"])
            rows.append({
                "family": config["family"], "rank": rank, "configuration": configuration_label(config),
                **{c: config[c] for c in (*CONFIG_COLUMNS, "domain")},
                "pipeline_check": bool(config["pipeline_check"]),
                "axis": axis.label, "shown": axis.shown(float(source["value"])) if defined else np.nan,
                "value": float(source["value"]) if defined else np.nan,
                "metric_id": source["metric_id"] if source is not None else "",
                "reason": "" if defined else (source["reason"] if source is not None
                                               else f"no {axis.axis} rows for this configuration"),
            })
    table = pd.DataFrame(rows, columns=["family", "rank", "configuration", *CONFIG_COLUMNS, "domain", "pipeline_check",
                                        "axis", "shown", "value", "metric_id", "reason"])
    return table


def spider_choices(frame: pd.DataFrame) -> dict:
    """Every configuration the spider can show (in-domain, with a defined AUROC), in its order, with its value on
    each axis (None: no number) and the metric id each comes from: what the page's picker draws from."""
    table = spider_table(frame, top=len(frame))
    configurations = []
    for _, rows in table.groupby("rank", sort=True):
        rows = rows.set_index("axis").reindex([a.label for a in SPIDER_AXES])
        first = rows.iloc[0]
        configurations.append({
            "label": first["configuration"], "family": first["family"], "check": bool(first["pipeline_check"]),
            "values": [None if pd.isna(v) else round(float(v), 6) for v in rows["shown"]],
            "ids": ["" if pd.isna(v) else str(v) for v in rows["metric_id"]],
        })
    return {"axes": [a.label for a in SPIDER_AXES], "families": FAMILIES, "configurations": configurations}


# ------------------------------------------------------------------------------------------- means


def mean_interval(values, bounds: tuple[float, float] | None = None) -> tuple[float, float, float]:
    """Mean and 95% Student-t interval of values (configurations as the sample), clipped to the metric's
    `bounds` (an AUROC mean cannot leave [0, 1] however few configurations there are); no interval for one
    value."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, np.nan, np.nan
    half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return mean, low, high


def _mean_row(values: pd.DataFrame, bounds=(0.0, 1.0), **keys) -> dict:
    mean, low, high = mean_interval(values["value"], bounds) if len(values) else (np.nan, np.nan, np.nan)
    return {**keys, "configurations": len(values), "mean": mean, "ci_low": low, "ci_high": high,
            "metric_ids": " ".join(values["metric_id"])}


def method_means(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean test AUROC per family, method, model domain and task over the in-domain configurations."""
    auroc = _defined(metric_rows(frame[frame["in_domain"]], "performance", "auroc"))
    rows = [_mean_row(group, family=family, method=method, domain=domain, task=task)
            for (family, method, domain, task), group in auroc.groupby(["family", "method", "domain", "task"])]
    return _ordered(pd.DataFrame(rows, columns=_mean_columns(["family", "method", "domain", "task"])))


def task_cliff(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean test AUROC per family and task (pipeline-check models as a series of their own)."""
    auroc = _defined(metric_rows(frame[frame["in_domain"]], "performance", "auroc"))
    rows = [_mean_row(group, series=series_of(family, check), family=family, task=task)
            for (family, check, task), group in auroc.groupby(["family", "pipeline_check", "task"])]
    return _ordered(pd.DataFrame(rows, columns=_mean_columns(["series", "family", "task"])))


def general_vs_ophthalmic(frame: pd.DataFrame, datasets: list[str]) -> pd.DataFrame:
    """Per dataset, the mean linear-probe AUROC of general and of ophthalmic vision encoders (over models and
    tasks) and the difference ophthalmic - general; a side without encoders says so."""
    auroc = _defined(metric_rows(frame[frame["in_domain"]], "performance", "auroc"))
    auroc = auroc[(auroc["family"] == "vm") & (auroc["method"] == "linear_probe")]
    rows = []
    for dataset in datasets:
        row = {"dataset": dataset}
        for domain in ("general", "ophthalmic"):
            values = auroc[(auroc["dataset"] == dataset) & (auroc["domain"] == domain)]
            row[f"{domain}_mean"] = values["value"].mean() if len(values) else np.nan
            row[f"{domain}_configurations"] = len(values)
            row[f"{domain}_metric_ids"] = " ".join(values["metric_id"])
        row["difference"] = row["ophthalmic_mean"] - row["general_mean"]
        row["metric_ids"] = " ".join(filter(None, (row["general_metric_ids"], row["ophthalmic_metric_ids"])))
        missing = [d for d in ("general", "ophthalmic") if not row[f"{d}_configurations"]]
        row["reason"] = (f"no defined AUROC of any {' or '.join(missing)} vision encoder on {dataset} (none selected, "
                         "or their probes could not be fit or scored: see the coverage section)") if missing else ""
        rows.append(row)
    return pd.DataFrame(rows, columns=["dataset", "general_mean", "general_configurations", "ophthalmic_mean",
                                       "ophthalmic_configurations", "difference", "reason", "general_metric_ids",
                                       "ophthalmic_metric_ids", "metric_ids"])


def mllm_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per multimodal LLM and method: mean AUROC and ECE over its in-domain configurations, its size and domain,
    and the mean of its sex equalized-odds gaps and of its |quality accuracy gaps| (the spider's axes)."""
    mllm = frame[(frame["family"] == "mllm") & frame["in_domain"]]
    measures = {"auroc": ("performance", "auroc", ""), "ece": ("calibration", "ece", ""),
                "fairness_gap": ("fairness", "equalized_odds_gap", "sex:max-min"),
                "quality_gap": ("quality", "accuracy_gap", "quality:adequate-inadequate")}
    rows = []
    for (model, method), group in mllm.groupby(["model", "method"]):
        first = group.iloc[0]
        row = {"model": model, "method": method, "domain": first["domain"], "size_b": first["size_b"],
               "pipeline_check": bool(first["pipeline_check"])}
        for name, (axis, metric, tag) in measures.items():
            values = _defined(metric_rows(group, axis, metric, tag))
            magnitude = values["value"].abs() if name == "quality_gap" else values["value"]
            row[name] = magnitude.mean() if len(values) else np.nan
            row[f"{name}_configurations"] = len(values)
            row[f"{name}_metric_ids"] = " ".join(values["metric_id"])
        rows.append(row)
    columns = ["model", "method", "domain", "size_b", "pipeline_check"]
    for name in measures:
        columns += [name, f"{name}_configurations", f"{name}_metric_ids"]
    return pd.DataFrame(rows, columns=columns)


# -------------------------------------------------------------------------------------- transfer


def transfer_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Test AUROC of each encoder's probe trained on dataset A (rows) and tested on B (columns): the
    cross-dataset pairs, and the in-domain probe on the diagonal."""
    auroc = metric_rows(frame, "performance", "auroc")
    probes = auroc[auroc["method"] == "linear_probe"]
    cross = probes[~probes["in_domain"]]
    diagonal = probes[probes["in_domain"] & probes["model"].isin(cross["model"].unique())]
    table = pd.concat([cross, diagonal], ignore_index=True)
    table = table.assign(train_dataset=table["_train"].where(table["_train"] != "", table["dataset"]))
    columns = ["model", "task", "train_dataset", "dataset", "value", "ci_low", "ci_high", "metric_id", "reason",
               "pipeline_check"]
    return table[columns].sort_values(["model", "task", "train_dataset", "dataset"]).reset_index(drop=True)


# ------------------------------------------------------------------------------------- reliability


def reliability_targets(frame: pd.DataFrame) -> pd.DataFrame:
    """The configuration with the best test AUROC of each family (one per family and pipeline-check status),
    with a defined ECE: its reliability diagram is drawn from its test predictions."""
    ece = _defined(metric_rows(frame[frame["in_domain"]], "calibration", "ece"))[KEY + ["metric_id", "value"]]
    joined = by_auroc(frame).merge(ece.rename(columns={"metric_id": "ece_metric_id", "value": "ece"}), on=KEY)
    return joined.groupby(["family", "pipeline_check"], sort=True).head(1).reset_index(drop=True)


def reliability_table(targets: pd.DataFrame, samples: pd.DataFrame, n_bins: int = 10) -> pd.DataFrame:
    """Per target configuration and bin: bounds, image count, mean score and observed positive rate on its test
    split (the bins of its 10-bin ECE, whose metric_id each row carries)."""
    from focus_dagster.evaluation.metrics import ece_bins

    test = samples[samples["split"] == "test"]
    test = test.assign(_train=test["train_dataset"].astype(object).where(test["train_dataset"].notna(), ""))
    rows = []
    for target in targets.to_dict("records"):
        mine = test[(test[KEY] == pd.Series({k: target[k] for k in KEY})).all(axis=1)]
        if mine.empty:
            continue
        bins = ece_bins(mine["label"].astype(bool).to_numpy(), mine["score"].to_numpy(float), n_bins)
        for k in range(n_bins + 1):
            if k == n_bins and not bins["count"][k]:
                continue  # the point bin [1, 1] is shown only when a score sits there
            rows.append({"configuration": configuration_label(target), "family": target["family"],
                         **{c: target[c] for c in (*CONFIG_COLUMNS, "domain")},  # what the page filters by
                         "pipeline_check": bool(target["pipeline_check"]), "bin_lower": bins["lower"][k],
                         "bin_upper": bins["upper"][k], "count": bins["count"][k],
                         "mean_score": bins["mean_score"][k], "positive_rate": bins["mean_label"][k],
                         "ece": target["ece"], "metric_id": target["ece_metric_id"]})
    return pd.DataFrame(rows, columns=["configuration", "family", *CONFIG_COLUMNS, "domain", "pipeline_check",
                                       "bin_lower", "bin_upper", "count", "mean_score", "positive_rate", "ece",
                                       "metric_id"])


# -------------------------------------------------------------------------------------------- LoRA


LORA_METRICS = ("auroc", "accuracy@0.5", "ece")


def lora_deltas(effects: pd.DataFrame, models: dict[str, ModelInfo]) -> pd.DataFrame:
    """The adapted - base deltas (AUROC, accuracy at 0.5, ECE) of every adapted configuration, with their
    intervals, p- and q-values, in-domain vs out-of-domain."""
    if effects is None or effects.empty:
        return pd.DataFrame(columns=_LORA_COLUMNS)
    rows = effects[effects["metric"].isin(LORA_METRICS)].copy()
    rows["pipeline_check"] = [bool(models.get(m) and models[m].pipeline_check) for m in rows["model"]]
    rows["adapter"] = rows["model"] + "." + rows["train_dataset"].astype(str) + "." + rows["task"]
    return rows[_LORA_COLUMNS].sort_values(["domain", "metric", "adapter", "dataset"]).reset_index(drop=True)


_LORA_COLUMNS = ["adapter", "model", "train_dataset", "task", "dataset", "domain", "metric", "base", "adapted",
                 "delta", "ci_low", "ci_high", "p_value", "q_value", "n", "reason", "pipeline_check", "metric_id"]


def lora_means(deltas: pd.DataFrame) -> pd.DataFrame:
    """Mean delta per domain and metric over the adapted configurations (with a t interval, clipped to
    [-1, 1]), and the ids; adapters of pipeline-check models are a series of their own."""
    defined = deltas[deltas["delta"].notna()].rename(columns={"delta": "value"})
    rows = [_mean_row(group, (-1.0, 1.0), series=series_of("mllm", check), domain=domain, metric=metric)
            for (check, domain, metric), group in defined.groupby(["pipeline_check", "domain", "metric"])]
    return pd.DataFrame(rows, columns=_mean_columns(["series", "domain", "metric"]))


# -------------------------------------------------------------------------------------- robustness

ROBUSTNESS = "robustness"  # the axis of the quality-axis rows taken from the robustness summary
QUALITY_AXIS = "quality_axis"


def quality_axis_rows(summary: pd.DataFrame | None) -> pd.DataFrame:
    """The robustness summary as metric rows of the axis `robustness`: one per configuration, its quality axis
    (1 - mean relative AUROC drop over its degradations and severities) under the summary row's metric id. No
    interval: a mean over degradations, each of which has its own paired interval in the robustness table."""
    columns = ["metric_id", *CONFIG_COLUMNS, "axis", "metric", "group", "value", "ci_low", "ci_high", "n", "n_pos",
               "reason", "partition"]
    if summary is None or summary.empty:
        return pd.DataFrame(columns=columns)
    return pd.DataFrame({
        "metric_id": summary["metric_id"], "model": summary["model"], "dataset": summary["dataset"],
        "task": summary["task"], "method": summary["method"],
        "train_dataset": _recorded_train_dataset(summary), "axis": ROBUSTNESS, "metric": QUALITY_AXIS,
        "group": "", "value": summary["quality_axis"].astype(float), "ci_low": np.nan, "ci_high": np.nan,
        "n": summary["n"], "n_pos": summary["n_pos"],
        "reason": np.where(summary["quality_axis"].isna(), "no degraded AUROC of this configuration is defined "
                           "(see its rows in metrics.robustness)", None),
        "partition": summary["model"] + "|" + summary["dataset"],
    }, columns=columns)


def _recorded_train_dataset(summary: pd.DataFrame) -> pd.Series:
    """The training dataset each summary row records (a summary written before it recorded one: unknown)."""
    if "train_dataset" not in summary:
        return pd.Series(None, index=summary.index, dtype=object)
    return summary["train_dataset"].astype(object).where(summary["train_dataset"].notna(), None)


def robustness_curves(rows: pd.DataFrame | None, models: dict[str, ModelInfo]) -> pd.DataFrame:
    """Mean AUROC per model series, degradation and severity over the configurations (severity 0: the same
    configurations' clean AUROC), with a t interval and the ids of the robustness rows it averages; the
    degradation's family (the registry's) names the panel it is drawn in."""
    columns = ["panel", "degradation", "series", "severity", "configurations", "mean", "ci_low", "ci_high",
               "metric_ids"]
    if rows is None or rows.empty:
        return pd.DataFrame(columns=columns)
    auroc = rows[(rows["metric"] == "auroc") & rows["degraded"].notna() & rows["clean"].notna()].copy()
    if auroc.empty:
        return pd.DataFrame(columns=columns)
    auroc["panel"] = [json_field(p, "family") for p in auroc["parameters"]]
    info = {m: models.get(m) for m in auroc["model"].unique()}
    # A dual encoder's probe and its zero-shot prompts are series of their own: two methods, one image tower.
    auroc["series"] = [series_of(info[m].interface if info[m] else METHOD_FAMILY.get(meth, "?"),
                                 bool(info[m] and info[m].pipeline_check))
                       + ("" if meth == "linear_probe" else f" · {meth.replace('_', '-')}")
                       for m, meth in zip(auroc["model"], auroc["method"])]
    out = []
    for (panel, name, series), group in auroc.groupby(["panel", "degradation", "series"], sort=True):
        clean = group.drop_duplicates(["model", "dataset", "task", "method"])
        out.append(_mean_row(clean.assign(value=clean["clean"]), panel=panel, degradation=name, series=series,
                             severity=0))
        for severity, at in group.groupby("severity", sort=True):
            out.append(_mean_row(at.assign(value=at["degraded"]), panel=panel, degradation=name, series=series,
                                 severity=int(severity)))
    return pd.DataFrame(out, columns=columns)


def json_field(text, key: str):
    """One field of a JSON object held as text (a robustness row's `parameters`); None when absent."""
    import json

    try:
        return json.loads(text).get(key) if isinstance(text, str) else None
    except ValueError:
        return None


def robustness_extremes(summary: pd.DataFrame | None, models: dict[str, ModelInfo], count: int = 5) -> pd.DataFrame:
    """The `count` most and `count` least robust configurations by mean relative AUROC drop (real models; the
    pipeline-check models' own list follows when there are any), with their worst degradation and mCE."""
    columns = ["rank", "configuration", "quality_axis", "mean_relative_drop", "worst_degradation", "worst_severity",
               "worst_relative_drop", "mce", "ce_baseline", "variants", "metric_id"]
    if summary is None or summary.empty:
        return pd.DataFrame(columns=columns)
    defined = summary[summary["mean_relative_drop"].notna()].copy()
    defined["pipeline_check"] = [bool(models.get(m) and models[m].pipeline_check) for m in defined["model"]]
    defined["_train"] = _recorded_train_dataset(defined).fillna("")
    defined["configuration"] = [configuration_label(row) for row in defined.to_dict("records")]
    parts = []
    for check, group in defined.groupby("pipeline_check", sort=True):  # real models first
        ordered = group.sort_values(["mean_relative_drop", "configuration"])
        most, least = ordered.head(count), ordered.tail(count).iloc[::-1]
        least = least[~least["metric_id"].isin(most["metric_id"])]
        parts += [most.assign(rank=[f"most robust {k + 1}" + (" †" if check else "") for k in range(len(most))]),
                  least.assign(rank=[f"least robust {k + 1}" + (" †" if check else "") for k in range(len(least))])]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


# ---------------------------------------------------------------------------------------- coverage

COVERAGE_AXES = ("performance", "calibration", "fairness", "quality", "robustness", "transfer", "lora")


def coverage(frame: pd.DataFrame, effects: pd.DataFrame | None, datasets: list[str],
             notes: dict[str, dict[str, list[str]]] | None = None) -> pd.DataFrame:
    """Which dataset contributes to which axis: per dataset and axis, 'yes' when at least one number is defined;
    otherwise 'no' and the reasons of its empty rows (or that no row exists). `notes` (dataset -> axis -> what a
    check upstream said of its rows, e.g. an attribute below its coverage floor) come first in the reason, even
    of a covered cell: its other numbers stand, those of the attribute named are withheld."""
    rows = []
    for dataset in datasets:
        for axis in COVERAGE_AXES:
            mine = _axis_rows(frame, effects, dataset, axis)
            defined = mine[_value_column(axis)].notna() if len(mine) else pd.Series(dtype=bool)
            noted = ((notes or {}).get(dataset) or {}).get(axis) or []
            reasons = sorted(set(mine.loc[~defined, "reason"].dropna()) - set(noted)) if len(mine) else []
            rows.append({"dataset": dataset, "axis": axis, "covered": "yes" if defined.any() else "no",
                         "reason": _cell_reason(noted, [] if defined.any() else reasons, defined.any(), axis,
                                                dataset)})
    return pd.DataFrame(rows, columns=["dataset", "axis", "covered", "reason"])


def _cell_reason(noted: list[str], reasons: list[str], covered: bool, axis: str, dataset: str) -> str:
    """The checks' notes, then up to three reasons of the empty rows; that no row exists when nothing explains an
    empty cell."""
    listed = noted + reasons[:3]
    if not listed:
        return "" if covered else _no_rows(axis, dataset)
    return "; ".join(listed) + (" ..." if len(reasons) > 3 else "")


def empty_numbers(frame: pd.DataFrame, effects: pd.DataFrame | None) -> pd.DataFrame:
    """Every null number with its reason, grouped by dataset, axis and reason (the rows' ids kept)."""
    parts = [frame[frame["value"].isna()].assign(axis_shown=lambda f: np.where(f["in_domain"], f["axis"], "transfer"))]
    if effects is not None and len(effects):
        parts.append(effects[effects["delta"].isna()].assign(axis_shown="lora"))
    empty = pd.concat(parts, ignore_index=True)
    if empty.empty:
        return pd.DataFrame(columns=["dataset", "axis", "reason", "numbers", "metric_ids"])
    grouped = empty.groupby(["dataset", "axis_shown", "reason"], dropna=False)["metric_id"]
    table = grouped.agg(numbers="size", metric_ids=lambda ids: " ".join(ids)).reset_index()
    return table.rename(columns={"axis_shown": "axis"}).sort_values(["dataset", "axis", "reason"]).reset_index(drop=True)


def unavailable_configurations(unavailable: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """The configurations without predictions, each with its reason and the id of its null AUROC row."""
    if unavailable is None or unavailable.empty:
        return pd.DataFrame(columns=[*CONFIG_COLUMNS, "reason", "metric_id"])
    rows = unavailable.assign(_train=unavailable["train_dataset"].astype(object).where(
        unavailable["train_dataset"].notna(), ""))
    auroc = metric_rows(frame, "performance", "auroc")[KEY + ["metric_id"]]
    joined = rows.merge(auroc, on=KEY, how="left")
    joined["metric_id"] = joined["metric_id"].fillna("")
    return joined[[*CONFIG_COLUMNS, "reason", "metric_id"]].sort_values(CONFIG_COLUMNS).reset_index(drop=True)


def _axis_rows(frame, effects, dataset: str, axis: str) -> pd.DataFrame:
    if axis == "lora":
        return effects[effects["dataset"] == dataset] if effects is not None and len(effects) else pd.DataFrame()
    if axis == "transfer":
        return frame[~frame["in_domain"] & (frame["dataset"] == dataset) & (frame["axis"] == "performance")]
    return frame[frame["in_domain"] & (frame["dataset"] == dataset) & (frame["axis"] == axis)]


def _value_column(axis: str) -> str:
    return "delta" if axis == "lora" else "value"


def _no_rows(axis: str, dataset: str) -> str:
    source = {"performance": "metrics", "calibration": "metrics", "fairness": "fairness_metrics",
              "quality": "quality_metrics", "robustness": "robustness_summary", "transfer": "cross_dataset_metrics",
              "lora": "lora_effects"}[axis]
    return f"no rows: {source} has nothing for {dataset} (not materialised, blocked by a check, or not selected)"


# ------------------------------------------------------------------------------------------ helpers


def _defined(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["value"].notna()]


def _mean_columns(keys: list[str]) -> list[str]:
    return [*keys, "configurations", "mean", "ci_low", "ci_high", "metric_ids"]


def _ordered(table: pd.DataFrame) -> pd.DataFrame:
    """Tasks in the benchmark's order, then the other keys by name."""
    if table.empty:
        return table
    order = {task: k for k, task in enumerate(TASKS)}
    keys = [c for c in table.columns if c not in ("configurations", "mean", "ci_low", "ci_high", "metric_ids")]
    table = table.assign(_task=table["task"].map(order).fillna(len(TASKS)))
    others = [k for k in keys if k != "task"]
    return table.sort_values([*others, "_task"]).drop(columns="_task").reset_index(drop=True)
