"""Yes/no scoring through the real code path on tiny models of every supported family."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from focus_dagster.inference.yes_no import (
    VALUES,
    parse_answer,
    reference_style_scores,
    yes_no_scorer,
)
from focus_dagster.models.answer_tokens import AnswerTokenError, resolve_answer_tokens
from focus_dagster.models.catalog import CATALOG
from focus_dagster.models.registry import load_model
from focus_dagster.models.spec import ModelSpec, WeightsNotFoundError
from focus_dagster.models.tiny_mllm import (
    TINY_MLLM_FAMILIES,
    build_tiny_mllm,
    train_tiny_tokenizer,
)
from focus_dagster.questions import QuestionBook

QUESTIONS = [QuestionBook().question(task, "brset").text for task in ("any_dr", "referable_dr", "gon")]
FAMILY_CLASSES = {"llava": "LLaVA", "llava_next": "LLaVA-NeXT", "gemma3": "Gemma-3 / MedGemma", "qwen3_vl": "Qwen3-VL"}


@pytest.fixture(scope="module", params=TINY_MLLM_FAMILIES)
def loaded(request, tmp_path_factory):
    """A tiny model of each family, written in hub layout and loaded like any hub checkpoint."""
    folder = build_tiny_mllm(tmp_path_factory.mktemp(request.param) / "model", request.param, seed=3)
    spec = ModelSpec(id=f"tiny-{request.param}", interface="mllm", domain="pipeline-check", family="hf_mllm",
                     source="local", path=str(folder), preprocess=CATALOG["tiny_llava"].preprocess)
    return load_model(spec).to("cpu")


def images(n: int, seed: int = 0):
    return torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def test_each_family_loads_through_the_processor_with_a_clean_audit(loaded):
    assert loaded.family_name == FAMILY_CLASSES[loaded.spec.id.removeprefix("tiny-")]
    assert loaded.report.clean and loaded.report.matched == loaded.report.model_tensors
    assert len(loaded.tokens.yes_ids) == 4 and len(loaded.tokens.no_ids) == 4 and not loaded.tokens.excluded


def test_batched_scores_equal_one_image_at_a_time_with_left_padding(loaded):
    """Questions of different lengths in one batch: padding on the left keeps every row's last position exact."""
    per_image = {"a": QUESTIONS, "b": ["Glaucoma? Answer with yes or no only."] * 3, "c": QUESTIONS[::-1]}
    scorer = yes_no_scorer(loaded, QUESTIONS, per_image=per_image)
    pixels = images(3)
    batched = scorer(pixels, ["a", "b", "c"])
    single = torch.cat([scorer(pixels[i : i + 1], [image_id]) for i, image_id in enumerate("abc")])
    assert batched.shape == (3, 3 * len(VALUES))
    torch.testing.assert_close(batched, single, atol=2e-5, rtol=1e-4, equal_nan=True)


def test_probabilities_are_consistent(loaded):
    values = yes_no_scorer(loaded, QUESTIONS)(images(4)).reshape(4, 3, len(VALUES))
    p_yes, p_no, yes_max, no_max = (values[..., k] for k in range(4))
    assert ((p_yes > 0) & (p_no > 0) & (p_yes + p_no <= 1 + 1e-6)).all()
    assert ((yes_max <= p_yes + 1e-7) & (yes_max >= p_yes / 4 - 1e-7)).all()  # max of 4 variants vs their sum
    assert (no_max <= p_no + 1e-7).all()
    assert torch.isnan(values[..., 4]).all()  # no answer generated unless asked


def test_batched_scores_agree_with_the_reference_generate_loop(loaded):
    pixels = images(2, seed=1)
    batched = yes_no_scorer(loaded, QUESTIONS[:1], answer_tokens=3)(pixels).reshape(2, len(VALUES))
    for i in range(2):
        p_yes, p_yes_max, text, _ = reference_style_scores(loaded.model, loaded.processor, loaded.tokens, pixels[i],
                                                        QUESTIONS[0], max_new_tokens=3)
        assert batched[i, 0].item() == pytest.approx(p_yes, abs=1e-6)
        assert batched[i, 2].item() == pytest.approx(p_yes_max, abs=1e-6)
        assert batched[i, 4].item() == {"yes": 1.0, "no": 0.0}.get(parse_answer(text), -1.0)


def test_a_multi_token_variant_is_excluded_with_its_reason_not_misread():
    tokens = resolve_answer_tokens(train_tiny_tokenizer("llava", single_token_answers=False), "split-yes")
    assert " Yes" in tokens.excluded and "tokens" in tokens.excluded[" Yes"]
    assert " Yes" not in tokens.yes and "yes" in tokens.yes


class _OneWordTokenizer:
    """A tokenizer that splits every word into characters: no answer is a single token."""

    unk_token_id = None

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def convert_ids_to_tokens(self, ids):
        return [chr(i) for i in ids]


def test_a_tokenizer_without_single_token_answers_cannot_be_scored():
    with pytest.raises(AnswerTokenError, match="no variant of 'yes' is a single token"):
        resolve_answer_tokens(_OneWordTokenizer(), "chars")


@pytest.mark.parametrize(
    "text, answer",
    [("Yes.", "yes"), (" no, the disc is normal", "no"), ("NO", "no"), ("Maybe", "unparseable"), ("", "unparseable"),
     ("yesterday", "unparseable")],
)
def test_generated_answers_are_parsed_or_counted_as_unparseable(text, answer):
    assert parse_answer(text) == answer


def test_missing_weights_name_the_spec_and_where_it_looked_and_download_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsNotFoundError, match=r"medgemma_4b.*hub cache.*google/medgemma-4b-it.*path:"):
        load_model(CATALOG["medgemma_4b"])
    with pytest.raises(WeightsNotFoundError, match=str(tmp_path / "nowhere")):
        load_model(replace(CATALOG["medgemma_4b"], path=str(tmp_path / "nowhere")))
    assert not (tmp_path / "hub").exists() or not any((tmp_path / "hub").iterdir())


def test_a_folder_without_a_chat_template_is_refused(tmp_path):
    folder = build_tiny_mllm(tmp_path / "m", "llava")
    for template in folder.glob("chat_template*"):
        template.unlink()
    spec = replace(CATALOG["tiny_llava"], family="hf_mllm", path=str(folder))
    with pytest.raises(WeightsNotFoundError, match="chat template"):
        load_model(spec)
