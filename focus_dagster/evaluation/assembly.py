"""Assembling the per-sample predictions tables from the model outputs they read.

One dataset's table (`predictions`) takes every model output a selection implies: each model's methods (linear
probe, zero-shot, yes/no) and each LoRA adapter scored on the dataset. The cross-dataset table takes the
in-domain probes of each encoder trained on dataset A and scores them on the test split of every other dataset
B. Either way, every expected configuration ends with test-split rows or with an unavailable row giving the
reason (focus_dagster/evaluation/configurations.py), and every row carries the lineage of what it was computed
from: the lineage id of the output it came from, the stamps of the labels and the model.

The steps read the outputs (they know where the files are) and hand them over as they go; nothing here reads
storage, so the rules are the same whichever store the numbers live in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import pandas as pd

from focus_dagster import lineage
from focus_dagster.adapter_plan import AdapterKey
from focus_dagster.evaluation.configurations import LORA_METHOD, Configuration, unavailable_frame, unavailable_rows
from focus_dagster.evaluation.inputs import model_of, unusable_cross_embeddings
from focus_dagster.evaluation.predictions import (
    CONFIG_COLUMNS,
    Assembled,
    empty_predictions,
    finish,
    finite_scores,
    frame_version,
    with_labels,
    with_lineage,
)
from focus_dagster.evaluation.probes import PROBE_COLUMNS, PROBE_METHOD
from focus_dagster.version import code_version

CROSS_ASSET = "cross_dataset_metrics"


@dataclass
class ModelOutput:
    """A model output read for the predictions table (with labels attached) and the lineage stamp written with it,
    or the reason it cannot be used."""

    stamp: dict | None = None
    frame: pd.DataFrame | None = None
    reason: str | None = None
    skipped: dict = field(default_factory=dict)  # task -> why no probe was fit (probes only)


# ------------------------------------------------------------------------------------- one dataset's table


def source_key(model: str, method: str, train_dataset, task: str) -> tuple[str, str, str]:
    """The output a configuration's rows come from: (model, method, adapter key; "" for the methods without an
    adapter, whose one output covers every task and, for a probe, has the evaluated dataset as train dataset)."""
    adapter = AdapterKey(model, train_dataset, task).key if method == LORA_METHOD else ""
    return model, method, adapter


def source_configuration(model: str, method: str, adapter: str) -> dict:
    """What one output's lineage stamp says it is about."""
    return {"model": model, "method": method, **({"adapter": adapter} if adapter else {})}


def source_name(model: str, method: str, adapter: str) -> str:
    return f"{model}/{method}" + (f"/{adapter}" if adapter else "")


def row_lineage(labels_stamp: dict | None, source: dict | None, train_labels: dict | None = None) -> dict:
    """The lineage columns of a configuration's rows, from the stamps the step read."""
    model = model_of(source) or {}
    return {
        "release_version": lineage.fact(labels_stamp, "inputs", "records", "inputs", "release", "version"),
        "labels_version": lineage.fact(labels_stamp, "version"),
        "model_revision": model.get("revision"),
        "model_snapshot": model.get("snapshot"),
        "weights_sha256": model.get("weights_sha256"),
        "source_asset": lineage.fact(source, "asset"),
        "source_run_id": lineage.fact(source, "run_id"),
        "train_labels_version": lineage.fact(train_labels, "version"),
        "code_version": code_version(),
    }


def unavailable_summary(rows: list[dict]) -> list[dict]:
    """The unavailable configurations as the UI shows them (the table has their lineage too)."""
    keys = ("model", "method", "task", "train_dataset", "dataset", "reason")
    return [{k: row[k] for k in keys} for row in rows]


def method_predictions(dataset: str, model: str, interface: str, method: str, configs: list[Configuration],
                       output: ModelOutput, lineage_columns: dict, run_id: str):
    """One model x method on one dataset: its finished rows, the unavailable rows of its configurations without
    test predictions (with the lineage the output recorded), and the rows rejected as non-finite."""
    if output.frame is None:
        return [], [{**c.unavailable(output.reason), **lineage_columns} for c in configs], Assembled(pd.DataFrame())
    source = f"{output.stamp['asset']} {model}/{dataset}"
    checked = finite_scores(output.frame, f"{method} {model}/{dataset}")
    missing = unavailable_rows(configs, output.frame, checked.frame, source, output.skipped)
    part = finish(checked.frame, dataset=dataset, model=model, interface=interface, method=method,
                  **lineage_columns, run_id=run_id)
    return [part], [{**row, **lineage_columns} for row in missing], checked


