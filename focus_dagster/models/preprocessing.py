"""A model's preprocessing, from its own configuration: what it was trained to see, and where each value came from.

Layers, lowest first; a layer sets a field only where nothing stronger has:
1. the platform's default (ImageNet mean/std, resize 256 bicubic, crop 224);
2. timm's `pretrained_cfg` of the architecture built (options.model_name), its input size as built
   (options.img_size), for models of the timm families that are not in the catalog;
3. the catalog's published settings (RETFound, FLAIR, ...: models/catalog.py);
4. the model's own configuration file beside its weights: a Hugging Face `preprocessor_config.json` (the image
   processor then computes the pixels itself) or a timm `config.json` with its `pretrained_cfg`;
5. the `preprocess:` block of focus.yaml, field by field (models/selection.py).
Only files on this machine are read; nothing is downloaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from focus_dagster.models.selection import CATALOG_SOURCE, USER_SOURCE
from focus_dagster.models.spec import ModelSpec, ModelSpecError, Preprocess

TIMM_FAMILIES = ("timm", "timm_vit", "retfound_mae", "retfound_dinov2", "visionfm", "efficientnet_lite0", "tiny_vit")
HUB_FAMILIES = ("hf_vision", "hf_vit", "hf_dinov2", "hf_dinov3", "hf_clip", "hf_siglip", "tiny_clip")
# The architecture a timm family builds when options.model_name does not name one (loaders/timm_family.py).
TIMM_DEFAULT_ARCH = {"timm_vit": "vit_base_patch16_224", "retfound_mae": "vit_large_patch16_224",
                     "retfound_dinov2": "vit_large_patch14_dinov2", "visionfm": "vit_base_patch16_224",
                     "efficientnet_lite0": "efficientnet_lite0", "tiny_vit": "vit_tiny_patch16_224"}
TIMM_CROP_MODES = {"center": "resize_crop", "squash": "squash"}
PIL_FILTERS = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # Pillow's resample codes, as image processors store them
PROCESSOR_FILE = "preprocessor_config.json"


@dataclass(frozen=True)
class Layer:
    """Values read from one configuration, where they came from, and whether they outrank the catalog's."""

    values: dict
    source: str
    over_catalog: bool


def with_own_preprocessing(spec: ModelSpec) -> ModelSpec:
    """The spec with its preprocessing resolved through every layer (multimodal LLMs keep theirs: their own
    processor takes the catalog's square)."""
    if spec.interface == "mllm":
        return spec
    preprocess = spec.preprocess
    for layer in own_layers(spec):
        preprocess = laid_over(preprocess, layer)
    return replace(spec, preprocess=preprocess)


def laid_over(preprocess: Preprocess, layer: Layer) -> Preprocess:
    """`layer` over `preprocess`, for the fields nothing stronger set (the user's; the catalog's, for a layer
    that does not outrank it). A user's geometry marks `processor` as the user's too (selection.overridden), so
    no processor computes pixels the user gave another geometry."""
    sources = dict(preprocess.sources)

    def free(name: str) -> bool:
        return sources.get(name) != USER_SOURCE and (layer.over_catalog or sources.get(name) != CATALOG_SOURCE)

    taken = {name: value for name, value in layer.values.items() if free(name)}
    return replace(preprocess, **taken).with_sources(layer.source, taken) if taken else preprocess


def own_layers(spec: ModelSpec) -> list[Layer]:
    """The model's own configurations, lowest first (none for families whose checkpoints carry none)."""
    if spec.family in TIMM_FAMILIES:
        return [layer for layer in (architecture_layer(spec), timm_file_layer(spec)) if layer]
    if spec.family in HUB_FAMILIES:
        layer = processor_layer(spec)
        return [layer] if layer else []
    return []


# ------------------------------------------------------------------------------------------------------ timm


def architecture_layer(spec: ModelSpec) -> Layer | None:
    """timm's data config of the architecture built (a model of the user's; catalog models keep theirs)."""
    from focus_dagster.models.catalog import CATALOG

    name = spec.options.get("model_name") or timm_config_file_architecture(spec) or TIMM_DEFAULT_ARCH.get(spec.family)
    if not name:
        return None
    import timm

    cfg = timm.get_pretrained_cfg(name)
    if cfg is None:
        return None  # an unknown name: the loader says so, with close names
    cfg = cfg.to_dict()
    if isinstance(spec.options.get("img_size"), int):  # the input size as built, not as pretrained
        cfg.update(input_size=(3, spec.options["img_size"], spec.options["img_size"]), test_input_size=None)
    where = f"timm pretrained_cfg of {name!r}"
    return Layer(timm_values(cfg, where), where, over_catalog=spec.id not in CATALOG)


def timm_file_layer(spec: ModelSpec) -> Layer | None:
    """The `pretrained_cfg` of a timm `config.json` beside the weights (timm's save format for the hub)."""
    found = timm_config_file(spec)
    if found is None or not isinstance(found[1].get("pretrained_cfg"), dict):
        return None
    path, config = found
    return Layer(timm_values(config["pretrained_cfg"], str(path)), f"model config {path}", over_catalog=True)


def timm_config_file(spec: ModelSpec) -> tuple[Path, dict] | None:
    """(path, contents) of a timm config.json (one with an `architecture`) in the folder of the weights."""
    from focus_dagster.models.loaders.timm_family import config_beside_weights

    found = config_beside_weights(spec)
    return found if found and "architecture" in found[1] else None


