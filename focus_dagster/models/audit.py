"""Checkpoint audit: every load says how many tensors matched, and a partial load is an error.

The reference implementation loaded a RETFound-DINOv2 checkpoint's `model` key with `strict=False` and
silently got no weights at all (its weights sit under `teacher` with a `backbone.` prefix). Here a load
reports matched / missing / unexpected tensors, and any backbone tensor left missing raises.
Weights are read from safetensors, or with `torch.load(weights_only=True)`: never unrestricted pickle.
"""

from __future__ import annotations

import pickle
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

from focus_dagster.models.spec import CheckpointError, WeightsNotFoundError

SAFETENSORS_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")


@dataclass
class LoadReport:
    """What a checkpoint load did: the figures shown in the materialisation metadata."""

    model_id: str
    checkpoint: str
    weights_sha256: str
    model_tensors: int
    matched: int
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    shape_mismatched: list[str] = field(default_factory=list)
    ignored_missing: list[str] = field(default_factory=list)  # heads the model does not use (documented per family)

    @property
    def clean(self) -> bool:
        return not self.missing and not self.shape_mismatched

    def summary(self) -> dict:
        data = asdict(self)
        for key in ("missing", "unexpected", "shape_mismatched", "ignored_missing"):
            data[f"{key}_count"] = len(data[key])
            data[key] = data[key][:20]
        data["clean"] = self.clean
        return data


def read_weights(path: str | Path, model_id: str) -> dict:
    """A checkpoint's top-level mapping, read safely: safetensors, or torch.load with weights_only=True."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise WeightsNotFoundError(f"model {model_id!r}: no weights file at {path}.")
    if path.suffix in SAFETENSORS_SUFFIXES:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device="cpu")
        except SafetensorError as exc:
            raise unreadable_safetensors(model_id, path, exc) from exc
    try:
        loaded = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # the unpickler refuses anything but tensors and plain containers
        if is_pickle_refusal(exc):
            # PyTorch's message advises weights_only=False: it must not reach the user as the platform's advice.
            raise pickle_refused(model_id, str(path), exc) from None
        raise CheckpointError(
            f"model {model_id!r}: {path} cannot be read with torch.load(weights_only=True) ({type(exc).__name__}: "
            f"{torch_reason(exc)}). Convert it to safetensors, or re-save only its state dict; arbitrary pickles "
            "are never unpickled."
        ) from exc
    if not isinstance(loaded, Mapping):
        raise CheckpointError(f"model {model_id!r}: {path} holds a {type(loaded).__name__}, not a state dict.")
    return dict(loaded)


# PyTorch's refusal text mixes the reason with advice (retry with weights_only=False, allowlist the global,
# read the docs); the reason follows "WeightsUnpickler error:" when that marker is there.
_UNPICKLER_REASON = "WeightsUnpickler error:"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ADVICE = re.compile(
    r"weights_only|safe_globals|Check the documentation|Please file an issue|Weights only load failed|"
    r"can still be loaded|trusted source|trust the source|arbitrary code|two options",
    re.IGNORECASE,
)


def is_pickle_refusal(exc: BaseException) -> bool:
    """True when `exc` (or an error it was raised from) is the weights-only unpickler refusing a pickle."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, pickle.UnpicklingError) or "Weights only load failed" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def torch_reason(exc: BaseException) -> str:
    """Why PyTorch refused a file, without its advice (to set weights_only=False, to allowlist globals)."""
    text = _ANSI.sub("", str(exc))
    if _UNPICKLER_REASON in text:
        text = text.split(_UNPICKLER_REASON, 1)[1]
    kept = [
        sentence
        for paragraph in re.split(r"\n\s*\n|\n\t", text)
        for sentence in re.split(r"(?<=[.!?])\s+", paragraph.strip())
        if sentence and not _ADVICE.search(sentence)
    ]
    return " ".join(" ".join(kept).split()).rstrip(".") or type(exc).__name__


def pickle_refused(model_id: str, where: str, exc: BaseException) -> CheckpointError:
    """The platform's refusal of a weights file that is a pickle torch.load(weights_only=True) will not read."""
    return CheckpointError(
        f"model {model_id!r}: torch.load(weights_only=True) refuses {where} ({torch_reason(exc)}): it pickles "
        "more than tensors, or is no PyTorch checkpoint at all. The platform never loads weights with "
        "weights_only=False, whatever PyTorch's own message suggests: unpickling without that restriction runs "
        "any code the file holds. Convert the checkpoint to safetensors where you trust it (load it there and "
        "save its state dict with safetensors.torch.save_file, or save_pretrained(..., safe_serialization=True) "
        "for a hub folder), then point the spec's path at the converted weights."
    )


