"""What a LoRA adapter changes: adapted vs base yes/no scores on the same test images, from the predictions table.

For every adapted configuration (method `yes_no_lora`: model, evaluated dataset, task, the adapter's training
dataset) the base configuration is the same model's `yes_no` scores of the same dataset and task. The two are
paired on the test images both scored (`n` counts them) and compared by `paired.paired_deltas`: deltas of
AUROC, accuracy at 0.5 and at each side's own Youden threshold, ECE and Brier, each with a 95% interval and a
two-sided bootstrap p-value, on resamples seeded from the adapted configuration's identity. `domain` is
in_domain when the evaluated dataset is the adapter's training dataset, out_of_domain otherwise. q-values are
Benjamini-Hochberg within each metric x domain family; the summary gives the mean delta per metric, in-domain
vs out-of-domain, per model and overall (`paired.summarise`).

An adapted configuration without scores (no adapter: one class in its training split; not materialised) or
without base scores is a row per metric with the reason, never a silent gap. `metric_id` names what is measured
(the adapted configuration, axis `lora_effect`, the metric's delta), as every metric id does, and the rows carry
the lineage ids of both score sets, so `focus trace` reaches the adapter, its training data and the base model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from focus_dagster.evaluation.configurations import LORA_METHOD
from focus_dagster.evaluation.predictions import CONFIG_COLUMNS

AXIS = "lora_effect"
BASE_METHOD = "yes_no"
EFFECT_COLUMNS = [
    "metric_id", *CONFIG_COLUMNS, "domain", "metric", "base", "adapted", "delta", "ci_low", "ci_high", "p_value",
    "q_value", "n", "n_pos", "reason", "adapted_lineage_id", "base_lineage_id",
]


def effect_rows(samples: pd.DataFrame, unavailable: pd.DataFrame, n_resamples: int = 1000,
                seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows, summary): one row per adapted configuration and metric, and the means (module docstring).

    `samples`: predictions.samples rows (any methods and splits); `unavailable`: predictions.unavailable rows.
    """
    from focus_dagster.evaluation.paired import PAIRED_METRICS, SUMMARY_COLUMNS, summarise

    test = samples[samples["split"] == "test"]
    base = {key: frame for key, frame in test[test["method"] == BASE_METHOD].groupby(["model", "dataset", "task"])}
    rows = []
    for key, adapted in test[test["method"] == LORA_METHOD].groupby(CONFIG_COLUMNS, dropna=False, sort=True):
        config = dict(zip(CONFIG_COLUMNS, key))
        rows += _compared(config, adapted, base.get((config["model"], config["dataset"], config["task"])),
                          n_resamples, seed)
    missing = unavailable[unavailable["method"] == LORA_METHOD] if len(unavailable) else unavailable
    for record in missing.to_dict("records"):
        config = {c: record.get(c) for c in CONFIG_COLUMNS}
        rows += [_row(config, metric, reason=f"no adapted scores: {record['reason']}") for metric in PAIRED_METRICS]
    table = pd.DataFrame(rows, columns=[c for c in EFFECT_COLUMNS if c != "q_value"])
    if table.empty:
        return table.assign(q_value=pd.Series(dtype=float))[EFFECT_COLUMNS], pd.DataFrame(columns=SUMMARY_COLUMNS)
    summary = summarise(table.assign(delta=table["delta"].astype(float), p_value=table["p_value"].astype(float)))
    return summary.rows[EFFECT_COLUMNS], summary.means[SUMMARY_COLUMNS]


def _compared(config: dict, adapted: pd.DataFrame, base: pd.DataFrame | None, n_resamples: int, seed: int) -> list:
    from focus_dagster.evaluation.paired import PAIRED_METRICS, paired_deltas
    from focus_dagster.evaluation.tables import configuration_seed, shared_value

    adapted_lineage = shared_value(adapted, "lineage_id", config)
    if base is None:
        reason = (f"no base yes/no scores of {config['model']} on {config['dataset']} for {config['task']}: "
                  "materialise token_probabilities and predictions for that dataset")
        return [_row(config, m, reason=reason, adapted_lineage_id=adapted_lineage) for m in PAIRED_METRICS]
    base_config = {**config, "method": BASE_METHOD, "train_dataset": None}
    pair = adapted.merge(base, on="image_id", suffixes=("_adapted", "_base"))
    deltas = paired_deltas(
        pair["label_adapted"].to_numpy(dtype=int), pair["score_base"].to_numpy(dtype=float),
        pair["score_adapted"].to_numpy(dtype=float), base_threshold=shared_value(base, "threshold", base_config),
        adapted_threshold=shared_value(adapted, "threshold", config), seed=configuration_seed(config, seed),
        n_resamples=n_resamples)
    lineage = {"adapted_lineage_id": adapted_lineage,
               "base_lineage_id": shared_value(base, "lineage_id", base_config)}
    return [_row(config, name, **{k: v for k, v in delta.as_row().items() if k != "metric"}, **lineage)
            for name, delta in deltas.items()]


def _row(config: dict, metric: str, **values) -> dict:
    from focus_dagster.evaluation.tables import metric_id

    domain = "in_domain" if config["dataset"] == config["train_dataset"] else "out_of_domain"
    row = {"metric_id": metric_id(config, AXIS, f"{metric}_delta"), **config, "domain": domain, "metric": metric}
    row.update({k: v for k, v in values.items() if k in EFFECT_COLUMNS})
    return {column: row.get(column, np.nan if column in ("delta", "p_value") else None)
            for column in EFFECT_COLUMNS if column != "q_value"}
