"""From the yes/no scorer's flat per-image vectors to one row per image and task, checked against a literal frame."""

from __future__ import annotations

import numpy as np
import pandas as pd

from focus_dagster.inference.yes_no import VALUES, probabilities_frame

NAN = float("nan")
COLUMNS = ["image_id", "task", "question_id", "p_yes", "p_no", "score", "p_yes_reference", "p_no_reference",
           "answer", "first_token"]


class _Tokenizer:
    """Decodes a token id to a visible marker, so the first-token column shows which id was decoded."""

    def decode(self, ids):
        return f"<{ids[0]}>"


def test_scorer_vectors_become_one_sorted_row_per_image_and_task():
    # Per image: (p_yes, p_no, p_yes_reference, p_no_reference, answer_code, first_token_id) for each task,
    # tasks in the order given; images deliberately not in id order.
    values = np.array([
        [0.75, 0.25, 0.5, 0.125, 1.0, 7, 0.0, 0.0, 0.0, 0.0, -1.0, 3],  # b: any_dr, gon
        [0.125, 0.375, 0.125, 0.25, 0.0, 7, 0.25, 0.25, 0.125, 0.125, NAN, 9],  # a: any_dr, gon
    ], dtype=np.float32)
    assert values.shape[1] == 2 * len(VALUES)
    asked = pd.DataFrame({"image_id": ["a", "a", "b"], "task": ["any_dr", "gon", "any_dr"],
                          "question_id": ["q-dr", "q-gon", "q-dr"], "question": ["?", "?", "?"]})
    frame = probabilities_frame(["b", "a"], values, ["any_dr", "gon"], asked, _Tokenizer())
    expected = pd.DataFrame({
        "image_id": ["a", "a", "b", "b"],
        "task": ["any_dr", "gon", "any_dr", "gon"],
        "question_id": ["q-dr", "q-gon", "q-dr", NAN],  # b/gon was not asked: kept, with no question id
        "p_yes": [0.125, 0.25, 0.75, 0.0],
        "p_no": [0.375, 0.25, 0.25, 0.0],
        "score": [0.25, 0.5, 0.75, NAN],  # no mass on either answer: no score
        "p_yes_reference": [0.125, 0.125, 0.5, 0.0],
        "p_no_reference": [0.25, 0.125, 0.125, 0.0],
        "answer": ["no", "not generated", "yes", "unparseable"],
        "first_token": ["<7>", "<9>", "<7>", "<3>"],
    }, columns=COLUMNS)
    expected["question_id"] = expected["question_id"].astype(object)
    pd.testing.assert_frame_equal(frame, expected, check_exact=True)


def test_no_images_give_an_empty_frame_with_the_columns():
    asked = pd.DataFrame(columns=["image_id", "task", "question_id", "question"])
    frame = probabilities_frame([], np.zeros((0, 0), dtype=np.float32), ["any_dr"], asked, _Tokenizer())
    assert frame.empty and list(frame.columns) == COLUMNS
