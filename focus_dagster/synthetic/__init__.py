"""Synthetic look-alikes of the ten FOCUS datasets, written in their published layouts.

Each look-alike has the publisher's file and folder names, columns, codes and quirks, so the real
readers run on it unchanged. Its images are rendered fundus photographs whose content follows each
row's labels (DR grade -> lesions, edema -> macular exudates, glaucoma / cup-disc flag -> enlarged cup,
quality flags -> blur, uneven light, artifacts) with a per-camera signature. Deterministic by seed.

This is the platform's embedded default (used when no real dataset is configured) and what the tests
run on. Two effects are planted on purpose so that the fairness and quality axes can be validated
against a known answer: see PLANTED_EFFECTS.
"""

from __future__ import annotations

import importlib
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Iterable, Mapping

from focus_dagster.config_schema import DEFAULT_IMAGES, LOOKALIKE_DEFAULT
from focus_dagster.datasets.registry import DATASET_KEYS
from focus_dagster.errors import ConfigError, UnknownDatasetError
from focus_dagster.files import atomic_path
from focus_dagster.synthetic.common import (
    DEFAULT_SCALE,
    SynthManifest,
    dataset_rng,
    render_jobs,
)

DEFAULT_PER_DATASET = DEFAULT_IMAGES  # focus.yaml's default `synthetic.per_dataset` (config_schema says why)
MANIFEST_NAME = ".focus-synthetic.json"

PLANTED_EFFECTS = {
    "sex_lesion_contrast": (
        "BRSET: lesions of women (patient_sex == 2) are rendered at 45% of the contrast used for men, so "
        "DR is harder to see for women; a sex gap in DR sensitivity/AUROC on BRSET is expected."
    ),
    "quality_accuracy_loss": (
        "BRSET and mBRSET: images flagged inadequate (any BRSET quality flag = 2, mBRSET final_quality = "
        "no) are heavily blurred, unevenly lit and carry artifacts that hide small lesions; accuracy on "
        "inadequate images is expected to be lower than on adequate ones."
    ),
}


def synthesize(
    out: str | Path,
    datasets: Iterable[str] | None = None,
    per_dataset: int | Mapping[str, int] = DEFAULT_PER_DATASET,
    seed: int = 0,
    scale: float = DEFAULT_SCALE,
    workers: int | None = None,
) -> dict[str, SynthManifest]:
    """Write look-alikes of `datasets` (default: all ten) under `out/<key>/`, replacing existing copies;
    `per_dataset`: images of each, one number for all or per dataset key (`images_for`).

    Each dataset is written to a temporary folder and moved into place when complete, so a reader never
    sees half a dataset. Returns the manifest of each dataset: the counts a reader must reproduce.
    """
    keys = list(datasets) if datasets is not None else list(DATASET_KEYS)
    unknown = [k for k in keys if k not in DATASET_KEYS]
    if unknown:
        raise UnknownDatasetError(f"no look-alike for {unknown}: look-alikes exist of the published datasets only "
                                  f"({', '.join(DATASET_KEYS)}); a dataset declared in focus.yaml is read from its "
                                  "own root")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = {key: images_for(per_dataset, key) for key in keys}
    plans = {}
    with ExitStack() as staging:  # each dataset is written into a partial folder, renamed into place at the end
        for key in keys:
            partial = staging.enter_context(atomic_path(out / key))
            partial.mkdir(parents=True)
            writer = importlib.import_module(f"focus_dagster.synthetic.{key}")
            plans[key] = (partial, writer.plan(partial, sizes[key], dataset_rng(seed, key), scale))
        # One pool for the images of all datasets, so that small datasets do not leave cores idle.
        render_jobs([(partial, job) for partial, p in plans.values() for job in p.jobs], workers)
        for key, (partial, plan) in plans.items():
            record = _manifest_record(plan.manifest, seed, sizes[key], scale)
            (partial / MANIFEST_NAME).write_text(json.dumps(record, indent=1))
            plan.manifest.root = out / key
    manifests = {key: plan.manifest for key, (_, plan) in plans.items()}
    return manifests


def images_for(per_dataset: int | Mapping[str, int], key: str) -> int:
    """The images of `key`'s look-alike: `per_dataset` itself, or its entry for `key` (else its `default`, else
    80)."""
    if isinstance(per_dataset, Mapping):
        number = per_dataset.get(key, per_dataset.get(LOOKALIKE_DEFAULT, DEFAULT_IMAGES[LOOKALIKE_DEFAULT]))
    else:
        number = per_dataset
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ConfigError(f"per_dataset for {key} must be a whole number, at least 1, got {number!r}")
    return number


def _manifest_record(manifest: SynthManifest, seed: int, per_dataset: int, scale: float) -> dict:
    record = manifest.summary()
    record.pop("root")
    record.update(seed=seed, per_dataset=per_dataset, scale=scale, planted_effects=sorted(PLANTED_EFFECTS))
    return record


def is_synthetic_root(root: str | Path) -> bool:
    """True when `root` holds a complete look-alike written by `synthesize`."""
    return (Path(root) / MANIFEST_NAME).is_file()


def read_manifest(root: str | Path) -> dict:
    return json.loads((Path(root) / MANIFEST_NAME).read_text())
