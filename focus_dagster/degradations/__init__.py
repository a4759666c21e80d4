"""Graded fundus degradations for the image-quality axis: what a blurred, dim, hazy, compressed or noisy photograph
does to a model, on every dataset, whether or not its publisher graded image quality.

`degrade(image, name, severity, key)` takes a photograph's pixels (H x W x 3 uint8) and returns them degraded, as
uint8:
- inside the fundus disc only (fundus.py), the black surround left byte for byte as it was;
- seeded by the image's `key` (its content hash or id), the degradation and the severity, so the same image at the
  same severity gives the same bytes in every run and on every device;
- spatial parameters scaled by the disc's diameter over the 224-px reference the severities were defined on.

The batched engine applies a degradation to each image's clean pixels on the model's grid: after the model's
library has resized (and cropped) the decoded photograph, before its normalisation (inference/engine.py). There,
and not on the photograph at full size:
- the published severities are defined on images of that size (MedMNIST-C and ImageNet-C corrupt 224-px
  images): at full size, a JPEG block or a noise draw per pixel is averaged away by the 9-19x downscale that
  follows, and the same severity would mean less on IDRiD's 4,288-px photographs than on BRSET's 2,048-px ones;
- an image is decoded once for every degradation and severity (its clean pixels are in the pixel cache), and a
  degradation costs what a 224-px image costs: 36 to 140 times fewer pixels than BRSET's and IDRiD's photographs
  (bench/degradations.py measures both).
Each model's degraded images are therefore its own grid's, with the same physical extent of blur, grain and
shadow (every spatial parameter is scaled by the disc that grid shows).
"""

from __future__ import annotations

from focus_dagster.degradations.registry import (
    DEGRADATIONS,
    FAMILIES,
    REGISTRY_VERSION,
    SEVERITIES,
    Degradation,
    DegradationError,
    degradation,
)

__all__ = ["DEGRADATIONS", "FAMILIES", "REGISTRY_VERSION", "SEVERITIES", "Degradation", "DegradationError",
           "Degrading", "degradation", "degrade", "seed_for"]
_APPLYING = ("Degrading", "degrade", "seed_for")  # in apply.py, which imports torch: loaded when first asked for


def __getattr__(name: str):
    if name in _APPLYING:
        from focus_dagster.degradations import apply

        return getattr(apply, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
