"""JSIEC1000 look-alike: `1000images/<class folder>/<file>`, no label file (the folder is the label).

Class folders are drawn with the real image counts of the 39 published folders (scaled to `n`), with
at least two images each of Normal, DR1, DR2 and DR3 and one of blur-with-suspected-PDR when n >= 20,
so the any-DR and referable-DR tasks have both classes. File names follow the real set: a
time-based UUID with a double dot (`<uuid>..JPG`, consecutive UUIDs within a folder), except in
`11.Severe hypertensive retinopathy` (`<sha1>.jpg`), `23.Vessel tortuosity`
(`prob100#99__23___<sha1>.JPG`) and a few `<md5>.jpg` in `29.0.Blur fundus without PDR`. The three
real `..TIF` images are not imitated (the renderer writes JPEG and PNG only).

Image content follows the class where the renderer can show it: DR1/DR2/DR3 -> ICDR grade 1/2/3;
blur with suspected PDR -> grade 4 behind strong defocus; blur without PDR -> strong defocus; large
optic cup and possible glaucoma -> enlarged cup; tessellated, pathological myopia / chorioretinal
atrophy, laser spots, severe hypertensive retinopathy, BRVO/CRVO, yellow-white flecks / maculopathy
-> the matching extra finding; massive hard exudates -> macular exudates; vitreous particles and
silicon oil -> artifacts and uneven light. Other classes render as a normal fundus. Resolutions are
a plausible mix around 2000-2500 px (the real set mixes cameras), neutral `generic` signature.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from focus_dagster.datasets.jsiec1000 import CLASS_FOLDERS, IMAGE_ROOT
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

KEY = "jsiec1000"
FOLDERS = list(CLASS_FOLDERS)
# Classes every look-alike of 20 or more images carries, with their minimum counts.
MINIMUM = {"0.0.Normal": 2, "0.3.DR1": 2, "1.0.DR2": 2, "1.1.DR3": 2, "29.1.Blur fundus with suspected PDR": 1}
RESOLUTIONS = [(2124, 2056), (2196, 1958), (2400, 2000), (2048, 1536)]
RESOLUTION_WEIGHTS = [3, 3, 2, 2]
STRONG_BLUR = (0.5, 0.85)
SHA1_NAMED = "11.Severe hypertensive retinopathy"
PROB_NAMED = "23.Vessel tortuosity"
MD5_NAMED = "29.0.Blur fundus without PDR"
MD5_SHARE = 8 / 114

# What the renderer draws for each class (classes not listed render as a normal fundus).
CLASS_CONTENT: dict[str, dict] = {
    "0.1.Tessellated fundus": {"extra": ("tessellated",)},
    "0.2.Large optic cup": {"glaucoma": True},
    "0.3.DR1": {"dr_grade": 1},
    "1.0.DR2": {"dr_grade": 2},
    "1.1.DR3": {"dr_grade": 3},
    "2.0.BRVO": {"extra": ("occlusion",)},
    "2.1.CRVO": {"extra": ("occlusion",)},
    "6.Maculopathy": {"extra": ("drusen",)},
    "9.Pathological myopia": {"extra": ("myopic",)},
    "10.0.Possible glaucoma": {"glaucoma": True},
    "11.Severe hypertensive retinopathy": {"extra": ("hypertensive",)},
    "18.Vitreous particles": {"artifacts": 0.5},
    "20.Massive hard exudates": {"macular_edema": True},
    "21.Yellow-white spots-flecks": {"extra": ("drusen",)},
    "24.Chorioretinal atrophy-coloboma": {"extra": ("myopic",)},
    "27.Laser Spots": {"extra": ("laser_spots",)},
    "28.Silicon oil in eye": {"illumination": 0.5},
    "29.0.Blur fundus without PDR": {"strong_blur": True},
    "29.1.Blur fundus with suspected PDR": {"dr_grade": 4, "strong_blur": True},
}


def plan(root: Path, n: int, rng: np.random.Generator, scale: float) -> SynthPlan:
    counts = class_counts(n)
    folders = [folder for folder, count in zip(FOLDERS, counts) for _ in range(count)]
    names = file_names(folders, rng)
    for folder in dict.fromkeys(folders):
        (root / IMAGE_ROOT / folder).mkdir(parents=True, exist_ok=True)
    jobs = image_jobs(folders, names, rng, scale)
    return SynthPlan(SynthManifest(KEY, root, label_rows=len(jobs), images_written=len(jobs)), jobs)


def class_counts(n: int) -> np.ndarray:
    minimum = [MINIMUM.get(folder, 0) for folder in FOLDERS] if n >= 20 else None
    return allocate(list(CLASS_FOLDERS.values()), n, minimum)


def file_names(folders: list[str], rng: np.random.Generator) -> list[str]:
    """One file name per image, in each folder's own naming style."""
    # One camera PC wrote the UUIDs: clock sequence and node are shared, time stamps run on.
    mid, clock, node = int(rng.integers(0, 2**16)), int(rng.integers(0, 2**14)) | 0x8000, int(rng.integers(0, 2**48))
    next_time = {folder: int(rng.integers(0, 2**32 - 10_000)) for folder in dict.fromkeys(folders)}
    names = []
    for folder in folders:
        if folder == SHA1_NAMED:
            names.append(f"{_hex(rng, 40)}.jpg")
        elif folder == PROB_NAMED:
            score, second = int(rng.choice([90, 95, 98, 99, 100])), int(rng.integers(84, 100))
            names.append(f"prob{score}#{second}__23___{_hex(rng, 40)}.JPG")
        elif folder == MD5_NAMED and rng.random() < MD5_SHARE:
            names.append(f"{_hex(rng, 32)}.jpg")
        else:
            next_time[folder] += 1
            names.append(f"{next_time[folder]:08x}-{mid:04x}-11e8-{clock:04x}-{node:012x}..JPG")
    return names


def image_jobs(folders: list[str], names: list[str], rng: np.random.Generator, scale: float) -> list[ImageJob]:
    n = len(folders)
    content = [CLASS_CONTENT.get(folder, {}) for folder in folders]
    cdr = cup_disc_ratio(rng, [c.get("glaucoma", False) for c in content])
    strong = [c.get("strong_blur", False) for c in content]
    blur = np.where(strong, rng.uniform(*STRONG_BLUR, n), rng.uniform(0.0, 0.08, n))
    sizes = choice(rng, range(len(RESOLUTIONS)), RESOLUTION_WEIGHTS, n).astype(int)
    eyes = choice(rng, ["R", "L"], [1, 1], n)
    image_seeds = seeds(rng, n)
    jobs = []
    for i, (folder, name, c) in enumerate(zip(folders, names, content)):
        width, height = scaled_size(RESOLUTIONS[sizes[i]], scale)
        jobs.append(
            ImageJob(
                rel_path=f"{IMAGE_ROOT}/{folder}/{name}",
                seed=image_seeds[i],
                spec=FundusSpec(
                    width=width,
                    height=height,
                    camera="generic",
                    dr_grade=c.get("dr_grade", 0),
                    macular_edema=c.get("macular_edema", False),
                    cup_disc_ratio=float(cdr[i]),
                    eye=str(eyes[i]),
                    blur=float(blur[i]),
                    illumination=c.get("illumination", 0.0),
                    artifacts=c.get("artifacts", 0.0),
                    extra=c.get("extra", ()),
                ),
            )
        )
    return jobs


def _hex(rng: np.random.Generator, digits: int) -> str:
    return rng.bytes(digits // 2).hex()
