"""The leaderboard and the cross-dataset matrix as Markdown: what the UI, the report file and the demo print."""

from __future__ import annotations

import pandas as pd

from focus_dagster.evaluation.predictions import CONFIG_COLUMNS, keyed_by_training


def top_configurations(table: pd.DataFrame, top: int) -> pd.DataFrame:
    """Per method and task (in name order), the `top` configurations by test AUROC, each with its ECE."""
    auroc = table[(table["metric"] == "auroc") & (table["group"] == "") & table["value"].notna()]
    if auroc.empty:
        return auroc
    ece = table[(table["metric"] == "ece") & (table["group"] == "")][CONFIG_COLUMNS + ["value"]]
    auroc = _with_ece(auroc, ece)
    return pd.concat([rows.sort_values("value", ascending=False).head(top)
                      for _, rows in auroc.groupby(["method", "task"], sort=True)])


def leaderboard_markdown(table: pd.DataFrame, top: int = 3) -> str:
    """Top configurations per family (interface x method) and task by test AUROC, with ECE and metric ids."""
    best = top_configurations(table, top)
    if best.empty:
        return "no defined AUROC yet"
    lines = ["| method | task | model | dataset | trained on | AUROC (95% CI) | ECE | metric_id |",
             "|---|---|---|---|---|---|---|---|"]
    for row in best.itertuples():
        lines.append(
            f"| {row.method} | {row.task} | {row.model} | {row.dataset} | {row.train_dataset or '-'} | "
            f"{fmt(row.value)} ({fmt(row.ci_low)}-{fmt(row.ci_high)}) | {fmt(row.ece)} | `{row.metric_id}` |")
    return "\n".join(lines)


def cross_matrix_markdown(table: pd.DataFrame) -> str:
    """AUROC of every probe trained on one dataset and tested on another, with intervals and metric ids."""
    auroc = table[(table["metric"] == "auroc") & table["group"].eq("")]
    if auroc.empty:
        return "no cross-dataset pairs"
    lines = ["| model | task | trained on | tested on | AUROC | 95% CI | metric_id |", "|---|---|---|---|---|---|---|"]
    for row in auroc.sort_values(["model", "task", "train_dataset", "dataset"]).itertuples():
        lines.append(f"| {row.model} | {row.task} | {row.train_dataset} | {row.dataset} | {fmt(row.value)} | "
                     f"{fmt(row.ci_low)}-{fmt(row.ci_high)} | `{row.metric_id}` |")
    return "\n".join(lines[:202])


def _with_ece(auroc: pd.DataFrame, ece: pd.DataFrame) -> pd.DataFrame:
    """AUROC rows with the ECE of the same configuration."""
    keys = ["model", "dataset", "task", "method", "_train"]
    right = keyed_by_training(ece).rename(columns={"value": "ece"})[keys + ["ece"]]
    return keyed_by_training(auroc).merge(right, on=keys, how="left")


def fmt(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.3f}"
