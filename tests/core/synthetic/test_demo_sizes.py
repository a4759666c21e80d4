"""The default look-alikes are large enough for the fairness and graded-quality axes.

BRSET and mBRSET publish sex and quality grades, but the benchmark keeps about half of their images and the
keyed-hash split sends 40% of the patients to test. protocol.md skips a fairness group below 10 images and a
quality group below 5. Read and labelled as the assets do, the test splits of the default look-alikes (focus.yaml
without a `synthetic:` section, default seed) hold both sexes of both datasets and BRSET's inadequate grade at
those minimums; at 80 images each they do not, which is why the demo's spider plots had no such points.
"""

from __future__ import annotations

import pytest

from focus_dagster.config import parse_config
from focus_dagster.datasets import read_dataset
from focus_dagster.labels import harmonise
from focus_dagster.synthetic import synthesize

FAIRNESS_MINIMUM, QUALITY_MINIMUM = 10, 5  # protocol.md: fairness and image-quality groups


def _test_groups(tmp_path, per_dataset) -> dict[str, dict[str, int]]:
    """Per dataset, the test images of each sex and quality grade, after the benchmark's subset and split."""
    defaults = parse_config({}, tmp_path / "home").synthetic
    keys = ["brset", "mbrset"]
    synthesize(tmp_path / "data", keys, per_dataset=per_dataset, seed=defaults.seed, scale=0.03, workers=1)
    groups = {}
    for key in keys:
        read = read_dataset(key, tmp_path / "data" / key)
        labels = harmonise(key, read.records, read.quarantine, seed=defaults.seed).labels
        test = labels[labels["split"] == "test"]
        groups[key] = {**test["sex"].value_counts().to_dict(), **test["quality"].value_counts().to_dict()}
    return groups


def test_the_default_sizes_fill_both_sexes_and_brsets_inadequate_grade(tmp_path):
    groups = _test_groups(tmp_path, parse_config({}, tmp_path / "home").synthetic.per_dataset)
    for key in ("brset", "mbrset"):
        assert groups[key].get("F", 0) >= FAIRNESS_MINIMUM and groups[key].get("M", 0) >= FAIRNESS_MINIMUM, groups
    assert groups["brset"].get("inadequate", 0) >= QUALITY_MINIMUM, groups


@pytest.mark.parametrize("key", ["brset", "mbrset"])
def test_at_80_images_each_a_sex_falls_short(tmp_path, key):
    groups = _test_groups(tmp_path, 80)[key]
    assert min(groups.get("F", 0), groups.get("M", 0)) < FAIRNESS_MINIMUM, groups
