"""The resources every asset step asks for, built from one configuration (the code location's `resources=`)."""

from __future__ import annotations

from resources.data import DatasetRoots
from resources.models import ModelHub
from resources.storage import FocusStorage


def focus_resources(config) -> dict:
    """The resources every asset step asks for, built from one configuration."""
    return {
        "datasets": DatasetRoots.from_config(config),
        "models": ModelHub.from_config(config),
        "storage": FocusStorage.from_config(config),
    }
