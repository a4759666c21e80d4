"""Yes/no scoring of multimodal LLMs: the probability of "yes" at the first answer token, batched.

For each image and each task question, the model sees one user turn (the image and the question) and the
assistant-turn opener from its chat template. One forward pass over a left-padded batch gives the logits at
the first generated position; a softmax over the whole vocabulary turns them into probabilities, and

    p_yes = sum of P(v) over the single-token variants v of yes / Yes / " yes" / " Yes" (distinct token ids)
    p_no  = the same for no / No / " no" / " No"
    score = p_yes / (p_yes + p_no)
    p_yes_reference = max over the yes variants of P(v)  (the reference benchmark's raw column)

A variant that the tokenizer splits into several tokens cannot be read off one position: it is excluded,
with the reason, and never mis-scored by its first piece (focus_dagster.models.answer_tokens resolves the
ids once per tokenizer, at load). Optionally a short greedy answer is generated and parsed; an answer that
is neither yes nor no is a counted outcome ("unparseable"), never a dropped row.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pandas as pd

from focus_dagster.models.answer_tokens import AnswerTokens

if TYPE_CHECKING:
    from focus_dagster.models.loaders.mllm import LoadedMLLM

# Per (image, task) the scorer returns these values, in this order (a flat float vector per image).
VALUES = ("p_yes", "p_no", "p_yes_reference", "p_no_reference", "answer_code", "first_token_id")
ANSWER_CODES = {1.0: "yes", 0.0: "no", -1.0: "unparseable"}
REFERENCE_MAX_NEW_TOKENS = 128


def parse_answer(text: str) -> str:
    """'yes', 'no' or 'unparseable' from a generated answer ("Yes.", " no, because ..." are fine)."""
    words = re.findall(r"[a-z]+", text.lower())
    if words and words[0] in ("yes", "no"):
        return words[0]
    return "unparseable"


def answer_code(text: str) -> float:
    return {"yes": 1.0, "no": 0.0}.get(parse_answer(text), -1.0)


def chat_messages(question: str) -> list[dict]:
    """One user turn holding the image and the question (protocol.md)."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]


def chat_prompt(processor, question: str) -> str:
    """The chat template applied to one user turn, with the assistant turn opened (generation prompt)."""
    return processor.apply_chat_template(chat_messages(question), add_generation_prompt=True, tokenize=False)


def first_token_values(logits, tokens: AnswerTokens):
    """[N, V] logits at the first generated position -> [N, 4] (p_yes, p_no, p_yes_reference, p_no_reference)
    and [N] argmax ids. The softmax runs in float32 over the full vocabulary."""
    import torch

    probs = torch.softmax(logits.float(), dim=-1)
    yes, no = probs[:, tokens.yes_ids], probs[:, tokens.no_ids]
    values = torch.stack([yes.sum(-1), no.sum(-1), yes.max(-1).values, no.max(-1).values], dim=-1)
    return values, logits.argmax(dim=-1)


@dataclass
class YesNoScorer:
    """Scores batches of images against one question per task with one loaded model.

    model / processor: a hub image-text-to-text model and its processor; questions: one question per task,
    the same for every image, or `per_image` (image id -> one question per task, in the same task order)
    where questions carry per-image context. `answer_tokens > 0` also generates that many tokens greedily
    and parses the answer; the first-token logits then come from the same `generate` call.
    """

    model: object
    processor: object
    tokens: AnswerTokens
    questions: Sequence[str]
    answer_tokens: int = 0
    per_image: Mapping[str, Sequence[str]] | None = None
    _prompts: dict = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.processor.tokenizer.padding_side = "left"  # the first generated position is then the last column

    def prompt(self, question: str) -> str:
        if question not in self._prompts:
            self._prompts[question] = chat_prompt(self.processor, question)
        return self._prompts[question]

    def __call__(self, pixels, image_ids: Sequence[str] | None = None):
        """Images [B, 3, H, W] in [0, 1] -> [B, tasks * len(VALUES)] float tensor (see VALUES)."""
        import torch

        images = [image for image in pixels.float().cpu()]
        questions = [self.questions_for(image_ids[i] if image_ids else None) for i in range(len(images))]
        n_questions = len(self.questions)
        pairs = [(image, self.prompt(q)) for image, asked in zip(images, questions) for q in asked]
        inputs = self.inputs([image for image, _ in pairs], [prompt for _, prompt in pairs])
        logits, answers = self._first_logits(inputs)
        values, argmax = first_token_values(logits, self.tokens)
        codes = torch.tensor(answers if answers is not None else [math.nan] * len(argmax), dtype=torch.float32)
        rows = torch.cat([values.cpu(), codes[:, None], argmax.float().cpu()[:, None]], dim=-1)
        return rows.reshape(len(images), n_questions * len(VALUES))

    def questions_for(self, image_id: str | None) -> Sequence[str]:
        if self.per_image is None or image_id is None:
            return self.questions
        asked = self.per_image[image_id]
        if len(asked) != len(self.questions):
            raise ValueError(f"image {image_id!r}: {len(asked)} questions for {len(self.questions)} tasks.")
        return asked

    def inputs(self, images: list, prompts: list[str]):
        """Processor outputs for aligned (image, prompt) pairs, on the model's device."""
        # One image list per prompt: Gemma-3's processor reads a flat list as several images of one prompt.
        batch = self.processor(text=prompts, images=[[image] for image in images], padding=True, return_tensors="pt",
                               do_rescale=False)
        device = next(self.model.parameters()).device
        dtype = next(self.model.parameters()).dtype
        return {
            key: (value.to(device, dtype=dtype) if value.is_floating_point() else value.to(device))
            for key, value in batch.items()
        }

    def _first_logits(self, inputs):
        import torch

        with torch.inference_mode():
            if self.answer_tokens <= 0:
                return last_position_logits(self.model, inputs), None
            out = self.model.generate(
                **inputs, max_new_tokens=self.answer_tokens, do_sample=False, output_logits=True,
                return_dict_in_generate=True, pad_token_id=self.processor.tokenizer.pad_token_id,
            )
        new_tokens = out.sequences[:, inputs["input_ids"].shape[1]:]
        texts = self.processor.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        return out.logits[0], [answer_code(text) for text in texts]


