"""Harmonisation: native records -> the canonical label table of datasets.md, plus the rejects.

Every record read ends in exactly one of two tables: `labels` (one row per benchmark image, with its
split, three task labels, metadata and the id of the rule that produced it) or `rejects` (with the
stage that rejected it and why: quarantined by the reader, outside the benchmark subset, blank or
ungradable label, no usable split). `records in = labels + rejects`, always.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from focus_dagster.labels.rule_lookup import rule_for
from focus_dagster.labels.rules import METADATA, TASKS, LabelRule
from focus_dagster.labels.splits import SPLITS, assign_splits

LABEL_COLUMNS = [
    "dataset", "image_id", "image_path", "patient_id", "split", *TASKS, *METADATA, "label_rule", "content_hash",
]
REJECT_COLUMNS = ["dataset", "image_id", "image_path", "source_file", "source_row", "stage", "reason_code", "reason"]


@dataclass
class LabelResult:
    dataset: str
    rule: LabelRule
    labels: pd.DataFrame
    rejects: pd.DataFrame
    records_in: int
    split_method: str
    split_source: str | None = None
    split_report: dict = field(default_factory=dict)

    def positives_by_split(self) -> dict[str, dict[str, dict[str, int]]]:
        """{task: {split: {"n": defined labels, "positives": n}}} for the tasks this dataset carries."""
        out: dict = {}
        for task in TASKS:
            defined = self.labels[self.labels[task].notna()]
            if defined.empty:
                continue
            out[task] = {
                split: {"n": int((defined["split"] == split).sum()),
                        "positives": int(((defined["split"] == split) & (defined[task] == 1)).sum())}
                for split in SPLITS
                if (defined["split"] == split).any()
            }
        return out

    def accounting_line(self) -> str:
        reasons = self.rejects["reason_code"].value_counts()
        listed = ", ".join(f"{code}: {n}" for code, n in reasons.items()) or "none"
        return (
            f"{self.dataset}: {self.records_in} records in = {len(self.labels)} labelled + {len(self.rejects)} "
            f"rejected (reasons: {listed})"
        )


def harmonise(
    dataset: str,
    records: pd.DataFrame,
    quarantine: pd.DataFrame | None = None,
    *,
    root: Path | None = None,
    splits_dir: Path | None = None,
    seed: int = 0,
) -> LabelResult:
    """Apply the dataset's rule, assign splits and account for every record.

    records: the native records (as read, or as stored in DuckDB); quarantine: the reader's quarantined
    rows (they are carried into the rejects); root: the dataset root, to hash image content for the
    leakage check (skipped when None).
    """
    rule = rule_for(dataset)
    quarantine = quarantine if quarantine is not None else pd.DataFrame(columns=REJECT_COLUMNS)
    records = records.reset_index(drop=True)
    excluded = subset_rejects(rule, records)
    kept = records[~records["image_id"].isin(excluded["image_id"])]
    labels = label_rows(rule, kept, root)
    assignment = assign_splits(dataset, labels, records, splits_dir, seed)
    labels["split"] = assignment.split.astype(object)
    unsplit = labels["image_id"].isin(list(assignment.unassigned))
    split_rejects = _rejects_from(
        kept.set_index("image_id").loc[labels.loc[unsplit, "image_id"]].reset_index(),
        dataset, "splits", assignment.unassigned_codes, assignment.unassigned,
    )
    labels = labels[~unsplit].reset_index(drop=True)
    rejects = pd.concat([reader_rejects(dataset, quarantine), excluded, split_rejects], ignore_index=True)
    return LabelResult(
        dataset, rule, labels[LABEL_COLUMNS], rejects[REJECT_COLUMNS].reset_index(drop=True),
        records_in=len(records) + len(quarantine), split_method=assignment.method,
        split_source=assignment.source, split_report=assignment.report,
    )


def subset_rejects(rule: LabelRule, records: pd.DataFrame) -> pd.DataFrame:
    """Records outside the benchmark subset, each with the first filter that excluded it."""
    taken = pd.Series(False, index=records.index)
    parts = []
    for subset in rule.subset:
        hit = subset.excluded(records).fillna(False).astype(bool) & ~taken
        taken |= hit
        rows = records[hit]
        codes = {i: subset.reason_code for i in rows["image_id"]}
        reasons = {i: subset.reason for i in rows["image_id"]}
        parts.append(_rejects_from(rows, rule.dataset, "labels", codes, reasons))
    return pd.concat(parts, ignore_index=True) if parts else _empty_rejects()


def label_rows(rule: LabelRule, kept: pd.DataFrame, root: Path | None) -> pd.DataFrame:
    """Canonical rows (split still empty) for the records in the benchmark subset."""
    labels = pd.DataFrame(
        {
            "dataset": rule.dataset,
            "image_id": kept["image_id"].astype(str),
            "image_path": kept["image_path"].astype(str),
            "patient_id": kept["patient_id"].astype(object).where(kept["patient_id"].notna(), None),
            "split": None,
        },
        index=kept.index,
    )
    labels = labels.join(rule.task_labels(kept))
    metadata = rule.metadata(kept)
    for column in METADATA:
        values = metadata.get(column)
        if column == "age":
            labels[column] = (pd.to_numeric(values, errors="coerce") if values is not None
                              else pd.Series(float("nan"), index=kept.index)).astype("Float64")
        else:
            labels[column] = values.astype(object).where(values.notna(), None) if values is not None else None
    labels["label_rule"] = rule.id
    labels["content_hash"] = [content_hash(root / p) for p in labels["image_path"]] if root is not None else None
    return labels.reset_index(drop=True)


def content_hash(path: Path) -> str:
    """A short digest of the image bytes: the same picture filed twice is caught even under two names."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, lambda: hashlib.blake2b(digest_size=16)).hexdigest()


def reader_rejects(dataset: str, quarantine: pd.DataFrame) -> pd.DataFrame:
    if quarantine.empty:
        return _empty_rejects()
    frame = quarantine.copy()
    frame["dataset"] = dataset
    frame["stage"] = "records"
    return frame[REJECT_COLUMNS]


def _rejects_from(rows: pd.DataFrame, dataset: str, stage: str, codes: dict, reasons: dict) -> pd.DataFrame:
    if rows.empty:
        return _empty_rejects()
    return pd.DataFrame(
        {
            "dataset": dataset,
            "image_id": rows["image_id"].astype(str).to_numpy(),
            "image_path": rows["image_path"].astype(str).to_numpy(),
            "source_file": rows["source_file"].astype(str).to_numpy(),
            "source_row": rows["source_row"].astype("int64").to_numpy(),
            "stage": stage,
            "reason_code": [codes[i] for i in rows["image_id"]],
            "reason": [reasons[i] for i in rows["image_id"]],
        }
    )


def _empty_rejects() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in REJECT_COLUMNS})
    frame["source_row"] = frame["source_row"].astype("int64")
    return frame
