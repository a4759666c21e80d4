"""Whether the inputs of an evaluation step fit together.

Every step of the evaluation reads outputs written by earlier runs: model outputs, probes, the labels, the group
attributes, the yes/no questions. A refresh reaches them one at a time, so at any moment some may rest on an
older labels release, on other weights, or on questions the registry no longer asks. Each rule here answers one
question, "why may these not be combined?", from the lineage stamps the inputs were written with
(focus_dagster/lineage.py): a sentence naming the input and what to do, or None when they fit. The steps decide
what a refusal means: a configuration row with the reason, or a failed step.
"""

from __future__ import annotations

import pandas as pd

from focus_dagster import lineage
from focus_dagster.labels import TASKS
from focus_dagster.labels.coverage import ATTRIBUTES, USABLE_CHECK, not_applicable_reason, published
from focus_dagster.labels.rule_lookup import rule_for
from focus_dagster.questions import QuestionBook, find_leaks

# ------------------------------------------------------------------------------------------ model outputs


def not_materialised(asset: str, model: str, dataset: str) -> str:
    """The reason for an output that was never written (or whose last run failed)."""
    return (f"{asset} {model}/{dataset} is not materialised (its run failed or a blocking check upstream stopped "
            "it: see the asset in the UI)")


def model_of(stamp: dict | None) -> dict | None:
    """The model facts of a model output (probes: those of the embeddings they were fit on)."""
    if stamp is None:
        return None
    return lineage.fact(stamp, "facts", "model") or model_of(lineage.fact(stamp, "inputs", "embeddings"))


def labels_version_used(stamp: dict) -> str | None:
    """The labels version a model output rests on (probes and zero-shot scores: their own labels input, which
    must match the embeddings' too, else None)."""
    versions = {lineage.fact(stamp, "inputs", "labels", "version")}
    below = lineage.fact(stamp, "inputs", "embeddings")
    if below is not None:
        versions.add(lineage.fact(below, "inputs", "labels", "version"))
    return versions.pop() if len(versions) == 1 else None


def unusable_output(stamp: dict | None, labels_stamp: dict | None, asset: str, model: str,
                    dataset: str) -> str | None:
    """Why a model output must not be combined with the labels read now: written without lineage, computed from
    other labels (a refresh has not reached it yet), or by weights whose checkpoint audit failed."""
    name = f"{asset} {model}/{dataset}"
    if stamp is None:
        return f"{name} was written without lineage (by an earlier version): rematerialise it"
    used = labels_version_used(stamp)
    current = (labels_stamp or {}).get("version")
    if used != current:
        return (f"{name} was computed from labels version {used} of {dataset}, but the labels are now version "
                f"{current}: rematerialise {asset} (the refresh sensor does so once its upstream is current)")
    model_facts = model_of(stamp) or {}
    if model_facts.get("audit_clean") is False:
        return f"{name} was computed by weights whose checkpoint audit failed ({model_facts.get('weights_path')})"
    return None


def unusable_cross_embeddings(model: str, source: str, dataset: str, probes: dict | None, embeddings: dict | None,
                              labels_stamp: dict | None, present: bool) -> str | None:
    """Why B's embeddings cannot be scored by A's probes: not materialised, from other labels than B's current
    ones, or from other weights than those the probes were fit on."""
    name = f"image_embeddings {model}/{dataset}"
    if not present:
        return not_materialised("image_embeddings", model, dataset)
    if embeddings is None:
        return f"{name} was written without lineage (by an earlier version): rematerialise it"
    used, current = lineage.fact(embeddings, "inputs", "labels", "version"), lineage.fact(labels_stamp, "version")
    if used != current:
        return (f"{name} was computed from labels version {used}, but the labels of {dataset} are now version "
                f"{current}: rematerialise it")
    fit_on = (model_of(probes) or {}).get("weights_sha256")
    scored_with = (model_of(embeddings) or {}).get("weights_sha256")
    if fit_on != scored_with:
        return (f"the probes of {model} on {source} were fit on embeddings of weights {fit_on}, {name} comes from "
                f"weights {scored_with}: rematerialise the older of the two")
    return None


# ------------------------------------------------------------------------------- predictions and labels


