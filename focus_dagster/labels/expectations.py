"""Data-quality checks on the harmonised label table, each one property validated with Great Expectations.

The harmonised table (one row per image, canonical columns in shared/datasets.md) feeds every score of the
benchmark, so it is checked before anything downstream runs. Each `check_*` function tests one property and
returns a `CheckOutcome`: the verdict, how many rows (or groups) break the property, a few offending items
and the per-expectation results. Properties of single rows run as Great Expectations expectations on the
table itself; properties of groups (a patient across splits, a task within a split, the row accounting) are
first reduced with pandas to a small frame, which is then validated the same way, so every verdict comes from
an expectation and shows up in `expectations`.

The expectations run through `focus_dagster.labels.gx`, which imports Great Expectations only on the first
validation, so importing this module (and loading the code location) stays quick.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from itertools import chain, zip_longest

import pandas as pd

from focus_dagster.labels import gx
from focus_dagster.labels.gx import MAX_EXAMPLES, Verdict
from focus_dagster.labels.rules import AXIS_METADATA, METADATA, METADATA_CODES, TASK_VALUES, TASKS
from focus_dagster.labels.splits import SPLITS

__all__ = [
    "CheckOutcome",
    "check_degenerate_tasks",
    "check_label_values",
    "check_metadata_coverage",
    "check_patient_ids",
    "check_referable_implies_any",
    "check_row_accounting",
    "check_rule_consistency",
    "check_split_has_test",
    "check_split_leakage",
]

# The codes of the canonical harmonised record (shared/datasets.md), as the label rules and splits define them.
ALLOWED_VALUES: dict[str, list] = {
    **{task: list(TASK_VALUES) for task in TASKS},
    "split": list(SPLITS),
    **{column: list(codes) for column, codes in METADATA_CODES.items()},
}
REQUIRED_COLUMNS = ("image_id", "split", "label_rule")
VALUE_COLUMNS = tuple(dict.fromkeys((*REQUIRED_COLUMNS, *ALLOWED_VALUES)))
# Measured by the coverage check; an axis column (AXIS_METADATA) with no value at all fails it, since that
# fairness or quality axis then cannot be reported.
COVERAGE_COLUMNS = (*METADATA, "patient_id")


# ------------------------------------------------------------------------------------------------ outcome


@dataclass
class CheckOutcome:
    """The verdict of one property of the label table, with enough detail to act on it."""

    name: str
    success: bool
    unexpected_count: int
    checked_count: int
    examples: list[dict] = field(default_factory=list)
    expectations: list[dict] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """Everything above as plain JSON types, ready to be shown as asset-check metadata."""
        return gx.jsonable(asdict(self))


# ------------------------------------------------------------------------------------------------- checks


def check_label_values(labels: pd.DataFrame) -> CheckOutcome:
    """Every label and metadata code is one the benchmark knows.

    Task labels (any_dr, referable_dr, gon) are 0, 1 or empty (empty means "not defined for this image",
    never a negative); split is train, val or test and always set; sex is F or M, quality adequate or
    inadequate, eye R or L, each possibly empty; image_id is set and unique; every row names the label rule that
    produced it. A failure here means the harmonisation wrote a code the scoring cannot interpret.
    """
    expect = gx.expect()
    present = [c for c in VALUE_COLUMNS if c in labels.columns]
    # Expectations on an absent column would only raise; the table-columns expectation reports it instead.
    expectations = [expect.ExpectTableColumnsToMatchSet(column_set=list(VALUE_COLUMNS), exact_match=False)]
    expectations += [expect.ExpectColumnValuesToBeInSet(column=c, value_set=allowed)
                     for c, allowed in ALLOWED_VALUES.items() if c in present]
    expectations += [expect.ExpectColumnValuesToNotBeNull(column=c) for c in REQUIRED_COLUMNS if c in present]
    if "image_id" in present:
        expectations.append(expect.ExpectColumnValuesToBeUnique(column="image_id"))
    key = ["image_id"] if "image_id" in present else []
    verdicts = gx.validate("labels", labels[present], expectations, key)
    examples = _interleave(_row_examples(v) for v in verdicts)
    return _outcome("label_values", verdicts, checked=len(labels), examples=examples)


def check_rule_consistency(labels: pd.DataFrame, recomputed: pd.DataFrame,
                           independent: pd.DataFrame | None = None,
                           rejects: pd.DataFrame | None = None) -> CheckOutcome:
    """The stored labels are what the dataset's documented rules give on the source records.

    Images are matched by image_id. `independent` holds the labels given by an independent transcription
    of each rule (SQL over the native columns, written from datasets.md: `focus_dagster.labels.rule_sql`);
    when present, the stored labels and the labels `recomputed` with the pipeline's own rule functions must
    both agree with it, so a wrong rule (a wrong threshold, a swapped column) fails the check instead of
    being confirmed by itself. Without it, stored and recomputed labels are compared with each other. For
    each task the values must agree wherever either is defined: an empty label that became 0 (or the
    reverse) is a disagreement, because "not defined" must never turn into "negative". An image present on
    one side only is a disagreement too, and so is an image_id that appears twice, since its labels cannot
    be matched.

    When `independent` also says, for every source record, whether it belongs to the benchmark subset
    (column `in_subset`, from the independent SQL transcription of the subset rule), the subset itself is
    checked and the labels are compared on the kept images only: an image kept in the harmonised labels
    that lies outside the subset fails, and so does an image inside the subset that was not kept, unless
    the `rejects` table (image_id, reason_code) rejected it for its split (a `split:` reason code). An
    in-subset image rejected by a subset or label filter, or dropped without any reject, means a wrong
    subset filter. Without `rejects` no image counts as rejected.
    """
    _require_columns(recomputed, ("image_id", *TASKS), "recomputed labels",
                     "recompute every task from the source records before comparing")
    _require_columns(labels, ("image_id", *TASKS), "harmonised labels",
                     "pass the full harmonised table")
    joined = _join_stored_and_recomputed(labels, recomputed)
    membership = None
    # Each pair (A, B) of label columns that must agree; the reference side is B.
    pairs = [("stored", "recomputed")]
    if independent is not None:
        _require_columns(independent, ("image_id", *TASKS), "independent labels",
                         "evaluate every task with the independent (SQL) rules before comparing")
        if "in_subset" in independent.columns:
            membership = _subset_membership(labels, independent, rejects)
            # Labels are compared where the harmonised table kept the image; membership covers the rest.
            independent = independent[independent["image_id"].astype(str).isin(set(labels["image_id"].astype(str)))]
        joined = _join_independent(joined, independent)
        pairs = [("stored", "independent"), ("recomputed", "independent")]
    expect = gx.expect()
    expectations = [
        expect.ExpectColumnValuesToBeInSet(column="presence", value_set=["both"]),
        expect.ExpectColumnValuesToBeUnique(column="image_id"),
    ]
    # Tasks are compared only on images both sides have; one-sided images are counted once, above.
    compared = [(task, a, b) for a, b in pairs for task in TASKS]
    expectations += [
        expect.ExpectColumnPairValuesToBeEqual(
            column_A=f"{task}_{a}", column_B=f"{task}_{b}", ignore_row_if="both_values_are_missing",
            row_condition='presence=="both"', condition_parser="pandas")
        for task, a, b in compared
    ]
    verdicts = gx.validate("rule_comparison", joined, expectations, ["image_id"])
    presence, unique, *tasks = verdicts
    groups = [
        [{"image_id": r.get("image_id"), "problem": r.get("presence")} for r in presence.rows],
        [{"image_id": r.get("image_id"), "problem": "image_id appears more than once"} for r in unique.rows],
        *(_mismatch_examples(task, v, a, b) for (task, a, b), v in zip(compared, tasks, strict=True)),
    ]
    checked = len(joined)
    info = {}
    if membership is not None:
        subset_verdicts = _validate_subset_membership(membership)
        verdicts += subset_verdicts
        groups += [_membership_examples(v, membership) for v in subset_verdicts]
        # Records the harmonised table did not keep were checked for their membership only.
        checked += len(set(membership["image_id"]) - set(joined["image_id"].astype(str)))
        info["subset_membership"] = _membership_counts(membership, subset_verdicts)
    return _outcome("rule_consistency", verdicts, checked=checked, examples=_interleave(groups), info=info)


# A reject with one of these reason codes (splits.py) leaves an image of the benchmark subset out for a reason
# other than the subset: legitimate. Every other reason code of an in-subset image is a wrong subset filter.
NON_SUBSET_REJECT_PREFIXES = ("split:",)
_INSIDE, _OUTSIDE = "inside the benchmark subset", "outside the benchmark subset"
_KEPT, _SPLIT_REJECT, _VANISHED = "kept", "rejected for its split", "dropped without a reject"


def _subset_membership(labels: pd.DataFrame, independent: pd.DataFrame,
                       rejects: pd.DataFrame | None) -> pd.DataFrame:
    """One row per source record: image_id, its subset verdict (SQL), its fate in the pipeline, reject codes.

    `subset` is "inside/outside the benchmark subset"; `fate` is "kept", "rejected for its split",
    "rejected (<codes>)" or "dropped without a reject".
    """
    frame = pd.DataFrame({
        "image_id": independent["image_id"].astype(str).to_numpy(),
        "subset": [_INSIDE if bool(v) else _OUTSIDE
                   for v in independent["in_subset"].astype("boolean").fillna(False)],
    })
    codes: dict[str, list[str]] = {}
    if rejects is not None and len(rejects):
        _require_columns(rejects, ("image_id", "reason_code"), "label rejects", "pass the label_rejects table")
        for image_id, code in zip(rejects["image_id"].astype(str), rejects["reason_code"], strict=True):
            codes.setdefault(image_id, []).append("" if pd.isna(code) else str(code))
    kept = set(labels["image_id"].astype(str))

    def fate(image_id: str) -> str:
        if image_id in kept:
            return _KEPT
        found = codes.get(image_id)
        if not found:
            return _VANISHED
        if all(c.startswith(NON_SUBSET_REJECT_PREFIXES) for c in found):
            return _SPLIT_REJECT
        return f"rejected ({', '.join(found)})"

    frame["fate"] = [fate(i) for i in frame["image_id"]]
    frame["reason_code"] = [", ".join(codes.get(i, [])) or None for i in frame["image_id"]]
    return frame


def _validate_subset_membership(membership: pd.DataFrame) -> list[Verdict]:
    """Kept images lie inside the subset; images inside the subset are kept or rejected for their split."""
    expect = gx.expect()
    expectations = [
        expect.ExpectColumnValuesToBeInSet(column="subset", value_set=[_INSIDE],
                                           row_condition=f'fate=="{_KEPT}"', condition_parser="pandas"),
        expect.ExpectColumnValuesToBeInSet(column="fate", value_set=[_KEPT, _SPLIT_REJECT],
                                           row_condition=f'subset=="{_INSIDE}"', condition_parser="pandas"),
    ]
    return gx.validate("subset_membership", membership[["image_id", "subset", "fate"]], expectations, ["image_id"])


def _membership_examples(verdict: Verdict, membership: pd.DataFrame) -> list[dict]:
    """{"image_id", "problem", "fate", "reason_code"} for each image the subset check flags."""
    by_id = membership.drop_duplicates("image_id").set_index("image_id")
    examples = []
    for r in verdict.rows:
        image_id = r.get("image_id")
        fate = by_id.at[image_id, "fate"] if image_id in by_id.index else None
        problem = ("kept in the harmonised labels but outside the benchmark subset (independent SQL)"
                   if fate == _KEPT else "inside the benchmark subset (independent SQL) but not kept")
        examples.append({"image_id": image_id, "problem": problem, "fate": fate,
                         "reason_code": by_id.at[image_id, "reason_code"] if image_id in by_id.index else None})
    return examples


def _membership_counts(membership: pd.DataFrame, verdicts: list[Verdict]) -> dict:
    inside = membership["subset"] == _INSIDE
    kept_outside, dropped_inside = verdicts
    return {
        "records": len(membership),
        "inside_subset": int(inside.sum()),
        "kept": int((membership["fate"] == _KEPT).sum()),
        "inside_rejected_for_split": int((inside & (membership["fate"] == _SPLIT_REJECT)).sum()),
        "kept_outside_subset": kept_outside.unexpected_count,
        "inside_subset_not_kept": dropped_inside.unexpected_count,
    }


def _mismatch_examples(task: str, verdict: Verdict, a: str = "stored", b: str = "recomputed") -> list[dict]:
    return [{"image_id": r.get("image_id"), "column": task, a: _label(r.get(f"{task}_{a}")),
             b: _label(r.get(f"{task}_{b}"))} for r in verdict.rows]


def check_referable_implies_any(labels: pd.DataFrame) -> CheckOutcome:
    """An image with referable DR also has any DR (referable_dr <= any_dr wherever both are defined).

    Under the reference rules this can fail legitimately: diabetic macular edema makes an image referable
    even when its ICDR grade is 0. The rows are reported so their number can be judged, not as an error.
    """
    _require_columns(labels, ("image_id", "any_dr", "referable_dr"), "harmonised labels",
                     "pass the full harmonised table")
    frame = labels[["image_id", "any_dr", "referable_dr"]].astype({"any_dr": "float64", "referable_dr": "float64"})
    expectation = gx.expect().ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="any_dr", column_B="referable_dr", or_equal=True, ignore_row_if="either_value_is_missing")
    verdicts = gx.validate("labels", frame, [expectation], ["image_id"])
    examples = [{"image_id": r.get("image_id"), "referable_dr": _label(r.get("referable_dr")),
                 "any_dr": _label(r.get("any_dr"))} for r in verdicts[0].rows]
    both_defined = int((frame["any_dr"].notna() & frame["referable_dr"].notna()).sum())
    return _outcome("referable_implies_any", verdicts, checked=both_defined, examples=examples)


def check_split_leakage(labels: pd.DataFrame) -> CheckOutcome:
    """No patient and no image content sits in two splits.

    A patient_id found in more than one of train, val and test, or the same image bytes (content_hash)
    under two splits, lets a model be scored on what it was trained on. Rows without a patient_id cannot
    be grouped and are counted in `rows_without_patient_id` (see the patient_ids check).
    """
    patient_splits = _splits_by_group(labels, "patient_id")
    hash_splits = _splits_by_group(labels, "content_hash")
    verdicts = [
        *gx.validate("patient_splits", _split_counts(patient_splits, "patient_id"),
                     [_one_split_per_group()], ["patient_id"]),
        *gx.validate("hash_splits", _split_counts(hash_splits, "content_hash"),
                     [_one_split_per_group()], ["content_hash"]),
    ]
    examples = _interleave([
        _leak_examples(verdicts[0], patient_splits, "patient_id"),
        _leak_examples(verdicts[1], hash_splits, "content_hash"),
    ])
    patients = patient_splits["patient_id"].nunique()
    hashes = hash_splits["content_hash"].nunique()
    info = {
        "patients": patients,
        "rows_without_patient_id": _null_count(labels, "patient_id"),
        "content_hashes": hashes,
        "rows_without_content_hash": _null_count(labels, "content_hash"),
    }
    return _outcome("split_leakage", verdicts, checked=patients + hashes, examples=examples, info=info)


def check_row_accounting(records_in: int, labels: int, rejects: int) -> CheckOutcome:
    """Every input record ends either in the label table or in the rejects table, with nothing lost.

    The number of records read must equal labelled rows plus rejected rows exactly; a difference means
    rows vanished (or were duplicated) during harmonisation without a recorded reason.
    """
    counts = {"records_in": int(records_in), "labels": int(labels), "rejects": int(rejects),
              "unaccounted": int(records_in) - int(labels) - int(rejects)}
    frame = pd.DataFrame({"records_in": [counts["records_in"]],
                          "labels_plus_rejects": [counts["labels"] + counts["rejects"]]})
    expectation = gx.expect().ExpectColumnPairValuesToBeEqual(column_A="records_in", column_B="labels_plus_rejects")
    verdicts = gx.validate("row_accounting", frame, [expectation])
    examples = [] if verdicts[0].success else [counts]
    return _outcome("row_accounting", verdicts, checked=1, examples=examples, info=counts)


def check_metadata_coverage(labels: pd.DataFrame) -> CheckOutcome:
    """Share of images with age, sex, quality, camera, eye and patient_id, and whether each axis can run.

    The fairness (age, sex, camera) and quality axes need at least some images with the value; the check
    fails when any of age, sex, quality or camera is empty on every row (or absent), and lists those
    columns. Partial coverage passes and is shown as a fraction per column. Here the violating items are
    columns: `unexpected_count` is the number of axes with no value, `checked_count` the number of axes.
    """
    frame = labels.reindex(columns=list(COVERAGE_COLUMNS))  # an absent column reads as empty everywhere
    # `mostly` just above zero: the axis passes as soon as one row has a value. eye and patient_id are
    # measured only (mostly=0): their absence limits nothing here (patient ids have their own check).
    any_value = 0.5 / max(len(frame), 1)
    expectations = [
        gx.expect().ExpectColumnValuesToNotBeNull(column=c, mostly=any_value if c in AXIS_METADATA else 0.0)
        for c in COVERAGE_COLUMNS
    ]
    verdicts = gx.validate("labels", frame, expectations)
    by_column = dict(zip(COVERAGE_COLUMNS, verdicts, strict=True))
    coverage = {c: _non_null_fraction(v.unexpected_count, len(frame)) for c, v in by_column.items()}
    missing = [c for c in AXIS_METADATA if not by_column[c].success]
    examples = [{"column": c, "coverage": coverage[c], "problem": "no image has a value: this axis cannot run"}
                for c in missing]
    return CheckOutcome(
        name="metadata_coverage",
        success=not missing,
        unexpected_count=len(missing),
        checked_count=len(AXIS_METADATA),
        examples=examples,
        expectations=[v.entry for v in verdicts],
        info=coverage,
    )


def check_patient_ids(labels: pd.DataFrame) -> CheckOutcome:
    """Every image has a patient_id, so that splits can be shown to keep each patient on one side.

    Rows without one cannot be checked for patient leakage across splits. Some datasets publish no patient
    identifier at all (G1020, JSIEC, RFMiD): for them this check fails by design, and says how many rows
    are affected.
    """
    frame = labels.reindex(columns=["image_id", "patient_id"])
    expectation = gx.expect().ExpectColumnValuesToNotBeNull(column="patient_id")
    verdicts = gx.validate("labels", frame, [expectation], ["image_id"])
    examples = [{"image_id": r.get("image_id"), "column": "patient_id", "value": None} for r in verdicts[0].rows]
    info = {"rows_without_patient_id": verdicts[0].unexpected_count}
    return _outcome("patient_ids", verdicts, checked=len(frame), examples=examples, info=info)


def check_degenerate_tasks(labels: pd.DataFrame, min_positives: int = 10) -> CheckOutcome:
    """Each task has enough positives and negatives in every split to be scored.

    For every task defined on at least one image, positives and negatives are counted per split. A split
    with fewer than `min_positives` positives, or fewer than `min_positives` negatives, gives an AUROC that
    rests on a handful of images (RFMiD's referable DR has 2 positives in test): such a (task, split) is
    flagged so it is reported as degenerate rather than scored silently.
    """
    counts = _class_counts(labels)
    frame = _count_frame(counts)
    expectation = gx.expect().ExpectColumnValuesToBeBetween(column="minority_count", min_value=min_positives)
    verdicts = gx.validate("task_counts", frame, [expectation], ["task", "split"])
    examples = [{"task": r.get("task"), "split": r.get("split"), **counts[r.get("task")][r.get("split")]}
                for r in verdicts[0].rows]
    return _outcome("degenerate_tasks", verdicts, checked=len(frame), examples=examples, info=counts)


# ---------------------------------------------------------------------------------- group-level frames


def _join_stored_and_recomputed(labels: pd.DataFrame, recomputed: pd.DataFrame) -> pd.DataFrame:
    """One row per image_id on either side, both sides' task labels next to each other."""
    joined = labels[["image_id", *TASKS]].merge(
        recomputed[["image_id", *TASKS]], on="image_id", how="outer",
        suffixes=("_stored", "_recomputed"), indicator="presence")
    joined["presence"] = joined["presence"].astype(str).map({
        "both": "both", "left_only": "missing from the recomputed labels",
        "right_only": "missing from the stored labels"})
    # As floats an empty label is NaN, which compares unequal to 0; pandas' nullable NA would not compare.
    task_columns = [f"{task}_{side}" for task in TASKS for side in ("stored", "recomputed")]
    return joined.astype({c: "float64" for c in task_columns})


def _join_independent(joined: pd.DataFrame, independent: pd.DataFrame) -> pd.DataFrame:
    """The stored/recomputed comparison with the independent labels added as `<task>_independent`."""
    other = independent[["image_id", *TASKS]].rename(columns={t: f"{t}_independent" for t in TASKS})
    out = joined.merge(other, on="image_id", how="outer", indicator="_independent_side")
    side = out.pop("_independent_side").astype(str)
    out.loc[side == "right_only", "presence"] = "missing from the stored and recomputed labels"
    out.loc[(side == "left_only") & (out["presence"] == "both"), "presence"] = "missing from the independent labels"
    return out.astype({f"{t}_independent": "float64" for t in TASKS})


def _splits_by_group(labels: pd.DataFrame, key: str) -> pd.DataFrame:
    """The distinct (key, split) pairs, rows without the key left out (they cannot be grouped)."""
    if key not in labels.columns or "split" not in labels.columns:
        return pd.DataFrame({key: pd.Series(dtype=object), "split": pd.Series(dtype=object)})
    return labels[[key, "split"]].dropna().drop_duplicates()


def _split_counts(pairs: pd.DataFrame, key: str) -> pd.DataFrame:
    """How many splits each group (patient or content hash) appears in."""
    return pairs.groupby(key, sort=True).size().rename("split_count").reset_index()


def _one_split_per_group():
    return gx.expect().ExpectColumnValuesToBeBetween(column="split_count", min_value=1, max_value=1)


def _leak_examples(verdict: Verdict, pairs: pd.DataFrame, key: str) -> list[dict]:
    """The offending groups with the splits they sit in, e.g. {"patient_id": "17", "splits": ["test", "train"]}."""
    offenders = [r.get(key) for r in verdict.rows]
    splits = pairs[pairs[key].isin(offenders)].groupby(key)["split"].agg(lambda s: sorted(map(str, s)))
    return [{key: k, "splits": splits.get(k, [])} for k in offenders]


def _class_counts(labels: pd.DataFrame) -> dict[str, dict[str, dict[str, int]]]:
    """{task: {split: {"positives": n, "negatives": m}}} for every task defined on at least one image."""
    if "split" not in labels.columns:
        return {}
    present = set(labels["split"].dropna().astype(str))
    splits = [s for s in SPLITS if s in present] + sorted(present - set(SPLITS))
    split = labels["split"].astype(str)
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for task in TASKS:
        if task not in labels.columns or not labels[task].notna().any():
            continue
        positives = labels[task].eq(1).fillna(False).astype(bool).groupby(split).sum()
        negatives = labels[task].eq(0).fillna(False).astype(bool).groupby(split).sum()
        counts[task] = {s: {"positives": int(positives.get(s, 0)), "negatives": int(negatives.get(s, 0))}
                        for s in splits}
    return counts


def _count_frame(counts: dict[str, dict[str, dict[str, int]]]) -> pd.DataFrame:
    """One row per (task, split) with the size of its smaller class, the figure that must reach the minimum."""
    rows = [{"task": task, "split": split, "positives": c["positives"], "negatives": c["negatives"],
             "minority_count": min(c["positives"], c["negatives"])}
            for task, by_split in counts.items() for split, c in by_split.items()]
    columns = ["task", "split", "positives", "negatives", "minority_count"]
    return pd.DataFrame(rows, columns=columns).astype({c: "int64" for c in columns[2:]})


# ------------------------------------------------------------------------------------------------ helpers


def _outcome(name: str, verdicts: list[Verdict], *, checked: int, examples: Iterable[dict],
             info: dict | None = None) -> CheckOutcome:
    return CheckOutcome(
        name=name,
        success=all(v.success for v in verdicts),
        unexpected_count=sum(v.unexpected_count for v in verdicts),
        checked_count=int(checked),
        examples=gx.jsonable(list(examples)[:MAX_EXAMPLES]),
        expectations=[v.entry for v in verdicts],
        info=gx.jsonable(info or {}),
    )


def _row_examples(verdict: Verdict) -> list[dict]:
    """{"image_id", "column", "value"} for each offending row of a single-column expectation."""
    column = verdict.entry["column(s)"]
    if not isinstance(column, str):  # the table-columns expectation: the offenders are missing columns
        return [{"column": c, "problem": "column missing from the table"}
                for c in verdict.entry["partial_unexpected_list"]]
    return [{"image_id": r.get("image_id"), "column": column, "value": r.get(column)} for r in verdict.rows]


def _interleave(groups: Iterable[list[dict]]) -> list[dict]:
    """Take examples in turn from each expectation, so that one noisy column does not hide the others."""
    mixed = chain.from_iterable(zip_longest(*groups))
    return [e for e in mixed if e is not None][:MAX_EXAMPLES]


def _require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str, remedy: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"The {what} lack column(s) {', '.join(missing)}: {remedy}.")


