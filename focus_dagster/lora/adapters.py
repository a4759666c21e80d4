"""Adapter folders: written atomically with their manifest, checked before use, loaded onto a base model.

An adapter folder holds peft's `adapter_config.json` and `adapter_model.safetensors` and, beside them,
`manifest.json`: how the adapter was trained (settings, examples, losses) and on which base weights
(`base_weights_sha256`). An adapter only means something on the weights it was trained on, so loading it onto
a model whose checkpoint hash differs is refused rather than silently producing other numbers.
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from focus_dagster.files import atomic_path, file_sha256
from focus_dagster.lora.errors import AdapterError

if TYPE_CHECKING:
    from focus_dagster.models.loaders.mllm import LoadedMLLM

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
MANIFEST = "manifest.json"
ADAPTER_FILES = (ADAPTER_CONFIG, ADAPTER_WEIGHTS, MANIFEST)


def write_adapter_folder(source: Path, destination: Path, manifest: dict, sha256: str | None = None) -> str:
    """Copy peft's output from `source` to `destination` with `manifest.json` beside it, in one rename.

    The manifest also records the sha256 of the weights file (`sha256` when the caller has just hashed it: a
    saved embedding matrix can weigh gigabytes), which is returned. A destination that already exists is replaced
    whole; a failure leaves it as it was.
    """
    sha = sha256 or file_sha256(Path(source) / ADAPTER_WEIGHTS)
    with atomic_path(Path(destination)) as partial:
        shutil.copytree(source, partial)
        record = {**manifest, "adapter_model_sha256": sha}
        (partial / MANIFEST).write_text(json.dumps(record, indent=2, sort_keys=True, default=str))
    return sha


def read_manifest(folder: Path) -> dict:
    """The manifest of an adapter folder (AdapterError when it is missing or unreadable)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise _missing(folder, [MANIFEST])
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise AdapterError(f"{path} is not valid JSON ({exc}); re-materialise lora_adapters.") from exc


def check_adapter(mllm: LoadedMLLM, folder: Path) -> dict:
    """The folder's manifest, once its files are all there, unchanged, and it belongs to `mllm`'s weights."""
    folder = Path(folder)
    missing = [name for name in ADAPTER_FILES if not (folder / name).is_file()]
    if missing:
        raise _missing(folder, missing)
    manifest = read_manifest(folder)
    trained_on, loaded = manifest.get("base_weights_sha256"), mllm.report.weights_sha256
    if trained_on != loaded:
        raise AdapterError(
            f"adapter {folder} was trained on base weights {trained_on} but model {mllm.spec.id!r} has weights "
            f"{loaded}: the adapter only applies to the weights it was trained on. Re-materialise lora_adapters "
            "for this model (or load the base checkpoint it was trained on)."
        )
    recorded = manifest.get("adapter_model_sha256")
    if recorded and file_sha256(folder / ADAPTER_WEIGHTS) != recorded:
        raise AdapterError(f"{folder / ADAPTER_WEIGHTS} does not match the sha256 in its manifest ({recorded}): "
                           "the file was changed or truncated. Re-materialise lora_adapters.")
    return manifest


def load_adapted(mllm: LoadedMLLM, folder: Path, *, merge: bool = False) -> LoadedMLLM:
    """`mllm` with the adapter in `folder` applied, in eval mode (AdapterError when the folder is unusable).

    The adapter is injected into `mllm.model` itself (no copy of a possibly very large model is made): the
    returned LoadedMLLM's model is the peft model, or with `merge=True` the base model with the LoRA
    updates merged into its weights. Score the base model from a fresh load, not from `mllm` afterwards.
    """
    from peft import PeftModel

    check_adapter(mllm, folder)
    with warnings.catch_warnings():  # transformers' own deprecation notice, raised inside peft: not ours to fix
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        model = PeftModel.from_pretrained(mllm.model, str(folder), is_trainable=False)
    if merge:
        model = model.merge_and_unload()
    model.eval()
    return replace(mllm, model=model)


def _missing(folder: Path, names: list[str]) -> AdapterError:
    return AdapterError(
        f"adapter folder {folder} lacks {', '.join(names)}: it was not written completely or was changed. "
        "Re-materialise lora_adapters for this model and dataset."
    )
