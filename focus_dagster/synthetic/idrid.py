"""IDRiD look-alike (disease grading): two label CSVs with the publisher's header quirks, names colliding across splits.

Train and test each number their images from IDRiD_001, so the first names exist in both folders with
different images and, for many of them, different labels (real: 41 of 103), and the writer makes sure
at least one colliding name differs when there are 20 images or more. Split sizes follow the real
413/103 (80/20, at least two test images). Grades and edema risks follow the real per-split counts (train
ICDR 0..4 = 134/20/136/74/49, test 34/5/32/19/13; edema risk 0/1/2 = 177/41/195 and 45/10/48), edema
being drawn given the grade (none for grade 0, mostly for grades >= 2), which reproduces those margins
approximately. The header is written as published: `Risk of macular edema ` with its trailing space and
trailing empty columns (commas), CRLF line ends (plausible for the Excel export). Images are Kowa VX-10
alpha look-alikes at 4288x2848 times `scale`.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.idrid import (
    GROUNDTRUTHS,
    IMAGES,
    PART,
    PUBLISHED_HEADER,
    PUBLISHED_RESOLUTION,
    SPLIT_LAYOUTS,
)
from focus_dagster.files import write_bytes_atomically
from focus_dagster.synthetic.common import (
    ImageJob,
    SynthManifest,
    SynthPlan,
    choice,
    scaled_size,
    seeds,
)
from focus_dagster.synthetic.render import FundusSpec

KEY = "idrid"
CAMERA = "kowa_vx10"
SPLIT_IMAGES = {"train": 413, "test": 103}
GRADE_COUNTS = {"train": [134, 20, 136, 74, 49], "test": [34, 5, 32, 19, 13]}
EDEMA_RISK_BY_GRADE = [0.0, 0.2, 0.8, 0.95, 0.95]  # P(risk > 0 | grade)
SEVERE_EDEMA_SHARE = 195 / 236  # risk 2 among images with risk > 0
TRAILING_EMPTY_COLUMNS = 8


def plan(root: Path, n: int, rng: np.random.Generator, scale: float) -> SynthPlan:
    test_size = max(2, round(n * SPLIT_IMAGES["test"] / sum(SPLIT_IMAGES.values())))
    labels = {
        "train": sample_labels("train", max(2, n - test_size), rng),
        "test": sample_labels("test", test_size, rng),
    }
    ensure_test_classes(labels["test"], n)
    ensure_a_collision_differs(labels, n)
    jobs = []
    for layout in SPLIT_LAYOUTS:
        write_label_file(root / PART / GROUNDTRUTHS / layout.label_file, labels[layout.split])
        image_dir = f"{PART}/{IMAGES}/{layout.image_folder}"
        (root / image_dir).mkdir(parents=True, exist_ok=True)
        jobs += image_jobs(labels[layout.split], image_dir, rng, scale)
    rows = sum(len(frame) for frame in labels.values())
    manifest = SynthManifest(KEY, root, label_rows=rows, images_written=len(jobs))
    shared = min(len(labels["train"]), len(labels["test"]))
    manifest.notes.append(f"IDRiD_001..IDRiD_{shared:03d} exist in both splits (different images)")
    return SynthPlan(manifest, jobs)


def sample_labels(split: str, size: int, rng: np.random.Generator) -> pd.DataFrame:
    grade = choice(rng, range(5), GRADE_COUNTS[split], size).astype(int)
    return pd.DataFrame({
        "Image name": [f"IDRiD_{i:03d}" for i in range(1, size + 1)],
        "Retinopathy grade": grade,
        "Risk of macular edema": edema_risk(grade, rng),
    })


def edema_risk(grade: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    at_risk = rng.random(len(grade)) < np.take(EDEMA_RISK_BY_GRADE, grade)
    return np.where(at_risk, np.where(rng.random(len(grade)) < SEVERE_EDEMA_SHARE, 2, 1), 0)


def ensure_test_classes(test: pd.DataFrame, n: int) -> None:
    """From 20 images on, the test split holds a grade-0 image and a referable (grade >= 2) one."""
    if n < 20 or len(test) < 2:
        return
    if not (test["Retinopathy grade"] == 0).any():
        test.loc[0, ["Retinopathy grade", "Risk of macular edema"]] = [0, 0]
    if not (test["Retinopathy grade"] >= 2).any():
        test.loc[len(test) - 1, ["Retinopathy grade", "Risk of macular edema"]] = [2, 2]


def ensure_a_collision_differs(labels: dict[str, pd.DataFrame], n: int) -> None:
    """From 20 images on, at least one name shared by both splits has different labels in each."""
    shared = min(len(labels["train"]), len(labels["test"]))
    columns = ["Retinopathy grade", "Risk of macular edema"]
    train, test = (labels[s].loc[: shared - 1, columns].to_numpy() for s in ("train", "test"))
    same = (train == test).all(axis=1)
    if n >= 20 and same.all():
        grade = int(labels["test"].at[0, "Retinopathy grade"])
        labels["train"].loc[0, columns] = [4, 2] if grade < 4 else [0, 0]


def write_label_file(path: Path, frame: pd.DataFrame) -> None:
    """The publisher's CSV: header with the trailing space, then trailing empty columns on every line."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    padding = [""] * TRAILING_EMPTY_COLUMNS
    writer.writerow(PUBLISHED_HEADER + padding)
    for row in frame.itertuples(index=False):
        writer.writerow([str(v) for v in row] + padding)
    write_bytes_atomically(path, buffer.getvalue().encode("utf-8"))


def image_jobs(frame: pd.DataFrame, image_dir: str, rng: np.random.Generator, scale: float) -> list[ImageJob]:
    width, height = scaled_size(PUBLISHED_RESOLUTION, scale)
    eyes = rng.choice(["R", "L"], size=len(frame))
    image_seeds = seeds(rng, len(frame))
    return [
        ImageJob(
            rel_path=f"{image_dir}/{row[0]}.jpg",
            seed=image_seeds[i],
            spec=FundusSpec(
                width=width,
                height=height,
                camera=CAMERA,
                dr_grade=int(row[1]),
                macular_edema=bool(row[2] > 0),
                eye=str(eyes[i]),
            ),
        )
        for i, row in enumerate(frame.itertuples(index=False))
    ]
