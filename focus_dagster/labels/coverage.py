"""Which group attributes each dataset's publisher provides, and whether the test images carry them.

The fairness axis groups test images by sex, age and camera, the quality axis by image quality. A dataset
either publishes an attribute (then nearly every test image must carry it: a mapping that loses it, such as
a sex code read the wrong way, must stop the numbers grouped by it rather than shrink their groups silently)
or does not (then the attribute is "not applicable" there, and the fairness rows say so). From the datasets'
documentation (shared datasets.md, "Metadata for the fairness and quality axes"):

    age + sex: BRSET, mBRSET, PAPILA;  quality: BRSET, mBRSET;  camera: BRSET, mBRSET, REFUGE (by split).

Each attribute is judged on its own: one below the floor withholds the values of the rows grouped by it (they
stay, null, with the reason `withheld` gives), and the others are reported as usual. Only when the dataset
publishes attributes and none reaches the floor is the attribute table at fault as a whole (`fault`): the
mapping lost the metadata, and every fairness and quality number of the dataset waits.
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
# The checks of group_attributes: the verdict per attribute, and the gate of the attribute table as a whole. The
# first names the reason of every withheld row, so that a row says which check withheld it.
COVERAGE_CHECK = "attribute_coverage"
USABLE_CHECK = "attributes_usable"
# The attributes each axis groups by (evaluation/tables.py: sex, the age splits and camera; quality).
AXIS_ATTRIBUTES = {"fairness": ("sex", "age", "camera"), "quality": ("quality",)}


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
        """Every published attribute reaches the floor."""
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
            "failing": self.failing, "fault": self.fault,
        })

    def shortfall(self, attribute: str) -> str:
        """'age is set on 82.8% of the test images (floor 90%)'."""
        share = self.shares[attribute]
        where = f"is set on {share:.1%} of the test images" if share is not None else "has no test image to be set on"
        return f"{attribute} {where} (floor {COVERAGE_FLOOR:.0%})"

    def withheld(self) -> dict[str, str]:
        """attribute -> why the rows grouped by it carry no value: the published attributes below the floor."""
        return {a: f"{COVERAGE_CHECK}: {self.shortfall(a)}" for a in self.failing}

    @property
    def fault(self) -> str | None:
        """Why the attribute table cannot serve any fairness or quality number of the dataset, or None: the dataset
        publishes attributes and every one is below the floor (the mapping lost the metadata as a whole)."""
        expected = published(self.dataset)
        if not expected or len(self.failing) < len(expected):
            return None
        return (f"every attribute {self.dataset} publishes is below the floor: "
                f"{'; '.join(self.shortfall(a) for a in self.failing)}. The label mapping lost them; fix the reader "
                f"or rule and rematerialise harmonised_labels. Every fairness and quality number of {self.dataset} "
                "waits until one of them passes.")

    def failure_message(self) -> str:
        """The verdict of the attributes below the floor, what happens to their rows, and what to do."""
        flowing = [a for a in published(self.dataset) if a not in self.failing]
        rest = f"; the rows grouped by {', '.join(flowing)} are reported as usual." if flowing else "."
        return (f"{self.dataset}: {'; '.join(self.shortfall(a) for a in self.failing)}. The label mapping lost "
                f"values; fix the reader or rule and rematerialise harmonised_labels. Until then the fairness and "
                f"quality rows grouped by {', '.join(self.failing)} are kept with no value and this reason{rest}")


def axis_notes(withheld: dict[str, str] | None, fault: str | None) -> dict[str, list[str]]:
    """axis -> what the checks of group_attributes say about its rows (`withheld` and `fault` as recorded with
    group_attributes): the reasons of the attributes it groups by that were withheld, or the gate's fault."""
    if fault:
        return {axis: [f"{USABLE_CHECK}: {fault}"] for axis in AXIS_ATTRIBUTES}
    withheld = withheld or {}
    return {axis: [withheld[a] for a in attributes if a in withheld] for axis, attributes in AXIS_ATTRIBUTES.items()}


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
