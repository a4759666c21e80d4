"""The label rules: how each dataset's own columns become the three benchmark tasks.

One rule per dataset, each written once, with an id that every harmonised row carries (`label_rule`)
and a description the UI shows. A rule has three parts:

- `subset`: which native records belong to the benchmark (the rest are rejected with a reason);
- `tasks`: any_dr / referable_dr / gon as functions of the native columns. A task the dataset does not
  carry is absent and becomes null ("not defined"), never 0;
- `label_columns`: the native columns the labels come from (or that restate them), which a yes/no
  question may never show the model;
- `metadata`: age, sex (F/M), quality (adequate/inadequate), camera and eye (R/L) from the dataset's own
  codes (sex codes differ per dataset: BRSET 1 = male, mBRSET 1 = male, PAPILA 0 = male).

Rules follow the reference benchmark exactly (see datasets.md); the consistency check recomputes every
label from the stored records with these functions and with an independent SQL form of each rule
(focus_dagster/labels/rule_sql.py), and requires all three to agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np
import pandas as pd

TASKS = ("any_dr", "referable_dr", "gon")
# A task label is one of these or null: null means "not defined for this image", never a negative.
TASK_VALUES = (0, 1)
# The metadata the fairness and quality axes group by (datasets.md); eye is laterality, kept where given.
AXIS_METADATA = ("age", "sex", "quality", "camera")
METADATA = (*AXIS_METADATA, "eye")
# The canonical codes of the coded metadata columns, the only values a rule may write there (age and camera
# are free values). Each rule maps its dataset's own codes onto these.
METADATA_CODES = {"sex": ("F", "M"), "quality": ("adequate", "inadequate"), "eye": ("R", "L")}

Frame = pd.DataFrame
Series = pd.Series



def defined_tasks(labels: pd.DataFrame) -> list[str]:
    """The tasks a dataset's harmonised labels define (a non-null label on at least one image), in TASKS order."""
    return [task for task in TASKS if task in labels and labels[task].notna().any()]

@dataclass(frozen=True)
class SubsetFilter:
    """Records outside the benchmark subset: `excluded(records)` is True for rows to reject."""

    reason_code: str
    reason: str
    excluded: Callable[[Frame], Series]


@dataclass(frozen=True)
class LabelRule:
    id: str
    dataset: str
    description: str
    tasks: dict[str, Callable[[Frame], Series]]
    subset: tuple[SubsetFilter, ...] = ()
    metadata: Callable[[Frame], dict[str, Series]] = field(default=lambda records: {})  # no demographics
    # Native columns that define the labels or restate them (file names included where they encode the
    # class): never shown to a model that is asked about the label (the yes/no question leak check).
    label_columns: tuple[str, ...] = ()

    def task_labels(self, records: Frame) -> Frame:
        """The three task columns for `records` (nullable 0/1; null where the dataset lacks the task)."""
        out = pd.DataFrame(index=records.index)
        for task in TASKS:
            if task in self.tasks:
                out[task] = as_label(self.tasks[task](records))
            else:
                out[task] = pd.Series(pd.NA, index=records.index, dtype="Int8")
        return out


# ------------------------------------------------------------------------------------------ small helpers


def num(records: Frame, column: str) -> Series:
    """A native column as numbers (DuckDB returns nullable integers as floats with NaN)."""
    return pd.to_numeric(records[column], errors="coerce")


def as_label(values: Series) -> Series:
    """Booleans / 0-1 numbers as nullable Int8; missing stays missing."""
    numeric = pd.to_numeric(values.astype("object").where(values.notna(), None), errors="coerce")
    return numeric.astype("Float64").round().astype("Int8")


def defined_where(condition: Series, defined: Series) -> Series:
    """`condition` as 0/1 where `defined`, null elsewhere (a blank grade is not a negative)."""
    return condition.astype("Float64").where(defined, pd.NA)


def mapped(values: Series, mapping: dict) -> Series:
    """Map a coded column through the dataset's own table; unknown codes become null."""
    def lookup(v):
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return None
        key = int(v) if isinstance(v, (int, float, np.integer, np.floating)) else str(v)
        return mapping.get(key)

    return values.map(lookup).astype(object)


def constant(records: Frame, value) -> Series:
    return pd.Series(value, index=records.index, dtype=object)


def icdr_tasks(grade: Callable[[Frame], Series], edema: Callable[[Frame], Series]) -> dict:
    """Any DR = ICDR >= 1; referable DR = ICDR >= 2 or macular edema (both null where the grade is blank).
    The rules are built at import, so the tasks are module functions bound to the dataset's columns (a lambda
    made here would be fixed at import, out of `make mutate`'s reach)."""
    return {"any_dr": partial(_icdr_any_dr, grade), "referable_dr": partial(_icdr_referable_dr, grade, edema)}


