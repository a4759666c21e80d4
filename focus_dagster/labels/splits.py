"""Train/val/test splits, by the precedence of datasets.md.

1. A published split file the user supplies (`<splits_dir>/labels_splits_<dataset>.csv`, the reference
   benchmark's format, including BRSET's `patient_id,image_id,split` and mBRSET's `patient,file,split`).
2. The dataset's native split (RFMiD, RFMiD 2.0, IDRiD; REFUGE with official val relabelled test).
3. A deterministic, seeded, patient-grouped, label-stratified 60/40 train/test split.

Published files are joined on the image's path tail (folder + file name), which is unambiguous even where
native names repeat across splits (IDRiD, RFMiD); BRSET and mBRSET files are joined on their own keys.
Every disagreement is reported: split rows naming no harmonised image, harmonised images the file omits,
and images the file puts in two splits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.datasets.label_files import decode_label_bytes, normalise_header
from focus_dagster.datasets.records import SPLITS
from focus_dagster.errors import DatasetLayoutError
from focus_dagster.labels.rules import TASKS

TEST_FRACTION = 0.4
# Native splits as the reference benchmark uses them: REFUGE's official validation set is its test set.
NATIVE_SPLIT_MAP = {
    "rfmid": {"train": "train", "val": "val", "test": "test"},
    "rfmid_2": {"train": "train", "val": "val", "test": "test"},
    "idrid": {"train": "train", "test": "test"},
    "refuge": {"train": "train", "val": "test"},
}


@dataclass
class SplitAssignment:
    """The split of each harmonised image (indexed like the labels), and what could not be assigned."""

    split: pd.Series
    method: str
    source: str | None = None
    unassigned: dict[str, str] = field(default_factory=dict)  # image_id -> reason (rejected by the caller)
    unassigned_codes: dict[str, str] = field(default_factory=dict)
    report: dict = field(default_factory=dict)


def split_file_path(splits_dir: Path, dataset: str) -> Path:
    return Path(splits_dir) / f"labels_splits_{dataset}.csv"


def assign_splits(
    dataset: str,
    labels: pd.DataFrame,
    records: pd.DataFrame,
    splits_dir: Path | None = None,
    seed: int = 0,
) -> SplitAssignment:
    """Splits for `labels` (harmonised rows with image_id, image_path, patient_id and task columns).

    `records` are all native records of the dataset (also those rejected before splitting), so that a
    split file naming a rejected image is told apart from one naming an image the dataset lacks.
    """
    if splits_dir is not None and split_file_path(splits_dir, dataset).is_file():
        return published_split(dataset, labels, records, split_file_path(splits_dir, dataset))
    if dataset in NATIVE_SPLIT_MAP:
        return native_split(dataset, labels, records)
    return seeded_split(labels, seed)


# ------------------------------------------------------------------------------------------- published


def published_split(dataset: str, labels: pd.DataFrame, records: pd.DataFrame, path: Path) -> SplitAssignment:
    published = read_split_file(path, dataset)
    published["key"] = published_keys(dataset, published, path)
    ours = our_keys(dataset, labels, records)
    bad_values = ~published["split"].isin(SPLITS)
    if bad_values.any():
        raise DatasetLayoutError(
            f"[{dataset}] {path}: unknown split value(s) {sorted(published.loc[bad_values, 'split'].unique())}; "
            f"expected {list(SPLITS)}."
        )
    per_key = published.groupby("key")["split"].agg(lambda s: sorted(set(s)))
    conflicting = {k for k, v in per_key.items() if len(v) > 1}
    single = {k: v[0] for k, v in per_key.items() if len(v) == 1}
    split = ours.map(single)
    unassigned, codes = {}, {}
    for image_id, key in zip(labels["image_id"], ours):
        if key in conflicting:
            unassigned[image_id] = f"{path.name} puts this image in {' and '.join(per_key[key])}"
            codes[image_id] = "split:conflicting"
        elif key not in per_key:
            unassigned[image_id] = f"absent from {path.name}"
            codes[image_id] = "split:absent_from_split_file"
    unmatched = set(per_key.index) - set(ours)
    rejected_earlier = sorted(unmatched & set(our_keys(dataset, records, records)))
    unknown = sorted(unmatched - set(rejected_earlier))
    report = {
        "split_file_rows": len(published),
        "split_file_images_rejected_before_splitting": len(rejected_earlier),
        "split_file_images_the_dataset_lacks": len(unknown),
        "examples_the_dataset_lacks": unknown[:10],
        "images_absent_from_split_file": sum(c == "split:absent_from_split_file" for c in codes.values()),
        "images_with_conflicting_splits": sum(c == "split:conflicting" for c in codes.values()),
    }
    return SplitAssignment(split, "published", str(path), unassigned, codes, report)


def read_split_file(path: Path, dataset: str) -> pd.DataFrame:
    import io

    text = decode_label_bytes(path.read_bytes(), str(path), dataset, ("utf-8-sig", "latin-1"))
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    frame = frame.rename(columns=normalise_header)
    required = {"brset": ["image_id", "split"], "mbrset": ["file", "split"]}.get(dataset, ["image_path", "split"])
    missing = [c for c in required if c not in frame]
    if missing:
        raise DatasetLayoutError(
            f"[{dataset}] split file {path} lacks column(s) {missing}; found {list(frame.columns)}. "
            "Expected the reference benchmark's labels_splits_<dataset>.csv format."
        )
    return frame.apply(lambda c: c.str.strip())


def published_keys(dataset: str, published: pd.DataFrame, path: Path) -> pd.Series:
    if dataset == "brset":
        return published["image_id"]
    if dataset == "mbrset":
        return published["file"]
    return published["image_path"].map(path_tail)


def our_keys(dataset: str, labels: pd.DataFrame, records: pd.DataFrame) -> pd.Series:
    if dataset == "brset":
        return labels["image_id"]
    if dataset == "mbrset":
        files = records.set_index("image_id")["file"]
        return labels["image_id"].map(files)
    return labels["image_path"].map(path_tail)


def path_tail(path: str) -> str:
    """The last folder and the file name: what a path on another machine and ours have in common."""
    parts = str(path).replace("\\", "/").rstrip("/").split("/")
    return "/".join(parts[-2:])


# ---------------------------------------------------------------------------------------------- native


def native_split(dataset: str, labels: pd.DataFrame, records: pd.DataFrame) -> SplitAssignment:
    native = labels["image_id"].map(records.set_index("image_id")["native_split"])
    mapping = NATIVE_SPLIT_MAP[dataset]
    split = native.map(mapping)
    unassigned = {i: f"native split {s!r} is not used by the benchmark" for i, s in zip(labels["image_id"], native)
                  if s not in mapping}
    codes = {i: "split:unused_native_split" for i in unassigned}
    report = {"native_to_benchmark": mapping}
    return SplitAssignment(split, "native", None, unassigned, codes, report)


# ---------------------------------------------------------------------------------------------- seeded


def seeded_split(labels: pd.DataFrame, seed: int) -> SplitAssignment:
    """60/40 train/test, whole patients on one side, the task-label mix kept alike on both sides.

    Images without a patient id form their own group (the dataset has no patient key: say so, since
    leakage between two images of one patient cannot then be ruled out).
    """
    groups = labels["patient_id"].astype(object).where(labels["patient_id"].notna(), "image:" + labels["image_id"])
    strata = _strata(labels)
    test = _grouped_stratified_test(groups.to_numpy(), strata.to_numpy(), seed)
    split = pd.Series(np.where(test, "test", "train"), index=labels.index, dtype=object)
    report = {"seed": seed, "test_fraction": TEST_FRACTION, "groups": int(groups.nunique())}
    return SplitAssignment(split, "seeded", None, report=report)


def _strata(labels: pd.DataFrame) -> pd.Series:
    """One stratum per pattern of defined task labels, e.g. '1|0|-'."""
    parts = [labels[t].astype("Int8").astype(str).replace("<NA>", "-") for t in TASKS]
    return parts[0] + "|" + parts[1] + "|" + parts[2]


def _grouped_stratified_test(groups: np.ndarray, strata: np.ndarray, seed: int) -> np.ndarray:
    """Whether each row is in the test side: whole groups, drawn stratum by stratum, seeded.

    Each group is assigned to the stratum of its most positive row; within a stratum, groups are shuffled
    with the seed and the first 40% (rounded) go to test, so small strata are split as evenly as they can be.
    """
    frame = pd.DataFrame({"group": groups, "stratum": strata})
    group_stratum = frame.groupby("group", sort=True)["stratum"].max()
    rng = np.random.default_rng(seed)
    test_groups: set = set()
    for stratum in sorted(group_stratum.unique()):
        members = np.array(sorted(group_stratum.index[group_stratum == stratum]), dtype=object)
        rng.shuffle(members)
        n_test = int(round(len(members) * TEST_FRACTION))
        test_groups.update(members[:n_test].tolist())
    return frame["group"].isin(test_groups).to_numpy()
