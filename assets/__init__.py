"""Dagster assets: thin wrappers that call the core, store the result and describe it."""

from assets.datasets import build_dataset_assets

__all__ = ["build_dataset_assets"]
