"""Dagster assets: thin wrappers that call the core, store the result and describe it."""

from assets.datasets import build_dataset_assets
from assets.evaluation import build_evaluation_assets
from assets.labels import build_label_assets
from assets.mllm import build_mllm_assets
from assets.models import build_model_assets

__all__ = ["build_dataset_assets", "build_evaluation_assets", "build_label_assets", "build_mllm_assets", "build_model_assets"]
