"""Model specs: what a model is, where its weights are, and how it wants its images.

A spec is data, not code: the catalog lists the reference grid, a user's focus.yaml selects from it and
adds their own, and every number a model produces carries the spec's id and its weights hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from focus_dagster.errors import FocusError

INTERFACES = ("vm", "vlm", "mllm")
DOMAINS = ("general", "ophthalmic", "medical", "pipeline-check")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
RESIZE_POLICIES = ("resize_crop", "squash", "pad_longest")


class ModelSpecError(FocusError):
    """A model spec that cannot be used as written."""


class WeightsNotFoundError(FocusError):
    """A model's weights are not on this machine (nothing is ever downloaded at run time)."""


class CheckpointError(FocusError):
    """A checkpoint that does not fit its model: wrong format, missing or unexpected tensors."""


@dataclass(frozen=True)
class Preprocess:
    """How images reach the model.

    resize_crop: shorter side to `resize_to`, centre crop `size` (timm / RETFound style);
    squash: straight to `size` x `size`; pad_longest: longer side to `size`, zero-padded square (FLAIR).
    `scale_only`: divide by 255 and apply no mean/std (FLAIR).
    """

    size: int = 224
    resize: str = "resize_crop"
    resize_to: int | None = 256
    interpolation: str = "bicubic"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    scale_only: bool = False

    def __post_init__(self) -> None:
        if self.resize not in RESIZE_POLICIES:
            raise ModelSpecError(f"preprocess.resize must be one of {RESIZE_POLICIES}, got {self.resize!r}")
        if self.interpolation not in ("bicubic", "bilinear", "nearest"):
            raise ModelSpecError(f"preprocess.interpolation {self.interpolation!r} is not supported")


@dataclass(frozen=True)
class ModelSpec:
    """One model of the grid.

    id: the platform's name for it (partition key); family: the loader that reads its checkpoint format;
    source: the hub id as published (or a local path); path: where its weights are on this machine (a
    file or folder; a hub id alone is looked up in the local hub cache, offline); pooling: how an image
    embedding is read off the backbone; pretrained_on: FOCUS datasets the model saw in pretraining (its
    results there are in-distribution).
    """

    id: str
    interface: str
    domain: str
    family: str
    source: str
    revision: str | None = None
    path: str | None = None
    preprocess: Preprocess = field(default_factory=Preprocess)
    pooling: str = "cls"
    dtype: str = "float32"
    pretrained_on: tuple[str, ...] = ()
    trust_remote_code: bool = False
    options: dict = field(default_factory=dict)  # family-specific architecture settings
    notes: str = ""

    def __post_init__(self) -> None:
        if self.interface not in INTERFACES:
            raise ModelSpecError(f"model {self.id!r}: interface must be one of {INTERFACES}, got {self.interface!r}")
        if self.domain not in DOMAINS:
            raise ModelSpecError(f"model {self.id!r}: domain must be one of {DOMAINS}, got {self.domain!r}")

    @property
    def is_pipeline_check(self) -> bool:
        """Seeded toy models that test the plumbing: their numbers say nothing about retinal AI."""
        return self.domain == "pipeline-check"

    def with_path(self, path: str | Path) -> ModelSpec:
        return replace(self, path=str(path))

    def contamination(self, dataset: str) -> bool:
        """True when the model saw `dataset` in pretraining (results there are not out-of-distribution)."""
        return dataset in self.pretrained_on
