"""The Dagster instance under FOCUS_HOME: where it lives and where its UI listens.

Wiring, not science: the demo, the UI command and `focus trace --runs` find the instance here. Lineage is not
read from the instance's events: every step records what it read in what it writes (focus_dagster/lineage.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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