def _null_count(frame: pd.DataFrame, column: str) -> int:
    return int(frame[column].isna().sum()) if column in frame.columns else len(frame)


def _non_null_fraction(nulls: int, rows: int) -> float:
    return round((rows - nulls) / rows, 4) if rows else 0.0


def _label(value):
    """A task label as 0, 1 or None (GX hands back floats and NaN)."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


def check_split_has_test(labels: pd.DataFrame) -> CheckOutcome:
    """The dataset keeps at least one image on the test side, so that it can be scored at all.

    A split that leaves no test image (the reference IDRiD split file, read as published, gives 310 train
    and 0 test images) would let the dataset vanish from the metrics without an error. The images are
    counted per split (train, val, test, always all three); the test count must be at least one.
    """
    split = labels["split"].astype(object) if "split" in labels.columns else pd.Series(dtype=object)
    counts = {s: int((split == s).sum()) for s in SPLITS}
    frame = pd.DataFrame({"split": ["test"], "images": [counts["test"]]}).astype({"images": "int64"})
    expectation = gx.expect().ExpectColumnValuesToBeBetween(column="images", min_value=1)
    verdicts = gx.validate("split_sizes", frame, [expectation], ["split"])
    examples = [] if verdicts[0].success else [{"split": "test", "images": 0, "images_per_split": counts}]
    return _outcome("split_has_test", verdicts, checked=1, examples=examples, info={"images_per_split": counts})
