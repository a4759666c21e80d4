"""RFMiD 2.0 look-alike: latin-1 label CSVs with the `ON`+NBSP header and trailing comma, images beside them.

IDs are one numbering over the whole dataset with gaps, as in the reference benchmark's split file (1..900
for 860 rows; datasets.md documents IDs restarting in every split, the layout that
tests/test_published_layouts_more.py reads), shared out over the splits in the real proportions
(507/177/170 images, at least two per split) and sorted within each split. A contiguous block of IDs (the 62%-73% stretch, as 561..654 of 900
are) is written `{ID}.JPG`, the rest `{ID}.jpg`. About 0.7% of label rows (6 of 860; at least one from
20 rows on) get no image, recorded as `image_missing` in the manifest. The NBSP (byte 0xA0) of the
`ON` header makes the files invalid UTF-8, as the real ones are. ME is kept degenerate: 4 positives per
860 rows, one (in the test split) on a small look-alike. DR about 8.2% (70/854 as in the published
split file). The `WNL` share (30%), the other disease rates and the camera per extension (`.jpg`
2048x1536, `.JPG` 4288x2848) are plausible values, not the real ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.rfmid_2 import (
    DISEASE_COLUMNS,
    PUBLISHED_COLUMNS,
    PUBLISHED_HEADER,
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

KEY = "rfmid_2"
SPLIT_IMAGES = {"train": 507, "val": 177, "test": 170}
ID_SPAN = 900 / 860
UPPERCASE_BLOCK = (561 / 900, 655 / 900)
MISSING_IMAGE_RATE = 6 / 860
ME_RATE = 4 / 860
WNL_RATE = 0.30
# Share of all images per flag (DR from the published split file; the others plausible).
DISEASE_RATES = {"DR": 70 / 854, "ODC": 0.08, "MH": 0.06, "TSLN": 0.06, "DN": 0.05, "MYA": 0.05, "ARMD": 0.04,
                 "BRVO": 0.02, "CRVO": 0.015, "LS": 0.02, "RS": 0.02, "CSR": 0.015, "ODE": 0.015, "ODP": 0.015}
RARE_RATE = 0.006
EXTENSIONS = {".jpg": ((2048, 1536), "topcon_trc"), ".JPG": ((4288, 2848), "kowa_vx10")}
DR_GRADE_WEIGHTS = [0, 2, 4, 2, 2]  # rendering only: RFMiD 2.0 publishes no grade
EXTRA_FINDINGS = {"ARMD": "drusen", "DN": "drusen", "MYA": "myopic", "TSLN": "tessellated", "LS": "laser_spots",
                  "HR": "hypertensive", "BRVO": "occlusion", "CRVO": "occlusion", "CRAO": "occlusion"}


def plan(root: Path, n: int, rng: np.random.Generator, scale: float) -> SynthPlan:
    labels = sample_labels(n, rng)
    jobs = []
    for layout in SPLIT_LAYOUTS:
        frame = labels[labels["split"] == layout.split]
        write_csv(root / layout.label_path, frame[PUBLISHED_COLUMNS], encoding="latin-1",
                  header=PUBLISHED_HEADER, trailing_empty_column=True)
        (root / layout.folder).mkdir(parents=True, exist_ok=True)
        jobs += image_jobs(frame[frame["has_image"]], layout.folder, rng, scale)
    missing = int((~labels["has_image"]).sum())
    manifest = SynthManifest(KEY, root, label_rows=len(labels), images_written=len(jobs),
                             expected_quarantine={"image_missing": missing} if missing else {})
    manifest.notes.append(f"ME positives: {int(labels['ME'].sum())} of {len(labels)} (real: 4 of 860); degenerate task")
    return SynthPlan(manifest, jobs)


def sample_labels(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """Label rows sorted by split then ID, with `split`, `extension` and `has_image` bookkeeping columns."""
    ids = np.sort(rng.choice(np.arange(1, max(n, round(n * ID_SPAN)) + 1), size=n, replace=False))
    rank = np.arange(n) / n
    extension = np.where((rank >= UPPERCASE_BLOCK[0]) & (rank < UPPERCASE_BLOCK[1]), ".JPG", ".jpg")
    frame = pd.DataFrame({"ID": ids, "split": rng.permutation(split_column(n)), "extension": extension})
    frame = pd.concat([frame, disease_flags(n, rng)], axis=1)
    order = {layout.split: k for k, layout in enumerate(SPLIT_LAYOUTS)}
    frame = frame.sort_values(["split", "ID"], key=lambda c: c.map(order) if c.name == "split" else c)
    frame = frame.reset_index(drop=True)
    place_me(frame, n, rng)
    ensure_dr_both_ways(frame, n)
    frame["has_image"] = image_presence(frame, n, rng)
    return frame


def split_column(n: int) -> np.ndarray:
    total = sum(SPLIT_IMAGES.values())
    val = max(2, round(n * SPLIT_IMAGES["val"] / total))
    test = max(2, round(n * SPLIT_IMAGES["test"] / total))
    return np.array(["train"] * max(2, n - val - test) + ["val"] * val + ["test"] * test)[:n]


def disease_flags(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """0/1 flags: WNL rows have none; every other row has at least one finding (ME is placed later)."""
    wnl = rng.random(n) < WNL_RATE
    drawn = [d for d in DISEASE_COLUMNS if d not in ("WNL", "ME")]
    rates = np.array([DISEASE_RATES.get(d, RARE_RATE) / (1 - WNL_RATE) for d in drawn]).clip(0, 0.95)
    flags = (rng.random((n, len(drawn))) < rates) & ~wnl[:, None]
    # The one finding an otherwise empty row gets is never DR, which keeps DR at its real rate.
    fill_in = np.where(np.array(drawn) == "DR", 0.0, rates)
    fill_in = fill_in / fill_in.sum()
    for i in np.flatnonzero(~wnl & ~flags.any(axis=1)):
        flags[i, rng.choice(len(drawn), p=fill_in)] = True
    frame = pd.DataFrame(flags.astype(int), columns=drawn)
    frame["WNL"] = wnl.astype(int)
    frame["ME"] = 0
    return frame[DISEASE_COLUMNS]


def place_me(frame: pd.DataFrame, n: int, rng: np.random.Generator) -> None:
    """The real ME rate (4 in 860), at least one positive from 20 rows on, test split first."""
    count = round(n * ME_RATE)
    if n >= 20:
        count = max(count, 1)
    test = frame.index[frame["split"] == "test"].to_numpy()
    others = frame.index[frame["split"] != "test"].to_numpy()
    in_test = min(count, len(test), max(1, count // 2))
    rows = list(rng.choice(test, size=in_test, replace=False))
    rows += list(rng.choice(others, size=min(count - in_test, len(others)), replace=False))
    frame.loc[rows, ["ME", "WNL"]] = [1, 0]


def ensure_dr_both_ways(frame: pd.DataFrame, n: int) -> None:
    """From 20 rows on, the test split holds at least one DR-positive and one DR-negative row."""
    test = frame.index[frame["split"] == "test"]
    if n < 20 or len(test) < 2:
        return
    if frame.loc[test, "DR"].sum() == 0:
        frame.loc[test[0], ["DR", "WNL"]] = [1, 0]
    if frame.loc[test, "DR"].sum() == len(test):
        frame.loc[test[-1], "DR"] = 0


def image_presence(frame: pd.DataFrame, n: int, rng: np.random.Generator) -> np.ndarray:
    """False for the ~0.7% of rows published without an image, chosen among rows no task depends on."""
    count = round(n * MISSING_IMAGE_RATE)
    if n >= 20:
        count = max(count, 1)
    spare = frame.index[(frame["DR"] == 0) & (frame["ME"] == 0)].to_numpy()
    present = np.ones(len(frame), dtype=bool)
    present[rng.choice(spare, size=min(count, len(spare)), replace=False)] = False
    return present


def image_jobs(frame: pd.DataFrame, folder: str, rng: np.random.Generator, scale: float) -> list[ImageJob]:
    size = len(frame)
    grade = np.where(frame["DR"] == 1, choice(rng, range(5), DR_GRADE_WEIGHTS, size).astype(int), 0)
    cdr = cup_disc_ratio(rng, frame["ODC"] == 1)
    eyes = rng.choice(["R", "L"], size=size)
    image_seeds = seeds(rng, size)
    jobs = []
    for i, row in enumerate(frame.to_dict("records")):
        native, camera = EXTENSIONS[row["extension"]]
        width, height = scaled_size(native, scale)
        jobs.append(
            ImageJob(
                rel_path=f"{folder}/{row['ID']}{row['extension']}",
                seed=image_seeds[i],
                spec=FundusSpec(
                    width=width,
                    height=height,
                    camera=camera,
                    dr_grade=int(grade[i]),
                    macular_edema=bool(row["ME"]),
                    cup_disc_ratio=float(cdr[i]),
                    eye=str(eyes[i]),
                    extra=tuple(sorted({tag for column, tag in EXTRA_FINDINGS.items() if row[column] == 1})),
                ),
            )
        )
    return jobs
