"""REFUGE look-alike: `REFUGE/{train,val,test}/Images/*.jpg` + `REFUGE/{split}/index.json`.

Three equal splits as in the mirror (400/400/400), 10% glaucoma in train and val (40 of 400), an
unlabelled test split. Train names `g0001..` (glaucoma) then `n0001..` (normal); val `V0001..` with
the glaucoma images at drawn positions; test `T0001..`. Each index.json is a JSON object keyed by
record number ("0", "1", ...) as the mirror ships it; records hold `ImgName`, `Size_X`, `Size_Y`,
`Fovea_X`, `Fovea_Y` and `Label` (test: `ImgName`, `Size_X`, `Size_Y` only). Sizes are those of the
written (scaled) image, and the fovea is where the renderer draws it, so the coordinates stay true to
the pictures. Cameras: train Zeiss Visucam 500 (2124x2056), val/test Canon CR-2 (1634x1634).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from focus_dagster.datasets.refuge import DATASET_FOLDER, INDEX_FILE, SPLIT_FOLDERS
from focus_dagster.files import write_bytes_atomically
from focus_dagster.synthetic.common import (
    ImageJob,
    SynthManifest,
    SynthPlan,
    allocate,
    choice,
    cup_disc_ratio,
    scaled_size,
    seeds,
)
from focus_dagster.synthetic.render import FundusSpec

KEY = "refuge"
IMAGE_FOLDER = "Images"
GLAUCOMA_RATE = 40 / 400
CAMERA_BY_SPLIT = {
    "train": ("zeiss_visucam500", (2124, 2056)),
    "val": ("canon_cr2", (1634, 1634)),
    "test": ("canon_cr2", (1634, 1634)),
}
LABELLED = ("train", "val")


def plan(root: Path, n: int, rng: np.random.Generator, scale: float) -> SynthPlan:
    sizes = allocate([1, 1, 1], n, [2, 2, 2] if n >= 6 else None)
    jobs: list[ImageJob] = []
    for split, count in zip(SPLIT_FOLDERS, sizes):
        labels = split_labels(split, int(count), n >= 20, rng)
        split_jobs = image_jobs(split, labels, rng, scale)
        write_index(root / DATASET_FOLDER / split / INDEX_FILE, split, labels, split_jobs)
        (root / DATASET_FOLDER / split / IMAGE_FOLDER).mkdir(parents=True, exist_ok=True)
        jobs.extend(split_jobs)
    return SynthPlan(SynthManifest(KEY, root, label_rows=len(jobs), images_written=len(jobs)), jobs)


def split_labels(split: str, count: int, both_classes: bool, rng: np.random.Generator) -> list[tuple[str, int | None]]:
    """(image name stem, label) pairs of one split, in file-name order; label None on the test split."""
    if split not in LABELLED:
        return [(f"T{i + 1:04d}", None) for i in range(count)]
    glaucoma = int(round(count * GLAUCOMA_RATE))
    if both_classes and count >= 2:
        glaucoma = min(max(glaucoma, 1), count - 1)
    if split == "train":
        return [(f"g{i + 1:04d}", 1) for i in range(glaucoma)] + [(f"n{i + 1:04d}", 0) for i in range(count - glaucoma)]
    flags = np.zeros(count, dtype=int)
    flags[rng.choice(count, size=glaucoma, replace=False)] = 1
    return [(f"V{i + 1:04d}", int(flag)) for i, flag in enumerate(flags)]


def image_jobs(
    split: str, labels: list[tuple[str, int | None]], rng: np.random.Generator, scale: float
) -> list[ImageJob]:
    camera, native = CAMERA_BY_SPLIT[split]
    width, height = scaled_size(native, scale)
    # Test images carry the val prevalence, though no label is published for them.
    glaucoma = [label == 1 if label is not None else rng.random() < GLAUCOMA_RATE for _, label in labels]
    cdr = cup_disc_ratio(rng, glaucoma)
    eyes = choice(rng, ["R", "L"], [1, 1], len(labels))
    image_seeds = seeds(rng, len(labels))
    return [
        ImageJob(
            rel_path=f"{DATASET_FOLDER}/{split}/{IMAGE_FOLDER}/{stem}.jpg",
            seed=image_seeds[i],
            spec=FundusSpec(
                width=width,
                height=height,
                camera=camera,
                cup_disc_ratio=float(cdr[i]),
                eye=str(eyes[i]),
            ),
        )
        for i, (stem, _) in enumerate(labels)
    ]


def write_index(path: Path, split: str, labels: list[tuple[str, int | None]], jobs: list[ImageJob]) -> None:
    records = {}
    for k, ((stem, label), job) in enumerate(zip(labels, jobs)):
        record = {"ImgName": f"{stem}.jpg", "Size_X": job.spec.width, "Size_Y": job.spec.height}
        if split in LABELLED:
            fovea_x, fovea_y = job.geometry().fovea
            record.update(Fovea_X=round(fovea_x, 2), Fovea_Y=round(fovea_y, 2), Label=label)
        records[str(k)] = record
    write_bytes_atomically(path, json.dumps(records, indent=1).encode("utf-8"))
