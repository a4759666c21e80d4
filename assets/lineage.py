"""Where a number came from: the upstream materialisations and observations, read from the Dagster instance."""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg


@dataclass(frozen=True)
class Produced:
    """One upstream event: the run that wrote it, its data version and metadata values."""

    asset: str
    partition: str | None
    run_id: str
    data_version: str | None
    timestamp: float
    metadata: dict = field(default_factory=dict)


def latest_materialization(instance: dg.DagsterInstance, asset: str, partition: str | None = None) -> Produced | None:
    records = instance.fetch_materializations(_filter(asset, partition), limit=1).records
    if not records:
        return None
    event = records[0].asset_materialization
    return _produced(asset, partition, records[0], event)


def latest_observation(instance: dg.DagsterInstance, asset: str, partition: str | None = None) -> Produced | None:
    records = instance.fetch_observations(_filter(asset, partition), limit=1).records
    if not records:
        return None
    return _produced(asset, partition, records[0], records[0].asset_observation)


def _filter(asset: str, partition: str | None) -> dg.AssetRecordsFilter:
    return dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None)


def _produced(asset, partition, record, event) -> Produced:
    metadata = {k: _plain(v.value) for k, v in (event.metadata or {}).items()}
    return Produced(asset, partition, record.run_id, (event.tags or {}).get("dagster/data_version"), record.timestamp,
                    metadata)


def _plain(value):
    return value if isinstance(value, (str, int, float, bool, list, dict, type(None))) else str(value)


def model_partition(model: str, dataset: str) -> str:
    """The multi-partition key string of (model, dataset), as the instance stores it."""
    return str(dg.MultiPartitionKey({"model": model, "dataset": dataset}))


@functools.cache
def code_version() -> str:
    """The package version, plus the git commit of the checkout it runs from (and '+dirty' for local edits)."""
    from focus_dagster import __version__

    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+{commit}" + ("-dirty" if dirty else "")
