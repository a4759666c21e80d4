"""A dataset of the user's own, declared in focus.yaml: the schema of its declaration.

A clinic export (a label table and its images) becomes a FOCUS dataset without code. The declaration says
where the table is, which column names each image, and how its columns become the three tasks, the group
attributes and the split:

    datasets:
      clinic:
        root: /data/clinic
        labels: export.csv              # CSV / TSV / XLSX under root; delimiter and encoding detected or set
        image: file                     # column holding the image path relative to root
        patient: patient_id             # optional: split grouping and leakage checks
        tasks:
          any_dr: {icdr: dr_grade}                        # ICDR 0-4: >= 1
          referable_dr: {icdr: dr_grade, edema: dme}      # >= 2 or edema
          gon: {vcdr: cdr, threshold: 0.6}                # or {column: glaucoma, positive: [1, "yes"]}
        attributes:
          age: age
          sex: {column: sex, female: [F, 2], male: [M, 1]}
          quality: {column: quality, adequate: [good, usable]}
        split: {column: split}          # or {seeded: 0.4} (grouped by patient when given)

Each declared column has a scale, and a value outside it sends its row to quarantine with the row, the
column and the value (never a guess): an ICDR grade is a whole number 0-4, a vertical cup-to-disc ratio a
number in [0, 1], an edema flag 0/1/yes/no/true/false (or the values declared), a coded column the values
its declaration lists. A blank cell is "not known": a blank grade leaves the task undefined (null), never
negative; a blank edema flag is no edema (the convention of the published datasets, datasets.md).

The same declaration gives the reader (`focus_dagster/datasets/declared.py`), the label rule
(`focus_dagster/labels/declared.py`, pandas) and the rule's SQL form (`focus_dagster/labels/rule_sql.py`),
which the `rule_consistency` check compares; nothing is written twice by hand.

Values are compared as the user reads them: text without case (`Yes` = `yes`), numbers by value (`1` =
`1.0`). `matches` is that comparison, and the SQL form makes it again in DuckDB.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

TASK_NAMES = ("any_dr", "referable_dr", "gon")
ICDR_SCALE = (0, 4)
# The ICDR grade from which each DR task is positive (datasets.md, "Tasks").
ICDR_THRESHOLDS = {"any_dr": 1, "referable_dr": 2}
# The edema flags a bare `edema: <column>` accepts, as the published files write them.
EDEMA_POSITIVE = (1, "yes", "true", "y")
EDEMA_NEGATIVE = (0, "no", "false", "n")
AGE_RANGE = (0.0, 130.0)
SPLIT_VALUES = {"train": ("train", "training"), "val": ("val", "validation", "valid"), "test": ("test", "testing")}
LABEL_SUFFIXES = (".csv", ".tsv", ".txt", ".xlsx", ".xlsm")
# A dataset key of the user's own names a table (records.<key>) and folders and files of the stores: a plain
# lower-case identifier, so that it can never lead out of a store nor need quoting in SQL.
KEY_PATTERN = r"^[a-z][a-z0-9_]*$"
KEY_MAX = 64

# YAML reads unquoted yes / no / true / false as booleans: in a value list they stand for those words.
YAML_TRUE = ("yes", "true", "y", "on")
YAML_FALSE = ("no", "false", "n", "off")


def _words_for_booleans(values: Any) -> Any:
    if not isinstance(values, (list, tuple)):
        return values
    out: list = []
    for value in values:
        out += list(YAML_TRUE if value is True else YAML_FALSE if value is False else (value,))
    return out


Value = Union[str, int, float]
Values = Annotated[tuple[Value, ...], BeforeValidator(_words_for_booleans)]


class Strict(BaseModel):
    """Every block of a declaration: unknown keys are refused, with their path."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _values(values: list[Value], where: str) -> tuple[Value, ...]:
    if not values:
        raise ValueError(f"{where} lists no value")
    return tuple(values)


# -------------------------------------------------------------------------------------------------- tasks


