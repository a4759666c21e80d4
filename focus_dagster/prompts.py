"""Zero-shot prompts: one versioned registry, referenced by id from every score it produced.

Each task has a negative and a positive prompt, worded exactly as in the reference benchmark. A zero-shot
score is the softmax, over the two prompts, of `logit_scale * cosine(image, prompt)`; the score of the
positive prompt is P(positive).

Some dual encoders wrap a prompt in their own template (FLAIR turns X into "A fundus photograph of X").
Their text tower says so with `wraps_prompts = True`; `prompt_pair(task, model_wraps=True)` then hands them
the bare condition, so that no prompt is ever wrapped twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from focus_dagster.errors import FocusError

PROMPTS_VERSION = "reference-1"
FUNDUS_TEMPLATE = "A fundus photograph of {}"


class PromptError(FocusError):
    """A task without a registered prompt pair."""


@dataclass(frozen=True)
class Prompt:
    """One prompt: its id, the full sentence, and the condition a self-wrapping model receives instead.

    `condition` is what goes into "A fundus photograph of {}"; where the reference sentence does not have
    that form (gon positive), the condition is the nearest phrase that keeps the meaning.
    """

    id: str
    text: str
    condition: str


@dataclass(frozen=True)
class PromptPair:
    task: str
    negative: Prompt
    positive: Prompt


def _pair(task: str, negative: tuple[str, str], positive: tuple[str, str]) -> PromptPair:
    return PromptPair(
        task=task,
        negative=Prompt(f"{PROMPTS_VERSION}/{task}/negative", *negative),
        positive=Prompt(f"{PROMPTS_VERSION}/{task}/positive", *positive),
    )


PROMPTS: dict[str, PromptPair] = {
    "any_dr": _pair(
        "any_dr",
        (
            "A fundus photograph of a healthy retina without diabetic retinopathy.",
            "a healthy retina without diabetic retinopathy.",
        ),
        ("A fundus photograph of a retina with diabetic retinopathy.", "a retina with diabetic retinopathy."),
    ),
    "referable_dr": _pair(
        "referable_dr",
        (
            "A fundus photograph showing no referable diabetic retinopathy.",
            "no referable diabetic retinopathy.",
        ),
        ("A fundus photograph showing referable diabetic retinopathy.", "referable diabetic retinopathy."),
    ),
    "gon": _pair(
        "gon",
        ("A fundus photograph of a healthy eye without glaucoma.", "a healthy eye without glaucoma."),
        ("A fundus photograph showing signs of glaucoma.", "signs of glaucoma."),
    ),
}


def prompt_entry(task: str) -> PromptPair:
    """The registered pair of `task` (with ids), or an error listing the tasks that have one."""
    if task not in PROMPTS:
        raise PromptError(f"no zero-shot prompts for task {task!r}; registered: {', '.join(PROMPTS)}")
    return PROMPTS[task]


def prompt_pair(task: str, model_wraps: bool = False) -> tuple[str, str]:
    """(negative, positive) prompt text for `task`; bare conditions when the model wraps prompts itself."""
    pair = prompt_entry(task)
    if model_wraps:
        return pair.negative.condition, pair.positive.condition
    return pair.negative.text, pair.positive.text


def tower_wraps_prompts(text_tower) -> bool:
    """Whether a loaded text tower applies its own prompt template (FLAIR): pass it to `prompt_pair`."""
    return bool(getattr(text_tower, "wraps_prompts", False))


def zero_shot_probability(image_embeddings, negative_text, positive_text, logit_scale: float, logit_bias=None):
    """P(positive) per image: softmax over the two prompts of `logit_scale * cosine (+ logit_bias)`.

    image_embeddings [B, D]; negative_text / positive_text [D] (or [1, D]) text embeddings in the same
    space. Embeddings are L2-normalised here. A bias (SigLIP) is added to both logits, so it cancels in the
    two-prompt softmax; it is accepted for symmetry with the models' own logits and changes nothing here.
    """
    import torch

    images = torch.nn.functional.normalize(torch.as_tensor(image_embeddings).float(), dim=-1)
    texts = torch.stack([torch.as_tensor(negative_text).float().reshape(-1), torch.as_tensor(positive_text).float().reshape(-1)])
    texts = torch.nn.functional.normalize(texts, dim=-1)
    logits = float(logit_scale) * images @ texts.T
    if logit_bias is not None:
        logits = logits + float(logit_bias)
    return torch.softmax(logits, dim=-1)[:, 1]
