"""LoRA supervised fine-tuning of a multimodal LLM on yes/no answers, seeded, resumable and memory-aware.

Each example is one image, one question and its answer ("yes" or "no"). The model sees the scorer's own
prompt (focus_dagster.lora.batches) followed by the answer token, and learns that token only, so the adapter
moves exactly the probability the platform reads. Training is:

- deterministic: the random generators are seeded from the settings (LoRA initialisation, dropout, the
  example order), so on a CPU the same inputs give bit-identical adapter weights;
- resumable: every `checkpoint_every` optimizer steps the whole state is written atomically under the work
  folder; a run that died resumes from it and ends with the weights an uninterrupted run would have, while a
  checkpoint of other examples, settings or base weights is never reused;
- memory-aware: a CUDA out-of-memory halves the micro-batch, doubles the accumulation (the effective batch,
  and so the optimization, stay the same) and redoes the step.

The base model is wrapped in place for training and unwrapped afterwards, so the caller's model holds its
original weights again when `train_adapter` returns.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from focus_dagster.files import atomic_path
from focus_dagster.lora.adapters import ADAPTER_WEIGHTS, load_adapted, read_manifest, write_adapter_folder
from focus_dagster.lora.batches import ANSWERS, answer_loss, answer_token_id, load_pixels, training_batch
from focus_dagster.lora.checkpoint import (
    Progress,
    checkpoint_folder,
    read_progress,
    read_state,
    remove_checkpoint,
    save_checkpoint,
    training_fingerprint,
)
from focus_dagster.lora.errors import AdapterError, TrainingSetError
from focus_dagster.lora.settings import LoraSettings

if TYPE_CHECKING:
    from focus_dagster.models.loaders.mllm import LoadedMLLM

__all__ = ["AdapterError", "Example", "TrainedAdapter", "TrainingSetError", "load_adapted", "read_manifest",
           "train_adapter", "write_adapter"]

ADAPTER_FOLDER = "adapter"
ADAPTER_NAME = "default"
# The modules trained in full and saved with the adapter (peft modules_to_save), where the model has them.
EMBEDDING_MODULES = ("lm_head", "embed_tokens")
# About this many step lines per run reach `progress` (a 16k-example epoch has 1,000 steps); checkpoints,
# resumes and out-of-memory retries are always reported.
STEP_LINES = 100


@dataclass(frozen=True)
class Example:
    """One training example: an image file, the question asked about it, and the answer ("yes" or "no")."""

    image_id: str
    image: Path
    question: str
    answer: str


@dataclass
class TrainedAdapter:
    """An adapter as trained: peft's files in `folder`, and how the run went.

    `losses` holds the mean answer loss of every optimizer step, including the steps done before a resume;
    `seconds` and `examples_per_second` measure this call only. `micro_batch` / `accumulation` are the values
    finally used (a CUDA out-of-memory halves the one and doubles the other).
    """

    folder: Path
    steps: int
    losses: list[float]
    examples_seen: int
    seconds: float
    examples_per_second: float
    device: str
    micro_batch: int
    accumulation: int
    resumed_from_step: int | None
    model_id: str = ""
    base_weights_sha256: str = ""
    fingerprint: str = ""
    settings: dict = field(default_factory=dict)
    answer_counts: dict = field(default_factory=dict)
    answer_token_ids: dict = field(default_factory=dict)

    def manifest(self) -> dict:
        """What the adapter's manifest records about its training (the caller adds its own lineage); the work
        folder it was trained in is left out, as it says nothing once the adapter is published."""
        record = asdict(self)
        record.pop("folder")
        return record


def check_training_set(examples: Sequence[Example]) -> dict[str, int]:
    """The answer counts, once the examples can train a yes/no adapter: both answers present, nothing else,
    every image file there."""
    other = [example for example in examples if example.answer not in ANSWERS]
    if other:
        shown = ", ".join(f"{e.image_id}: {e.answer!r}" for e in other[:5])
        raise TrainingSetError(f"{len(other)} examples have an answer other than 'yes' or 'no' ({shown}).")
    missing = [example for example in examples if not Path(example.image).is_file()]
    if missing:
        shown = ", ".join(f"{e.image_id}: {e.image}" for e in missing[:5])
        raise TrainingSetError(f"{len(missing)} example images do not exist ({shown}).")
    counts = Counter(example.answer for example in examples)
    if len(counts) < 2:
        raise TrainingSetError(
            f"the training set has {counts['yes']} 'yes' and {counts['no']} 'no' examples: an adapter needs both "
            "answers to learn to tell them apart. Train on a split (or task) that has both classes."
        )
    return {answer: counts[answer] for answer in ANSWERS}


def train_adapter(mllm: LoadedMLLM, examples: Sequence[Example], settings: LoraSettings, work_dir: Path, *,
                  device: str = "cpu", progress: Callable[[str], None] | None = None) -> TrainedAdapter:
    """Train a LoRA adapter of `mllm` on `examples`; peft's files end in `work_dir/adapter`.

    Checkpoints go to `work_dir/checkpoint` and are resumed from when their fingerprint matches (and removed
    once the adapter is saved). `progress` receives a line per optimizer step (about STEP_LINES per run),
    checkpoint, resume and out-of-memory retry, and the examples' progress lines (done / total, rate, time left,
    about every ten seconds: focus_dagster/progress.py).
    """
    import torch

    counts = check_training_set(examples)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    _place(mllm, device)
    started = time.perf_counter()
    with torch.random.fork_rng(devices=_cuda_devices(device)):  # the caller's generators are left as they were
        torch.manual_seed(settings.seed)
        trainer = _Trainer(mllm, list(examples), settings, work_dir, device, progress or (lambda _line: None))
        try:
            resumed_from = trainer.resume()
            done_before = trainer.progress.examples_seen
            trainer.run()
            folder = trainer.save_adapter()
        finally:
            trainer.unwrap()
    remove_checkpoint(work_dir)
    seconds = time.perf_counter() - started
    state = trainer.progress
    return TrainedAdapter(
        folder=folder, steps=state.step, losses=state.losses, examples_seen=state.examples_seen,
        seconds=seconds, examples_per_second=(state.examples_seen - done_before) / seconds if seconds > 0 else 0.0,
        device=device, micro_batch=state.micro_batch, accumulation=state.accumulation,
        resumed_from_step=resumed_from, model_id=mllm.spec.id, base_weights_sha256=mllm.report.weights_sha256,
        fingerprint=state.fingerprint, settings=settings.as_dict(), answer_counts=counts,
        answer_token_ids={answer: trainer.answer_ids[answer] for answer in ANSWERS},
    )


def write_adapter(trained: TrainedAdapter, destination: Path, manifest: dict, sha256: str | None = None) -> str:
    """Publish a trained adapter at `destination` (atomically), with `manifest.json` beside peft's files.

    The manifest holds the training record (`TrainedAdapter.manifest()`, including `base_weights_sha256`)
    updated with the caller's `manifest`. Returns the sha256 of adapter_model.safetensors (`sha256`: the caller's
    hash of that file, so it is not read twice).
    """
    if not (Path(trained.folder) / ADAPTER_WEIGHTS).is_file():
        raise AdapterError(f"{trained.folder} has no {ADAPTER_WEIGHTS}: the training output is gone; train again.")
    return write_adapter_folder(trained.folder, destination, {**trained.manifest(), **manifest}, sha256)


def total_steps(n_examples: int, settings: LoraSettings) -> int:
    """Optimizer steps of a run: every epoch ends with a (possibly short) step, capped by max_steps."""
    steps = settings.epochs * math.ceil(n_examples / settings.effective_batch)
    return min(steps, settings.max_steps) if settings.max_steps else steps


def learning_rate(settings: LoraSettings, step: int, total: int) -> float:
    """The rate of optimizer step `step` (0-based): constant, or decaying linearly to zero over the run."""
    if settings.lr_schedule == "constant":
        return settings.learning_rate
    return settings.learning_rate * (total - step) / total


def example_order(n_examples: int, settings: LoraSettings) -> list[list[int]]:
    """One seeded permutation of the examples per epoch: the order is part of what a checkpoint records."""
    import torch

    generator = torch.Generator().manual_seed(settings.seed)
    return [torch.randperm(n_examples, generator=generator).tolist() for _ in range(settings.epochs)]


def _cuda_devices(device: str) -> list[int]:
    import torch

    if not str(device).startswith("cuda"):
        return []
    return [torch.device(device).index or 0]


class _Trainer:
    """One training run: the wrapped model, its optimizer, and where it stands (`progress`)."""

    def __init__(self, mllm, examples: list[Example], settings: LoraSettings, work_dir: Path, device: str,
                 say: Callable[[str], None]):
        import torch

        from focus_dagster.inference.yes_no import YesNoScorer

        self.mllm, self.examples, self.settings, self.work_dir = mllm, examples, settings, work_dir
        self.device, self.say = device, say
        self.total = total_steps(len(examples), settings)
        self.answer_ids = {answer: answer_token_id(mllm.tokens, answer) for answer in ANSWERS}
        fingerprint = training_fingerprint(mllm.report.weights_sha256, examples, settings)
        self.progress = Progress(fingerprint=fingerprint, step=0, losses=[],
                                 order=example_order(len(examples), settings), micro_batch=settings.micro_batch,
                                 accumulation=settings.accumulation, examples_seen=0)
        self.requires_grad = {name: p.requires_grad for name, p in mllm.model.named_parameters()}
        # Last: from here on the caller's model is wrapped, and `unwrap` must run whatever happens.
        self.model = _wrap_with_lora(mllm.model, settings)
        self.trainable = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        self.mixed_precision = _mixed_precision(self.trainable, device)
        self.optimizer = torch.optim.AdamW(list(self.trainable.values()), lr=settings.learning_rate,
                                           weight_decay=settings.weight_decay)
        # The scorer's batch builder, on the model being trained: training prompts are scoring prompts.
        self.scorer = YesNoScorer(self.model, mllm.processor, mllm.tokens, [])

    def resume(self) -> int | None:
        """Continue from the checkpoint under the work folder when it belongs to this run; its step, or None."""
        import torch

        saved = read_progress(self.work_dir)
        if saved is None:
            return None
        if saved.fingerprint != self.progress.fingerprint:
            self.say(f"checkpoint {checkpoint_folder(self.work_dir)} is of other examples, settings or base weights "
                     f"({saved.fingerprint} != {self.progress.fingerprint}): starting afresh")
            remove_checkpoint(self.work_dir)
            return None
        state = read_state(self.work_dir)
        with torch.no_grad():
            for name, tensor in state["trainable"].items():
                self.trainable[name].copy_(tensor)
        self.optimizer.load_state_dict(state["optimizer"])
        _set_rng_state(state["rng"], self.device)
        self.progress = saved
        self.say(f"resumed from the checkpoint at step {saved.step}/{self.total}")
        return saved.step

    def run(self) -> None:
        """Optimizer steps until the plan is done, a checkpoint every `checkpoint_every` (none after the last)."""
        from focus_dagster.progress import Progress as Tracker

        self.model.train()
        # Over the examples still to learn from (a resumed run's earlier steps are done already).
        remaining = sum(len(self.step_examples(step)) for step in range(self.progress.step, self.total))
        tracker = Tracker(f"lora {self.mllm.spec.id} training", remaining, "examples", self.say)
        while self.progress.step < self.total:
            indices = self.step_examples(self.progress.step)
            loss = self.optimizer_step(indices)
            state = self.progress
            state.step += 1
            state.losses.append(loss)
            state.examples_seen += len(indices)
            tracker.advance(len(indices))
            if state.step % max(1, self.total // STEP_LINES) == 0 or state.step == self.total:
                self.say(f"step {state.step}/{self.total}: loss {loss:.4f} "
                         f"({len(indices)} examples, micro-batch {state.micro_batch} x {state.accumulation})")
            every = self.settings.checkpoint_every
            if every and state.step % every == 0 and state.step < self.total:
                self.checkpoint()

    def step_examples(self, step: int) -> list[int]:
        """The example indices of optimizer step `step`: a slice of its epoch's permutation."""
        per_epoch = math.ceil(len(self.examples) / self.settings.effective_batch)
        epoch, position = divmod(step, per_epoch)
        size = self.settings.effective_batch
        return self.progress.order[epoch][position * size:(position + 1) * size]

    def optimizer_step(self, indices: list[int]) -> float:
        """Accumulate the gradients of `indices` in micro-batches and take one AdamW step; the mean loss.

        On a CUDA out-of-memory the half-done step is thrown away (gradients and generator states reset) and
        redone with micro-batches half as large.
        """
        import torch

        rng = _rng_state(self.device)
        while True:
            try:
                loss = self.accumulate(indices)
                break
            except torch.cuda.OutOfMemoryError:
                pass  # halve outside the handler: its traceback still holds the failed step's tensors
            self.halve_micro_batch()
            _set_rng_state(rng, self.device)
        if self.settings.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(list(self.trainable.values()), self.settings.max_grad_norm)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.settings, self.progress.step, self.total)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def accumulate(self, indices: list[int]) -> float:
        """Backpropagate the answer loss of `indices`, micro-batch by micro-batch, as one mean over the step."""
        self.optimizer.zero_grad(set_to_none=True)
        size, total = self.progress.micro_batch, 0.0
        for start in range(0, len(indices), size):
            chunk = [self.examples[i] for i in indices[start:start + size]]
            with self.mixed_precision():
                loss_sum, _ = answer_loss(self.model, self.batch(chunk))
            # One answer token per example: dividing by the step's example count makes the accumulated gradient
            # the gradient of the step's mean loss, whatever the micro-batch size.
            (loss_sum / len(indices)).backward()
            total += float(loss_sum.detach())
        return total / len(indices)

    def batch(self, chunk: list[Example]) -> dict:
        pixels = _decoded(chunk, self.mllm.spec.preprocess)
        answers = [self.answer_ids[example.answer] for example in chunk]
        return training_batch(self.scorer, pixels, [example.question for example in chunk], answers)

    def halve_micro_batch(self) -> None:
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        state = self.progress
        if state.micro_batch == 1:
            raise torch.cuda.OutOfMemoryError(
                f"model {self.mllm.spec.id!r}: CUDA out of memory with one example per micro-batch at step "
                f"{state.step + 1}; use a device with more memory (or a smaller model).")
        before = (state.micro_batch, state.accumulation)
        state.micro_batch //= 2
        state.accumulation = math.ceil(self.settings.effective_batch / state.micro_batch)
        if str(self.device).startswith("cuda"):
            torch.cuda.empty_cache()
        self.say(f"CUDA out of memory at step {state.step + 1} with micro-batch {before[0]} x {before[1]}: "
                 f"redoing it with {state.micro_batch} x {state.accumulation}")

    def checkpoint(self) -> None:
        trainable = {name: p.detach().to("cpu", copy=True) for name, p in self.trainable.items()}
        optimizer_state = _to_cpu(self.optimizer.state_dict())
        path = save_checkpoint(self.work_dir, self.progress, trainable, optimizer_state, _rng_state(self.device))
        self.say(f"checkpoint at step {self.progress.step}/{self.total}: {path}")

    def save_adapter(self) -> Path:
        """peft's files (adapter_config.json, adapter_model.safetensors) in `work_dir/adapter`, atomically."""
        target = self.work_dir / ADAPTER_FOLDER
        with atomic_path(target) as partial:
            self.model.save_pretrained(str(partial))
        return target

    def unwrap(self) -> None:
        """Take the adapter out again: the caller's model has its own modules, flags and eval mode back."""
        self.model.delete_adapter(ADAPTER_NAME)
        base = self.model.unload()
        for name, parameter in base.named_parameters():
            parameter.requires_grad_(self.requires_grad.get(name, parameter.requires_grad))
        base.eval()
        self.mllm.model = base


