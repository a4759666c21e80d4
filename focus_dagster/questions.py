"""Yes/no questions for multimodal LLMs: one versioned registry, and the check that no question leaks a label.

Each task has one question that asks for "yes" or "no" only (protocol.md). A multimodal LLM is scored by the
probability it gives "yes" as its first answer token, so the question is part of the measurement: it has an
id, the registry has a version, and every score row names both.

A question may carry per-image context through placeholders, e.g. "The patient is {age} years old.": a
placeholder names a harmonised metadata column (age, sex, quality, camera, eye) or a column of the dataset's
own label file. That is where the reference benchmark leaked the answer into its BRSET prompts (defect 4 of
datasets.md: prompts stating `macular_edema` / `increased_cup_disc`). `find_leaks` refuses a question that

- has a placeholder naming a task label or a column the dataset's label rule reads (`LabelRule.label_columns`);
- names such a column in its text (identifier-like names only: `macular_edema`, `DR_ICDR`, `binaryLabels`);
- renders, on the dataset's images, a placeholder whose values decide a task's label (a column that restates
  the label under another name, found from the data).

Users replace questions in focus.yaml (a new `version` is required, so scores never mix wordings):

    questions:
      version: site-2026-1
      tasks: {gon: "Is the optic disc glaucomatous? Answer with yes or no only."}
      datasets: {brset: {any_dr: "The patient is {patient_age} years old. Any diabetic retinopathy? Answer yes or no."}}
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any, Mapping

import pandas as pd

from focus_dagster.config_schema import QuestionsSection, TaskQuestions, validated
from focus_dagster.errors import ConfigError
from focus_dagster.labels.rules import METADATA, TASKS, LabelRule

QUESTIONS_VERSION = "focus-yes-no-1"
ANSWER_INSTRUCTION = "Answer with yes or no only."
DEFAULT_QUESTIONS = {
    "any_dr": f"Does this fundus photograph show any signs of diabetic retinopathy? {ANSWER_INSTRUCTION}",
    "referable_dr": "Does this fundus photograph show referable diabetic retinopathy (moderate non-proliferative "
    f"diabetic retinopathy or worse, or diabetic macular edema)? {ANSWER_INSTRUCTION}",
    "gon": f"Does this fundus photograph show signs of glaucomatous optic neuropathy? {ANSWER_INSTRUCTION}",
}
# File names and row positions can encode the class (REFUGE's g/n prefixes, JSIEC's class folders): never shown.
ALWAYS_HIDDEN = ("image_id", "image_path", "source_file", "source_row", "patient_id", "native_split", "split",
                 "label_rule", "content_hash")
# A placeholder column with few distinct values, each of which goes with one label only, restates the label.
RESTATES_MAX_VALUES = 10
RESTATES_MIN_PER_CLASS = 5


@dataclass(frozen=True)
class Question:
    """One question: id (version/task[/dataset]), task, template text, and the placeholders it fills."""

    id: str
    task: str
    text: str
    fields: tuple[str, ...] = ()

    def render(self, row: Mapping[str, Any]) -> str:
        """The question for one image: placeholders filled from its metadata/record (missing -> 'unknown')."""
        if not self.fields:
            return self.text
        return self.text.format(**{name: _shown(row.get(name)) for name in self.fields})


@dataclass(frozen=True)
class QuestionBook:
    """The registry in force: the version, and a question per task (per dataset where overridden)."""

    version: str = QUESTIONS_VERSION
    tasks: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_QUESTIONS))
    datasets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def question(self, task: str, dataset: str) -> Question:
        """The question asked for `task` on `dataset` (the dataset's own wording where one is configured)."""
        own = self.datasets.get(dataset, {})
        if task in own:
            return make_question(f"{self.version}/{task}/{dataset}", task, own[task])
        if task not in self.tasks:
            raise ConfigError(f"no yes/no question for task {task!r}; questions exist for {sorted(self.tasks)}.")
        return make_question(f"{self.version}/{task}", task, self.tasks[task])

    def for_dataset(self, dataset: str, tasks) -> list[Question]:
        return [self.question(task, dataset) for task in tasks]


def make_question(question_id: str, task: str, text: str) -> Question:
    """A Question with its placeholders parsed; a malformed template is an error naming the question."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:
        raise ConfigError(f"question {question_id!r}: {exc} in {text!r}; write placeholders as {{column}}.") from exc
    bad = [name for name in names if not name.isidentifier() and not _is_plain_name(name)]
    if bad:
        raise ConfigError(f"question {question_id!r}: placeholders must name a column, got {bad} in {text!r}.")
    return Question(question_id, task, text, tuple(dict.fromkeys(names)))


def _is_plain_name(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split(" "))


def _shown(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
        return "unknown"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def question_book(raw: Any, where: str = "focus.yaml") -> QuestionBook:
    """The `questions:` block of focus.yaml as a QuestionBook (None = the reference questions): its shape checked
    by its schema (QuestionsSection), then a new version and templates that parse."""
    if raw is None:
        return QuestionBook()
    section = validated(QuestionsSection, raw, where, "questions")
    if not section.version or section.version == QUESTIONS_VERSION:
        raise ConfigError(
            f"{where}: questions.version must be set to a new name (not {QUESTIONS_VERSION!r}) when questions are "
            "changed, so that scores from different wordings are never mixed."
        )
    tasks = {**DEFAULT_QUESTIONS, **_task_texts(section.tasks)}
    datasets = {key: _task_texts(texts) for key, texts in (section.datasets or {}).items()}
    book = QuestionBook(version=section.version, tasks=tasks, datasets=datasets)
    for dataset, texts in datasets.items():  # parse every template now: mistakes surface at load time
        book.for_dataset(dataset, texts)
    book.for_dataset("", tasks)
    return book


def _task_texts(texts: TaskQuestions | None) -> dict[str, str]:
    """The questions written, by task (a task left out keeps the registry's question)."""
    return texts.model_dump(exclude_none=True) if texts is not None else {}


# ------------------------------------------------------------------------------------------------ leak check


@dataclass(frozen=True)
class Leak:
    question_id: str
    kind: str  # placeholder | named_column | restates_label
    column: str
    detail: str


def find_leaks(question: Question, rule: LabelRule, rows: pd.DataFrame | None = None) -> list[Leak]:
    """Every way `question` could tell the model the label it is asked about (empty list = clean).

    rows: the dataset's images with the placeholder columns and the task labels (for the data-driven test);
    without them only the template is inspected.
    """
    forbidden = set(rule.label_columns) | set(TASKS)
    leaks = [
        Leak(question.id, "placeholder", name, f"placeholder {{{name}}} fills in a column that defines the labels")
        for name in question.fields
        if name in forbidden
    ]
    leaks += [
        Leak(question.id, "placeholder", name, f"placeholder {{{name}}} shows file names or split bookkeeping, "
             "which can encode the class")
        for name in question.fields
        if name in ALWAYS_HIDDEN
    ]
    literal = re.sub(r"\{[^{}]*\}", " ", question.text)  # placeholders are judged above, not as text
    for column in sorted(rule.label_columns):
        if _identifier_like(column) and re.search(rf"(?<![\w]){re.escape(column)}(?![\w])", literal):
            leaks.append(Leak(question.id, "named_column", column, f"the text names the label column {column!r}"))
    if rows is not None:
        leaks += _restated_labels(question, rows, forbidden)
    return leaks


def _identifier_like(name: str) -> bool:
    """Column names that are not ordinary words: with an underscore, a digit, or an inner capital."""
    return "_" in name or any(c.isdigit() for c in name) or bool(re.search(r"[a-z][A-Z]", name))


def _restated_labels(question: Question, rows: pd.DataFrame, forbidden: set[str]) -> list[Leak]:
    leaks = []
    labels = rows[question.task] if question.task in rows else None
    if labels is None:
        return leaks
    for name in question.fields:
        if name in forbidden or name in ALWAYS_HIDDEN or name not in rows:
            continue
        pairs = pd.DataFrame({"value": rows[name].astype(str), "label": labels}).dropna()
        if pairs.empty or pairs["value"].nunique() > RESTATES_MAX_VALUES:
            continue
        counts = pairs["label"].value_counts()
        if len(counts) < 2 or counts.min() < RESTATES_MIN_PER_CLASS:
            continue
        if (pairs.groupby("value")["label"].nunique() == 1).all():
            leaks.append(Leak(question.id, "restates_label", name,
                              f"the values of {name!r} decide the {question.task} label on every image"))
    return leaks


def unknown_fields(question: Question, columns) -> list[str]:
    """Placeholders that name neither a metadata column nor a column of the dataset's label file."""
    known = set(columns) | set(METADATA)
    return [name for name in question.fields if name not in known]
