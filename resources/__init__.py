"""Dagster resources: where tables and artifacts are stored, where each dataset is read from, which models run."""

from resources import layout
from resources.data import DatasetRoots
from resources.models import ModelHub
from resources.storage import FocusStorage

__all__ = ["DatasetRoots", "FocusStorage", "ModelHub", "focus_resources", "layout"]


def focus_resources(config) -> dict:
    """The resources every asset step asks for, built from one configuration."""
    return {
        "datasets": DatasetRoots.from_config(config),
        "models": ModelHub.from_config(config),
        "storage": FocusStorage.from_config(config),
    }
