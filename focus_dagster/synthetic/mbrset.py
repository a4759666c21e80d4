"""mBRSET look-alike: `labels_mbrset.csv` + `images/{patient}.{1..4}.jpg`, smartphone-camera images.

Four images per patient (`.1`/`.3` macula-centred right/left, `.2`/`.4` disc-centred), with the real
file's rates: about 5% blank `final_icdr`, 5% blank `final_edema`, 5.7% inadequate quality; `sex` uses
the dataset's own coding, 0 = female and 1 = male.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.mbrset import PUBLISHED_COLUMNS
from focus_dagster.synthetic.common import (
    ImageJob,
    SynthManifest,
    SynthPlan,
    choice,
    clipped_normal,
    quality_degradation,
    scaled_size,
    seeds,
    write_csv,
)
from focus_dagster.synthetic.render import FundusSpec

KEY = "mbrset"
NATIVE_SIZE = (1600, 1600)
# Real counts of final_icdr 0..4 among graded rows, and blank rates.
ICDR_COUNTS = [3750, 272, 568, 82, 212]
BLANK_ICDR_RATE = 280 / 5164
BLANK_EDEMA_RATE = 265 / 5164
EDEMA_RATE_BY_GRADE = [0.01, 0.15, 0.35, 0.6, 0.6]


def plan(root: Path, n: int, rng: np.random.Generator, scale: float) -> SynthPlan:
    labels = sample_labels(n, rng)
    write_csv(root / "labels_mbrset.csv", labels[PUBLISHED_COLUMNS])
    (root / "images").mkdir(parents=True, exist_ok=True)
    jobs = image_jobs(labels, rng, scale)
    return SynthPlan(SynthManifest(KEY, root, label_rows=len(labels), images_written=len(jobs)), jobs)


def sample_labels(n: int, rng: np.random.Generator) -> pd.DataFrame:
    patients = max(1, int(np.ceil(n / 4)))
    patient = np.repeat(np.arange(1, patients + 1), 4)[:n]
    view = np.tile([1, 2, 3, 4], patients)[:n]
    per_patient = lambda values: np.asarray(values)[patient - 1]  # noqa: E731 - one draw per patient
    grade_eye = choice(rng, range(5), ICDR_COUNTS, 2 * patients).astype(int).reshape(patients, 2)
    grade = grade_eye[patient - 1, (view > 2).astype(int)]
    edema = rng.random(n) < np.take(EDEMA_RATE_BY_GRADE, grade)
    icdr_text = np.where(rng.random(n) < BLANK_ICDR_RATE, "", grade.astype(str))
    edema_text = np.where(rng.random(n) < BLANK_EDEMA_RATE, "", np.where(edema, "yes", "no"))
    quality_ok = rng.random(n) >= 292 / 5164
    return pd.DataFrame(
        {
            "patient": patient,
            "age": per_patient(clipped_normal(rng, 61.4, 11.6, 18, 95, patients).round().astype(int)),
            "sex": per_patient((rng.random(patients) < 1804 / 5164).astype(int)),
            "dm_time": per_patient(rng.integers(1, 30, patients)),
            "insulin": per_patient(rng.integers(0, 2, patients)),
            "insulin_time": "",
            "oraltreatment_dm": per_patient(rng.integers(0, 2, patients)),
            "systemic_hypertension": per_patient(rng.integers(0, 2, patients)),
            "insurance": per_patient(rng.integers(0, 2, patients)),
            "educational_level": per_patient(rng.integers(1, 6, patients)),
            "alcohol_consumption": per_patient(rng.integers(0, 2, patients)),
            "smoking": per_patient(rng.integers(0, 2, patients)),
            "obesity": per_patient(rng.integers(0, 2, patients)),
            "vascular_disease": per_patient(rng.integers(0, 2, patients)),
            "acute_myocardial_infarction": per_patient(rng.integers(0, 2, patients)),
            "nephropathy": per_patient(rng.integers(0, 2, patients)),
            "neuropathy": per_patient(rng.integers(0, 2, patients)),
            "diabetic_foot": per_patient(rng.integers(0, 2, patients)),
            "file": [f"{p}.{v}.jpg" for p, v in zip(patient, view)],
            "laterality": np.where(view <= 2, "right", "left"),
            "final_artifacts": np.where(rng.random(n) < 4272 / 5164, "yes", "no"),
            "final_quality": np.where(quality_ok, "yes", "no"),
            "final_icdr": icdr_text,
            "final_edema": edema_text,
            "true_grade": grade,
            "true_edema": edema,
        }
    )


def image_jobs(labels: pd.DataFrame, rng: np.random.Generator, scale: float) -> list[ImageJob]:
    width, height = scaled_size(NATIVE_SIZE, scale)
    blur, illumination, artifacts = quality_degradation(rng, (labels["final_quality"] == "no").to_numpy())
    image_seeds = seeds(rng, len(labels))
    cdr = rng.uniform(0.2, 0.5, len(labels))
    return [
        ImageJob(
            rel_path=f"images/{row.file}",
            seed=image_seeds[i],
            spec=FundusSpec(
                width=width,
                height=height,
                camera="phelcom_eyer",
                dr_grade=int(row.true_grade),
                macular_edema=bool(row.true_edema),
                cup_disc_ratio=float(cdr[i]),
                eye="R" if row.laterality == "right" else "L",
                blur=float(blur[i]),
                illumination=float(illumination[i]),
                artifacts=float(artifacts[i]),
            ),
        )
        for i, row in enumerate(labels.itertuples(index=False))
    ]