class EdemaFlag(Strict):
    """A macular edema column and the values that mean edema / no edema."""

    column: str = Field(description="column holding the diabetic macular edema flag")
    positive: Values = Field(EDEMA_POSITIVE, description="values meaning edema")
    negative: Values = Field(EDEMA_NEGATIVE, description="values meaning no edema")


class IcdrTask(Strict):
    """An ICDR grade 0-4: any_dr = grade >= 1; referable_dr = grade >= 2, or edema where `edema` is given."""

    icdr: str = Field(description="column holding the ICDR grade, a whole number 0-4")
    edema: str | EdemaFlag | None = Field(None, description="referable_dr only: the macular edema column "
                                                            "(0/1, yes/no, true/false) or {column, positive, negative}")

    def edema_flag(self) -> EdemaFlag | None:
        return EdemaFlag(column=self.edema) if isinstance(self.edema, str) else self.edema


class VcdrTask(Strict):
    """A vertical cup-to-disc ratio in [0, 1]: positive when it is at least `threshold`."""

    vcdr: str = Field(description="column holding the vertical cup-to-disc ratio, a number in [0, 1]")
    threshold: float = Field(gt=0, lt=1, description="positive when the ratio is >= threshold")


class ColumnTask(Strict):
    """A binary column: `positive` values are 1, `negative` values 0 (every other value 0 when not listed)."""

    column: str = Field(description="column holding the label")
    positive: Values = Field(description="values meaning positive")
    negative: Values | None = Field(None, description="values meaning negative; when left out, every "
                                                                 "other non-blank value is negative")

    @field_validator("positive")
    @classmethod
    def _some_positive(cls, values):
        return _values(list(values), "positive")

    @model_validator(mode="after")
    def _disjoint(self):
        overlap = [v for v in self.positive if self.negative and matches(v, self.negative)]
        if overlap:
            raise ValueError(f"values {overlap} are listed as both positive and negative")
        return self


def _task_form(value: Any) -> str | None:
    """Which form a task is written in, told by its first key (None: no known form, a clear error)."""
    forms = {IcdrTask: "<icdr>", VcdrTask: "<vcdr>", ColumnTask: "<column>"}
    if isinstance(value, BaseModel):
        return forms.get(type(value))
    if isinstance(value, dict):
        return next((f"<{form}>" for form in ("icdr", "vcdr", "column") if form in value), None)
    return None


TaskSpec = Annotated[
    Union[Annotated[IcdrTask, Tag("<icdr>")], Annotated[VcdrTask, Tag("<vcdr>")], Annotated[ColumnTask, Tag("<column>")]],
    Discriminator(_task_form, custom_error_type="task_form",
                  custom_error_message="a task is {icdr: <column>[, edema: <column>]}, {vcdr: <column>, threshold: "
                                       "<0..1>} or {column: <column>, positive: [...][, negative: [...]]}"),
]


class Tasks(Strict):
    """The benchmark tasks this dataset defines (a task left out is undefined here, never negative)."""

    any_dr: TaskSpec | None = Field(None, description="any diabetic retinopathy (ICDR >= 1)")
    referable_dr: TaskSpec | None = Field(None, description="referable DR (ICDR >= 2 or macular edema)")
    gon: TaskSpec | None = Field(None, description="glaucomatous optic neuropathy")

    @model_validator(mode="after")
    def _forms_fit_tasks(self):
        if not self.declared():
            raise ValueError("declare at least one of any_dr, referable_dr, gon")
        if isinstance(self.any_dr, IcdrTask) and self.any_dr.edema is not None:
            raise ValueError("any_dr: edema counts for referable_dr only (any_dr = ICDR >= 1)")
        if isinstance(self.gon, IcdrTask):
            raise ValueError("gon: an ICDR grade is not a glaucoma label; use {vcdr: ..., threshold: ...} or "
                             "{column: ..., positive: [...]}")
        for name in ("any_dr", "referable_dr"):
            if isinstance(getattr(self, name), VcdrTask):
                raise ValueError(f"{name}: a cup-to-disc ratio is not a retinopathy label; use {{icdr: ...}} or "
                                 "{column: ..., positive: [...]}")
        return self

    def declared(self) -> dict[str, IcdrTask | VcdrTask | ColumnTask]:
        return {name: getattr(self, name) for name in TASK_NAMES if getattr(self, name) is not None}


