"""Shared machinery of the synthetic look-alike writers.

A writer decides, for one dataset, the rows of its label files and one `ImageJob` per image (what to
draw and where); this module renders the jobs (in parallel worker processes when there are many),
writes label files with the publisher's encodings and quirks, and keeps the manifest that tests compare
the readers against.
"""

from __future__ import annotations

import csv
import io
import os
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from focus_dagster.files import write_bytes_atomically
from focus_dagster.synthetic.render import FundusGeometry, FundusSpec, fundus_geometry, render_fundus

# Published image sizes (width, height) at full resolution; look-alikes are written at these times `scale`.
DEFAULT_SCALE = 0.125
MIN_SIDE = 64


@dataclass(frozen=True)
class ImageJob:
    """One image to render: its path relative to the dataset root, what it shows, and how it is saved.

    `spec` decides the picture's content and `seed` its random details (vessel tree, lesion positions,
    noise): the same pair always gives the same pixels. Jobs are pickled to the rendering processes, so
    every field must stay a picklable value (the spec and its camera are frozen dataclasses).
    """

    rel_path: str
    spec: FundusSpec
    seed: int
    jpeg_quality: int = 90

    def geometry(self) -> FundusGeometry:
        """Pixel geometry (disc, cup, fovea) of the image this job renders, for annotation files."""
        return fundus_geometry(self.spec, self.seed)


@dataclass
class SynthManifest:
    """What a writer produced: the numbers a reader of the look-alike must reproduce exactly."""

    dataset: str
    root: Path
    label_rows: int = 0
    images_written: int = 0
    expected_quarantine: dict[str, int] = field(default_factory=dict)
    unlisted_images: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def expected_kept(self) -> int:
        return self.label_rows - sum(self.expected_quarantine.values())

    def summary(self) -> dict:
        return {
            "dataset": self.dataset,
            "root": str(self.root),
            "label_rows": self.label_rows,
            "images_written": self.images_written,
            "expected_kept": self.expected_kept,
            "expected_quarantine": dict(self.expected_quarantine),
            "unlisted_images": self.unlisted_images,
        }


@dataclass
class SynthPlan:
    """A writer's output before rendering: the label files are already on disk, the images are jobs."""

    manifest: SynthManifest
    jobs: list[ImageJob]


def dataset_rng(seed: int, key: str) -> np.random.Generator:
    """An independent, reproducible random stream per (seed, dataset)."""
    return np.random.default_rng([seed, zlib.crc32(key.encode())])


def scaled_size(size: tuple[int, int], scale: float) -> tuple[int, int]:
    """A published resolution times `scale`, keeping the aspect ratio and a usable minimum side."""
    w, h = size
    factor = max(scale, MIN_SIDE / min(w, h))
    return max(MIN_SIDE, int(round(w * factor))), max(MIN_SIDE, int(round(h * factor)))


def seeds(rng: np.random.Generator, n: int) -> list[int]:
    return [int(s) for s in rng.integers(0, 2**31 - 1, size=n)]


def clipped_normal(rng: np.random.Generator, mean: float, sd: float, lo: float, hi: float, n: int) -> np.ndarray:
    return np.clip(rng.normal(mean, sd, size=n), lo, hi)


def choice(rng: np.random.Generator, values: Sequence, weights: Sequence[float], n: int) -> np.ndarray:
    p = np.asarray(weights, dtype=float)
    return rng.choice(np.asarray(values, dtype=object), size=n, p=p / p.sum())


def allocate(weights: Sequence[float], n: int, minimum: Sequence[int] | None = None) -> np.ndarray:
    """Split `n` into counts proportional to `weights` (largest remainders), each at least `minimum`.

    Used by several look-alikes to keep small datasets faithful to the real proportions while every
    class a task needs is still present.
    """
    w = np.asarray(weights, dtype=float)
    exact = n * w / w.sum()
    counts = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - counts), kind="stable")[: n - counts.sum()]:
        counts[i] += 1
    if minimum is not None:
        floor = np.asarray(minimum, dtype=int)
        if floor.sum() > n:
            raise ValueError(f"cannot give {n} items at least {list(floor)} per class")
        while (counts < floor).any():
            short = int(np.flatnonzero(counts < floor)[0])
            spare = counts - floor
            donor = int(np.argmax(spare))
            counts[donor] -= 1
            counts[short] += 1
    return counts


def quality_degradation(rng: np.random.Generator, inadequate: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blur, illumination and artifact strengths: strong on inadequate images, slight on adequate ones.

    This is what plants the accuracy loss on inadequate-quality images: their lesions are blurred and
    darkened away (see focus_dagster.synthetic.PLANTED_EFFECTS).
    """
    n = len(inadequate)
    blur = np.where(inadequate, rng.uniform(0.55, 1.0, n), rng.uniform(0.0, 0.08, n))
    illumination = np.where(inadequate, rng.uniform(0.3, 0.9, n), rng.uniform(0.0, 0.1, n))
    artifacts = np.where(inadequate, rng.uniform(0.2, 0.8, n), 0.0)
    return blur, illumination, artifacts


# ------------------------------------------------------------------------------------------ label files


def write_csv(
    path: Path,
    frame: pd.DataFrame,
    *,
    encoding: str = "utf-8",
    bom: bool = False,
    header: Sequence[str] | None = None,
    trailing_empty_column: bool = False,
) -> None:
    """Write a label CSV the way its publisher did: encoding, BOM, exact header spelling, stray commas."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    names = list(header) if header is not None else list(frame.columns)
    writer.writerow(names + ([""] if trailing_empty_column else []))
    for row in frame.itertuples(index=False):
        cells = ["" if _is_missing(v) else str(v) for v in row]
        writer.writerow(cells + ([""] if trailing_empty_column else []))
    data = buffer.getvalue().encode(encoding)
    if bom:
        data = b"\xef\xbb\xbf" + data
    write_bytes_atomically(path, data)


def _is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA


# ------------------------------------------------------------------------------------------------ images


def render_jobs(items: Sequence[tuple[Path, ImageJob]], workers: int | None = None) -> int:
    """Render and save each (dataset root, job); worker processes share the work when there is enough."""
    if not items:
        return 0
    workers = workers if workers is not None else min(os.cpu_count() or 1, 8)
    roots, jobs = zip(*items)
    if workers <= 1 or len(items) < 64:
        for root, job in items:
            render_job(root, job)
        return len(items)
    chunk = max(1, len(items) // (workers * 8))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        list(pool.map(render_job, roots, jobs, chunksize=chunk))
    return len(items)


def render_job(root: Path, job: ImageJob) -> None:
    """Render one job and write it atomically in the format its file name says."""
    image = render_fundus(job.spec, job.seed)
    path = root / job.rel_path
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    if path.suffix.lower() == ".png":
        image.save(buffer, format="PNG", compress_level=1)
    else:
        image.save(buffer, format="JPEG", quality=job.jpeg_quality)
    write_bytes_atomically(path, buffer.getvalue())


def cup_disc_ratio(rng: np.random.Generator, glaucoma: Iterable[bool]) -> np.ndarray:
    """Vertical cup-to-disc ratios: enlarged cups for glaucoma / increased-cup flags, normal ones otherwise."""
    flags = np.asarray(list(glaucoma), dtype=bool)
    return np.where(flags, rng.uniform(0.62, 0.88, len(flags)), rng.uniform(0.2, 0.45, len(flags)))


def eye_from(values: Iterable, right) -> list[str]:
    return ["R" if v == right else "L" for v in values]
