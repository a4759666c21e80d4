"""Dagster resources: where tables and artifacts are stored, where each dataset is read from, which models run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from resources import layout

if TYPE_CHECKING:
    from resources.data import DatasetRoots
    from resources.models import ModelHub
    from resources.storage import FocusStorage

__all__ = ["DatasetRoots", "FocusStorage", "ModelHub", "focus_resources", "layout"]


def __getattr__(name: str):
    """The resource classes on first use: `resources.layout` alone (what `focus trace` needs) imports no Dagster."""
    if name == "DatasetRoots":
        from resources.data import DatasetRoots as found
    elif name == "ModelHub":
        from resources.models import ModelHub as found
    elif name == "FocusStorage":
        from resources.storage import FocusStorage as found
    else:
        raise AttributeError(f"module 'resources' has no attribute {name!r}")
    return found


def focus_resources(config) -> dict:
    """The resources every asset step asks for, built from one configuration."""
    from resources.data import DatasetRoots
    from resources.models import ModelHub
    from resources.storage import FocusStorage

    return {
        "datasets": DatasetRoots.from_config(config),
        "models": ModelHub.from_config(config),
        "storage": FocusStorage.from_config(config),
    }