def yes_no_scorer(mllm: LoadedMLLM, questions: Sequence[str], answer_tokens: int = 0,
                  per_image: Mapping[str, Sequence[str]] | None = None) -> YesNoScorer:
    """A YesNoScorer on a loaded MLLM, reading its answer tokens: one question per task, or `per_image`
    (image id -> questions in task order) where questions carry per-image context."""
    return YesNoScorer(mllm.model, mllm.processor, mllm.tokens, list(questions), answer_tokens, per_image)


def probabilities_frame(image_ids, values: np.ndarray, tasks: list[str], asked: pd.DataFrame,
                        tokenizer) -> pd.DataFrame:
    """Scorer output [n, tasks x VALUES] -> one row per image and task, sorted by image_id and task.

    Columns: image_id, task, question_id (joined from `asked`), p_yes, p_no, score (p_yes / (p_yes + p_no),
    missing where both are 0), p_yes_reference, p_no_reference, answer (yes / no / unparseable, or "not
    generated") and first_token (the most likely first token, decoded by `tokenizer`).
    """
    cube = values.reshape(len(image_ids), len(tasks), len(VALUES)) if len(image_ids) else np.zeros((0, len(tasks), 6))
    frame = pd.DataFrame({
        "image_id": np.repeat(np.asarray(image_ids, dtype=object), len(tasks)),
        "task": np.tile(np.asarray(tasks, dtype=object), len(image_ids)),
        **{name: cube[:, :, k].reshape(-1).astype(float) for k, name in enumerate(VALUES)},
    })
    total = frame["p_yes"] + frame["p_no"]
    frame["score"] = (frame["p_yes"] / total).where(total > 0)
    frame["answer"] = frame.pop("answer_code").map(ANSWER_CODES).fillna("not generated")
    ids = frame.pop("first_token_id").astype(int)
    decoded = {i: tokenizer.decode([i]) for i in set(ids.tolist())}
    frame["first_token"] = ids.map(decoded)
    frame = frame.merge(asked[["image_id", "task", "question_id"]], on=["image_id", "task"], how="left")
    columns = ["image_id", "task", "question_id", "p_yes", "p_no", "score", "p_yes_reference", "p_no_reference",
               "answer", "first_token"]
    return frame[columns].sort_values(["image_id", "task"], kind="stable").reset_index(drop=True)


def last_position_logits(model, inputs):
    """Logits at the last prompt position [N, V], computing the vocabulary projection for that position only."""
    try:
        return model(**inputs, logits_to_keep=1).logits[:, -1, :]
    except TypeError:  # a model without logits_to_keep: compute all positions and keep the last
        return model(**inputs).logits[:, -1, :]


def reference_style_scores(model, processor, tokens: AnswerTokens, image, question: str,
                           max_new_tokens: int = REFERENCE_MAX_NEW_TOKENS) -> tuple[float, float, str, int]:
    """The reference benchmark's way, for comparison: one `generate` call per image and question, with
    `output_scores=True`, reading the first step's scores. Returns (p_yes summed, p_yes max, answer text,
    tokens generated)."""
    import torch

    processor.tokenizer.padding_side = "left"
    batch = processor(text=[chat_prompt(processor, question)], images=[[image]], return_tensors="pt", do_rescale=False)
    dtype = next(model.parameters()).dtype
    batch = {k: (v.to(dtype=dtype) if v.is_floating_point() else v) for k, v in batch.items()}
    with torch.inference_mode():
        out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=processor.tokenizer.pad_token_id)
    values, _ = first_token_values(out.scores[0], tokens)
    answer = out.sequences[0, batch["input_ids"].shape[1]:]
    text = processor.tokenizer.decode(answer, skip_special_tokens=True)
    return float(values[0, 0]), float(values[0, 2]), text, len(out.scores)
