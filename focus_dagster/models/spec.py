"""Model specs: what a model is, where its weights are, and how it wants its images.

A spec is data, not code: the catalog lists the reference grid, a user's focus.yaml selects from it and
adds their own, and every number a model produces carries the spec's id and its weights hash.
"""

from __future__ import annotations

import math
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
INTERPOLATIONS = ("bicubic", "bilinear", "nearest")
# The fields a model's configuration, the catalog or focus.yaml can set, one by one.
PREPROCESS_FIELDS = ("size", "resize", "resize_to", "crop_pct", "interpolation", "mean", "std", "scale_only", "processor")


class ModelSpecError(FocusError):
    """A model spec that cannot be used as written."""


class WeightsNotFoundError(FocusError):
    """A model's weights are not on this machine (nothing is ever downloaded at run time)."""


class CheckpointError(FocusError):
    """A checkpoint that does not fit its model: wrong format, missing or unexpected tensors."""


@dataclass(frozen=True)
class Preprocess:
    """How images reach the model, as resolved from the model's own configuration, the catalog and focus.yaml.

    resize_crop: shorter side to `resize_to`, centre crop `size` (timm's `center` crop mode);
    squash: both sides to `resize_to` (default `size`), centre crop `size` (timm's `squash`);
    pad_longest: longer side to `size`, zero-padded square (timm's `border` with a black fill; FLAIR).
    `crop_pct`, timm's way to say it, sets the resize side to floor(size / crop_pct) instead. `scale_only`: divide by 255, no mean/std (FLAIR).
    `processor`: a folder whose Hugging Face image processor computes the pixels itself (the values above then
    describe what it does). `sources` says where each value came from (never part of equality).
    """

    size: int = 224
    resize: str = "resize_crop"
    resize_to: int | None = 256
    crop_pct: float | None = None
    interpolation: str = "bicubic"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    scale_only: bool = False
    processor: str | None = None
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.resize not in RESIZE_POLICIES:
            raise ModelSpecError(f"preprocess.resize must be one of {RESIZE_POLICIES}, got {self.resize!r}")
        if self.interpolation not in INTERPOLATIONS:
            raise ModelSpecError(f"preprocess.interpolation {self.interpolation!r} is not supported; "
                                 f"one of {INTERPOLATIONS}")
        if self.crop_pct is not None and not 0 < self.crop_pct <= 1:
            raise ModelSpecError(f"preprocess.crop_pct must be in (0, 1], got {self.crop_pct}")
        if self.scale_size < self.size:
            raise ModelSpecError(f"preprocess.resize_to {self.resize_to} is smaller than the crop size {self.size}")

    @property
    def scale_size(self) -> int:
        """The side the resize aims at before the centre crop (timm's floor(size / crop_pct))."""
        if self.resize == "pad_longest":
            return self.size
        if self.crop_pct is not None:
            return math.floor(self.size / self.crop_pct)
        return self.resize_to or self.size

    @property
    def transform(self) -> str:
        """Which library computes the pixels: the model's image processor, or timm's eval transform."""
        return "image_processor" if self.processor else "timm"

    def values(self) -> dict:
        """Everything that decides the model's input, by name (what fingerprints and the lineage record)."""
        values = {name: getattr(self, name) for name in PREPROCESS_FIELDS}
        values.update(resize_to=self.scale_size, crop_pct=self.crop_pct or round(self.size / self.scale_size, 6),
                      transform=self.transform)
        return {name: list(value) if isinstance(value, tuple) else value for name, value in values.items()}

    def described(self) -> dict:
        """values() with the source of each value (model config / catalog / focus.yaml / platform default)."""
        sources = {name: source for name, source in self.sources if name != "processor" or self.processor}
        return {"values": self.values(), "sources": sources}

    def with_sources(self, source: str, names=None) -> Preprocess:
        """A copy whose fields `names` (default: all) are said to come from `source`."""
        names = PREPROCESS_FIELDS if names is None else tuple(names)
        merged = dict(self.sources) | {name: source for name in names}
        return replace(self, sources=tuple(sorted(merged.items())))


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