def _icdr_any_dr(grade: Callable[[Frame], Series], r: Frame) -> Series:
    return defined_where(grade(r) >= 1, grade(r).notna())


def _icdr_referable_dr(grade: Callable[[Frame], Series], edema: Callable[[Frame], Series], r: Frame) -> Series:
    # A blank edema flag is no edema (datasets.md): False, so that `|` never turns a graded image into null.
    return defined_where((grade(r) >= 2) | edema(r).fillna(False).astype(bool), grade(r).notna())


# ---------------------------------------------------------------------------------------------- the rules

JSIEC_ANY_DR = ("DR1", "DR2", "DR3", "Blur fundus with suspected PDR")
JSIEC_REFERABLE = ("DR2", "DR3", "Blur fundus with suspected PDR")


def _brset_metadata(r: Frame) -> dict:
    return {
        "age": num(r, "patient_age"),
        "sex": mapped(num(r, "patient_sex"), {1: "M", 2: "F"}),
        "quality": mapped(r["quality"], {"Adequate": "adequate", "Inadequate": "inadequate"}),
        "camera": r["camera"].astype(object),
        "eye": mapped(num(r, "exam_eye"), {1: "R", 2: "L"}),
    }


def _mbrset_metadata(r: Frame) -> dict:
    return {
        "age": num(r, "age"),
        "sex": mapped(num(r, "sex"), {0: "F", 1: "M"}),
        "quality": mapped(r["final_quality"], {"yes": "adequate", "no": "inadequate"}),
        "camera": constant(r, "Phelcom Eyer"),
        "eye": mapped(r["laterality"], {"right": "R", "left": "L"}),
    }


def _papila_metadata(r: Frame) -> dict:
    return {
        "age": num(r, "Age"),
        "sex": mapped(num(r, "Gender"), {0: "M", 1: "F"}),
        "eye": mapped(r["eye"], {"OD": "R", "OS": "L"}),
    }


def _mbrset_view(r: Frame) -> Series:
    return r["file"].astype(str).str.extract(r"\.(\d)\.[^.]+$", expand=False)


def _messidor_grade(r: Frame) -> Series:
    return num(r, "diagnosis" if "diagnosis" in r else "adjudicated_dr_grade")


# Each rule's parts as named functions (not lambdas inside RULES): one place to read them, and `make mutate`
# mutates function bodies only, so every comparison and column name below is tried by the mutation run.


def _brset_not_diabetic(r: Frame) -> Series:
    return r["diabetes"].astype(str) != "yes"


def _brset_grade(r: Frame) -> Series:
    return num(r, "DR_ICDR")


def _brset_edema(r: Frame) -> Series:
    return num(r, "macular_edema") == 1


def _brset_gon(r: Frame) -> Series:
    return num(r, "increased_cup_disc")


def _mbrset_not_macula_centred(r: Frame) -> Series:
    return ~_mbrset_view(r).isin(["1", "3"])


def _mbrset_grade(r: Frame) -> Series:
    return num(r, "final_icdr")


def _mbrset_blank_grade(r: Frame) -> Series:
    return _mbrset_grade(r).isna()


def _mbrset_edema(r: Frame) -> Series:
    return r["final_edema"].astype(str) == "yes"


def _papila_gon(r: Frame) -> Series:
    diagnosis = num(r, "Diagnosis")
    return diagnosis.isin([1, 2]).where(diagnosis.notna())


def _rfmid_dr(r: Frame) -> Series:
    return num(r, "DR")


def _rfmid_cme(r: Frame) -> Series:
    return num(r, "CME")


def _rfmid_2_me(r: Frame) -> Series:
    return num(r, "ME")


def _idrid_grade(r: Frame) -> Series:
    return num(r, "Retinopathy grade")


def _idrid_edema(r: Frame) -> Series:
    return num(r, "Risk of macular edema") > 0


def _messidor_ungradable(r: Frame) -> Series:
    return num(r, "adjudicated_gradable") == 0


def _messidor_blank_grade(r: Frame) -> Series:
    return _messidor_grade(r).isna()


def _messidor_edema(r: Frame) -> Series:
    return num(r, "adjudicated_dme") == 1


def _refuge_gon(r: Frame) -> Series:
    return num(r, "Label")


def _refuge_unlabelled(r: Frame) -> Series:
    return _refuge_gon(r).isna()


def _refuge_metadata(r: Frame) -> dict:
    return {"camera": r["camera"].astype(object)}


def _g1020_gon(r: Frame) -> Series:
    return num(r, "binaryLabels")


def _jsiec_any_dr(r: Frame) -> Series:
    return r["class_name"].isin(JSIEC_ANY_DR)


def _jsiec_referable_dr(r: Frame) -> Series:
    return r["class_name"].isin(JSIEC_REFERABLE)


