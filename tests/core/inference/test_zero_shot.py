"""Zero-shot scores from stored embeddings, against a softmax of logit_scale x cosine computed by hand in numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from focus_dagster.inference.zero_shot import ZERO_SHOT_COLUMNS, zero_shot_frame
from focus_dagster.models.base import LoadedEncoder
from focus_dagster.models.spec import ModelSpec
from focus_dagster.prompts import PROMPTS, PROMPTS_VERSION

SCALE = 10.0
IMAGES = {"img-a": [1.0, 0.0, 0.0], "img-b": [0.0, 2.0, 0.0], "img-c": [1.0, 1.0, 0.5]}
# Known text vectors per (task, side), deliberately not unit length: the scores must normalise them.
TEXT = {
    ("any_dr", "negative"): [2.0, 0.0, 0.0],
    ("any_dr", "positive"): [0.0, 3.0, 0.0],
    ("gon", "negative"): [0.0, 0.0, 1.0],
    ("gon", "positive"): [1.0, 1.0, 1.0],
}


def toy_encoder() -> LoadedEncoder:
    """A dual encoder whose text tower maps each registered prompt sentence to a known vector."""
    vectors = {getattr(PROMPTS[task], side).text: v for (task, side), v in TEXT.items()}
    spec = ModelSpec(id="toy_clip", interface="vlm", domain="pipeline-check", family="toy", source="local",
                     pretrained_on=("brset",))
    return LoadedEncoder(spec=spec, embed=None, dim=3, report=None, modules=(), logit_scale=SCALE,
                         text=lambda prompts: torch.tensor([vectors[p] for p in prompts]))


def embeddings() -> pd.DataFrame:
    vectors = [np.asarray(v, dtype=np.float32) for v in IMAGES.values()]
    return pd.DataFrame({"image_id": list(IMAGES), "embedding": vectors})


def unit(vector: list[float]) -> np.ndarray:
    return np.asarray(vector, dtype=float) / np.linalg.norm(vector)


def p_positive(image: list[float], task: str) -> float:
    """softmax([s cos(image, negative), s cos(image, positive)])[1], in float64."""
    logits = [SCALE * unit(image) @ unit(TEXT[(task, side)]) for side in ("negative", "positive")]
    return float(np.exp(logits[1]) / (np.exp(logits[0]) + np.exp(logits[1])))


def test_scores_are_the_two_prompt_softmax_of_scaled_cosines():
    frame = zero_shot_frame(toy_encoder(), embeddings(), ["gon", "any_dr"], "brset")
    expected = pd.DataFrame({
        "model": ["toy_clip"] * 6,
        "dataset": ["brset"] * 6,
        "image_id": ["img-a", "img-b", "img-c"] * 2,
        "task": ["gon"] * 3 + ["any_dr"] * 3,
        "score": [p_positive(IMAGES[i], t) for t in ("gon", "any_dr") for i in IMAGES],
        "prompts": [PROMPTS_VERSION] * 6,
        "pipeline_check_model": [True] * 6,
        "in_pretraining_data": [True] * 6,
    })
    pd.testing.assert_frame_equal(frame, expected, rtol=1e-6)
    # Spot values by hand: img-a is the any_dr negative direction; img-b the positive one.
    assert frame.loc[3, "score"] == pytest.approx(1 / (1 + np.exp(SCALE)), rel=1e-5)
    assert frame.loc[4, "score"] == pytest.approx(1 / (1 + np.exp(-SCALE)), rel=1e-5)


def test_the_contamination_flag_follows_the_dataset():
    frame = zero_shot_frame(toy_encoder(), embeddings(), ["any_dr"], "idrid")
    assert set(frame["dataset"]) == {"idrid"} and not frame["in_pretraining_data"].any()


@pytest.mark.parametrize("tasks, images", [([], embeddings()), (["any_dr"], embeddings().iloc[:0])])
def test_no_task_or_no_image_gives_an_empty_frame_with_the_columns(tasks, images):
    frame = zero_shot_frame(toy_encoder(), images, tasks, "brset")
    assert frame.empty and list(frame.columns) == ZERO_SHOT_COLUMNS
