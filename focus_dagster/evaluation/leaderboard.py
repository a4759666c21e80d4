"""The leaderboard and the cross-dataset matrix as Markdown: what the UI, the report file and the demo print.

Pipeline checks (the built-in seeded toy models, `domain: pipeline-check`) test the plumbing; their numbers say
nothing about retinal images. Within each method x task block the real models are ranked first by test AUROC,
then the pipeline checks by theirs, so a check never stands above a real model whatever its AUROC; a check's
model carries MARK and the table ends with FOOTNOTE. Which models are checks is the caller's to say (the
model specs know it), as a set of model ids. Every name in a cell is escaped (focus_dagster/markup.py): a model id
or dataset of a user's is shown as written by any Markdown viewer, never read as markup.
"""

from __future__ import annotations

import pandas as pd

from focus_dagster.evaluation.predictions import CONFIG_COLUMNS, keyed_by_training
from focus_dagster.markup import md_text

MARK = "†"
FOOTNOTE = (f"{MARK} pipeline check: a seeded toy model that tests the plumbing; its numbers say nothing about "
            "retinal images, and it is ranked after the real models of its method and task.")


def top_configurations(table: pd.DataFrame, top: int, pipeline_checks=frozenset()) -> pd.DataFrame:
    """Per method and task (in name order), the `top` configurations by test AUROC, each with its ECE and
    `pipeline_check` (its model is one of `pipeline_checks`): real models first, then pipeline checks."""
    auroc = table[(table["metric"] == "auroc") & (table["group"] == "") & table["value"].notna()]
    if auroc.empty:
        return auroc.assign(pipeline_check=pd.Series(dtype=bool))
    ece = table[(table["metric"] == "ece") & (table["group"] == "")][CONFIG_COLUMNS + ["value"]]
    auroc = _with_ece(auroc, ece).assign(pipeline_check=lambda rows: rows["model"].isin(set(pipeline_checks)))
    return pd.concat([rows.sort_values(["pipeline_check", "value"], ascending=[True, False], kind="stable").head(top)
                      for _, rows in auroc.groupby(["method", "task"], sort=True)])


def marked(model: str, pipeline_check: bool) -> str:
    """The model's name as the leaderboard shows it: with MARK when it is a pipeline check."""
    return f"{model} {MARK}" if pipeline_check else model


def _names(row, *columns: str) -> list[str]:
    """The row's names in `columns`, as Markdown text (a missing training dataset as `-`)."""
    return [md_text(getattr(row, column) or "-") for column in columns]


def leaderboard_markdown(table: pd.DataFrame, top: int = 3, pipeline_checks=frozenset()) -> str:
    """Top configurations per family (interface x method) and task by test AUROC, with ECE and metric ids;
    pipeline checks (`pipeline_checks`, model ids) marked and ranked after the real models."""
    best = top_configurations(table, top, pipeline_checks)
    if best.empty:
        return "no defined AUROC yet"
    lines = ["| method | task | model | dataset | trained on | AUROC (95% CI) | ECE | metric_id |",
             "|---|---|---|---|---|---|---|---|"]
    for row in best.itertuples():
        method, task, model, dataset, trained_on = _names(row, "method", "task", "model", "dataset", "train_dataset")
        lines.append(
            f"| {method} | {task} | {marked(model, row.pipeline_check)} | {dataset} | "
            f"{trained_on} | {fmt(row.value)} ({fmt(row.ci_low)}-{fmt(row.ci_high)}) | {fmt(row.ece)} | "
            f"`{row.metric_id}` |")
    if best["pipeline_check"].any():
        lines += ["", FOOTNOTE]
    return "\n".join(lines)


def cross_matrix_markdown(table: pd.DataFrame) -> str:
    """AUROC of every probe trained on one dataset and tested on another, with intervals and metric ids."""
    auroc = table[(table["metric"] == "auroc") & table["group"].eq("")]
    if auroc.empty:
        return "no cross-dataset pairs"
    lines = ["| model | task | trained on | tested on | AUROC | 95% CI | metric_id |", "|---|---|---|---|---|---|---|"]
    for row in auroc.sort_values(["model", "task", "train_dataset", "dataset"]).itertuples():
        model, task, trained_on, tested_on = _names(row, "model", "task", "train_dataset", "dataset")
        lines.append(f"| {model} | {task} | {trained_on} | {tested_on} | {fmt(row.value)} | "
                     f"{fmt(row.ci_low)}-{fmt(row.ci_high)} | `{row.metric_id}` |")
    return "\n".join(lines[:202])


def _with_ece(auroc: pd.DataFrame, ece: pd.DataFrame) -> pd.DataFrame:
    """AUROC rows with the ECE of the same configuration."""
    keys = ["model", "dataset", "task", "method", "_train"]
    right = keyed_by_training(ece).rename(columns={"value": "ece"})[keys + ["ece"]]
    return keyed_by_training(auroc).merge(right, on=keys, how="left")


def fmt(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.3f}"
