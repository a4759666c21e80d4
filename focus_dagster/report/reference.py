"""The reference study's published values, versioned, each with where it is published and how the platform forms
the same figure from its own metric rows; `beside_ours` puts them next to ours.

Facts only (numbers and the table or figure that states them), from the FOCUS study (arXiv:2609.33158) as
summarised in the shared protocol. A value is a target for orientation, never for tuning: a difference says how
this grid, these datasets and this code compare with the published run, not which is right.

Each reference names a `kind` of comparison:
- `method_mean`: mean test AUROC over every in-domain configuration of a family, method and model domain (all
  datasets and tasks pooled, pipeline-check models never included);
- `encoder_gap`: on one dataset, the mean linear-probe AUROC of general minus that of ophthalmic vision
  encoders (over models and tasks);
- `model_mean`: one model's mean of a metric over its in-domain yes/no configurations;
- `lora_mean`: the mean adapted - base delta of a metric over real adapters, in-domain or out-of-domain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from focus_dagster.report import arena

REFERENCE_VERSION = "focus-paper-1"  # a changed or added value is a new version
STUDY = "arXiv:2609.33158"


@dataclass(frozen=True)
class Reference:
    """One published value: its id, what it measures, the value, where the study states it, and how ours is
    formed (`kind` and its `keys`)."""

    id: str
    quantity: str
    value: float
    source: str
    kind: str
    keys: tuple[tuple[str, str], ...]

    def key(self, name: str) -> str:
        return dict(self.keys)[name]


def _ref(id: str, quantity: str, value: float, source: str, kind: str, **keys: str) -> Reference:
    return Reference(id, quantity, value, source, kind, tuple(sorted(keys.items())))


REFERENCES: tuple[Reference, ...] = (
    _ref("mean.vm.general", "mean AUROC, general vision encoders, linear probe", 0.828, "Table 3", "method_mean",
         family="vm", method="linear_probe", domain="general"),
    _ref("mean.vm.ophthalmic", "mean AUROC, ophthalmic vision encoders, linear probe", 0.667, "Table 3",
         "method_mean", family="vm", method="linear_probe", domain="ophthalmic"),
    _ref("mean.mllm.medical", "mean AUROC, medical multimodal LLMs, yes/no", 0.803, "Table 3", "method_mean",
         family="mllm", method="yes_no", domain="medical"),
    _ref("mean.mllm.general", "mean AUROC, general multimodal LLMs, yes/no", 0.658, "Table 3", "method_mean",
         family="mllm", method="yes_no", domain="general"),
    _ref("gap.mbrset", "general minus ophthalmic vision encoders, mean linear-probe AUROC on mBRSET", 0.162,
         "Table 4", "encoder_gap", dataset="mbrset"),
    _ref("medgemma_27b.auroc", "MedGemma-27B, mean AUROC", 0.797, "Figure 5", "model_mean", model="medgemma_27b",
         axis="performance", metric="auroc"),
    _ref("gemma3_27b.auroc", "Gemma-3-27B, mean AUROC", 0.648, "Figure 5", "model_mean", model="gemma3_27b",
         axis="performance", metric="auroc"),
    _ref("medgemma_27b.ece", "MedGemma-27B, mean ECE", 0.19, "Figure 5", "model_mean", model="medgemma_27b",
         axis="calibration", metric="ece"),
    _ref("gemma3_27b.ece", "Gemma-3-27B, mean ECE", 0.36, "Figure 5", "model_mean", model="gemma3_27b",
         axis="calibration", metric="ece"),
    _ref("lora.in.accuracy", "LoRA, in-domain: mean delta of accuracy (at 0.5)", 0.033, "Table 5", "lora_mean",
         domain="in_domain", metric="accuracy@0.5"),
    _ref("lora.in.ece", "LoRA, in-domain: mean delta of ECE", -0.040, "Table 5", "lora_mean", domain="in_domain",
         metric="ece"),
    _ref("lora.in.auroc", "LoRA, in-domain: mean delta of AUROC (not significant)", 0.004, "Table 5", "lora_mean",
         domain="in_domain", metric="auroc"),
    _ref("lora.out.accuracy", "LoRA, out-of-domain: mean delta of accuracy (at 0.5)", 0.012, "Table 5",
         "lora_mean", domain="out_of_domain", metric="accuracy@0.5"),
    _ref("lora.out.ece", "LoRA, out-of-domain: mean delta of ECE", -0.018, "Table 5", "lora_mean",
         domain="out_of_domain", metric="ece"),
    _ref("lora.out.auroc", "LoRA, out-of-domain: mean delta of AUROC (not significant)", 0.002, "Table 5",
         "lora_mean", domain="out_of_domain", metric="auroc"),
)

COLUMNS = ["reference", "quantity", "source", "published", "ours", "difference", "configurations", "reason",
           "metric_ids"]


def beside_ours(frame: pd.DataFrame, deltas: pd.DataFrame) -> pd.DataFrame:
    """Every published value with ours beside it: `frame` is the arena's metric rows (arena.with_families),
    `deltas` the LoRA deltas (arena.lora_deltas). `difference` is ours - published; `configurations` counts the
    metric rows ours is formed from (their ids in `metric_ids`); where this grid has no such configuration, ours
    is empty and `reason` says what would fill it."""
    rows = []
    for reference in REFERENCES:
        ours, ids, missing = _ours(reference, frame, deltas)
        rows.append({"reference": reference.id, "quantity": reference.quantity,
                     "source": f"{STUDY} {reference.source}", "published": reference.value, "ours": ours,
                     "difference": ours - reference.value, "configurations": len(ids),
                     "reason": missing if np.isnan(ours) else "", "metric_ids": " ".join(ids)})
    return pd.DataFrame(rows, columns=COLUMNS)


def published(kind: str) -> pd.DataFrame:
    """The published values of one kind, a row each: what a figure draws as its reference marks. Columns: the
    reference id, the quantity, the value, its source (study, table or figure) and the keys of the comparison
    (family, method, domain; model, metric; ...)."""
    rows = [{"reference": r.id, "quantity": r.quantity, "value": r.value, "source": f"{STUDY} {r.source}",
             **dict(r.keys)} for r in REFERENCES if r.kind == kind]
    return pd.DataFrame(rows)


def beside(table: pd.DataFrame, kind: str, on: dict[str, str], ours: str, real: pd.Series, name: str = "published",
           **where: str) -> pd.DataFrame:
    """`table` with the published values of `kind` beside the rows they match (`on`: table column -> the
    reference's key; `where`: the reference's other keys, fixed): the value in `name`, its reference id in
    `<name>_reference`, and `ours - published` in `<name>_difference` for the rows of real models (`real`, a mask of
    `table`; a pipeline-check model's number is no estimate of the published one)."""
    found = published(kind)
    for key, value in where.items():
        found = found[found[key] == value] if len(found) else found
    found = found.rename(columns={key: column for column, key in on.items()})
    found = found[[*on, "value", "reference"]] if len(found) else pd.DataFrame(columns=[*on, "value", "reference"])
    out = table.merge(found.rename(columns={"value": name, "reference": f"{name}_reference"}), on=list(on),
                      how="left")
    out[f"{name}_difference"] = (out[ours] - out[name]).where(real.to_numpy())
    return out


def _ours(reference: Reference, frame: pd.DataFrame, deltas: pd.DataFrame) -> tuple[float, list[str], str]:
    """Our figure (NaN when this grid cannot form it), the metric ids it is formed from, and what is missing."""
    if reference.kind == "lora_mean":
        return _lora(reference, deltas)
    if reference.kind == "encoder_gap":
        return _encoder_gap(reference.key("dataset"), frame)
    real = frame[frame["in_domain"] & ~frame["pipeline_check"].astype(bool) & frame["value"].notna()]
    if reference.kind == "method_mean":
        rows = arena.metric_rows(real, "performance", "auroc")
        rows = rows[(rows["family"] == reference.key("family")) & (rows["method"] == reference.key("method"))
                    & (rows["domain"] == reference.key("domain"))]
        return _mean(rows["value"], rows["metric_id"],
                     f"no {reference.key('domain')} model of this family with a defined test AUROC is in this grid")
    if reference.kind == "model_mean":
        rows = arena.metric_rows(real, reference.key("axis"), reference.key("metric"))
        rows = rows[(rows["model"] == reference.key("model")) & (rows["method"] == "yes_no")]
        return _mean(rows["value"], rows["metric_id"],
                     f"{reference.key('model')} is not in this grid (select it under `models:` in focus.yaml, with "
                     "its weights on this machine)")
    raise ValueError(f"reference {reference.id}: unknown kind {reference.kind!r}")


def _mean(values: pd.Series, ids: pd.Series, missing: str) -> tuple[float, list[str], str]:
    return (float(values.mean()), list(ids), "") if len(values) else (np.nan, [], missing)


def _encoder_gap(dataset: str, frame: pd.DataFrame) -> tuple[float, list[str], str]:
    """The arena's general vs ophthalmic row of the dataset, as the study states the gap: general - ophthalmic."""
    row = arena.general_vs_ophthalmic(frame, [dataset]).iloc[0]
    if pd.isna(row["difference"]):
        return np.nan, [], row["reason"]
    return -float(row["difference"]), row["metric_ids"].split(), ""


def _lora(reference: Reference, deltas: pd.DataFrame) -> tuple[float, list[str], str]:
    """The arena's mean delta of real adapters for the reference's domain and metric."""
    means = arena.lora_means(deltas)
    found = means[(means["series"] == arena.series_of("mllm", False)) & (means["domain"] == reference.key("domain"))
                  & (means["metric"] == reference.key("metric"))]
    if found.empty:
        return np.nan, [], ("no adapter of a real multimodal LLM has been compared with its base model "
                            f"{reference.key('domain').replace('_', '-')} in this grid")
    return float(found["mean"].iloc[0]), found["metric_ids"].iloc[0].split(), ""
