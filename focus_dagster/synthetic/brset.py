"""BRSET look-alike: `labels.csv` (UTF-8 with BOM, all 34 published columns) + `fundus_photos/imgNNNNN.jpg`.

Prevalences follow the real file. One deliberate deviation: half of the patients are diabetic (real:
15.9%) so that a small look-alike still carries a usable benchmark subset; within the diabetic subset the
ICDR, edema, cup-disc, sex, age, camera and quality rates are the real ones.
Planted effect: lesions are rendered fainter for women (`patient_sex == 2`), so a fair model shows a
sex gap here (see focus_dagster.synthetic.PLANTED_EFFECTS).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.brset import PUBLISHED_COLUMNS, QUALITY_FLAGS
from focus_dagster.synthetic.common import (
    ImageJob,
    SynthManifest,
    SynthPlan,
    choice,
    clipped_normal,
    cup_disc_ratio,
    quality_degradation,
    scaled_size,
    seeds,
    write_csv,
)
from focus_dagster.synthetic.render import FundusSpec

KEY = "brset"
CAMERAS = {"Canon CR": ("canon_cr", (2048, 1536)), "NIKON NF5050": ("nikon_nf5050", (1956, 1934))}
DIABETIC_FRACTION = 0.5
FEMALE_LESION_CONTRAST = 0.45
# Real ICDR counts 0..4 and the edema rate per grade, in and outside the diabetic subset.
ICDR_DIABETIC = [1922, 107, 181, 127, 242]
ICDR_OTHER = [13288, 55, 129, 63, 152]
EDEMA_RATE_BY_GRADE = [20 / 1922, 18 / 107, 79 / 181, 83 / 127, 75 / 242]
FLAG_INADEQUATE_RATE = {"focus": 542 / 16266, "iluminaton": 84 / 16266, "image_field": 1401 / 16266, "artifacts": 57 / 16266}


def plan(root: Path, n: int, rng: np.random.Generator, scale: float) -> SynthPlan:
    labels = sample_labels(n, rng)
    write_csv(root / "labels.csv", labels[PUBLISHED_COLUMNS], bom=True)
    (root / "fundus_photos").mkdir(parents=True, exist_ok=True)
    jobs = image_jobs(labels, rng, scale)
    return SynthPlan(SynthManifest(KEY, root, label_rows=len(labels), images_written=len(jobs)), jobs)


def sample_labels(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """Rows of a BRSET-like labels.csv: patients with two eyes (a few with one), real code values."""
    patient = patient_ids(n, rng)
    diabetic = rng.random(n) < DIABETIC_FRACTION
    diabetic = _per_patient(patient, diabetic)
    grade = np.where(
        diabetic,
        choice(rng, range(5), ICDR_DIABETIC, n).astype(int),
        choice(rng, range(5), ICDR_OTHER, n).astype(int),
    )
    edema = rng.random(n) < np.take(EDEMA_RATE_BY_GRADE, grade)
    age = _per_patient(patient, clipped_normal(rng, 59.3, 19.2, 10, 92, n).round().astype(int))
    age_text = np.where(~diabetic & _per_patient(patient, rng.random(n) < 0.4), "NA", age.astype(str))
    sex = _per_patient(patient, np.where(rng.random(n) < 0.39, 1, 2))
    camera = np.where(rng.random(n) < np.where(diabetic, 0.982, 0.6), "Canon CR", "NIKON NF5050")
    flags = {f: np.where(rng.random(n) < rate, 2, 1) for f, rate in FLAG_INADEQUATE_RATE.items()}
    inadequate = np.any([flags[f] == 2 for f in QUALITY_FLAGS], axis=0)
    frame = pd.DataFrame(
        {
            "image_id": [f"img{i + 1:05d}" for i in range(n)],
            "patient_id": patient,
            "camera": camera,
            "patient_age": age_text,
            "comorbidities": np.where(diabetic, choice(rng, ["diabetes", "diabetes, SAH", "diabetes1"], [3, 4, 1], n),
                                      choice(rng, ["NA", "0", "SAH"], [5, 2, 1], n)),
            "diabetes_time_y": np.where(diabetic, choice(rng, ["5", "10", "15", "20", "NA"], [2, 3, 2, 2, 1], n), ""),
            "insuline": np.where(diabetic, choice(rng, ["yes", "no", "NA"], [4, 4, 4], n), ""),
            "patient_sex": sex,
            "exam_eye": _eyes(patient),
            "diabetes": np.where(diabetic, "yes", "no"),
            "nationality": "Brazil",
            "optic_disc": np.where(rng.random(n) < 0.2, 2, 1),
            "vessels": np.where(rng.random(n) < 0.05, 2, 1),
            "macula": np.where(rng.random(n) < 0.29, 2, 1),
            "DR_SDRG": grade,
            "DR_ICDR": grade,
            **{f: flags[f] for f in QUALITY_FLAGS},
            "diabetic_retinopathy": (grade >= 1).astype(int),
            "macular_edema": edema.astype(int),
            "scar": (rng.random(n) < 0.018).astype(int),
            "nevus": (rng.random(n) < 0.005).astype(int),
            "amd": (rng.random(n) < 0.02).astype(int),
            "vascular_occlusion": (rng.random(n) < 0.006).astype(int),
            "hypertensive_retinopathy": (rng.random(n) < 0.012).astype(int),
            "drusens": (rng.random(n) < 0.17).astype(int),
            "hemorrhage": ((grade >= 2) & (rng.random(n) < 0.6)).astype(int),
            "retinal_detachment": (rng.random(n) < 0.001).astype(int),
            "myopic_fundus": (rng.random(n) < 0.04).astype(int),
            "increased_cup_disc": (rng.random(n) < 3202 / 16266).astype(int),
            "other": (rng.random(n) < 0.047).astype(int),
            "quality": np.where(inadequate, "Inadequate", "Adequate"),
        }
    )
    return frame


def image_jobs(labels: pd.DataFrame, rng: np.random.Generator, scale: float) -> list[ImageJob]:
    n = len(labels)
    inadequate = (labels["quality"] == "Inadequate").to_numpy()
    blur, illumination, artifacts = quality_degradation(rng, inadequate)
    cdr = cup_disc_ratio(rng, labels["increased_cup_disc"] == 1)
    image_seeds = seeds(rng, n)
    jobs = []
    for i, row in enumerate(labels.itertuples(index=False)):
        camera, native = CAMERAS[row.camera]
        width, height = scaled_size(native, scale)
        extra = tuple(name for name, flag in (("drusen", row.drusens), ("myopic", row.myopic_fundus)) if flag == 1)
        jobs.append(
            ImageJob(
                rel_path=f"fundus_photos/{row.image_id}.jpg",
                seed=image_seeds[i],
                spec=FundusSpec(
                    width=width,
                    height=height,
                    camera=camera,
                    dr_grade=int(row.DR_ICDR),
                    macular_edema=bool(row.macular_edema),
                    cup_disc_ratio=float(cdr[i]),
                    eye="R" if row.exam_eye == 1 else "L",
                    lesion_contrast=FEMALE_LESION_CONTRAST if row.patient_sex == 2 else 1.0,
                    blur=float(blur[i]),
                    illumination=float(illumination[i]),
                    artifacts=float(artifacts[i]),
                    extra=extra,
                ),
            )
        )
    return jobs


def patient_ids(n: int, rng: np.random.Generator) -> np.ndarray:
    """Consecutive patient ids, two images per patient except for about one patient in ten."""
    ids, patient = [], 0
    while len(ids) < n:
        patient += 1
        ids.extend([patient] * (1 if rng.random() < 0.1 else 2))
    return np.asarray(ids[:n])


def _per_patient(patient: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Make a per-image draw constant within a patient (the patient's first image wins)."""
    first = pd.Series(values).groupby(patient).transform("first")
    return first.to_numpy()


def _eyes(patient: np.ndarray) -> np.ndarray:
    """1 = right for a patient's first image, 2 = left for the second."""
    return pd.Series(patient).groupby(patient).cumcount().to_numpy() % 2 + 1