def unreadable_safetensors(model_id: str, path: Path, exc: BaseException) -> CheckpointError:
    """The platform's error for a safetensors file its library cannot parse: almost always a file cut short by an
    interrupted download or copy, which only a fresh copy mends."""
    size = f" ({path.stat().st_size} bytes)" if path.is_file() else ""
    return CheckpointError(
        f"model {model_id!r}: weights file {path}{size} cannot be read as safetensors ({exc}): it is truncated or "
        "damaged, as an interrupted download or copy leaves it. Download or copy it again from its source and "
        "compare its size and sha256 with the source's."
    )


def first_unreadable_safetensors(folder: Path) -> tuple[Path, BaseException] | None:
    """The first safetensors file of a folder whose header does not parse, with safetensors' reason; None when
    every one does. Reading a header costs a few bytes, not the tensors."""
    from safetensors import SafetensorError, safe_open

    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except SafetensorError as exc:
            return path, exc
    return None


def describe_keys(mapping: Mapping, limit: int = 12) -> str:
    """A short summary of a checkpoint's keys, for errors about a wrong format."""
    keys = list(mapping)
    shown = ", ".join(repr(k) for k in keys[:limit])
    return f"{len(keys)} top-level key(s): {shown}{', ...' if len(keys) > limit else ''}"


def select_state_dict(checkpoint: Mapping, keys: Iterable[str], model_id: str, path: str) -> dict:
    """The tensor mapping under the first of `keys` present (or the checkpoint itself when it is one)."""
    for key in keys:
        if key in checkpoint and isinstance(checkpoint[key], Mapping):
            return dict(checkpoint[key])
    if checkpoint and all(hasattr(v, "shape") for v in checkpoint.values()):
        return dict(checkpoint)
    raise CheckpointError(
        f"model {model_id!r}: {path} has none of the expected keys {list(keys)} and is not a plain state dict; "
        f"it has {describe_keys(checkpoint)}."
    )


def load_audited(
    model,
    state_dict: Mapping,
    *,
    model_id: str,
    checkpoint: str,
    weights_sha256: str,
    optional_prefixes: tuple[str, ...] = (),
    built: str | None = None,
    advice: Callable[[LoadReport], str] | None = None,
) -> LoadReport:
    """Load `state_dict` into `model` and audit it; raise unless every backbone tensor was filled.

    optional_prefixes: model tensors a family may legitimately leave at their initial values (e.g. a
    classification head the benchmark never uses); they are reported as `ignored_missing`.
    built: what the model is, as the error names it (e.g. "timm 'resnet18'"); advice: the fix the error
    suggests, written from the failed report (only called when the load fails).
    """
    own = model.state_dict()
    matched, mismatched, usable = [], [], {}
    for name, tensor in state_dict.items():
        if name in own:
            if tuple(own[name].shape) == tuple(tensor.shape):
                usable[name] = tensor
                matched.append(name)
            else:
                mismatched.append(f"{name}: checkpoint {tuple(tensor.shape)} vs model {tuple(own[name].shape)}")
    model.load_state_dict(usable, strict=False)
    missing_all = [name for name in own if name not in usable]
    ignored = [n for n in missing_all if n.startswith(optional_prefixes)] if optional_prefixes else []
    report = LoadReport(
        model_id=model_id,
        checkpoint=checkpoint,
        weights_sha256=weights_sha256,
        model_tensors=len(own),
        matched=len(matched),
        missing=[n for n in missing_all if n not in ignored],
        unexpected=[n for n in state_dict if n not in own],
        shape_mismatched=mismatched,
        ignored_missing=ignored,
    )
    if not report.clean:
        raise CheckpointError(mismatch_message(report, built, advice))
    return report


def mismatch_message(report: LoadReport, built: str | None, advice: Callable[[LoadReport], str] | None) -> str:
    """The audit's refusal: what was built, how much the checkpoint filled, the first tensors that did not fit,
    and what to change."""
    target = f"does not fit {built}" if built else "does not fit the model built for it"
    fix = advice(report) if advice else "check the spec's family (checkpoint layout) and architecture options."
    return (
        f"model {report.model_id!r}: checkpoint {report.checkpoint} {target}: filled only {report.matched} of "
        f"{report.model_tensors} model tensors; missing {len(report.missing)} (e.g. {report.missing[:5]}), "
        f"unexpected {len(report.unexpected)} (e.g. {report.unexpected[:5]}), shape mismatches "
        f"{len(report.shape_mismatched)} (e.g. {report.shape_mismatched[:3]}). A partial load is never accepted: {fix}"
    )
