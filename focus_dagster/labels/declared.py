"""The label rule of a dataset declared in focus.yaml, built from its declaration (pandas form).

The declaration's task forms are the task definitions of datasets.md: `{icdr}` gives any_dr = grade >= 1,
`{icdr, edema}` referable_dr = grade >= 2 or edema, `{vcdr, threshold}` gon = ratio >= threshold, `{column,
positive}` the listed values. A blank grade or ratio leaves the task undefined (null); a blank edema flag is
no edema. The SQL form the consistency check compares with is built from the same declaration by
`rule_sql.declared_rule_sql`, independently of these functions.

The rule id is `<key>.declared-<digest>`: the digest covers the tasks and attributes as declared, so labels
made under another declaration never share a rule id.
"""

from __future__ import annotations

import functools

import pandas as pd

from focus_dagster.datasets.declaration import (
    ICDR_THRESHOLDS,
    ColumnTask,
    DatasetDeclaration,
    IcdrTask,
    VcdrTask,
    described,
    matches,
)
from focus_dagster.labels.rules import LabelRule, constant, defined_where, num


def declared_rule(key: str, declaration: DatasetDeclaration) -> LabelRule:
    """The LabelRule of a declared dataset (cached per declaration)."""
    return _rule(key, declaration)


@functools.lru_cache(maxsize=64)
def _rule(key: str, declaration: DatasetDeclaration) -> LabelRule:
    tasks = {name: _task(name, spec) for name, spec in declaration.tasks.declared().items()}
    return LabelRule(
        id=f"{key}.declared-{declaration.rule_digest()}",
        dataset=key,
        description=describe(key, declaration),
        tasks=tasks,
        metadata=lambda records: _metadata(declaration, records),
        label_columns=declaration.label_columns(),
    )


def _task(name: str, spec):
    if isinstance(spec, IcdrTask):
        return _icdr_task(spec, ICDR_THRESHOLDS[name])
    if isinstance(spec, VcdrTask):
        return lambda r: defined_where(num(r, spec.vcdr) >= spec.threshold, num(r, spec.vcdr).notna())
    return _column_task(spec)


def _icdr_task(spec: IcdrTask, threshold: int):
    edema = spec.edema_flag()

    def label(r: pd.DataFrame) -> pd.Series:
        grade = num(r, spec.icdr)
        positive = grade >= threshold
        if edema is not None:
            positive = positive | _holds(r[edema.column], edema.positive)  # blank: no edema
        return defined_where(positive, grade.notna())
    return label


def _column_task(spec: ColumnTask):
    def label(r: pd.DataFrame) -> pd.Series:
        cells = r[spec.column]
        positive = _holds(cells, spec.positive)
        defined = positive | _holds(cells, spec.negative) if spec.negative is not None else cells.notna()
        return defined_where(positive, defined)
    return label


def _holds(cells: pd.Series, values) -> pd.Series:
    """True where a (non-null) cell holds one of `values`, compared as `declaration.matches` does."""
    return cells.map(lambda v: v is not None and not pd.isna(v) and matches(v, values)).astype(bool)


def _coded(cells: pd.Series, groups: dict[str, tuple | None]) -> pd.Series:
    """Canonical codes from the declared values of each (a group without values: every other non-blank cell)."""
    def code(v):
        if v is None or pd.isna(v):
            return None
        listed = next((name for name, values in groups.items() if values is not None and matches(v, values)), None)
        return listed or next((name for name, values in groups.items() if values is None), None)
    return cells.map(code).astype(object)


def _metadata(declaration: DatasetDeclaration, r: pd.DataFrame) -> dict:
    attributes, out = declaration.attributes, {}
    if attributes.age:
        out["age"] = num(r, attributes.age)
    if attributes.sex is not None:
        out["sex"] = _coded(r[attributes.sex.column], {"F": attributes.sex.female, "M": attributes.sex.male})
    if attributes.quality is not None:
        quality = attributes.quality
        out["quality"] = _coded(r[quality.column], {"adequate": quality.adequate, "inadequate": quality.inadequate})
    camera = attributes.camera_spec()
    if camera is not None:
        out["camera"] = constant(r, camera.constant) if camera.constant else r[camera.column].astype(object)
    if attributes.eye is not None:
        out["eye"] = _coded(r[attributes.eye.column], {"R": attributes.eye.right, "L": attributes.eye.left})
    return out


def describe(key: str, declaration: DatasetDeclaration) -> str:
    """The rule in words, as the UI shows it beside `label_rule`."""
    parts = [f"{name} = {_task_words(name, spec)}" for name, spec in declaration.tasks.declared().items()]
    attributes = declaration.attributes
    if attributes.sex is not None:
        parts.append(f"sex F = {described(attributes.sex.female)}, M = {described(attributes.sex.male)}")
    if attributes.quality is not None:
        parts.append(f"quality adequate = {described(attributes.quality.adequate)}")
    return (f"Declared in focus.yaml ({key}, {declaration.labels}). " + "; ".join(parts)
            + ". A blank grade or label is undefined (null), never negative; a blank edema flag is no edema.")


def _task_words(name: str, spec) -> str:
    if isinstance(spec, IcdrTask):
        edema = spec.edema_flag()
        grade = f"{spec.icdr} >= {ICDR_THRESHOLDS[name]} (ICDR 0-4)"
        return grade + (f" or {edema.column} in {{{described(edema.positive)}}}" if edema is not None else "")
    if isinstance(spec, VcdrTask):
        return f"{spec.vcdr} >= {spec.threshold:g} (vertical cup-to-disc ratio)"
    negative = f", negative {{{described(spec.negative)}}}" if spec.negative is not None else ""
    return f"{spec.column} in {{{described(spec.positive)}}}{negative}"
