"""Which group attributes each dataset's publisher provides, and whether the test images carry them.

The fairness axis groups test images by sex, age and camera, the quality axis by image quality. A dataset
either publishes an attribute (then nearly every test image must carry it: a mapping that loses it, such as
a sex code read the wrong way, must stop the fairness numbers rather than shrink their groups silently) or
does not (then the attribute is "not applicable" there, and the fairness rows say so). From the datasets'
documentation (shared datasets.md, "Metadata for the fairness and quality axes"):

    age + sex: BRSET, mBRSET, PAPILA;  quality: BRSET, mBRSET;  camera: BRSET, mBRSET, REFUGE (by split).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from focus_dagster.labels import gx

# attribute -> the datasets whose publisher provides it
PUBLISHED = {
    "age": ("brset", "mbrset", "papila"),
    "sex": ("brset", "mbrset", "papila"),
    "quality": ("brset", "mbrset"),
    "camera": ("brset", "mbrset", "refuge"),
}
ATTRIBUTES = tuple(PUBLISHED)
# The share of test images that must carry a published attribute.
COVERAGE_FLOOR = 0.9
NOT_APPLICABLE = "not applicable"


def published(dataset: str) -> tuple[str, ...]:
    """The group attributes the dataset's publisher provides (a declared dataset: those its declaration maps)."""
    from focus_dagster.datasets.registry import declaration

    declared = declaration(dataset)
    if declared is not None:
        return tuple(a for a in ATTRIBUTES if a in declared.attributes.published())
    return tuple(attribute for attribute, datasets in PUBLISHED.items() if dataset in datasets)


def not_applicable_reason(dataset: str, attribute: str) -> str:
    from focus_dagster.datasets.registry import declaration

    where = "its focus.yaml declaration" if declaration(dataset) is not None else "datasets.md"
    return f"{NOT_APPLICABLE}: {dataset} does not publish {attribute} ({where})"


@dataclass
class Coverage:
    """Per attribute: published or not, the share of test images with a value, and the verdict."""

    dataset: str
    test_images: int
    shares: dict[str, float | None]  # attribute -> share of test images with a value (None: no test image)
    failing: list[str] = field(default_factory=list)  # published attributes below the floor
    expectations: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failing

    def usable(self) -> dict[str, bool]:
        """attribute -> whether the axes group by it (published and covered)."""
        return {a: a in published(self.dataset) and a not in self.failing for a in ATTRIBUTES}

    def summary(self) -> dict:
        return gx.jsonable({
            "dataset": self.dataset, "test_images": self.test_images, "floor": COVERAGE_FLOOR,
            "attributes": {a: ({"published": True, "share": self.shares[a], "passed": a not in self.failing}
                               if a in published(self.dataset) else {"published": False,
                                                                       "verdict": not_applicable_reason(self.dataset, a)})
                           for a in ATTRIBUTES},
            "failing": self.failing,
        })

    def failure_message(self) -> str:
        parts = [f"{a} on {self.shares[a]:.0%}" if self.shares[a] is not None else f"{a} (no test image)"
                 for a in self.failing]
        return (f"{self.dataset} publishes {', '.join(self.failing)}, but the test images carry {', '.join(parts)} "
                f"(floor {COVERAGE_FLOOR:.0%}): the label mapping lost it; fix the reader or rule and rematerialise "
                "harmonised_labels. Fairness and quality numbers of this dataset wait until it passes.")


def check_attribute_coverage(dataset: str, labels: pd.DataFrame) -> Coverage:
    """Great Expectations: every published attribute is set on at least COVERAGE_FLOOR of the test images."""
    test = labels[labels["split"] == "test"].reindex(columns=list(ATTRIBUTES))
    expected = published(dataset)
    if not expected:
        return Coverage(dataset, len(test), {a: _share(test, a) for a in ATTRIBUTES})
    verdicts = gx.validate("attributes", test, [
        gx.expect().ExpectColumnValuesToNotBeNull(column=a, mostly=COVERAGE_FLOOR) for a in expected])
    failing = [a for a, verdict in zip(expected, verdicts, strict=True) if not verdict.success or test.empty]
    return Coverage(dataset, len(test), {a: _share(test, a) for a in ATTRIBUTES}, failing,
                    [v.entry for v in verdicts])


def _share(frame: pd.DataFrame, column: str) -> float | None:
    return float(frame[column].notna().mean()) if len(frame) else None