RULES: dict[str, LabelRule] = {
    rule.dataset: rule
    for rule in [
        LabelRule(
            id="brset.icdr",
            dataset="brset",
            label_columns=("DR_ICDR", "DR_SDRG", "diabetic_retinopathy", "macular_edema", "increased_cup_disc"),
            description="Diabetic patients only. any_dr = DR_ICDR >= 1; referable_dr = DR_ICDR >= 2 or "
            "macular_edema = 1; gon = increased_cup_disc. Sex 1 = M, 2 = F.",
            subset=(SubsetFilter("subset:not_diabetic", "not in the benchmark subset (diabetes != yes)",
                                 _brset_not_diabetic),),
            tasks={**icdr_tasks(_brset_grade, _brset_edema), "gon": _brset_gon},
            metadata=_brset_metadata,
        ),
        LabelRule(
            id="mbrset.icdr",
            dataset="mbrset",
            label_columns=("final_icdr", "final_edema"),
            description="Macula-centred images (*.1, *.3) with a final ICDR grade. any_dr = final_icdr >= 1; "
            "referable_dr = final_icdr >= 2 or final_edema = yes (blank edema = no); no glaucoma label. "
            "Sex 0 = F, 1 = M.",
            subset=(
                SubsetFilter("subset:not_macula_centred", "not macula-centred (views .2/.4 are disc-centred)",
                             _mbrset_not_macula_centred),
                SubsetFilter("label:blank_grade", "final_icdr is blank", _mbrset_blank_grade),
            ),
            tasks=icdr_tasks(_mbrset_grade, _mbrset_edema),
            metadata=_mbrset_metadata,
        ),
        LabelRule(
            id="papila.diagnosis",
            dataset="papila",
            label_columns=("Diagnosis",),
            description="gon = Diagnosis in {1 glaucoma, 2 suspect} (suspects positive, as the reference). "
            "Gender 0 = M, 1 = F.",
            tasks={"gon": _papila_gon},
            metadata=_papila_metadata,
        ),
        LabelRule(
            id="rfmid.dr_cme",
            dataset="rfmid",
            label_columns=("DR", "CME"),
            description="any_dr = DR; referable_dr = CME (the reference's choice: a degenerate task, 7 positives "
            "in all of RFMiD). No demographics.",
            tasks={"any_dr": _rfmid_dr, "referable_dr": _rfmid_cme},
        ),
        LabelRule(
            id="rfmid_2.dr_me",
            dataset="rfmid_2",
            label_columns=("DR", "ME"),
            description="any_dr = DR; referable_dr = ME (4 positives in all: degenerate). No demographics.",
            tasks={"any_dr": _rfmid_dr, "referable_dr": _rfmid_2_me},
        ),
        LabelRule(
            id="idrid.grade",
            dataset="idrid",
            label_columns=("Retinopathy grade", "Risk of macular edema"),
            description="any_dr = Retinopathy grade >= 1; referable_dr = grade >= 2 or Risk of macular edema > 0. "
            "Images keyed by (split, name).",
            tasks=icdr_tasks(_idrid_grade, _idrid_edema),
        ),
        LabelRule(
            id="messidor_2.adjudicated",
            dataset="messidor_2",
            label_columns=("diagnosis", "adjudicated_dr_grade", "adjudicated_dme"),
            description="Gradable images only. any_dr = adjudicated grade >= 1; referable_dr = grade >= 2 or "
            "adjudicated_dme = 1.",
            subset=(
                SubsetFilter("label:ungradable", "adjudicated as not gradable", _messidor_ungradable),
                SubsetFilter("label:blank_grade", "adjudicated grade is blank", _messidor_blank_grade),
            ),
            tasks=icdr_tasks(_messidor_grade, _messidor_edema),
        ),
        LabelRule(
            id="refuge.label",
            dataset="refuge",
            label_columns=("Label", "ImgName"),
            description="gon = Label (1 = glaucoma); the unlabelled test split is rejected. Split: official "
            "train = train, official val = test (the reference benchmark).",
            subset=(SubsetFilter("label:unlabelled", "no glaucoma label (unlabelled split)", _refuge_unlabelled),),
            tasks={"gon": _refuge_gon},
            metadata=_refuge_metadata,
        ),
        LabelRule(
            id="g1020.binary",
            dataset="g1020",
            label_columns=("binaryLabels",),
            description="gon = binaryLabels (1 = glaucoma). No patient column: splits may leak patients.",
            tasks={"gon": _g1020_gon},
        ),
        LabelRule(
            id="jsiec1000.folder",
            dataset="jsiec1000",
            label_columns=("class_folder", "class_code", "class_name"),
            description="any_dr = class folder DR1, DR2, DR3 or blur with suspected PDR; referable_dr = DR2, DR3 "
            "or suspected PDR (DR1 negative); glaucoma not evaluated.",
            tasks={"any_dr": _jsiec_any_dr, "referable_dr": _jsiec_referable_dr},
        ),
    ]
}
