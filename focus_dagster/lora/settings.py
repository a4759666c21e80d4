"""The knobs of LoRA fine-tuning, with the defaults of the benchmark's protocol.

LoRA rank 8, alpha 16, dropout 0.05 on every linear layer; the output head and the input embeddings trained
in full and saved with the adapter where the architecture has them; AdamW at 2e-5 for one epoch with an
effective batch of 16 (micro-batches of 4, gradients accumulated over 4). Every value is recorded in the
adapter's manifest, and all but `checkpoint_every` enter the fingerprint that decides whether a checkpoint
may be resumed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

LR_SCHEDULES = ("linear", "constant")


@dataclass(frozen=True)
class LoraSettings:
    """How one adapter is trained.

    target_modules: peft's "all-linear" (every linear layer except the output head) or a comma-separated list of
    module names. save_embeddings: train `lm_head` and `embed_tokens` in full (peft `modules_to_save`) where the
    model has them. The optimizer step sees `micro_batch * accumulation` examples; a CUDA out-of-memory halves
    `micro_batch` and doubles `accumulation`, so the effective batch never changes. lr_schedule "linear" decays
    the learning rate to zero over the run (the usual supervised fine-tuning default), "constant" keeps it.
    max_grad_norm clips the gradient norm of each optimizer step (None: no clipping).
    """

    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: str = "all-linear"
    save_embeddings: bool = True
    learning_rate: float = 2e-5
    epochs: int = 1
    micro_batch: int = 4
    accumulation: int = 4
    seed: int = 0
    checkpoint_every: int = 5
    max_steps: int | None = None
    weight_decay: float = 0.0
    lr_schedule: str = "linear"
    max_grad_norm: float | None = 1.0

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha < 1:
            raise ValueError(f"LoRA rank and alpha must be positive (r={self.r}, alpha={self.alpha}).")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), not {self.dropout}.")
        if self.learning_rate <= 0 or self.epochs < 1:
            raise ValueError(f"learning_rate must be > 0 and epochs >= 1 (got {self.learning_rate}, {self.epochs}).")
        if self.micro_batch < 1 or self.accumulation < 1:
            raise ValueError(f"micro_batch and accumulation must be >= 1 (got {self.micro_batch}, {self.accumulation}).")
        if self.checkpoint_every < 0 or (self.max_steps is not None and self.max_steps < 1):
            raise ValueError("checkpoint_every must be >= 0 (0: never) and max_steps >= 1 or None.")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule {self.lr_schedule!r} unknown; expected one of {LR_SCHEDULES}.")

    @property
    def effective_batch(self) -> int:
        """Examples per optimizer step."""
        return self.micro_batch * self.accumulation

    def as_dict(self) -> dict:
        """JSON-ready, as recorded in the adapter's manifest."""
        return {**asdict(self), "effective_batch": self.effective_batch}

    def target_module_names(self) -> str | list[str]:
        """What peft's `target_modules` receives."""
        if self.target_modules == "all-linear":
            return "all-linear"
        return [name.strip() for name in self.target_modules.split(",") if name.strip()]
