"""LoRA on the seeded tiny LLaVA finds the look-alike's lesions: adapted beats base on held-out images of the task,
by a paired interval that excludes zero, and an adapter trained on shuffled labels does not.

The IDRiD look-alike draws what each label says (ICDR grade >= 2: haemorrhages, hard exudates, cotton-wool spots;
macular edema: a ring of exudates around the macula), so a fine-tune that works must find them. IDRiD rather than
BRSET because BRSET's look-alike draws women's lesions at 45% contrast on purpose (the planted fairness effect),
which leaves most of its positives faint at the tiny model's 32 px (bench/lora_learning.py measures both).

Everything on the way is the platform's own: the IDRiD reader, label rule and native split (`harmonise`), the
question `yes_no_questions` renders, the training set `lora_adapters` builds (`training_set`), `train_adapter`,
the first-token scorer, and the paired bootstrap of `lora_effects` (`paired_deltas`: adapted and base on the same
resamples). Only the training schedule differs from the protocol's: the protocol's single epoch at 2e-5 moves a
randomly initialised model too little to show anything. Here: 30 epochs at a constant 3e-3, effective batch 16
(750 optimizer steps per adapter: 70-75 s each with one torch thread per process, two such processes side by
side on a quiet 2-core machine). Shorter does not hold: after 4 epochs (at 3e-3 or 1e-2, batch 8 or 16) the
true-label adapter is no better than its base on the held-out images, and at 20 epochs its interval's low end sits
at zero (below it on some float orders).

The margin rests on the seed. `bench/lora_learning.py --epochs 30 --seeds 0,1,2,3,4` runs this study (this test's
schedule) with the look-alike, the tiny model, the training order and the shuffle all drawn from each seed
(bench/results/lora_learning_idrid_seeds_cpu_2core.json). Held-out AUROC base -> adapted, delta and its paired
interval, true labels: seed 0 (this test) 0.515 -> 0.873, +0.358 (+0.233, +0.481); seed 1 0.595 -> 0.642, +0.048
(-0.043, +0.149); seed 2 0.404 -> 0.489, +0.084 (-0.006, +0.182); seed 3 0.545 -> 0.535, -0.010 (-0.226, +0.230);
seed 4 0.323 -> 0.575, +0.252 (+0.117, +0.389). Shuffled labels: -0.007, +0.010, +0.183 (-0.063, +0.413), -0.049,
and +0.186 (+0.068, +0.297) on seed 4, whose base ranks below chance (0.323): any adapter that moves its scores
moves its AUROC towards 0.5, so there a delta against the base is no sign of learning, and the true-label adapter
(0.575) barely beats the shuffled one (0.510). Only seed 0 shows the lesions learned (0.873 against 0.507 shuffled);
earlier searches over training seeds alone and other schedules (rank 32, 1e-2, 60 epochs) agree that the tiny
randomly initialised model learns them in some runs only. So this test pins seed 0: it proves the training, the
scorer and the paired bootstrap can show an adapter that learned, and that the same path shows nothing on shuffled
labels for that seed; it does not prove that every seed learns.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from focus_dagster.adapter_plan import training_set
from focus_dagster.datasets import read_dataset
from focus_dagster.evaluation.paired import paired_deltas
from focus_dagster.inference.yes_no import yes_no_scorer
from focus_dagster.labels import harmonise
from focus_dagster.lora.batches import load_pixels
from focus_dagster.lora.settings import LoraSettings
from focus_dagster.lora.train import Example, load_adapted, train_adapter, write_adapter
from focus_dagster.models.catalog import CATALOG
from focus_dagster.models.registry import load_model
from focus_dagster.models.tiny_mllm import build_tiny_mllm
from focus_dagster.questions import question_book
from focus_dagster.synthetic import synthesize

pytestmark = pytest.mark.heavy(200)  # seconds on a quiet 2-core machine: started first

TASK = "referable_dr"
RECORDS = 500
SETTINGS = LoraSettings(learning_rate=3e-3, epochs=30, micro_batch=8, accumulation=2, checkpoint_every=0,
                        lr_schedule="constant")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The IDRiD look-alike's labels, the rendered question per image, the base model and its held-out scores."""
    tmp = tmp_path_factory.mktemp("lora_look_alike")
    synthesize(tmp / "data", ["idrid"], per_dataset=RECORDS, seed=0)
    read = read_dataset("idrid", tmp / "data" / "idrid")
    labels = harmonise("idrid", read.records, read.quarantine, root=read.root).labels
    (question,) = question_book(None).for_dataset("idrid", [TASK])
    asked = pd.DataFrame({"image_id": labels["image_id"], "task": TASK,
                          "question": [question.render(row) for row in labels.to_dict("records")]})
    spec = replace(CATALOG["tiny_llava"], path=str(build_tiny_mllm(tmp / "model", "llava", seed=0)))
    base = load_model(spec).to("cpu")
    test = labels.loc[(labels["split"] == "test") & labels[TASK].notna()].sort_values("image_id")
    held_out = [read.root / path for path in test["image_path"]]
    y = test[TASK].astype(int).to_numpy()
    scored = _scores(base, held_out, question.text)
    return {"tmp": tmp, "spec": spec, "training": training_set(labels, asked, TASK, read.root),
            "question": question.text, "held_out": held_out, "y": y, "base_scores": scored}


def _scores(mllm, paths, question: str) -> np.ndarray:
    values = yes_no_scorer(mllm, [question])(load_pixels([str(p) for p in paths], mllm.spec.preprocess))
    return (values[:, 0] / (values[:, 0] + values[:, 1])).numpy()


def _auroc_delta(study, answers: list[str], name: str):
    """Train on `answers` from a fresh load of the base model (an applied adapter lives in the model it was
    applied to), score the held-out images with the adapter, compare with the base scores."""
    examples = [Example(image_id, path, question, answer)
                for (image_id, path, question, _), answer in zip(study["training"].rows, answers)]
    base = load_model(study["spec"]).to("cpu")
    trained = train_adapter(base, examples, SETTINGS, study["tmp"] / name / "work")
    write_adapter(trained, study["tmp"] / name / "adapter", {})
    adapted = _scores(load_adapted(base, study["tmp"] / name / "adapter"), study["held_out"], study["question"])
    return paired_deltas(study["y"], study["base_scores"], adapted, base_threshold=None, adapted_threshold=None,
                         seed=0)["auroc"]


def test_the_look_alike_has_both_classes_on_both_sides(study):
    training, y = study["training"], study["y"]
    assert training.positives >= 100 and training.negatives >= 50
    assert y.sum() >= 25 and (y == 0).sum() >= 15


def test_an_adapter_on_the_true_labels_ranks_held_out_images_better_than_its_base(study):
    answers = [answer for *_, answer in study["training"].rows]
    delta = _auroc_delta(study, answers, "true")
    assert delta.low > 0, delta  # the paired 95% interval excludes zero
    assert delta.adapted >= 0.65 and delta.delta >= 0.1, delta


def test_an_adapter_on_shuffled_labels_does_not(study):
    answers = [answer for *_, answer in study["training"].rows]
    shuffled = list(np.random.default_rng(1).permutation(answers))
    assert shuffled != answers and sorted(shuffled) == sorted(answers)
    delta = _auroc_delta(study, shuffled, "shuffled")
    assert delta.low <= 0 <= delta.high, delta
    assert abs(delta.delta) < 0.1, delta
