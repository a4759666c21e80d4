"""Which models a user runs: catalog ids, with overrides, and models of their own, from focus.yaml.

    models:
      - efficientnet_lite0                                   # a catalog id as is
      - {id: retfound_mae_natureCFP, path: /weights/RETFound_mae_natureCFP.pth}
      - {id: my_vit, family: timm_vit, interface: vm, domain: general, source: local,
         path: /weights/my_vit.safetensors, options: {embed_dim: 768, depth: 12, num_heads: 12}}

No `models:` key means the default models (they need no download).
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Iterable, Mapping

from focus_dagster.files import confined
from focus_dagster.models.spec import PREPROCESS_FIELDS, ModelSpec, ModelSpecError, Preprocess

# Where a preprocessing value came from (the model's own configuration files add theirs: models/preprocessing.py).
USER_SOURCE, CATALOG_SOURCE, DEFAULT_SOURCE = "focus.yaml", "catalog", "platform default"
# The fields that decide the pixels' geometry (mean, std and scale_only act later, on the model's device).
GEOMETRY = {"size", "resize", "resize_to", "crop_pct", "interpolation"}
# Families that build any architecture: by default its own pooling (timm's forward_head, the hub's pooler).
FAMILY_POOLING = {"timm": "default", "hf_vision": "default"}

OVERRIDABLE = {"path", "revision", "options", "pooling", "dtype", "trust_remote_code", "preprocess", "notes",
               "pretrained_on"}
REQUIRED_FOR_NEW = ("family", "interface", "domain", "source")


def resolve_models(entries: Iterable | None, cache_dir: Path, where: str = "focus.yaml") -> dict[str, ModelSpec]:
    """Model id -> spec for every selected model, in the order given."""
    from focus_dagster.models.catalog import CATALOG, DEFAULT_MODELS, SELF_BUILDING_FAMILIES

    entries = list(entries) if entries is not None else list(DEFAULT_MODELS)
    specs: dict[str, ModelSpec] = {}
    for entry in entries:
        entry = {"id": entry} if isinstance(entry, str) else dict(entry)
        spec = _spec_for(entry, CATALOG, where)
        if spec.path is None and spec.family in SELF_BUILDING_FAMILIES:  # their folder: the model cache
            spec = spec.with_path(confined(cache_dir, spec.id, f"the model cache folder of {spec.id!r}"))
        if spec.id in specs:
            raise ModelSpecError(f"{where}: model {spec.id!r} is listed twice under `models`.")
        specs[spec.id] = spec
    return specs


def _spec_for(entry: dict, catalog: Mapping[str, ModelSpec], where: str) -> ModelSpec:
    model_id = entry.pop("id")
    if model_id in catalog:
        unknown = sorted(set(entry) - OVERRIDABLE)
        if unknown:
            raise ModelSpecError(
                f"{where}: model {model_id!r} is in the catalog; only {sorted(OVERRIDABLE)} can be set for it, "
                f"not {unknown}."
            )
        base = catalog[model_id]
        return replace(base, **_typed(entry, base.preprocess, CATALOG_SOURCE))
    missing = [k for k in REQUIRED_FOR_NEW if k not in entry]
    if missing:
        raise ModelSpecError(
            f"{where}: model {model_id!r} is not in the catalog (`focus models` lists it), so it needs {missing}."
        )
    allowed = {f.name for f in fields(ModelSpec)} - {"id"}
    entry.setdefault("pooling", FAMILY_POOLING.get(entry["family"], "cls"))
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ModelSpecError(f"{where}: model {model_id!r} has unknown key(s) {unknown}; allowed: {sorted(allowed)}.")
    return ModelSpec(id=model_id, **_typed(entry, Preprocess(), DEFAULT_SOURCE))


def _typed(entry: dict, base: Preprocess, base_source: str) -> dict:
    typed = dict(entry)
    typed["preprocess"] = overridden(base.with_sources(base_source), typed.get("preprocess"))
    if "pretrained_on" in typed:
        typed["pretrained_on"] = tuple(typed["pretrained_on"])
    if "path" in typed and typed["path"] is not None:
        typed["path"] = str(Path(str(typed["path"])).expanduser())
    return typed


def overridden(base: Preprocess, block: Mapping | None) -> Preprocess:
    """The `preprocess:` block of focus.yaml over `base`, field by field: the keys it sets are marked as the
    user's, every other field keeps its value and its source. resize_to and crop_pct say one thing two ways:
    setting one clears the other."""
    if not block:
        return base
    values = {key: tuple(value) if key in ("mean", "std") else value for key, value in dict(block).items()}
    unknown = sorted(set(values) - set(PREPROCESS_FIELDS))
    if unknown:
        raise ModelSpecError(f"preprocess keys {unknown} are not known; allowed: {list(PREPROCESS_FIELDS)}")
    if "crop_pct" in values or "resize_to" in values:
        values.setdefault("crop_pct", None)
        values.setdefault("resize_to", None)
    if GEOMETRY & set(values) and "processor" not in values:
        values["processor"] = None  # the geometry is the user's: the pixels come from timm's transform with it
    return replace(base, **values).with_sources(USER_SOURCE, values)
