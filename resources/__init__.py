"""Dagster resources: where tables and artifacts are stored, and where each dataset is read from."""

from resources.data import DatasetRoots
from resources.models import ModelHub
from resources.storage import FocusStorage

__all__ = ["DatasetRoots", "FocusStorage", "ModelHub"]
