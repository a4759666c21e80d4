"""Resumable training: the state of a run after an optimizer step, written atomically, read back exactly.

A checkpoint is one folder under the training work folder: `state.pt` (the trainable weights, the optimizer
state and the random number generator states, loadable with `weights_only=True`) and `progress.json` (the
step, the loss history, the example order, the micro-batch as finally used, and the fingerprint of what was
being trained). It replaces the previous checkpoint in one rename, so a run killed at any moment leaves
either the old checkpoint or the new one. A checkpoint whose fingerprint differs from the run's (other
examples, settings or base weights) is never resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from focus_dagster.files import atomic_path

if TYPE_CHECKING:
    from focus_dagster.lora.settings import LoraSettings

CHECKPOINT_FOLDER = "checkpoint"
STATE_FILE = "state.pt"
PROGRESS_FILE = "progress.json"
# Bumped whenever the training procedure changes what the same inputs produce: old checkpoints then differ.
TRAINING_FORMAT = 1
# Settings that change when or how often state is saved, never the weights a run ends with.
_BOOKKEEPING_SETTINGS = ("checkpoint_every",)


@dataclass
class Progress:
    """Where a run stands after `step` optimizer steps."""

    fingerprint: str
    step: int
    losses: list[float]
    order: list[list[int]]  # one permutation of the example indices per epoch
    micro_batch: int
    accumulation: int
    examples_seen: int


def training_fingerprint(base_weights_sha256: str, examples: Sequence, settings: LoraSettings) -> str:
    """A key for everything that decides the adapter's weights: base weights, examples, settings, procedure.

    Image files enter by path, size and modification time: hashing every fundus image of a dataset again
    would cost more than the check is worth, and a rewritten file changes its modification time.
    """
    parts = {
        "format": TRAINING_FORMAT,
        "base_weights_sha256": base_weights_sha256,
        "settings": {k: v for k, v in settings.as_dict().items() if k not in _BOOKKEEPING_SETTINGS},
        "examples": [_example_key(example) for example in examples],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _example_key(example) -> list:
    stat = os.stat(example.image)
    return [example.image_id, str(example.image), stat.st_size, stat.st_mtime_ns, example.question, example.answer]


def checkpoint_folder(work_dir: Path) -> Path:
    return Path(work_dir) / CHECKPOINT_FOLDER


def save_checkpoint(work_dir: Path, progress: Progress, trainable: dict, optimizer_state: dict, rng: dict) -> Path:
    """Write the run's state after `progress.step` steps, replacing the previous checkpoint atomically."""
    import torch

    target = checkpoint_folder(work_dir)
    with atomic_path(target) as partial:
        partial.mkdir(parents=True)
        torch.save({"trainable": trainable, "optimizer": optimizer_state, "rng": rng}, partial / STATE_FILE)
        (partial / PROGRESS_FILE).write_text(json.dumps(asdict(progress)))
    return target


def read_progress(work_dir: Path) -> Progress | None:
    """The progress recorded by the last checkpoint, or None when there is none (or it cannot be read)."""
    path = checkpoint_folder(work_dir) / PROGRESS_FILE
    try:
        return Progress(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def read_state(work_dir: Path) -> dict:
    """The tensors of the last checkpoint: trainable weights, optimizer state, generator states."""
    import torch

    return torch.load(checkpoint_folder(work_dir) / STATE_FILE, map_location="cpu", weights_only=True)


def remove_checkpoint(work_dir: Path) -> None:
    """Drop the checkpoint once the adapter is saved: it holds full copies of the embeddings and the optimizer."""
    import shutil

    shutil.rmtree(checkpoint_folder(work_dir), ignore_errors=True)
