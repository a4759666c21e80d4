"""RFMiD look-alike: three split folders (nested twice, as in the common mirror), IDs restarting at 1.

Split proportions are the real 1920/640/640 (60/20/20, at least two images per split). Labels: 79% of
images carry a disease (`Disease_Risk`, real 1519/1920 in training); the diseases of those images follow
the approximate training-set counts reported for RFMiD (DR 376, MH 317, ODC 282, TSLN 186, DN 138, ...),
with every at-risk image given at least one disease. CME is kept as rare as it is: about 7 positives per
3200 images (4/1/2 over the splits), which on a small look-alike means one positive (in the test split)
or none below 20 images; it is never inflated. DR is binary; the rendered images draw a random grade
1-4 for DR positives. Images are PNG in the three published resolutions; the camera mix (75% 2144x1424,
15% 2048x1536, 10% 4288x2848) is plausible, not the real one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.rfmid import (
    DISEASE_COLUMNS,
    PUBLISHED_COLUMNS,
    SPLIT_LAYOUTS,
)
from focus_dagster.synthetic.common import (
    ImageJob,
    SynthManifest,
    SynthPlan,
    choice,
    cup_disc_ratio,
    scaled_size,
    seeds,
    write_csv,
)
from focus_dagster.synthetic.render import FundusSpec

KEY = "rfmid"
SPLIT_SHARES = {"train": 1920, "val": 640, "test": 640}
RISK_RATE = 1519 / 1920
# Approximate training-set positives per disease out of 1920 (CME handled apart: it is placed, not drawn).
TRAIN_COUNTS = {
    "DR": 376, "ARMD": 100, "MH": 317, "DN": 138, "MYA": 101, "BRVO": 73, "TSLN": 186, "ERM": 14, "LS": 47,
    "MS": 15, "CSR": 37, "ODC": 282, "CRVO": 28, "TV": 6, "AH": 16, "ODP": 65, "ODE": 58, "ST": 5, "AION": 17,
    "PT": 11, "RT": 14, "RS": 43, "CRS": 32, "EDN": 15, "RPEC": 22, "MHL": 11, "RP": 6, "CWS": 3, "CB": 3,
    "ODPM": 2, "PRH": 2, "MNF": 1, "HR": 3, "CRAO": 2, "TD": 1, "PTCR": 1, "CF": 1, "VH": 1, "MCA": 1, "VS": 1,
    "BRAO": 1, "PLQ": 1, "HPED": 1, "CL": 1,
}
CME_TOTAL, CME_PER_IMAGES = 7, 3200
CME_SPLIT_WEIGHTS = {"train": 4, "val": 1, "test": 2}
DR_GRADE_WEIGHTS = [0, 2, 4, 2, 2]  # rendering only: RFMiD publishes no grade
# (resolution, camera signature, share): plausible mix of the three published resolutions.
CAMERA_MIX = [
    ((2144, 1424), "topcon_trc", 0.75),
    ((2048, 1536), "topcon_nw400", 0.15),
    ((4288, 2848), "kowa_vx10", 0.10),
]
# Disease columns that change the rendered fundus beyond DR, edema and the cup.
EXTRA_FINDINGS = {"ARMD": "drusen", "DN": "drusen", "MYA": "myopic", "TSLN": "tessellated", "LS": "laser_spots",
                  "HR": "hypertensive", "BRVO": "occlusion", "CRVO": "occlusion", "BRAO": "occlusion",
                  "CRAO": "occlusion"}


def plan(root: Path, n: int, rng: np.random.Generator, scale: float) -> SynthPlan:
    sizes = split_sizes(n)
    labels = {split: sample_labels(size, rng) for split, size in sizes.items()}
    place_cme(labels, n, rng)
    ensure_dr_both_ways(labels["test"], n)
    jobs = []
    for layout in SPLIT_LAYOUTS:
        folder = f"{layout.folder}/{layout.folder}"
        frame = labels[layout.split]
        write_csv(root / folder / layout.label_file, frame[PUBLISHED_COLUMNS])
        (root / folder / layout.image_folder).mkdir(parents=True, exist_ok=True)
        jobs += image_jobs(frame, f"{folder}/{layout.image_folder}", rng, scale)
    total = sum(sizes.values())
    manifest = SynthManifest(KEY, root, label_rows=total, images_written=len(jobs))
    cme = sum(int(f["CME"].sum()) for f in labels.values())
    manifest.notes.append(f"CME positives: {cme} of {total} (real: 7 of 3200); the referable-DR task is degenerate")
    return SynthPlan(manifest, jobs)


def split_sizes(n: int) -> dict[str, int]:
    """Images per split in the real 3:1:1 proportions, at least two per split."""
    total = sum(SPLIT_SHARES.values())
    val = max(2, round(n * SPLIT_SHARES["val"] / total))
    test = max(2, round(n * SPLIT_SHARES["test"] / total))
    return {"train": max(2, n - val - test), "val": val, "test": test}


def sample_labels(size: int, rng: np.random.Generator) -> pd.DataFrame:
    """One split's label rows, IDs 1..size: at-risk images carry at least one disease, the rest none."""
    risk = rng.random(size) < RISK_RATE
    drawn = [d for d in DISEASE_COLUMNS if d != "CME"]
    rates = np.array([TRAIN_COUNTS[d] / 1920 / RISK_RATE for d in drawn]).clip(0, 0.95)
    flags = (rng.random((size, len(drawn))) < rates) & risk[:, None]
    # The one finding an otherwise empty row gets is never DR, which keeps DR at its real rate.
    fill_in = np.where(np.array(drawn) == "DR", 0.0, rates)
    fill_in = fill_in / fill_in.sum()
    for i in np.flatnonzero(risk & ~flags.any(axis=1)):
        flags[i, rng.choice(len(drawn), p=fill_in)] = True
    frame = pd.DataFrame(flags.astype(int), columns=drawn)
    frame["CME"] = 0
    frame.insert(0, "Disease_Risk", risk.astype(int))
    frame.insert(0, "ID", np.arange(1, size + 1))
    return frame[PUBLISHED_COLUMNS]


