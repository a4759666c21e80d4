"""The Dagster instance under FOCUS_HOME: where it lives, where its UI listens, and what its event log says.

Wiring, not science: the demo, the UI command, `focus trace` and the assets that record lineage read the
instance through these functions. Dagster is imported inside them, so that `focus --help` stays instant.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg

REPO_ROOT = Path(__file__).resolve().parents[1]
UI_HOST, UI_PORT = "127.0.0.1", 3000


def prepare_dagster_home(config) -> Path:
    """DAGSTER_HOME under FOCUS_HOME, configured by the repository's dagster.yaml (an explicit DAGSTER_HOME wins)."""
    explicit = os.environ.get("DAGSTER_HOME")
    if explicit:
        return Path(explicit)
    home = config.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    return home


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
    return _produced(asset, partition, records[0], records[0].asset_materialization)


def latest_observation(instance: dg.DagsterInstance, asset: str, partition: str | None = None) -> Produced | None:
    records = instance.fetch_observations(_filter(asset, partition), limit=1).records
    if not records:
        return None
    return _produced(asset, partition, records[0], records[0].asset_observation)


def _filter(asset: str, partition: str | None) -> dg.AssetRecordsFilter:
    import dagster as dg

    return dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None)


def _produced(asset, partition, record, event) -> Produced:
    metadata = {k: _plain(v.value) for k, v in (event.metadata or {}).items()}
    return Produced(asset, partition, record.run_id, (event.tags or {}).get("dagster/data_version"), record.timestamp,
                    metadata)


def _plain(value):
    return value if isinstance(value, (str, int, float, bool, list, dict, type(None))) else str(value)
