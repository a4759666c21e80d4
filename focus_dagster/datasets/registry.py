"""The ten FOCUS datasets: keys, titles, and the reader of each published layout."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from focus_dagster.errors import UnknownDatasetError

if TYPE_CHECKING:
    # Reader modules load on demand (get_reader), so that the registry stays cheap to import.
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


def get_reader(key: str) -> DatasetReader:
    """The reader for a dataset key; an error listing the known keys for anything else."""
    if key not in DATASETS:
        raise UnknownDatasetError(f"unknown dataset {key!r}; known datasets: {', '.join(DATASET_KEYS)}")
    return importlib.import_module(f"focus_dagster.datasets.{key}").READER
