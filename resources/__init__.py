"""Dagster resources: where tables and artifacts are stored, where each dataset is read from, which models run.

The package imports none of its modules: `from resources import FocusStorage` loads `resources.storage` on first
use, so `resources.layout` alone (what `focus trace` needs) imports no Dagster. The modules import one another
by their own names (`resources.layout`), never through this package, so nothing here is imported in a circle.
`resources.bundle.focus_resources` builds the resources every step asks for.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resources import layout
    from resources.data import DatasetRoots
    from resources.models import ModelHub
    from resources.storage import FocusStorage

# The public names, and the module each lives in.
_HOMES = {"DatasetRoots": "resources.data", "FocusStorage": "resources.storage", "ModelHub": "resources.models"}

__all__ = ["DatasetRoots", "FocusStorage", "ModelHub", "layout"]


def __getattr__(name: str):
    """A resource class (or `layout`) on first use."""
    if name == "layout":
        return import_module("resources.layout")
    if name not in _HOMES:
        raise AttributeError(f"module 'resources' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