# --------------------------------------------------------------------------------------------- attributes


class CodedColumn(Strict):
    """Common shape of a coded attribute: its column."""

    column: str


class Sex(CodedColumn):
    """Sex: the values meaning female and male (anything else is quarantined)."""

    female: Values
    male: Values


class Quality(CodedColumn):
    """Image quality: the values meaning adequate; `inadequate` lists the others (when left out, every other
    non-blank value is inadequate)."""

    adequate: Values
    inadequate: Values | None = None


class Eye(CodedColumn):
    """Laterality: the values meaning right and left eye."""

    right: Values = ("R", "right", "OD")
    left: Values = ("L", "left", "OS")


class Camera(Strict):
    """The camera: a column, or one constant for the whole dataset."""

    column: str | None = None
    constant: str | None = None

    @model_validator(mode="after")
    def _one(self):
        if (self.column is None) == (self.constant is None):
            raise ValueError("camera is a column name, {column: <column>} or {constant: <camera name>}")
        return self


class Attributes(Strict):
    """The group attributes of the fairness and quality axes, where the export has them."""

    age: str | None = Field(None, description="column holding the age in years")
    sex: Sex | None = None
    quality: Quality | None = None
    camera: str | Camera | None = None
    eye: Eye | None = None

    def camera_spec(self) -> Camera | None:
        return Camera(column=self.camera) if isinstance(self.camera, str) else self.camera

    def published(self) -> tuple[str, ...]:
        """The fairness / quality attributes this declaration provides (coverage is checked for these)."""
        return tuple(name for name in ("age", "sex", "quality", "camera") if getattr(self, name) is not None)


# -------------------------------------------------------------------------------------------------- split


class Split(Strict):
    """The split: a column of the export (train / val / test), or a seeded train/test split with `seeded`
    the test fraction, grouped by patient where `patient` is declared."""

    column: str | None = None
    values: dict[Literal["train", "val", "test"], Values] | None = Field(
        None, description="values of the split column meaning train / val / test (default: train, val or "
                          "validation, test; any case)")
    seeded: float | None = Field(None, gt=0, lt=1, description="test fraction of a seeded, grouped split")

    @model_validator(mode="after")
    def _one(self):
        if (self.column is None) == (self.seeded is None):
            raise ValueError("split is {column: <column>} or {seeded: <test fraction>}, one of the two")
        if self.values is not None and self.column is None:
            raise ValueError("split.values maps the values of split.column; give the column too")
        return self

    def value_map(self) -> dict[str, tuple[Value, ...]]:
        return dict(self.values) if self.values is not None else dict(SPLIT_VALUES)


# ------------------------------------------------------------------------------------------------ dataset


