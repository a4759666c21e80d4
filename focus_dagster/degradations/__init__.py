"""Graded fundus degradations for the image-quality axis: what a blurred, dim, hazy, compressed or noisy photograph
does to a model, on every dataset, whether or not its publisher graded image quality.

`degrade(image, name, severity, key)` takes a decoded photograph (H x W x 3 uint8, before any model's own
preprocessing) and returns it degraded, as uint8:
- inside the fundus disc only (fundus.py), the black surround left byte for byte as it was;
- seeded by the image's `key` (its content hash or id), the degradation and the severity, so the same image at the
  same severity gives the same bytes in every run and on every device;
- spatial parameters scaled by the disc's diameter over the 224-px reference the severities were defined on.
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
