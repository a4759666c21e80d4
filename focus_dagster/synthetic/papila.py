"""PAPILA look-alike: two clinical workbooks with the published two-row header + `FundusImages/RET{NNN}{OD|OS}.jpg`.

Every patient has both eyes (one row in `patient_data_od.xlsx`, one in `patient_data_os.xlsx`), so `n`
is rounded up to an even number of images. Patient numbers are a sorted, gappy subset like the real ones
(244 patients numbered 2..293), written `#002`. Per-eye diagnoses follow the real counts (333 healthy,
89 glaucoma, 66 suspect of 488 eyes: 155 GON positives) with the two eyes of a patient usually agreeing;
glaucomatous and suspect eyes get enlarged cups. Codes are the publisher's: `Gender` 0 = male,
1 = female. Age (about 62 +- 14 years), the female share (60%) and the clinical measurements (refraction,
IOP, pachymetry, axial length, sparse VF_MD) are plausible values, not the real distributions.
A few expert contour files (`ExpertsSegmentations/Contours/RET002_OD_disc_exp1.txt`, "x y" per line) are
written for the first patients; they are plausible ellipses, not traced from the rendered images.
The workbooks are written byte-for-byte reproducibly (fixed document and archive timestamps).
"""

from __future__ import annotations

import io
import math
import re
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.papila import (
    CONTOUR_DIR,
    EYE_FILES,
    IMAGE_DIR,
    PUBLISHED_COLUMNS,
    PUBLISHED_HEADER,
    PUBLISHED_RESOLUTION,
)
from focus_dagster.files import write_bytes_atomically
from focus_dagster.synthetic.common import (
    ImageJob,
    SynthManifest,
    SynthPlan,
    clipped_normal,
    cup_disc_ratio,
    scaled_size,
    seeds,
)
from focus_dagster.synthetic.render import FundusSpec

KEY = "papila"
CAMERA = "topcon_nw400"
DIAGNOSIS_COUNTS = [333, 89, 66]  # healthy, glaucoma, suspect eyes in the real dataset
SECOND_EYE_AGREES = 0.75
FEMALE_SHARE = 0.6
ID_SPREAD = 293 / 244  # real patient numbers run to 293 for 244 patients
CONTOUR_PATIENTS = 2
FIXED_TIMESTAMP = (2021, 6, 18, 0, 0, 0)  # the Figshare release month; any fixed date keeps bytes stable


def plan(root: Path, n: int, rng: np.random.Generator, scale: float) -> SynthPlan:
    patients = max(1, math.ceil(n / 2))
    table = sample_rows(patients, rng)
    for eye, rel in EYE_FILES.items():
        write_clinical_workbook(root / rel, table[table["eye"] == eye])
    write_contours(root, table[table["number"].isin(table["number"].unique()[:CONTOUR_PATIENTS])], rng, scale)
    (root / IMAGE_DIR).mkdir(parents=True, exist_ok=True)
    jobs = image_jobs(table, rng, scale)
    manifest = SynthManifest(KEY, root, label_rows=len(table), images_written=len(jobs))
    if n % 2:
        manifest.notes.append(f"n={n} rounded up to {len(table)}: every PAPILA patient has both eyes")
    return SynthPlan(manifest, jobs)


def sample_rows(patients: int, rng: np.random.Generator) -> pd.DataFrame:
    """One row per (patient, eye), right eyes first, in the published columns plus `eye` and `number`."""
    number = np.sort(rng.choice(np.arange(1, max(patients, round(patients * ID_SPREAD)) + 1), patients, replace=False))
    diagnosis = eye_diagnoses(patients, rng)
    age = clipped_normal(rng, 62, 14, 18, 90, patients).round().astype(int)
    gender = (rng.random(patients) < FEMALE_SHARE).astype(int)
    frames = []
    for e, eye in enumerate(("OD", "OS")):
        columns = {"number": number, "eye": eye, "ID": [f"#{k:03d}" for k in number], "Age": age,
                   "Gender": gender, "Diagnosis": diagnosis[:, e]}
        frames.append(pd.DataFrame({**columns, **clinical_measurements(diagnosis[:, e], age, rng)}))
    return pd.concat(frames, ignore_index=True)


def eye_diagnoses(patients: int, rng: np.random.Generator) -> np.ndarray:
    """(patients, 2) diagnoses; the second eye mostly shares the first's. From 10 patients on, both GON
    classes are present."""
    p = np.asarray(DIAGNOSIS_COUNTS, dtype=float) / sum(DIAGNOSIS_COUNTS)
    first = rng.choice(3, size=patients, p=p)
    second = np.where(rng.random(patients) < SECOND_EYE_AGREES, first, rng.choice(3, size=patients, p=p))
    both = np.stack([first, second], axis=1)
    if patients >= 10:
        if not (both > 0).any():
            both[0, 0] = 1
        if (both > 0).all():
            both[-1, 1] = 0
    return both