def mixed_labels(predictions_stamp: dict | None, labels_stamp: dict | None, dataset: str) -> str | None:
    """Metrics combine the predictions with the labels' metadata (sex, age, quality): both must rest on the same
    labels, or a refresh is half-way and the numbers would mix two releases."""
    assembled = lineage.fact(predictions_stamp, "inputs", "labels", "version")
    current = lineage.fact(labels_stamp, "version")
    if predictions_stamp is not None and assembled != current:
        return (f"the predictions of {dataset} were assembled from labels version {assembled}, but the labels "
                f"are now version {current}: materialise predictions[{dataset}] first (the refresh sensor "
                "does so on its own).")
    return None


# ------------------------------------------------------------------------------------- group attributes


def attributes_mismatch(dataset: str, predictions: dict | None, attributes: dict) -> str | None:
    """Why group attributes cannot group these predictions: they rest on another labels version (one of the two
    has not been refreshed yet)."""
    used = lineage.fact(predictions, "inputs", "labels", "version")
    grouped = lineage.fact(attributes, "inputs", "labels", "version")
    if used != grouped:
        return (f"the predictions of {dataset} rest on labels version {used}, group_attributes[{dataset}] on "
                f"{grouped}: materialise the older of the two (the refresh sensor does so on its own).")
    return None


def attributes_refusal(dataset: str, predictions: dict | None, attributes: dict | None) -> str | None:
    """Why the fairness and quality tables must not be computed from these attributes: not materialised, failed
    by the blocking coverage check (a hand-launched run past it), or resting on other labels than the
    predictions."""
    if attributes is None:
        return f"group_attributes[{dataset}] is not materialised: materialise it (with its checks) first."
    fault = lineage.fact(attributes, "facts", "fault")
    if fault:
        return f"{USABLE_CHECK} failed for {dataset}: {fault}"
    return attributes_mismatch(dataset, predictions, attributes)


def recorded_attributes(attributes: dict | None) -> tuple[dict[str, bool], dict[str, str]]:
    """The coverage check's verdicts as group_attributes recorded them: the attributes to group by
    ({attribute: bool}) and those withheld ({attribute: reason})."""
    usable = {a: bool(v) for a, v in (lineage.fact(attributes, "facts", "usable") or {}).items()}
    return usable, dict(lineage.fact(attributes, "facts", "withheld") or {})


def attribute_verdicts(dataset: str, predictions: dict | None, attributes: dict | None) -> tuple[dict, dict]:
    """Which attribute columns a gap may group by ({column: bool}) and why not ({column: reason}): as the
    fairness and quality tables would, from the coverage check's verdict recorded with group_attributes, and
    only when the attributes rest on the labels the predictions rest on. Unlike those tables, a refusal is a
    reason on every column, not a failure: the comparison's other rows stand."""
    if attributes is None:
        why = f"group_attributes[{dataset}] is not materialised"
        return {}, {column: why for column in ATTRIBUTES}
    why = attributes_mismatch(dataset, predictions, attributes)
    if why:
        return {}, {column: why for column in ATTRIBUTES}
    usable, withheld = recorded_attributes(attributes)
    reasons = {a: not_applicable_reason(dataset, a) for a in ATTRIBUTES if a not in published(dataset)}
    for column in ATTRIBUTES:
        if column in published(dataset) and not usable.get(column):
            reasons[column] = withheld.get(column) or f"attribute_coverage: {column} is below its coverage floor"
    return usable, reasons


# ---------------------------------------------------------------------------------------- yes/no questions


def asked_tasks(asked: pd.DataFrame) -> list[str]:
    """The tasks the stored questions ask, in the benchmark's task order."""
    return [t for t in TASKS if t in set(asked["task"])]


def questions_refusal(asked: pd.DataFrame, dataset: str, book: QuestionBook) -> str | None:
    """Why the stored questions must not be put to a model: they are not the registry's any more (stale), or
    one leaks the label, as recorded when they were rendered or as the registry's questions are judged now."""
    current = [book.question(t, dataset) for t in asked_tasks(asked)]
    stale = sorted(set(asked["question_id"]) - {q.id for q in current})
    if stale:
        return (f"yes_no_questions for {dataset} holds questions {stale}, not the registry's "
                f"{sorted(q.id for q in current)}: materialise yes_no_questions first.")
    recorded = sorted(set(asked.loc[asked["leak"].astype(bool), "leak"]))
    leaks = recorded + [leak.detail for q in current for leak in find_leaks(q, rule_for(dataset))]
    if leaks:
        return (f"{dataset}: the yes/no questions leak the label ({leaks}); nothing is scored until the "
                "questions are fixed (`questions:` in focus.yaml) and yes_no_questions passes no_label_leak.")
    return None