@dataclass
class PredictionsTable:
    """One dataset's predictions and unavailable rows, with the stamps to commit them under: one per output read
    (`stamps`) and the partition's (`stamp`, naming them)."""

    frame: pd.DataFrame
    unavailable: pd.DataFrame
    gaps: list[dict]
    version: str  # the content hash of the rows (frame_version)
    stamp: dict
    stamps: tuple
    rejected: dict
    examples: list


# The model outputs the table reads: ((model, method, adapter key), interface, a reader called when the table
# comes to it).
Outputs = Iterable[tuple[tuple[str, str, str], str, Callable[[], ModelOutput]]]


def predictions_table(dataset: str, run_id: str, labels_stamp: dict | None, expected: list[Configuration],
                      outputs: Outputs) -> PredictionsTable:
    """One dataset's predictions table: every configuration's test rows from the model outputs it reads, one
    output at a time, and a row with the reason for each configuration without any."""
    parts, gaps, sources, rejected, examples = [], [], {}, {}, []
    for key, interface, read in outputs:
        model, method, _ = key
        configs = [c for c in expected if source_key(c.model, c.method, c.train_dataset, c.task) == key]
        output = read()
        part, missing, checked = method_predictions(dataset, model, interface, method, configs, output,
                                                    row_lineage(labels_stamp, output.stamp), run_id)
        parts += part
        gaps += missing
        sources[key] = output.stamp
        rejected.update(checked.rejected)
        examples += checked.rejected_examples
    frame = pd.concat(parts, ignore_index=True) if parts else empty_predictions()
    version = frame_version(frame)
    stamps = {key: lineage.stamp("predictions", dataset, run_id, version, code_version=code_version(),
                                 inputs={"labels": labels_stamp, "source": source},
                                 configuration=source_configuration(*key))
              for key, source in sources.items()}
    ids = {key: lineage.stamp_id(value) for key, value in stamps.items()}
    # As text even with no rows: an empty column would be typed as numbers in a table created from it.
    frame["lineage_id"] = pd.Series([ids[source_key(*key)] for key in zip(
        frame["model"], frame["method"], frame["train_dataset"], frame["task"])], index=frame.index, dtype=object)
    frame["predictions_version"] = version
    frame["partition"] = dataset
    gaps = [{**row, "lineage_id": ids[_row_source(row)]} for row in gaps]
    unavailable = unavailable_frame(gaps, predictions_version=version, run_id=run_id, partition=dataset)
    partition_stamp = lineage.stamp("predictions", dataset, run_id, version, code_version=code_version(),
                                    inputs={"labels": labels_stamp},
                                    sources={source_name(*key): i for key, i in ids.items()})
    return PredictionsTable(frame, unavailable, gaps, version, partition_stamp, tuple(stamps.values()), rejected,
                            examples)


def _row_source(row: dict) -> tuple[str, str, str]:
    return source_key(row["model"], row["method"], row["train_dataset"], row["task"])


def configurations_count(frame: pd.DataFrame) -> int:
    """The configurations with at least one row."""
    return int(frame.groupby(CONFIG_COLUMNS, dropna=False).ngroups) if len(frame) else 0


# ------------------------------------------------------------------------------------------- cross-dataset


@dataclass
class Trained:
    """The in-domain probes of one encoder on one dataset with their stamp, or the reason there are none."""

    stamp: dict | None = None
    probes: dict = field(default_factory=dict)  # task -> Probe
    skipped: dict = field(default_factory=dict)  # task -> why no probe was fit
    reason: str | None = None


@dataclass
class Pair:
    """What one (encoder, A -> B) pair reads: A's probes, B's labels and B's embeddings (None when the file is
    absent, `present` False; a stamp of None when it was written without lineage)."""

    configs: list[Configuration]
    interface: str
    trained: Trained
    labels: pd.DataFrame
    labels_stamp: dict | None
    present: bool
    vectors: pd.DataFrame | None
    embeddings_stamp: dict | None


