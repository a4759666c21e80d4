"""Messidor-2 look-alike: `messidor_data.csv` (mirror schema) + `messidor-2/preprocess/<file>`.

Files are named as in the two parts of the real set: Messidor-1 images `YYYYMMDD_NNNNN_0S00_PP.png`
(60.5% of files; service codes 0100/0200/0400) and Messidor-2 images `IM00NNNN.JPG`, written in pairs
of consecutive numbers (right eye, then left eye: the pairing is real, the order within a pair is a
plausible choice). Dates and numbers are drawn, not real ones. Rows are sorted by file name.

Rates follow the real file: ICDR 0..4 = 1017/270/347/75/35 among gradable images, 151 DME (spread
over grades with plausible per-grade rates, most in grades 2-4), 4 ungradable images in 1,748. One
deliberate deviation: a look-alike of 10 or more rows always holds at least one ungradable row
(blank `diagnosis` and `adjudicated_dme`, `adjudicated_gradable` 0, an image degraded beyond grading),
so the quirk is exercised; the reader keeps it and the label step rejects it. Resolutions are the
three published ones, drawn with the proportions of Messidor-1 (588/400/212 of 1,200), Topcon TRC
camera signature.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.messidor_2 import IMAGE_DIRS, LABEL_FILE, PUBLISHED_COLUMNS
from focus_dagster.synthetic.common import (
    ImageJob,
    SynthManifest,
    SynthPlan,
    allocate,
    choice,
    quality_degradation,
    scaled_size,
    seeds,
    write_csv,
)
from focus_dagster.synthetic.render import FundusSpec

KEY = "messidor_2"
IMAGE_DIR = IMAGE_DIRS[0]
CAMERA = "topcon_trc"
ICDR_COUNTS = [1017, 270, 347, 75, 35]
# Plausible DME rates per grade giving about the real 151 DME images in 1,744.
DME_RATE_BY_GRADE = [0.004, 0.05, 0.24, 0.5, 0.45]
UNGRADABLE_RATE = 4 / 1748
MESSIDOR_1_SHARE = 1058 / 1748
SERVICES = ("0100", "0200", "0400")
RESOLUTIONS = [(1440, 960), (2240, 1488), (2304, 1536)]
RESOLUTION_WEIGHTS = [588, 400, 212]
FIRST_DAY, DAYS = date(2005, 10, 20), 220


def plan(root: Path, n: int, rng: np.random.Generator, scale: float) -> SynthPlan:
    labels = sample_labels(n, rng)
    write_csv(root / LABEL_FILE, labels[PUBLISHED_COLUMNS])
    (root / IMAGE_DIR).mkdir(parents=True, exist_ok=True)
    jobs = image_jobs(labels, rng, scale)
    ungradable = int((labels["adjudicated_gradable"] == 0).sum())
    manifest = SynthManifest(
        KEY,
        root,
        label_rows=len(labels),
        images_written=len(jobs),
        notes=[f"{ungradable} ungradable row(s) (blank grade, kept by the reader, rejected by the label step)"],
    )
    return SynthPlan(manifest, jobs)


def sample_labels(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """Rows of a messidor_data.csv look-alike, sorted by file name, with private `grade_`, `dme_`, `eye_` helpers."""
    ungradable = max(1, round(n * UNGRADABLE_RATE)) if n >= 10 else 0
    gradable = n - ungradable
    minimum = [1, 1, 1, 0, 0] if gradable >= 20 else None
    grades = rng.permutation(np.repeat(np.arange(5), allocate(ICDR_COUNTS, gradable, minimum)))
    dme = rng.random(gradable) < np.take(DME_RATE_BY_GRADE, grades)
    if gradable >= 20 and not dme.any():
        dme[np.flatnonzero(grades >= 2)[0]] = True  # keep the column's positive class present
    files, eyes = file_names(n, rng)
    order = rng.permutation(n)  # which files are the ungradable ones
    frame = pd.DataFrame(
        {
            "id_code": np.asarray(files)[order],
            "diagnosis": [str(g) for g in grades] + [""] * ungradable,
            "adjudicated_dme": [str(int(d)) for d in dme] + [""] * ungradable,
            "adjudicated_gradable": [1] * gradable + [0] * ungradable,
            "grade_": list(grades) + [0] * ungradable,
            "dme_": list(dme) + [False] * ungradable,
            "eye_": np.asarray(eyes)[order],
        }
    )
    return frame.sort_values("id_code", kind="stable").reset_index(drop=True)


def file_names(n: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """`n` unique file names of both parts, and the eye of each (R/L)."""
    n_first = int(round(n * MESSIDOR_1_SHARE))
    n_second = n - n_first
    days = rng.integers(0, DAYS, n_first)
    numbers = rng.choice(np.arange(40000, 70000), size=n_first, replace=False)
    services = choice(rng, SERVICES, [372, 397, 288], n_first)
    first = [
        f"{(FIRST_DAY + timedelta(days=int(d))).strftime('%Y%m%d')}_{num:05d}_{s}_PP.png"
        for d, num, s in zip(days, numbers, services)
    ]
    pairs = (n_second + 1) // 2
    starts = 12 + 2 * np.sort(rng.choice(np.arange(2400), size=pairs, replace=False))
    second = [f"IM{start + k:06d}.JPG" for start in starts for k in (0, 1)][:n_second]
    eyes = list(choice(rng, ["R", "L"], [1, 1], n_first)) + ["R" if k % 2 == 0 else "L" for k in range(n_second)]
    return first + second, eyes


def image_jobs(labels: pd.DataFrame, rng: np.random.Generator, scale: float) -> list[ImageJob]:
    n = len(labels)
    ungradable = (labels["adjudicated_gradable"] == 0).to_numpy()
    blur, illumination, artifacts = quality_degradation(rng, ungradable)
    # Ungradable means no grader could see the retina: the strongest degradation the renderer offers.
    blur = np.where(ungradable, 1.0, blur)
    sizes = choice(rng, range(len(RESOLUTIONS)), RESOLUTION_WEIGHTS, n).astype(int)
    cdr = rng.uniform(0.2, 0.5, n)
    image_seeds = seeds(rng, n)
    jobs = []
    for i, row in enumerate(labels.itertuples(index=False)):
        width, height = scaled_size(RESOLUTIONS[sizes[i]], scale)
        jobs.append(
            ImageJob(
                rel_path=f"{IMAGE_DIR}/{row.id_code}",
                seed=image_seeds[i],
                spec=FundusSpec(
                    width=width,
                    height=height,
                    camera=CAMERA,
                    dr_grade=int(row.grade_),
                    macular_edema=bool(row.dme_),
                    cup_disc_ratio=float(cdr[i]),
                    eye=row.eye_,
                    blur=float(blur[i]),
                    illumination=float(illumination[i]),
                    artifacts=float(artifacts[i]),
                ),
            )
        )
    return jobs