def timm_config_file_architecture(spec: ModelSpec) -> str | None:
    found = timm_config_file(spec)
    return found[1]["architecture"] if found else None


def timm_values(cfg: dict, where: str) -> dict:
    """A timm pretrained_cfg -> preprocessing values, through timm's own resolve_data_config."""
    from timm.data import resolve_data_config

    data = resolve_data_config(args={}, pretrained_cfg=cfg)
    _, height, width = data["input_size"]
    if height != width:
        raise ModelSpecError(f"{where}: input size {height}x{width} is not square; set `preprocess: {{size: ...}}`.")
    mode = data.get("crop_mode") or "center"
    if mode not in TIMM_CROP_MODES:
        raise ModelSpecError(f"{where}: timm crop_mode {mode!r} (padding with the mean colour) is not supported; "
                             "set `preprocess: {resize: resize_crop | squash | pad_longest}` for the model.")
    return {"size": height, "resize": TIMM_CROP_MODES[mode], "resize_to": None, "crop_pct": data.get("crop_pct") or 1.0,
            "interpolation": data["interpolation"], "mean": tuple(data["mean"]), "std": tuple(data["std"]),
            "scale_only": False, "processor": None}


# ------------------------------------------------------------------------------------------ Hugging Face hub


def processor_layer(spec: ModelSpec) -> Layer | None:
    """The image processor saved with a hub model (`preprocessor_config.json`): it computes the pixels."""
    folder = hub_folder(spec)
    if folder is None or not (folder / PROCESSOR_FILE).is_file():
        return None
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(str(folder), local_files_only=True)
    where = f"model config {folder / PROCESSOR_FILE}"
    return Layer({**processor_values(processor, where), "processor": str(folder)}, where, over_catalog=True)


def hub_folder(spec: ModelSpec) -> Path | None:
    """The model's folder on this machine (its path, or its hub cache snapshot), None when it is not here (the
    loader then says where it looked)."""
    from focus_dagster.models.catalog import hub_snapshot_dir

    if spec.path:
        folder = Path(spec.path).expanduser()
        return folder if folder.is_dir() else None
    return hub_snapshot_dir(spec.source, spec.revision)[0]


def processor_values(processor, where: str) -> dict:
    """What an image processor does, as preprocessing values (refused, by name, where it does what the platform
    cannot describe: non-square output, another rescale factor, an unsupported filter)."""
    crop = _side(getattr(processor, "crop_size", None), where, "crop_size") if getattr(processor, "do_center_crop", False) else None
    size = getattr(processor, "size", None)
    shortest = _field(size, "shortest_edge")
    if shortest is not None:
        if crop is None:
            raise ModelSpecError(f"{where}: resizing the shortest edge without a centre crop gives non-square images; "
                                 "set `preprocess:` for the model.")
        geometry = {"resize": "resize_crop", "size": crop, "resize_to": int(shortest), "crop_pct": None}
    else:
        side = _side(size, where, "size")
        geometry = {"resize": "squash", "size": crop or side, "resize_to": side, "crop_pct": None}
    if getattr(processor, "do_rescale", True) and not math.isclose(getattr(processor, "rescale_factor", 1 / 255), 1 / 255):
        raise ModelSpecError(f"{where}: rescale_factor {processor.rescale_factor} is not 1/255; set `preprocess:`.")
    resample = int(getattr(processor, "resample", 3) or 0)
    if resample not in PIL_FILTERS:
        raise ModelSpecError(f"{where}: resample {resample} is not one of {PIL_FILTERS}; set `preprocess:`.")
    normalises = bool(getattr(processor, "do_normalize", True))
    return {**geometry, "interpolation": PIL_FILTERS[resample],
            "mean": tuple(float(v) for v in processor.image_mean) if normalises else Preprocess().mean,
            "std": tuple(float(v) for v in processor.image_std) if normalises else Preprocess().std,
            "scale_only": not normalises}


def _field(size, name: str):
    if size is None:
        return None
    return size.get(name) if isinstance(size, dict) else getattr(size, name, None)


def _side(size, where: str, what: str) -> int:
    height, width = _field(size, "height"), _field(size, "width")
    if height is None or height != width:
        raise ModelSpecError(f"{where}: {what} {size} is not a square height x width; set `preprocess:` for the model.")
    return int(height)


# ------------------------------------------------------------------------------------------------ recording


def preprocess_record(preprocess: Preprocess) -> dict:
    """What the lineage, the metadata and `focus models --selected` show: every value, its source, and the
    digest of the image processor that computed the pixels (when one did)."""
    return {**preprocess.described(), **_processor_digest(preprocess)}


def preprocess_fingerprint(preprocess: Preprocess) -> dict:
    """What decides the model's input (its values and the processor's digest, not the sources): a change makes
    the embeddings stale."""
    return {**preprocess.values(), **_processor_digest(preprocess)}


def _processor_digest(preprocess: Preprocess) -> dict:
    return {"processor_digest": processor_digest(preprocess.processor)} if preprocess.processor else {}


def processor_digest(folder: str) -> str:
    """A short digest of an image processor's saved configuration (a changed processor, other pixels)."""
    import hashlib

    return hashlib.blake2b((Path(folder) / PROCESSOR_FILE).read_bytes(), digest_size=6).hexdigest()
