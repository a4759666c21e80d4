"""Yes/no questions: the versioned registry, focus.yaml overrides, and the label-leak check."""

from __future__ import annotations

import pandas as pd
import pytest

from focus_dagster.errors import ConfigError
from focus_dagster.labels.rules import RULES, TASKS
from focus_dagster.questions import (
    DEFAULT_QUESTIONS,
    QUESTIONS_VERSION,
    QuestionBook,
    find_leaks,
    make_question,
    question_book,
    unknown_fields,
)


def test_reference_questions_ask_for_yes_or_no_only_and_carry_versioned_ids():
    book = QuestionBook()
    for task in TASKS:
        question = book.question(task, "brset")
        assert question.id == f"{QUESTIONS_VERSION}/{task}"
        assert question.text.endswith("Answer with yes or no only.")
        assert question.fields == ()


@pytest.mark.parametrize("dataset", sorted(RULES))
def test_reference_questions_do_not_leak_on_any_dataset(dataset):
    book = QuestionBook()
    for task in TASKS:
        assert find_leaks(book.question(task, dataset), RULES[dataset]) == []


def test_brset_reference_leak_is_caught_as_placeholder_and_as_named_column():
    """Defect 4 of datasets.md: BRSET prompts that state macular_edema / increased_cup_disc."""
    rule = RULES["brset"]
    templated = make_question("x/gon/brset", "gon", "Findings: increased cup disc = {increased_cup_disc}. Glaucoma?")
    named = make_question("x/referable_dr/brset", "referable_dr", "Given macular_edema, is this referable?")
    assert [(leak.kind, leak.column) for leak in find_leaks(templated, rule)] == [("placeholder", "increased_cup_disc")]
    assert [(leak.kind, leak.column) for leak in find_leaks(named, rule)] == [("named_column", "macular_edema")]


def test_task_labels_and_file_names_are_never_placeholders():
    rule = RULES["refuge"]  # REFUGE file names start with g (glaucoma) or n
    question = make_question("x/gon", "gon", "Image {image_id}; label {gon}. Glaucoma?")
    kinds = {(leak.kind, leak.column) for leak in find_leaks(question, rule)}
    assert kinds == {("placeholder", "image_id"), ("placeholder", "gon")}


def test_a_column_that_restates_the_label_under_another_name_is_found_from_the_data():
    rule = RULES["papila"]
    question = make_question("x/gon/papila", "gon", "Chart code {chart_code}. Glaucoma? Answer yes or no.")
    rows = pd.DataFrame({"gon": [0] * 10 + [1] * 10, "chart_code": ["A"] * 10 + ["B"] * 10})
    assert [(leak.kind, leak.column) for leak in find_leaks(question, rule, rows)] == [("restates_label", "chart_code")]
    mixed = rows.assign(chart_code=["A", "B"] * 10)
    assert find_leaks(question, rule, mixed) == []


def test_context_that_does_not_decide_the_label_is_allowed():
    rule = RULES["brset"]
    question = make_question("x/any_dr/brset", "any_dr", "The patient is {age} years old ({sex}). Any DR?")
    rows = pd.DataFrame({"any_dr": [0, 1] * 10, "age": range(40, 60), "sex": ["F", "M", "M", "F"] * 5})
    assert find_leaks(question, rule, rows) == []
    assert question.render({"age": 61.0, "sex": None}) == "The patient is 61 years old (unknown). Any DR?"


def test_undeclared_native_columns_do_not_change_any_label(synth_all):
    """label_columns is complete: scrambling every other native column leaves every task label as it was."""
    from focus_dagster.datasets.registry import get_reader

    root, _ = synth_all
    for dataset, rule in RULES.items():
        records = get_reader(dataset).read(root / dataset).records
        base = rule.task_labels(records)
        scrambled = records.copy()
        for column in records.columns:
            if column not in rule.label_columns and column not in ("image_id", "image_path"):
                scrambled[column] = records[column].sample(frac=1, random_state=0).to_numpy()
        assert rule.task_labels(scrambled).equals(base), dataset


def test_focus_yaml_questions_need_a_new_version_and_known_tasks():
    with pytest.raises(ConfigError, match="questions.version must be set"):
        question_book({"tasks": {"gon": "Glaucoma? Answer yes or no."}})
    with pytest.raises(ConfigError, match="questions.tasks.amd: unknown key; allowed: any_dr, referable_dr, gon"):
        question_book({"version": "mine-1", "tasks": {"amd": "AMD?"}})
    with pytest.raises(ConfigError, match="placeholders"):
        question_book({"version": "mine-1", "tasks": {"gon": "Glaucoma {0}?"}})
    book = question_book({"version": "mine-1", "datasets": {"brset": {"gon": "Disc {camera}: glaucoma?"}}})
    assert book.question("gon", "brset").id == "mine-1/gon/brset"
    assert book.question("gon", "papila").text == DEFAULT_QUESTIONS["gon"]
    assert unknown_fields(book.question("gon", "brset"), ["patient_age"]) == []
    assert unknown_fields(make_question("q", "gon", "{nope}?"), ["patient_age"]) == ["nope"]
