"""The datasets: the ten published ones (keys, titles, the reader of each layout), and those the user declares.

A dataset declared in focus.yaml (`focus_dagster/datasets/declaration.py`) is registered here when the
configuration is parsed (`register_declared`), in every process that parses it; from then on its key is
looked up like a published one: `dataset_info`, `get_reader`, and the label rule of `labels.rules.rule_for`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from focus_dagster.errors import UnknownDatasetError

if TYPE_CHECKING:
    # Reader modules load on demand (get_reader), so that the registry stays cheap to import.
    from focus_dagster.datasets.declaration import DatasetDeclaration
    from focus_dagster.datasets.reader import DatasetReader


@dataclass(frozen=True)
class DatasetInfo:
    """One registered dataset: its key, the title shown to people, and where its files come from."""

    key: str
    title: str
    source: str


DATASETS: dict[str, DatasetInfo] = {
    info.key: info
    for info in [
        DatasetInfo("brset", "BRSET", "PhysioNet brazilian-ophthalmological 1.0.0 (credentialed)"),
        DatasetInfo("mbrset", "mBRSET", "PhysioNet mbrset (credentialed)"),
        DatasetInfo("papila", "PAPILA", "Figshare 10.6084/m9.figshare.14798004"),
        DatasetInfo("rfmid", "RFMiD", "RIADD challenge (common mirror layout)"),
        DatasetInfo("rfmid_2", "RFMiD 2.0", "Zenodo 7505822"),
        DatasetInfo("idrid", "IDRiD", "IEEE DataPort, disease-grading part"),
        DatasetInfo("messidor_2", "Messidor-2", "ADCIS images + Krause et al. 2018 adjudicated grades"),
        DatasetInfo("refuge", "REFUGE", "Grand Challenge (common mirror)"),
        DatasetInfo("g1020", "G1020", "G1020 (Bajwa et al. 2020)"),
        DatasetInfo("jsiec1000", "JSIEC1000", "Zenodo 3477553"),
    ]
}
DATASET_KEYS: tuple[str, ...] = tuple(DATASETS)
DECLARED_SOURCE = "declared in focus.yaml"

# key -> declaration, for the datasets of the configuration parsed last in this process.
_declared: dict[str, DatasetDeclaration] = {}


def register_declared(declared: dict[str, DatasetDeclaration]) -> None:
    """Make the declared datasets of a configuration known to this process (replacing any declared before)."""
    clash = sorted(set(declared) & set(DATASETS))
    if clash:
        raise UnknownDatasetError(f"{clash} are published datasets with readers of their own; they cannot be declared")
    _declared.clear()
    _declared.update(declared)


def declaration(key: str) -> DatasetDeclaration | None:
    """The declaration of a dataset of the user's own, None for a published one."""
    return _declared.get(key)


def is_known(key: str) -> bool:
    return key in DATASETS or key in _declared


def dataset_info(key: str) -> DatasetInfo:
    """Key, title and source of a published or declared dataset."""
    if key in DATASETS:
        return DATASETS[key]
    if key in _declared:
        spec = _declared[key]
        return DatasetInfo(key, spec.title or key, spec.source or DECLARED_SOURCE)
    raise _unknown(key)


def get_reader(key: str) -> DatasetReader:
    """The reader for a dataset key; an error listing the known keys for anything else."""
    if key in _declared:
        from focus_dagster.datasets.declared import DeclaredReader

        return DeclaredReader(key, _declared[key])
    if key not in DATASETS:
        raise _unknown(key)
    return importlib.import_module(f"focus_dagster.datasets.{key}").READER


def _unknown(key: str) -> UnknownDatasetError:
    known = [*DATASET_KEYS, *_declared]
    return UnknownDatasetError(f"unknown dataset {key!r}; known datasets: {', '.join(known)} (a dataset of your own "
                               "is declared under `datasets:` in focus.yaml)")
