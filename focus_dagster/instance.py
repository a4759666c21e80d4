"""The Dagster instance under FOCUS_HOME: where it lives and where its UI listens.

Wiring, not science: the demo, the UI command and `focus trace --runs` find the instance here. Lineage is not
read from the instance's events: every step records what it read in what it writes (focus_dagster/lineage.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from focus_dagster.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[1]
UI_HOST, UI_PORT = "127.0.0.1", 3000


# FOCUS_INSTANCE selects the instance's dagster.yaml: unset, the repository's (SQLite under FOCUS_HOME); a
# profile's name, deploy/<name>/dagster.yaml (`postgres`: deploy/postgres/README.md); else a dagster.yaml path.
INSTANCE_ENV = "FOCUS_INSTANCE"
PROFILES = REPO_ROOT / "deploy"


def instance_profile() -> Path:
    """The dagster.yaml that configures the instance, as FOCUS_INSTANCE selects it."""
    value = os.environ.get(INSTANCE_ENV, "").strip()
    if not value:
        return REPO_ROOT / "dagster.yaml"
    named = PROFILES / value / "dagster.yaml"
    if "/" not in value and named.is_file():
        return named
    path = Path(value).expanduser()
    path = path / "dagster.yaml" if path.is_dir() else path
    if path.is_file():
        return path
    known = sorted(p.parent.name for p in PROFILES.glob("*/dagster.yaml"))
    raise ConfigError(f"{INSTANCE_ENV}={value!r} is neither a profile under {PROFILES} ({', '.join(known) or 'none'}) "
                      "nor a dagster.yaml file. Unset it for the local instance under FOCUS_HOME.")


def prepare_dagster_home(config) -> Path:
    """DAGSTER_HOME under FOCUS_HOME, configured by the repository's dagster.yaml or the profile FOCUS_INSTANCE
    names (an explicit DAGSTER_HOME wins)."""
    explicit = os.environ.get("DAGSTER_HOME")
    if explicit:
        return Path(explicit)
    profile = instance_profile()
    home = config.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(profile, home / "dagster.yaml")
    return home
