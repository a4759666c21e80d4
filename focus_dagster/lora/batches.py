"""Training batches for yes/no supervised fine-tuning, built exactly as the scorer builds its inputs.

The scorer (focus_dagster.inference.yes_no) reads the probability of "yes" at the first generated position:
the logits at the last position of the left-padded prompt (one user turn: the image and the question, then
the assistant-turn opener). Training therefore uses that same prompt, from the scorer's own batch builder,
and appends one answer token: the loss is the cross-entropy of that token predicted from the last prompt
position, and every other position (prompt, image tokens, padding) carries the label -100.

The answer token is one of the ids the scorer sums for "yes" or "no" (`LoadedMLLM.tokens`): the example's
own spelling ("yes" / "no") when the tokenizer has it as one token, otherwise the first single-token variant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from focus_dagster.models.answer_tokens import NO_VARIANTS, YES_VARIANTS, AnswerTokens

if TYPE_CHECKING:
    from focus_dagster.models.spec import Preprocess

IGNORE = -100  # the label that cross-entropy skips
ANSWERS = ("yes", "no")
# Columns of the processor's output that run along the token sequence, and what an appended answer token
# gets in each: attention on; not an image token.
_SEQUENCE_FILL = {"attention_mask": 1}


def answer_token_id(tokens: AnswerTokens, answer: str) -> int:
    """The token id trained for `answer` ("yes" or "no"): one the scorer reads, the literal spelling first."""
    found, variants = (tokens.yes, YES_VARIANTS) if answer == "yes" else (tokens.no, NO_VARIANTS)
    for variant in variants:  # "yes", "Yes", " yes", " Yes": the literal answer leads
        if variant in found:
            return found[variant]
    raise ValueError(f"no single-token variant of {answer!r} in this tokenizer ({tokens.excluded}).")


def load_pixels(paths: Sequence[str], preprocess: Preprocess):
    """Image files -> float pixels [B, 3, H, W], decoded and normalised as the scoring run does."""
    import numpy as np
    import torch

    from focus_dagster.inference.images import normalise, pixels_file

    uint8 = torch.from_numpy(np.stack([pixels_file(path, preprocess) for path in paths]))
    return normalise(uint8, preprocess)


def training_batch(scorer, pixels, questions: Sequence[str], answer_ids: Sequence[int]) -> dict:
    """Model inputs and labels for (image, question, answer) triples.

    `scorer` is a YesNoScorer on the model being trained: its prompt and batch builder (left padding, chat
    template, processor call, device and dtype) make the inputs, so training sees byte for byte the prompt that
    scoring sees. The answer token is appended as the last column; `labels` is -100 except there.
    """
    import torch

    inputs = scorer.inputs(list(pixels), [scorer.prompt(question) for question in questions])
    ids = inputs["input_ids"]
    answers = torch.tensor(list(answer_ids), dtype=ids.dtype, device=ids.device)[:, None]
    batch = {key: _append_column(key, value, ids.shape, answers) for key, value in inputs.items()}
    labels = torch.full_like(batch["input_ids"], IGNORE)
    labels[:, -1:] = answers
    batch["labels"] = labels
    return batch


def _append_column(key: str, value, sequence_shape, answers):
    """Extend a per-token tensor by the answer column; other tensors (pixels, image sizes) pass unchanged."""
    import torch

    if key == "input_ids":
        return torch.cat([value, answers], dim=1)
    if value.dim() != 2 or tuple(value.shape) != tuple(sequence_shape):
        return value
    column = torch.full_like(value[:, :1], _SEQUENCE_FILL.get(key, 0))
    return torch.cat([value, column], dim=1)


def answer_loss(model, batch: dict):
    """(sum of the cross-entropy over the labelled tokens, how many there are) for one batch.

    Only the positions that predict a labelled token need vocabulary logits: with the answer in the last
    column(s), the model is asked for the last few positions only (`logits_to_keep`), which keeps the
    [batch, sequence, vocabulary] tensor of a 262k-token vocabulary out of memory.
    """
    import torch

    labels = batch["labels"]
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    labelled_columns = (labels != IGNORE).any(dim=0).nonzero()
    keep = labels.shape[1] - int(labelled_columns.min()) + 1
    try:
        logits = model(**inputs, logits_to_keep=keep).logits
    except TypeError:  # a model without logits_to_keep: all positions, then the last `keep`
        logits = model(**inputs).logits
    logits = logits[:, -keep:]
    predicted = logits[:, :-1].float()  # position t predicts token t + 1
    targets = labels[:, -(keep - 1):]
    loss = torch.nn.functional.cross_entropy(predicted.reshape(-1, predicted.shape[-1]), targets.reshape(-1),
                                             ignore_index=IGNORE, reduction="sum")
    return loss, int((targets != IGNORE).sum())
