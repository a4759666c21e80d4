"""The yes/no answer tokens of a tokenizer: which token ids a multimodal LLM's first answer token is read at.

Each variant of yes (yes / Yes / " yes" / " Yes") and of no must be exactly one known token to be read off
one position; a variant the tokenizer splits into several tokens is excluded, with the reason, and never
mis-scored by its first piece. This is a property of the tokenizer alone, so it is resolved once, when the
model is loaded, and carried on the loaded model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

YES_VARIANTS = ("yes", "Yes", " yes", " Yes")
NO_VARIANTS = ("no", "No", " no", " No")


class AnswerTokenError(ValueError):
    """The tokenizer has no single-token variant of "yes" or of "no": the model cannot be scored this way."""


@dataclass(frozen=True)
class AnswerTokens:
    """The token ids read for "yes" and "no", and the variants left out (with why)."""

    yes: dict[str, int]
    no: dict[str, int]
    excluded: dict[str, str] = field(default_factory=dict)

    @property
    def yes_ids(self) -> list[int]:
        return sorted(set(self.yes.values()))

    @property
    def no_ids(self) -> list[int]:
        return sorted(set(self.no.values()))

    def summary(self) -> dict:
        return {"yes": self.yes, "no": self.no, "excluded": self.excluded}


def resolve_answer_tokens(tokenizer, model_id: str = "model") -> AnswerTokens:
    """Which token ids stand for yes and no in this tokenizer: each variant must be exactly one known token."""
    unknown = getattr(tokenizer, "unk_token_id", None)
    found: dict[str, dict[str, int]] = {"yes": {}, "no": {}}
    excluded: dict[str, str] = {}
    for answer, variants in (("yes", YES_VARIANTS), ("no", NO_VARIANTS)):
        for variant in variants:
            ids = tokenizer.encode(variant, add_special_tokens=False)
            if len(ids) != 1:
                pieces = tokenizer.convert_ids_to_tokens(ids)
                excluded[variant] = f"encodes to {len(ids)} tokens {pieces}: not readable at one position"
            elif unknown is not None and ids[0] == unknown:
                excluded[variant] = "encodes to the unknown token"
            else:
                found[answer][variant] = int(ids[0])
    for answer in ("yes", "no"):
        if not found[answer]:
            raise AnswerTokenError(
                f"model {model_id!r}: no variant of {answer!r} is a single token in its tokenizer "
                f"({excluded}); it cannot be scored by first-token probability."
            )
    clash = set(found["yes"].values()) & set(found["no"].values())
    if clash:
        raise AnswerTokenError(f"model {model_id!r}: yes and no variants share token ids {sorted(clash)}.")
    return AnswerTokens(found["yes"], found["no"], excluded)
