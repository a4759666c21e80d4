"""The zero-shot prompt registry and the two-prompt softmax score."""

from __future__ import annotations

import pytest

from focus_dagster.prompts import (
    FUNDUS_TEMPLATE,
    PROMPTS,
    PROMPTS_VERSION,
    PromptError,
    prompt_entry,
    prompt_pair,
    tower_wraps_prompts,
    zero_shot_probability,
)


def test_reference_prompts_are_worded_as_in_the_protocol():
    assert PROMPTS_VERSION == "reference-1"
    assert prompt_pair("any_dr") == (
        "A fundus photograph of a healthy retina without diabetic retinopathy.",
        "A fundus photograph of a retina with diabetic retinopathy.",
    )
    assert prompt_pair("referable_dr") == (
        "A fundus photograph showing no referable diabetic retinopathy.",
        "A fundus photograph showing referable diabetic retinopathy.",
    )
    assert prompt_pair("gon") == (
        "A fundus photograph of a healthy eye without glaucoma.",
        "A fundus photograph showing signs of glaucoma.",
    )


def test_every_prompt_has_a_unique_versioned_id():
    ids = [p.id for pair in PROMPTS.values() for p in (pair.negative, pair.positive)]
    assert len(ids) == len(set(ids)) == 6
    assert all(i.startswith(f"{PROMPTS_VERSION}/") for i in ids)
    assert prompt_entry("gon").positive.id == "reference-1/gon/positive"


def test_self_wrapping_models_get_bare_conditions_never_wrapped_twice():
    class Wrapping:
        wraps_prompts = True

    assert tower_wraps_prompts(Wrapping()) and not tower_wraps_prompts(lambda prompts: prompts)
    for task in PROMPTS:
        for condition in prompt_pair(task, model_wraps=True):
            assert "fundus photograph" not in condition.lower()
    negative, _ = prompt_pair("any_dr", model_wraps=True)
    assert FUNDUS_TEMPLATE.format(negative) == prompt_pair("any_dr")[0]


def test_unknown_task_lists_the_registered_ones():
    with pytest.raises(PromptError, match="any_dr"):
        prompt_pair("cataract")


def test_probability_is_the_positive_share_of_a_two_prompt_softmax():
    torch = pytest.importorskip("torch")
    negative, positive = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0])
    images = torch.tensor([[0.1, 2.0, 0.0], [3.0, 0.2, 0.0], [1.0, 1.0, 5.0]])
    p_pos = zero_shot_probability(images, negative, positive, logit_scale=100.0)
    p_neg = zero_shot_probability(images, positive, negative, logit_scale=100.0)
    assert torch.allclose(p_pos + p_neg, torch.ones(3))
    assert p_pos[0] > 0.99 and p_pos[1] < 0.01 and abs(float(p_pos[2]) - 0.5) < 1e-6
    expected = torch.softmax(100.0 * torch.nn.functional.normalize(images, dim=-1)[:, :2], dim=-1)[:, 1]
    assert torch.allclose(p_pos, expected)


def test_scale_invariance_and_bias_cancelling():
    torch = pytest.importorskip("torch")
    images = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))
    negative, positive = torch.randn(2, 8, generator=torch.Generator().manual_seed(2))
    base = zero_shot_probability(images, negative, positive, logit_scale=10.0)
    assert torch.allclose(base, zero_shot_probability(7 * images, negative[None], 3 * positive, logit_scale=10.0))
    assert torch.allclose(base, zero_shot_probability(images, negative, positive, 10.0, logit_bias=-16.5), atol=1e-6)
    sharper = zero_shot_probability(images, negative, positive, logit_scale=50.0)
    assert torch.all((sharper - 0.5).abs() >= (base - 0.5).abs() - 1e-6)
