"""Loader families: the checkpoint format a spec names, and the function that reads it."""

from __future__ import annotations

import importlib

from focus_dagster.models.base import LoadedEncoder
from focus_dagster.models.spec import ModelSpec, ModelSpecError

# family -> "module:function"; modules are imported only when a model of that family is loaded.
LOADERS = {
    "timm": "focus_dagster.models.loaders.timm_any:load_timm",
    "timm_vit": "focus_dagster.models.loaders.timm_family:load_timm_vit",
    "retfound_mae": "focus_dagster.models.loaders.timm_family:load_retfound_mae",
    "retfound_dinov2": "focus_dagster.models.loaders.timm_family:load_retfound_dinov2",
    "visionfm": "focus_dagster.models.loaders.timm_family:load_visionfm",
    "efficientnet_lite0": "focus_dagster.models.loaders.timm_family:load_efficientnet_lite0",
    "tiny_vit": "focus_dagster.models.loaders.timm_family:load_tiny_vit",
    "hf_vit": "focus_dagster.models.loaders.hub_family:load_hf_vision",
    "hf_dinov2": "focus_dagster.models.loaders.hub_family:load_hf_vision",
    "hf_dinov3": "focus_dagster.models.loaders.hub_family:load_hf_vision",
    "hf_vision": "focus_dagster.models.loaders.hub_family:load_hf_vision_tower",
    "hf_clip": "focus_dagster.models.loaders.hub_family:load_hf_dual_encoder",
    "hf_siglip": "focus_dagster.models.loaders.hub_family:load_hf_dual_encoder",
    "tiny_clip": "focus_dagster.models.loaders.hub_family:load_tiny_clip",
    "flair": "focus_dagster.models.loaders.ophthalmic_vlm:load_flair",
    "eyeclip": "focus_dagster.models.loaders.ophthalmic_vlm:load_eyeclip",
    "retclip": "focus_dagster.models.loaders.ophthalmic_vlm:load_retclip",
}


def load_encoder(spec: ModelSpec) -> LoadedEncoder:
    """Load a VM or VLM spec through its family's loader (weights from local disk only), its preprocessing
    resolved from the model's own configuration first (models/preprocessing.py)."""
    from focus_dagster.models.preprocessing import with_own_preprocessing

    if spec.interface == "mllm":
        raise ModelSpecError(f"model {spec.id!r} is a multimodal LLM: it is scored by the token-probability step.")
    if spec.family not in LOADERS:
        raise ModelSpecError(f"model {spec.id!r}: unknown loader family {spec.family!r}; known: {', '.join(LOADERS)}")
    module_name, function = LOADERS[spec.family].split(":")
    return getattr(importlib.import_module(module_name), function)(with_own_preprocessing(spec))