def place_cme(labels: dict[str, pd.DataFrame], n: int, rng: np.random.Generator) -> None:
    """Put the real share of CME positives (at least one from 20 images on) on random rows of each split."""
    count = round(n * CME_TOTAL / CME_PER_IMAGES)
    if n >= 20:
        count = max(count, 1)
    for split, k in cme_per_split(count).items():
        frame = labels[split]
        rows = rng.choice(len(frame), size=min(k, len(frame)), replace=False)
        frame.loc[rows, ["CME", "Disease_Risk"]] = 1


def cme_per_split(count: int) -> dict[str, int]:
    """A few positives all go to the test split (as 2 of the real 7 do); more follow the real 4/1/2."""
    if count <= CME_SPLIT_WEIGHTS["test"]:
        return {"train": 0, "val": 0, "test": count}
    total = sum(CME_SPLIT_WEIGHTS.values())
    exact = {s: count * w / total for s, w in CME_SPLIT_WEIGHTS.items()}
    out = {s: int(v) for s, v in exact.items()}
    for s in sorted(exact, key=lambda s: out[s] - exact[s])[: count - sum(out.values())]:
        out[s] += 1
    return out


def ensure_dr_both_ways(test: pd.DataFrame, n: int) -> None:
    """From 20 images on, the test split holds at least one DR-positive and one DR-negative image."""
    if n < 20 or len(test) < 2:
        return
    if test["DR"].sum() == 0:
        test.loc[0, ["DR", "Disease_Risk"]] = 1
    if test["DR"].sum() == len(test):
        test.loc[len(test) - 1, "DR"] = 0


def image_jobs(frame: pd.DataFrame, image_dir: str, rng: np.random.Generator, scale: float) -> list[ImageJob]:
    size = len(frame)
    camera = rng.choice(len(CAMERA_MIX), size=size, p=[share for _, _, share in CAMERA_MIX])
    grade = np.where(frame["DR"] == 1, choice(rng, range(5), DR_GRADE_WEIGHTS, size).astype(int), 0)
    cdr = cup_disc_ratio(rng, frame["ODC"] == 1)
    eyes = rng.choice(["R", "L"], size=size)
    image_seeds = seeds(rng, size)
    jobs = []
    for i, row in enumerate(frame.to_dict("records")):
        native, signature, _ = CAMERA_MIX[camera[i]]
        width, height = scaled_size(native, scale)
        extra = tuple(sorted({tag for column, tag in EXTRA_FINDINGS.items() if row[column] == 1}))
        jobs.append(
            ImageJob(
                rel_path=f"{image_dir}/{row['ID']}.png",
                seed=image_seeds[i],
                spec=FundusSpec(
                    width=width,
                    height=height,
                    camera=signature,
                    dr_grade=int(grade[i]),
                    macular_edema=bool(row["CME"]),
                    cup_disc_ratio=float(cdr[i]),
                    eye=str(eyes[i]),
                    extra=extra,
                ),
            )
        )
    return jobs
