"""The configurations a selection implies, and the reason each one without predictions has none.

A configuration is what one headline number is about: model x evaluated dataset x task x method, plus the
dataset a linear probe was trained on. The selection (the registered models and their interfaces) and the
labels (a dataset defines a task when at least one of its images has a non-null label for it) say which
configurations must exist:

- in-domain: every model, every method of its interface (vm: linear_probe; vlm: linear_probe and
  zero_shot; mllm: yes_no), every task the dataset defines; a probe's train dataset is the dataset itself;
- cross-dataset: every encoder, every ordered pair of datasets (train A, evaluated B, A != B), every task
  both define;
- adapted (`yes_no_lora`): every LoRA adapter of a multimodal LLM on every dataset that defines its task, the
  adapter's training dataset as train dataset (in-domain when it is the evaluated dataset).

Each expected configuration ends with test-split predictions or with a row of the unavailable table giving
the reason (upstream not materialised or blocked, probe not fit because the training split lacks a class,
no scores for the task, every score rejected), so that a gap is never silent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import groupby

import pandas as pd

from focus_dagster.evaluation.predictions import LINEAGE_COLUMNS
from focus_dagster.evaluation.probes import PROBE_METHOD
from focus_dagster.labels import defined_tasks

METHODS = {"vm": (PROBE_METHOD,), "vlm": (PROBE_METHOD, "zero_shot"), "mllm": ("yes_no",)}
# A multimodal LLM with a LoRA adapter: yes/no scoring by the adapted model; its train_dataset is the adapter's.
LORA_METHOD = "yes_no_lora"
UNAVAILABLE_COLUMNS = ["dataset", "model", "method", "task", "train_dataset", "reason"]


@dataclass(frozen=True)
class Configuration:
    model: str
    dataset: str
    task: str
    method: str
    train_dataset: str | None = None

    def unavailable(self, reason: str) -> dict:
        """This configuration as a row of the unavailable table."""
        return {**asdict(self), "reason": reason}


def methods_of(interface: str) -> tuple[str, ...]:
    """The evaluation methods of a model interface."""
    return METHODS.get(interface, ())


def in_domain_configurations(dataset: str, labels: pd.DataFrame, interfaces: dict[str, str]) -> list[Configuration]:
    """Every in-domain configuration of one dataset; `interfaces` maps each selected model to its interface."""
    tasks = defined_tasks(labels)
    return [Configuration(model, dataset, task, method, dataset if method == PROBE_METHOD else None)
            for model, interface in interfaces.items() for method in methods_of(interface) for task in tasks]


def adapted_configurations(dataset: str, labels: pd.DataFrame, adapters: list[tuple[str, str, str]]
                           ) -> list[Configuration]:
    """The `yes_no_lora` configurations of one dataset: each adapter (model, task, training dataset) scored on it,
    for the tasks its labels define."""
    tasks = defined_tasks(labels)
    return [Configuration(model, dataset, task, LORA_METHOD, train) for model, task, train in adapters if task in tasks]


def cross_dataset_configurations(encoders: list[str], labels: dict[str, pd.DataFrame]) -> list[Configuration]:
    """Every cross-dataset configuration: encoder x (train A, evaluated B != A) x task defined on both,
    grouped by encoder, then train dataset, then evaluated dataset (see `by_pair`)."""
    tasks = {dataset: defined_tasks(frame) for dataset, frame in labels.items()}
    return [Configuration(model, target, task, PROBE_METHOD, source)
            for model in encoders for source in labels for target in labels if target != source
            for task in tasks[source] if task in tasks[target]]


def by_pair(configurations: list[Configuration]):
    """(model, train dataset, evaluated dataset) -> its configurations, for configurations grouped that way."""
    def pair(config):
        return config.model, config.train_dataset, config.dataset

    for key, group in groupby(configurations, key=pair):
        yield key, list(group)


def unavailable_rows(expected: list[Configuration], scored: pd.DataFrame, kept: pd.DataFrame, source: str,
                     skipped: dict[str, str] | None = None) -> list[dict]:
    """The expected configurations of one model output that have no test-split predictions, each with its reason.

    expected: configurations of one model, method and train dataset on one evaluated dataset; scored: that
    output's rows with labels attached (image_id, task, split, score); kept: the rows left once non-finite
    scores are rejected; source: the output's name for the reasons; skipped: task -> why no probe was fit.
    """
    rows = []
    for config in expected:
        reason = missing_reason(config, scored, kept, source, skipped or {})
        if reason is not None:
            rows.append(config.unavailable(reason))
    return rows


def missing_reason(config: Configuration, scored: pd.DataFrame, kept: pd.DataFrame, source: str,
                   skipped: dict[str, str]) -> str | None:
    """Why a configuration has no test-split predictions, or None when it has some."""
    task = config.task
    if _test_rows(kept, task):
        return None
    if task in skipped:
        return f"no linear probe of {config.model} trained on {config.train_dataset} for {task}: {skipped[task]}"
    rejected = _test_rows(scored, task)
    if rejected:
        return (f"all {rejected} test-split {task} scores from {source} were rejected (not finite or outside "
                "[0, 1]): see the rejected rows in the predictions step's metadata")
    if (scored["task"] == task).any():
        return f"{source} scores {task} only on training images: no test image has a {task} label"
    return f"{source} has no scores for {task} (it may predate the current labels: rematerialise it)"


def _test_rows(frame: pd.DataFrame, task: str) -> int:
    return int(((frame["task"] == task) & (frame["split"] == "test")).sum())


def unavailable_frame(rows: list[dict], **constants) -> pd.DataFrame:
    """The unavailable table's rows: configuration, reason and lineage columns (null where unknown), text-typed
    so that the stored table's column types never depend on which values happen to be present."""
    columns = [*UNAVAILABLE_COLUMNS, *LINEAGE_COLUMNS]
    frame = pd.DataFrame(rows, columns=columns).assign(**constants)
    return frame.astype(object).where(frame.notna(), None)