class DatasetDeclaration(Strict):
    """A dataset of your own: a label table under `root`, its image column, and how its columns become the
    tasks, the group attributes and the split."""

    root: str = Field(description="the dataset's folder (relative paths: relative to focus.yaml)")
    labels: str = Field(description="the label table under root: .csv, .tsv, .txt or .xlsx")
    image: str = Field(description="column holding each image's path, relative to root")
    id: str | None = Field(None, description="column holding a unique image id (default: the image path "
                                             "without its extension)")
    patient: str | None = Field(None, description="column holding the patient id: splits are grouped by it")
    delimiter: str | None = Field(None, min_length=1, max_length=1,
                                  description="the CSV delimiter (default: detected among , ; tab |)")
    encoding: str | None = Field(None, description="the text encoding (default: UTF-8, else cp1252)")
    sheet: str | int | None = Field(None, description="the sheet of an .xlsx file (default: the first)")
    title: str | None = Field(None, description="the name shown in the UI and the report (default: the key)")
    source: str | None = Field(None, description="where the data comes from, in words")
    tasks: Tasks
    attributes: Attributes = Field(default_factory=Attributes)
    split: Split = Field(default_factory=lambda: Split(seeded=0.4))

    @field_validator("labels")
    @classmethod
    def _label_suffix(cls, value: str) -> str:
        if not value.lower().endswith(LABEL_SUFFIXES):
            raise ValueError(f"{value!r}: the label table is a {', '.join(LABEL_SUFFIXES)} file")
        return value

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str | None) -> str | None:
        import codecs

        if value is not None:
            try:
                codecs.lookup(value)
            except LookupError:
                raise ValueError(f"unknown encoding {value!r} (e.g. utf-8, utf-8-sig, cp1252, latin-1)") from None
        return value

    def columns(self) -> dict[str, str]:
        """Every column the declaration names, by the key path that names it (for errors that point at both)."""
        named: dict[str, str] = {"image": self.image}
        for key in ("id", "patient"):
            if getattr(self, key):
                named[key] = getattr(self, key)
        for task, spec in self.tasks.declared().items():
            if isinstance(spec, IcdrTask):
                named[f"tasks.{task}.icdr"] = spec.icdr
                if spec.edema_flag():
                    named[f"tasks.{task}.edema"] = spec.edema_flag().column
            elif isinstance(spec, VcdrTask):
                named[f"tasks.{task}.vcdr"] = spec.vcdr
            else:
                named[f"tasks.{task}.column"] = spec.column
        attributes = self.attributes
        if attributes.age:
            named["attributes.age"] = attributes.age
        for name in ("sex", "quality", "eye"):
            if getattr(attributes, name) is not None:
                named[f"attributes.{name}"] = getattr(attributes, name).column
        camera = attributes.camera_spec()
        if camera is not None and camera.column:
            named["attributes.camera"] = camera.column
        if self.split.column:
            named["split.column"] = self.split.column
        return named

    def label_columns(self) -> tuple[str, ...]:
        """The columns the tasks are read from: never shown to a model asked about a label."""
        return tuple(dict.fromkeys(c for k, c in self.columns().items() if k.startswith("tasks.")))

    def rule_digest(self) -> str:
        """A short digest of what decides the labels: a changed declaration gives a new rule id."""
        rule = self.model_dump(mode="json", include={"tasks", "attributes"})
        return hashlib.sha256(json.dumps(rule, sort_keys=True).encode()).hexdigest()[:8]


# ------------------------------------------------------------------------------------------------- values


def number(value: Any) -> float | None:
    """A value as a finite number, or None when it is not one (`'2'` -> 2.0, `'yes'` -> None)."""
    if isinstance(value, bool):
        return None
    try:
        result = float(str(value).strip())
    except ValueError:
        return None
    return result if math.isfinite(result) else None


def split_values(values: tuple[Value, ...]) -> tuple[list[float], list[str]]:
    """A declared value list as (numbers, texts): numbers compare by value, texts without case."""
    numbers = [number(v) for v in values if number(v) is not None]
    texts = [str(v).strip().casefold() for v in values if number(v) is None]
    return numbers, texts


def matches(value: Any, values: tuple[Value, ...]) -> bool:
    """Whether a cell holds one of the declared values: the same number, or the same text without case."""
    numbers, texts = split_values(values)
    as_number = number(value)
    if as_number is not None:
        return as_number in numbers
    return str(value).strip().casefold() in texts


def described(values: tuple[Value, ...]) -> str:
    return ", ".join(repr(v) if isinstance(v, str) else f"{v:g}" for v in values)


def check_key(key: str) -> None:
    """A declared dataset's key, refused unless it matches KEY_PATTERN whole (`re.match`'s `$` would let a
    trailing newline through)."""
    if len(key) > KEY_MAX or not re.fullmatch(KEY_PATTERN, key):
        raise ValueError(f"dataset key {key!r}: lower-case letters, digits and _, starting with a letter, at most "
                         f"{KEY_MAX} characters ({KEY_PATTERN}); rename the key")
