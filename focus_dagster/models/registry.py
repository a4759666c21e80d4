"""Loader families: the checkpoint format a spec names, and the function that reads it, for every interface."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from focus_dagster.models.base import LoadedEncoder
from focus_dagster.models.spec import ModelSpec, ModelSpecError

if TYPE_CHECKING:
    from focus_dagster.models.loaders.mllm import LoadedMLLM

ENCODER_INTERFACES = ("vm", "vlm")  # a LoadedEncoder: image embeddings, and text embeddings for a dual encoder
MLLM_INTERFACES = ("mllm",)  # a LoadedMLLM: yes/no answers to questions about an image
WHAT_IT_IS = {"vm": "a vision encoder", "vlm": "a dual (image-text) encoder", "mllm": "a multimodal LLM"}

# family -> "module:function"; modules are imported only when a model of that family is loaded.
ENCODER_LOADERS = {
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
MLLM_LOADERS = {
    "hf_mllm": "focus_dagster.models.loaders.mllm:load_hf_mllm",
    "tiny_llava": "focus_dagster.models.loaders.mllm:load_tiny_llava",
}
LOADERS = {**ENCODER_LOADERS, **MLLM_LOADERS}  # every family a spec can name


def load_model(spec: ModelSpec, interfaces: tuple[str, ...] | None = None) -> LoadedEncoder | LoadedMLLM:
    """Load a spec through its family's loader, weights from local disk only: a vision or dual encoder (its
    preprocessing resolved from the model's own configuration first, models/preprocessing.py) or a multimodal LLM.
    `interfaces`: those the caller can use; a spec of another is refused before anything is read."""
    _check_interface(spec, interfaces)
    load = _loader(spec)
    if spec.family in MLLM_LOADERS:
        return load(spec)  # the model's own processor prepares its images
    from focus_dagster.models.preprocessing import with_own_preprocessing

    return load(with_own_preprocessing(spec))


def load_encoder(spec: ModelSpec) -> LoadedEncoder:
    """Load a VM or VLM spec (`load_model` for the callers that embed images)."""
    return load_model(spec, ENCODER_INTERFACES)


def loader_function(family: str):
    """The function that loads a family's checkpoints (its module imported now)."""
    module_name, function = LOADERS[family].split(":")
    return getattr(importlib.import_module(module_name), function)


def _loader(spec: ModelSpec):
    if spec.family not in LOADERS:
        raise ModelSpecError(f"model {spec.id!r}: unknown loader family {spec.family!r}; known: {', '.join(LOADERS)}")
    wanted = MLLM_LOADERS if spec.interface in MLLM_INTERFACES else ENCODER_LOADERS
    if spec.family not in wanted:
        raise ModelSpecError(
            f"model {spec.id!r}: interface {spec.interface!r} does not fit loader family {spec.family!r}; "
            f"families for it: {', '.join(wanted)}"
        )
    return loader_function(spec.family)


def _check_interface(spec: ModelSpec, interfaces: tuple[str, ...] | None) -> None:
    if interfaces is not None and spec.interface not in interfaces:
        raise ModelSpecError(f"model {spec.id!r} is {WHAT_IT_IS[spec.interface]} (interface {spec.interface!r}); "
                             f"this step takes {' or '.join(map(repr, interfaces))} models only.")
