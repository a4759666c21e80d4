"""LoRA on the seeded tiny LLaVA learns a visible image feature, read through the scorer.

The tiny model knows nothing, so the question is whether training moves the probability the platform reads:
images with bright yellow blobs (a caricature of exudates) are labelled "yes", clean ones "no"; after a few
epochs the adapted model's yes/no score ranks held-out images of both kinds apart, where the base model
cannot.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from focus_dagster.inference.yes_no import yes_no_scorer
from focus_dagster.lora.batches import load_pixels
from focus_dagster.lora.settings import LoraSettings
from focus_dagster.lora.train import Example, load_adapted, train_adapter, write_adapter
from focus_dagster.models.catalog import CATALOG
from focus_dagster.models.registry import load_model
from focus_dagster.models.tiny_mllm import build_tiny_mllm
from focus_dagster.questions import DEFAULT_QUESTIONS

QUESTION = DEFAULT_QUESTIONS["any_dr"]


def fundus_like(path: Path, with_blobs: bool, rng: np.random.Generator) -> Path:
    """A noisy dark-orange square, with three bright yellow 10-px blobs when `with_blobs`."""
    pixels = np.full((64, 64, 3), (120.0, 50.0, 20.0)) + rng.normal(0, 20, (64, 64, 3))
    if with_blobs:
        for y, x in rng.integers(8, 56, (3, 2)):
            pixels[y - 5:y + 5, x - 5:x + 5] = (250, 230, 90)
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path)
    return path


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Probability that a positive outscores a negative (ties count half): the rank definition of AUROC."""
    pos, neg = scores[positive], scores[~positive]
    return float(((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean())


def yes_scores(mllm, paths: list[Path]) -> np.ndarray:
    values = yes_no_scorer(mllm, [QUESTION])(load_pixels([str(p) for p in paths], mllm.spec.preprocess))
    return (values[:, 0] / (values[:, 0] + values[:, 1])).numpy()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """8 training and 8 held-out images, half with blobs each."""
    folder = tmp_path_factory.mktemp("blobs")
    rng = np.random.default_rng(0)
    train = [Example(f"t{i}", fundus_like(folder / f"t{i}.png", i % 2 == 1, rng), QUESTION, "yes" if i % 2 else "no")
             for i in range(8)]
    held_out = [fundus_like(folder / f"h{i}.png", i % 2 == 1, rng) for i in range(8)]
    return train, held_out, np.arange(8) % 2 == 1


def test_an_adapter_learns_a_visible_feature_that_the_base_model_does_not_see(images, tmp_path):
    train, held_out, blobs = images
    spec = replace(CATALOG["tiny_llava"], path=str(build_tiny_mllm(tmp_path / "model", "llava", seed=0)))
    base = load_model(spec).to("cpu")
    before = yes_scores(base, held_out)

    settings = LoraSettings(learning_rate=1e-2, epochs=10, micro_batch=8, accumulation=1, checkpoint_every=0)
    trained = train_adapter(base, train, settings, tmp_path / "work")
    write_adapter(trained, tmp_path / "adapter", {})
    after = yes_scores(load_adapted(base, tmp_path / "adapter"), held_out)

    assert trained.steps == 10 and trained.losses[-1] < trained.losses[0] / 4
    assert auroc(before, blobs) < 0.8
    assert auroc(after, blobs) == 1.0
    assert (after[blobs] > 0.5).all() and (after[~blobs] < 0.5).all()