def _place(mllm, device: str) -> None:
    """Move the model to `device` unless it is there already (as loaded for that device, in its dtype)."""
    import torch

    current = next(mllm.model.parameters()).device
    wanted = torch.device(device)
    if current.type != wanted.type or (wanted.index is not None and current.index != wanted.index):
        mllm.to(device)


def _mixed_precision(trainable: dict, device: str) -> Callable:
    """The context the forward pass runs in. Base weights in bf16/fp16 (a GPU load): the trained weights are
    kept in float32, since a 2e-5 step on a bf16 embedding mostly rounds away, and the forward runs under
    autocast in the base dtype. Float32 base weights (a CPU load): plain float32, nothing to do."""
    import contextlib

    import torch

    half = {p.dtype for p in trainable.values()} & {torch.bfloat16, torch.float16}
    if not half:
        return contextlib.nullcontext
    dtype = half.pop()
    for parameter in trainable.values():
        parameter.data = parameter.data.float()
    return lambda: torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def _wrap_with_lora(model, settings: LoraSettings):
    """The model with LoRA layers injected (in place) and the embeddings to train wrapped for saving."""
    from peft import LoraConfig, PeftModel, get_peft_model

    from focus_dagster.models.quiet import quiet_transformers

    quiet_transformers()
    # load_adapted injects an adapter into the model it is given (no copy): such a model is no base any more.
    if isinstance(model, PeftModel) or hasattr(model, "peft_config"):
        raise AdapterError("the model already carries an adapter (one applied by load_adapted stays in the model "
                           "it was applied to): train on a fresh load of the base model.")
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    to_save = [name for name in EMBEDDING_MODULES if name in names] if settings.save_embeddings else []
    # A model whose output head shares the input embedding matrix (Gemma-3, MedGemma) keeps sharing it: one
    # trained matrix serves both, as in the architecture, instead of two copies drifting apart.
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=settings.target_module_names(), modules_to_save=to_save or None,
                        ensure_weight_tying=bool(to_save) and _ties_embeddings(model))
    with warnings.catch_warnings():  # transformers' own deprecation notice, raised inside peft: not ours to fix
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config, adapter_name=ADAPTER_NAME)


def _ties_embeddings(model) -> bool:
    """Whether the output head and the input embeddings are one matrix in this model."""
    head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and embeddings is not None and head.weight is embeddings.weight


def _decoded(chunk: list[Example], preprocess):
    """Pixels of the chunk's images; an unreadable one stops training, named (a training set is not sampled
    around its holes: that would change what the adapter learns without a trace)."""
    try:
        return load_pixels([str(example.image) for example in chunk], preprocess)
    except Exception as exc:  # decoding errors come in many types (PIL, OSError, ValueError)
        ids = ", ".join(example.image_id for example in chunk)
        raise TrainingSetError(f"an image of examples {ids} could not be decoded: {type(exc).__name__}: {exc}") from exc


def _rng_state(device: str) -> dict:
    import torch

    state = {"cpu": torch.get_rng_state()}
    if str(device).startswith("cuda"):
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device: str) -> None:
    import torch

    torch.set_rng_state(state["cpu"])
    if "cuda" in state and str(device).startswith("cuda"):
        torch.cuda.set_rng_state(state["cuda"], device)


def _to_cpu(value):
    """A copy of a (nested) optimizer state on the CPU, so a checkpoint loads on any device."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_to_cpu(item) for item in value]
    return value
