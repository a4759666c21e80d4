"""Applying a degradation: `degrade` on one image's pixels, `Degrading` as the batched engine applies it.

Kept apart from the registry so that reading the configuration (which validates names against the registry)
never imports torch."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from focus_dagster.degradations import ops
from focus_dagster.degradations.fundus import Disc, find_disc
from focus_dagster.degradations.registry import REGISTRY_VERSION, DegradationError, degradation


def seed_for(key: str, name: str, severity: int) -> int:
    """The seed of one image's degradation: the same key, degradation, severity and registry give the same draw."""
    digest = hashlib.sha256(f"{REGISTRY_VERSION}|{name}|{severity}|{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def degrade(image: np.ndarray, name: str, severity: int, key: str, device: str | torch.device = "cpu") -> np.ndarray:
    """`image` (H x W x 3 uint8) with degradation `name` at `severity` (1-5) applied; see the package docstring."""
    spec = degradation(name)
    value = spec.value(severity)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise DegradationError(f"degradation {name!r} takes an H x W x 3 uint8 image, got {image.dtype} "
                               f"{image.shape}.")
    disc = find_disc(image)
    generator = torch.Generator().manual_seed(seed_for(key, name, severity))
    clean = torch.from_numpy(image.copy()).to(device).permute(2, 0, 1).float() / 255
    degraded = OPERATIONS[spec.name](clean, value, disc, generator)
    out = (degraded.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()
    inside = disc.mask()
    keep = ~inside if spec.region == "disc" else inside
    out[keep] = image[keep]
    return out


@dataclass(frozen=True)
class Degrading:
    """One degradation at one severity, as the batched engine applies it to every image of a run, on the
    model's pixel grid (focus_dagster/inference/engine.py, `Alteration`): `id` is part of its pixel-cache and
    shard keys."""

    name: str
    severity: int

    def __post_init__(self) -> None:
        degradation(self.name).value(self.severity)  # an unknown name or severity fails here, before any image

    @property
    def id(self) -> str:
        return f"{REGISTRY_VERSION}/{self.name}/{self.severity}"

    def __call__(self, image: np.ndarray, key: str) -> np.ndarray:
        return degrade(image, self.name, self.severity, key)


def _grain(disc: Disc) -> int:
    return max(1, round(disc.scale))


# Each registered degradation's operation: (image, value at the severity, disc, seeded generator) -> image.
OPERATIONS = {
    "defocus_blur": lambda image, value, disc, _: ops.defocus_blur(image, value[0] * disc.scale,
                                                                    value[1] * disc.scale),
    "underexposure": lambda image, value, _disc, _: ops.brightness(image, value),
    "uneven_illumination": ops.uneven_illumination,
    "haze": lambda image, value, disc, _: ops.haze(image, value, disc),
    "contrast_loss": lambda image, value, _disc, _: ops.contrast(image, value),
    "jpeg_compression": lambda image, value, _disc, _: ops.jpeg(image, value),
    "sensor_noise": lambda image, value, disc, generator: ops.gaussian_noise(image, value, _grain(disc), generator),
    "surround_noise": lambda image, value, disc, generator: ops.gaussian_noise(image, value, _grain(disc), generator),
    "edge_shadow": lambda image, value, disc, _: ops.vignetting(image, value, disc),
}