def cross_pair(pair: Pair, run_id: str):
    """The predictions of one encoder's probes trained on dataset A for dataset B, an unavailable row (with the
    reason) for each of the pair's tasks without test predictions, and the stamps of what the pair read: the
    probes (the training dataset's chain), B's embeddings and B's labels."""
    from focus_dagster.evaluation.probes import cross_dataset_scores

    first, trained = pair.configs[0], pair.trained
    model, source, dataset = first.model, first.train_dataset, first.dataset
    inputs = {"probes": trained.stamp, "embeddings": pair.embeddings_stamp, "labels": pair.labels_stamp}
    lineage_columns = {**row_lineage(pair.labels_stamp, trained.stamp,
                                     lineage.fact(trained.stamp, "inputs", "labels")),
                       "source_asset": "probe_predictions"}
    reason = trained.reason or unusable_cross_embeddings(model, source, dataset, trained.stamp, pair.embeddings_stamp,
                                                         pair.labels_stamp, pair.present)
    if reason:
        return [], [{**c.unavailable(reason), **lineage_columns} for c in pair.configs], inputs
    frames = [cross_dataset_scores(trained.probes[c.task], source, pair.vectors, pair.labels)
              for c in pair.configs if c.task in trained.probes]
    scored = with_labels(pd.concat([f for f in frames if len(f)] or [_no_scores()], ignore_index=True),
                         pair.labels, f"probe {model}/{source} on {dataset}")
    checked = finite_scores(scored, f"probe {model}/{source} on {dataset}")
    missing = unavailable_rows(pair.configs, scored, checked.frame,
                               f"probe_predictions {model}/{source} on {dataset}", trained.skipped)
    part = finish(checked.frame, dataset=dataset, model=model, interface=pair.interface, method=PROBE_METHOD,
                  **lineage_columns, run_id=run_id)
    return ([part] if len(part) else []), [{**row, **lineage_columns} for row in missing], inputs


def _no_scores() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=float if c in ("score", "threshold") else object) for c in PROBE_COLUMNS})


@dataclass
class CrossTables:
    """The cross-dataset predictions, unavailable rows and metric rows, with the stamps to commit them under."""

    samples: pd.DataFrame
    unavailable: pd.DataFrame
    metrics: pd.DataFrame
    gaps: list[dict]
    stamp: dict
    stamps: tuple


def cross_dataset_tables(pairs: Iterable[Pair], partition: str, run_id: str, settings, say=None) -> CrossTables:
    """Every pair's predictions (read one pair at a time), the unavailable rows, and their performance and
    calibration rows, all in the cross-dataset partition."""
    from focus_dagster.evaluation.tables import metric_rows, with_unavailable

    parts, gaps, read = [], [], {}
    for pair in pairs:
        first = pair.configs[0]
        part, missing, read[first.model, first.train_dataset, first.dataset] = cross_pair(pair, run_id)
        parts += part
        gaps += missing
    samples = pd.concat(parts, ignore_index=True) if parts else empty_predictions()
    version = frame_version(samples)
    stamps = {key: lineage.stamp(CROSS_ASSET, partition, run_id, version, code_version=code_version(), inputs=inputs,
                                 configuration={"model": key[0], "train_dataset": key[1], "dataset": key[2]})
              for key, inputs in read.items()}
    ids = {key: lineage.stamp_id(value) for key, value in stamps.items()}
    samples["lineage_id"] = pd.Series(
        [ids[key] for key in zip(samples["model"], samples["train_dataset"], samples["dataset"])],
        index=samples.index, dtype=object)
    samples["predictions_version"] = version
    samples["partition"] = partition
    gaps = [{**row, "lineage_id": ids[row["model"], row["train_dataset"], row["dataset"]]} for row in gaps]
    unavailable = unavailable_frame(gaps, predictions_version=version, run_id=run_id, partition=partition)
    rows = metric_rows(samples, pd.DataFrame({"image_id": samples["image_id"].unique()}), {}, settings, say=say,
                       what="cross-dataset metrics")
    table = with_unavailable(with_lineage(rows, samples, run_id), unavailable, run_id).assign(partition=partition)
    stamp = lineage.stamp(CROSS_ASSET, partition, run_id, version, code_version=code_version(), pairs=len(ids))
    return CrossTables(samples, unavailable, table, gaps, stamp, tuple(stamps.values()))


def pairs_count(samples: pd.DataFrame) -> int:
    """The (encoder, A, B, task) pairs with at least one row."""
    return int(samples.groupby(["model", "train_dataset", "dataset", "task"]).ngroups) if len(samples) else 0
