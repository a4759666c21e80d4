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

from focus_dagster.models.spec import ModelSpec, ModelSpecError, Preprocess

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
            spec = spec.with_path(Path(cache_dir) / spec.id)
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
        return replace(catalog[model_id], **_typed(entry))
    missing = [k for k in REQUIRED_FOR_NEW if k not in entry]
    if missing:
        raise ModelSpecError(
            f"{where}: model {model_id!r} is not in the catalog (`focus models` lists it), so it needs {missing}."
        )
    allowed = {f.name for f in fields(ModelSpec)} - {"id"}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ModelSpecError(f"{where}: model {model_id!r} has unknown key(s) {unknown}; allowed: {sorted(allowed)}.")
    return ModelSpec(id=model_id, **_typed(entry))


def _typed(entry: dict) -> dict:
    typed = dict(entry)
    if isinstance(typed.get("preprocess"), Mapping):
        values = dict(typed["preprocess"])
        for key in ("mean", "std"):
            if key in values:
                values[key] = tuple(values[key])
        typed["preprocess"] = Preprocess(**values)
    if "pretrained_on" in typed:
        typed["pretrained_on"] = tuple(typed["pretrained_on"])
    if "path" in typed and typed["path"] is not None:
        typed["path"] = str(Path(str(typed["path"])).expanduser())
    return typed
