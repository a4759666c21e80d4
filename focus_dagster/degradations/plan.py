"""Which degradations the image-quality axis applies, at which severities: the `degradations:` block of focus.yaml.

    degradations:
      types: [defocus_blur, haze, surround_noise]   # default: defocus_blur, uneven_illumination
      severities: [1, 3, 5]                         # default: 3

`types: all` is every registered degradation but the controls (surround_noise paints only the black surround, so
it checks a model rather than degrading the retina; it runs only when named). `degradations: false` or
`types: []` asks for none: no robustness work at all. The embedded default is small on purpose: two
degradations of different families (blur, illumination) at the middle severity, so that `make demo` stays within
30% of its time without them. Measured on the 2-core machine by bench/demo_robustness.py (each plan twice,
alternated, fresh homes): without degradations 131.4 s, this default 162.6 s, 1.24x; with JPEG compression as a
third, 1.39x (129.2 s against 179.6 s). About two thirds of the added time is fixed per model and dataset (the
extra steps and their robustness rows), a third the model's forward on each degraded copy of the test images.
Curves over severities and the full registry are one `severities: [1, 2, 3, 4, 5]` and `types: all` away.

The plan keeps the order the file gives (types outer, severities inner) and drops nothing: a name the registry
does not have, a severity outside 1-5, or one listed twice is an error naming its key path and what exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from focus_dagster.config_schema import DegradationsSection, validated
from focus_dagster.degradations.registry import DEGRADATIONS, REGISTRY_VERSION, SEVERITIES
from focus_dagster.errors import ConfigError

DEFAULT_TYPES = ("defocus_blur", "uneven_illumination")
DEFAULT_SEVERITIES = (3,)
ALL = "all"  # `types: all`: every registered degradation that is not a control


@dataclass(frozen=True)
class DegradationPlan:
    """The degradations to apply (registry names, in the order they run) and the severities of each."""

    types: tuple[str, ...] = DEFAULT_TYPES
    severities: tuple[int, ...] = DEFAULT_SEVERITIES

    @property
    def is_off(self) -> bool:
        """No degradation asked for: the image-quality axis does no work."""
        return not self.types

    def variants(self) -> list[tuple[str, int]]:
        """Every (type, severity) of the plan: types outer, severities inner, each in the plan's order."""
        return [(name, severity) for name in self.types for severity in self.severities]

    def to_document(self) -> dict:
        """The plan as focus.yaml writes it: `degradation_plan(plan.to_document(), where)` gives it back."""
        return {"types": list(self.types), "severities": list(self.severities)}


def non_control_types() -> tuple[str, ...]:
    """What `types: all` means: the registry's degradations in registry order, controls left out."""
    return tuple(name for name, spec in DEGRADATIONS.items() if not spec.control)


def degradation_plan(raw: Any, where: str) -> DegradationPlan:
    """The `degradations:` block validated: its shape by the schema (DegradationsSection), its names and
    severities by the registry. None is the default plan; false (or `types: []`) is the plan with none."""
    if raw is None:
        return DegradationPlan()
    if raw is False:
        return DegradationPlan(types=())
    section = validated(DegradationsSection, raw, where, "degradations")
    types = _types(section.types)
    severities = DEFAULT_SEVERITIES if section.severities is None else tuple(section.severities)
    mistakes = _type_mistakes(types) + _severity_mistakes(severities)
    if mistakes:
        raise ConfigError(f"{where}: {mistakes[0]}" if len(mistakes) == 1
                          else f"{where}:\n  " + "\n  ".join(mistakes))
    return DegradationPlan(types=types, severities=severities)


def _types(written: str | list[str] | None) -> tuple[str, ...]:
    """`types:` as names: left out, the default; `all`, the registry's non-controls; a list, as written."""
    if written is None:
        return DEFAULT_TYPES
    return non_control_types() if written == ALL else tuple(written)


def _type_mistakes(types: tuple[str, ...]) -> list[str]:
    """One line per unknown or repeated name, each with its key path (as the schema's errors write them)."""
    registered = ", ".join(f"{name} (a control)" if spec.control else name for name, spec in DEGRADATIONS.items())
    mistakes = []
    for index, name in enumerate(types):
        if name not in DEGRADATIONS:
            mistakes.append(f"degradations.types.{index}: unknown degradation {name!r}; the registry "
                            f"({REGISTRY_VERSION}) has {registered}; or write `types: all` for every one but "
                            "the controls")
        elif name in types[:index]:
            mistakes.append(f"degradations.types.{index}: {name!r} is listed twice (first as degradations.types."
                            f"{types.index(name)}); list each degradation once")
    return mistakes


def _severity_mistakes(severities: tuple[int, ...]) -> list[str]:
    """One line per severity outside the registry's scale or repeated, each with its key path."""
    scale = ", ".join(str(severity) for severity in SEVERITIES)
    mistakes = []
    for index, severity in enumerate(severities):
        if severity not in SEVERITIES:
            mistakes.append(f"degradations.severities.{index}: severity {severity} is not one of {scale} "
                            "(1: barely visible, 5: a grader's \"inadequate\")")
        elif severity in severities[:index]:
            mistakes.append(f"degradations.severities.{index}: severity {severity} is listed twice (first as "
                            f"degradations.severities.{severities.index(severity)}); list each severity once")
    return mistakes
