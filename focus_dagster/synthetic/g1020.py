"""G1020 look-alike: `G1020/G1020.csv` + `G1020/Images/image_{n}.jpg` with a LabelMe `image_{n}.json` beside each.

`imageID` holds the file name (`image_0.jpg`), `binaryLabels` 0/1 at the real rate (296 glaucoma in
1,020). Image numbers are drawn with gaps, as in the real set (0..3202 for 1,020 images). Sizes are
drawn between the published extremes 1944x2108 and 2426x3007 (portrait, height 1.08-1.24 times the
width: a plausible spread, not the real distribution); neutral `generic` camera signature.

Each LabelMe file holds a `disc` and a `cup` polygon (16 points each) traced on the ellipses the
renderer draws for that image (the disc and the cup of its `_draw_optic_disc`), in pixel
coordinates of the written image, with `imagePath`, `imageWidth` and `imageHeight`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.g1020 import (
    DATASET_FOLDER,
    IMAGE_DIR,
    LABEL_FILE,
    PUBLISHED_COLUMNS,
)
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
    write_csv,
)
from focus_dagster.synthetic.render import FundusSpec

KEY = "g1020"
LABEL_COUNTS = [724, 296]
HIGHEST_NUMBER_PER_IMAGE = 3203 / 1020
WIDTH_RANGE = (1944, 2426)
HEIGHT_RANGE = (2108, 3007)
LABELME_VERSION = "4.5.6"
POLYGON_POINTS = 16


def plan(root: Path, n: int, rng: np.random.Generator, scale: float) -> SynthPlan:
    labels = sample_labels(n, rng)
    write_csv(root / DATASET_FOLDER / LABEL_FILE, labels[PUBLISHED_COLUMNS])
    (root / DATASET_FOLDER / IMAGE_DIR).mkdir(parents=True, exist_ok=True)
    jobs = image_jobs(labels, rng, scale)
    for job in jobs:
        write_labelme(root / job.rel_path, job)
    return SynthPlan(SynthManifest(KEY, root, label_rows=len(labels), images_written=len(jobs)), jobs)


def sample_labels(n: int, rng: np.random.Generator) -> pd.DataFrame:
    counts = allocate(LABEL_COUNTS, n, [1, 1] if n >= 20 else None)
    flags = rng.permutation(np.repeat([0, 1], counts))
    highest = max(n, int(round(n * HIGHEST_NUMBER_PER_IMAGE)))
    numbers = np.sort(rng.choice(highest, size=n, replace=False))
    return pd.DataFrame({"imageID": [f"image_{k}.jpg" for k in numbers], "binaryLabels": flags})


def image_jobs(labels: pd.DataFrame, rng: np.random.Generator, scale: float) -> list[ImageJob]:
    n = len(labels)
    widths = rng.integers(WIDTH_RANGE[0], WIDTH_RANGE[1] + 1, n)
    heights = np.clip(np.round(widths * rng.uniform(1.08, 1.24, n)), *HEIGHT_RANGE).astype(int)
    cdr = cup_disc_ratio(rng, labels["binaryLabels"] == 1)
    eyes = choice(rng, ["R", "L"], [1, 1], n)
    image_seeds = seeds(rng, n)
    jobs = []
    for i, image_id in enumerate(labels["imageID"]):
        width, height = scaled_size((int(widths[i]), int(heights[i])), scale)
        jobs.append(
            ImageJob(
                rel_path=f"{DATASET_FOLDER}/{IMAGE_DIR}/{image_id}",
                seed=image_seeds[i],
                spec=FundusSpec(
                    width=width,
                    height=height,
                    camera="generic",
                    cup_disc_ratio=float(cdr[i]),
                    eye=str(eyes[i]),
                ),
            )
        )
    return jobs


def write_labelme(image_path: Path, job: ImageJob) -> None:
    """The LabelMe annotation beside an image: disc and cup polygons where the renderer draws them."""
    disc, cup = disc_and_cup_ellipses(job)
    document = {
        "version": LABELME_VERSION,
        "flags": {},
        "shapes": [
            {"label": label, "points": polygon(*ellipse), "group_id": None, "shape_type": "polygon", "flags": {}}
            for label, ellipse in (("disc", disc), ("cup", cup))
        ],
        "imagePath": image_path.name,
        "imageData": None,
        "imageHeight": job.spec.height,
        "imageWidth": job.spec.width,
    }
    write_bytes_atomically(image_path.with_suffix(".json"), json.dumps(document, indent=2).encode("utf-8"))


def disc_and_cup_ellipses(job: ImageJob) -> tuple[tuple[float, float, float, float], ...]:
    """(centre x, centre y, x radius, y radius) of the disc and the cup the renderer draws, in pixels."""
    geometry = job.geometry()
    return geometry.disc, geometry.cup


def polygon(cx: float, cy: float, rx: float, ry: float) -> list[list[float]]:
    return [
        [round(cx + rx * math.cos(t), 1), round(cy + ry * math.sin(t), 1)]
        for t in (2 * math.pi * k / POLYGON_POINTS for k in range(POLYGON_POINTS))
    ]
