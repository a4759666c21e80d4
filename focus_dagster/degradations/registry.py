"""The fundus degradations as data: a versioned registry, five severities each, with where every number comes from.

Severities 1-5 follow MedMNIST-C's set for fundus photographs (RetinaMNIST; Di Salvo et al. 2024) where it has
the degradation: defocus blur, under-exposure, contrast loss, JPEG compression, Gaussian sensor noise. Their
values are defined on 224-px images, and the platform applies them on the model's pixel grid (degradations/
__init__.py says why); a spatial value (a blur radius, a noise grain) is scaled by the fundus disc's diameter /
224, so that severity 3 means the same to a model that sees 224 px and to one that sees 448. Uneven illumination, haze and the edge shadow are not in that set (MedMNIST-C's fundus set has no
illumination or cataract model); their forms follow Shen et al. 2020 ("Modeling and enhancing low-quality retinal
fundus images") and Peli's cataract model, and their five values are this registry's own, spread from barely
visible (1) to a grader's "inadequate" (5). Any change to a value or a form is a new REGISTRY_VERSION.

`surround_noise` is a control, not a degradation of the retina: noise painted only in the black surround, where
no lesion is, so a model that does not look there loses nothing (its drop must cover zero).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from focus_dagster.errors import FocusError

# 2: applied on the model's pixel grid (before: on the decoded photograph at full size, then resized)
REGISTRY_VERSION = "focus-degradations-2"
SEVERITIES = (1, 2, 3, 4, 5)
MEDMNIST_C = "MedMNIST-C, RetinaMNIST set (Di Salvo et al. 2024, medmnistc corruptions registry)"
OWN = "this registry's own five values (no published set has this degradation for fundus photographs)"


class DegradationError(FocusError):
    """A degradation or severity the registry does not have."""


@dataclass(frozen=True)
class Degradation:
    """One degradation: its family (for the robustness curves' panels), the parameter per severity 1-5 and what
    it means, where the values and the form come from, and the code that applies it."""

    name: str
    family: str
    parameter: str
    values: tuple[Any, ...]
    values_source: str
    form: str
    implementation: str
    region: str = "disc"  # where it paints: "disc" (the retina) or "surround" (the control)
    control: bool = False

    def value(self, severity: int) -> Any:
        if severity not in SEVERITIES:
            raise DegradationError(f"degradation {self.name!r}: severity {severity!r} is not one of {SEVERITIES}.")
        return self.values[severity - 1]

    def describe(self, severity: int) -> dict[str, Any]:
        """What a degraded number's lineage records: registry version, name, severity and its parameter."""
        value = self.value(severity)
        return {"registry": REGISTRY_VERSION, "degradation": self.name, "family": self.family, "severity": severity,
                "parameter": self.parameter, "value": list(value) if isinstance(value, tuple) else value,
                "values_source": self.values_source, "form": self.form, "implementation": self.implementation,
                "region": self.region}


DEGRADATIONS: dict[str, Degradation] = {d.name: d for d in (
    Degradation("defocus_blur", "blur", "(disk radius, alias sigma) in reference pixels",
                ((4, 0.1), (5, 0.2), (6, 0.3), (7, 0.4), (8, 0.5)), MEDMNIST_C,
                "ImageNet-C defocus: a flat disk kernel with a Gaussian-smoothed edge",
                "own (FFT convolution; torchvision has no disk blur), tested against scipy.ndimage.convolve"),
    Degradation("underexposure", "illumination", "brightness factor", (0.9, 0.8, 0.7, 0.6, 0.5), MEDMNIST_C,
                "every value times the factor (MedMNIST-C brightness_down)",
                "torchvision adjust_brightness (= PIL ImageEnhance.Brightness)"),
    Degradation("uneven_illumination", "illumination", "darkening of the far rim",
                (0.2, 0.35, 0.5, 0.65, 0.8), OWN,
                "a linear fall-off across the disc from a random side (Shen et al. 2020, light transmission "
                "disturbance)", "own, tested against the gain it must leave on a flat disc"),
    Degradation("haze", "contrast", "transmission of fine detail", (0.85, 0.7, 0.55, 0.4, 0.25), OWN,
                "cataract veil: sharp core plus a Gaussian halo of a tenth of the disc diameter (Peli's model; "
                "Shen et al. 2020)", "own (halo blurred at 1/8 size by torchvision gaussian_blur), tested against "
                "scipy.ndimage.gaussian_filter"),
    Degradation("contrast_loss", "contrast", "contrast factor", (0.9, 0.8, 0.7, 0.6, 0.4), MEDMNIST_C,
                "a blend with the image's mean grey (MedMNIST-C contrast_down)",
                "torchvision adjust_contrast (= PIL ImageEnhance.Contrast)"),
    Degradation("jpeg_compression", "compression", "JPEG quality", (30, 25, 20, 10, 5), MEDMNIST_C,
                "encoded and decoded at the quality on the model's pixel grid (MedMNIST-C compresses its 224-px images)",
                "torchvision jpeg (libjpeg-turbo; nvJPEG on a GPU)"),
    Degradation("sensor_noise", "noise", "standard deviation on 0-1, per reference pixel",
                (0.04, 0.08, 0.12, 0.16, 0.20), MEDMNIST_C,
                "additive Gaussian noise (MedMNIST-C gaussian_noise), one draw per reference pixel",
                "own (torch.randn from a seeded generator), tested by its measured spread"),
    Degradation("edge_shadow", "artefact", "darkening at the rim", (0.2, 0.35, 0.5, 0.65, 0.8), OWN,
                "vignetting from a small pupil: loss growing as the fourth power of the distance from the centre",
                "own, tested against the gain it must leave on a flat disc"),
    Degradation("surround_noise", "control", "standard deviation on 0-1, per reference pixel",
                (0.04, 0.08, 0.12, 0.16, 0.20), MEDMNIST_C,
                "sensor_noise painted only outside the fundus disc", "as sensor_noise", region="surround",
                control=True),
)}
FAMILIES = tuple(dict.fromkeys(d.family for d in DEGRADATIONS.values()))


def degradation(name: str) -> Degradation:
    """The registered degradation `name`, or an error listing the ones there are."""
    try:
        return DEGRADATIONS[name]
    except KeyError:
        raise DegradationError(f"unknown degradation {name!r}: the registry ({REGISTRY_VERSION}) has "
                               f"{', '.join(DEGRADATIONS)}.") from None