def clinical_measurements(diagnosis: np.ndarray, age: np.ndarray, rng: np.random.Generator) -> dict:
    """Plausible refraction, lens status, IOP, pachymetry, axial length and sparse visual-field MD per eye."""
    m = len(diagnosis)
    gon = diagnosis > 0
    cylinder = -np.round(np.abs(rng.normal(0, 0.8, m)) * 4) / 4
    return {
        "Refractive_Defect_dioptre_1": np.round(rng.normal(0.25, 2.5, m) * 4) / 4,
        "Refractive_Defect_dioptre_2": cylinder,
        "Refractive_Defect_astigmatism": np.where(cylinder == 0, None, rng.integers(0, 181, m)),
        "Phakic/Pseudophakic": (rng.random(m) < np.where(age > 65, 0.35, 0.05)).astype(int),
        "IOP_Pneumatic": np.where(rng.random(m) < 0.08, None, np.round(rng.normal(15.5, 3.2, m) + 3 * gon, 1)),
        "IOP_Perkins": np.where(rng.random(m) < 0.6, None, np.round(rng.normal(15, 3, m) + 3 * gon)),
        "Pachymetry": np.round(rng.normal(545, 35, m)).astype(int),
        "Axial_Length": np.where(rng.random(m) < 0.1, None, np.round(rng.normal(23.5, 1.1, m), 2)),
        "VF_MD": np.where(rng.random(m) < 0.55, None, np.round(rng.normal(-1.2, 1.8, m) - 5 * gon, 2)),
    }


# ------------------------------------------------------------------------------------------ workbooks


def write_clinical_workbook(path: Path, rows: pd.DataFrame) -> None:
    """One eye's workbook: merged group row, sub-header row, then one patient per row."""
    from openpyxl import Workbook

    workbook = Workbook()
    sheet = workbook.active
    sheet.append([group for group, _ in PUBLISHED_HEADER])
    sheet.append([sub for _, sub in PUBLISHED_HEADER])
    for start, end, vertical in header_merges():
        sheet.merge_cells(start_row=1, start_column=start, end_row=2 if vertical else 1, end_column=end)
    for record in rows[PUBLISHED_COLUMNS].itertuples(index=False):
        sheet.append([_cell(v) for v in record])
    write_bytes_atomically(path, reproducible_xlsx_bytes(workbook))


def header_merges() -> list[tuple[int, int, bool]]:
    """(first column, last column, vertical) of each merged header cell, 1-based, from PUBLISHED_HEADER."""
    merges = []
    j = 0
    while j < len(PUBLISHED_HEADER):
        group, sub = PUBLISHED_HEADER[j]
        end = j
        while end + 1 < len(PUBLISHED_HEADER) and not PUBLISHED_HEADER[end + 1][0]:
            end += 1
        if end > j:
            merges.append((j + 1, end + 1, False))
        elif group and not sub:
            merges.append((j + 1, j + 1, True))
        j = end + 1
    return merges


def _cell(value):
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def reproducible_xlsx_bytes(workbook) -> bytes:
    """The workbook's .xlsx bytes with fixed timestamps, so that the same rows always give the same file."""
    import datetime as dt

    workbook.properties.created = dt.datetime(*FIXED_TIMESTAMP)
    raw = io.BytesIO()
    workbook.save(raw)
    stamp = dt.datetime(*FIXED_TIMESTAMP).strftime("%Y-%m-%dT%H:%M:%SZ").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(raw) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "docProps/core.xml":
                data = re.sub(rb"(<dcterms:modified[^>]*>)[^<]*(</dcterms:modified>)", rb"\g<1>" + stamp + rb"\g<2>",
                              data)
            entry = zipfile.ZipInfo(info.filename, date_time=FIXED_TIMESTAMP)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = info.external_attr
            dst.writestr(entry, data)
    return out.getvalue()


def write_contours(root: Path, rows: pd.DataFrame, rng: np.random.Generator, scale: float) -> None:
    """Disc and cup outlines of two experts for the given eyes, as the publisher's "x y" text files."""
    width, height = scaled_size(PUBLISHED_RESOLUTION, scale)
    for row in rows.itertuples(index=False):
        stem = f"RET{row.number:03d}{row.eye}"
        cx, cy = width * rng.uniform(0.45, 0.55), height * rng.uniform(0.45, 0.55)
        disc = min(width, height) * rng.uniform(0.12, 0.16)
        cup = disc * (0.7 if row.Diagnosis > 0 else 0.35)
        for expert in (1, 2):
            wobble = rng.uniform(0.95, 1.05)
            for part, radius in (("disc", disc), ("cup", cup)):
                text = ellipse_points(cx, cy, radius * wobble, radius * wobble * 1.08)
                write_bytes_atomically(root / CONTOUR_DIR / f"RET{row.number:03d}_{row.eye}_{part}_exp{expert}.txt", text.encode())


def ellipse_points(cx: float, cy: float, rx: float, ry: float, points: int = 48) -> str:
    angles = np.linspace(0, 2 * np.pi, points, endpoint=False)
    return "".join(f"{cx + rx * np.cos(a):.2f} {cy + ry * np.sin(a):.2f}\n" for a in angles)


# ---------------------------------------------------------------------------------------------- images


def image_jobs(table: pd.DataFrame, rng: np.random.Generator, scale: float) -> list[ImageJob]:
    width, height = scaled_size(PUBLISHED_RESOLUTION, scale)
    cdr = cup_disc_ratio(rng, table["Diagnosis"] > 0)
    image_seeds = seeds(rng, len(table))
    return [
        ImageJob(
            rel_path=f"{IMAGE_DIR}/RET{row.number:03d}{row.eye}.jpg",
            seed=image_seeds[i],
            spec=FundusSpec(
                width=width,
                height=height,
                camera=CAMERA,
                cup_disc_ratio=float(cdr[i]),
                eye="R" if row.eye == "OD" else "L",
            ),
        )
        for i, row in enumerate(table.itertuples(index=False))
    ]
