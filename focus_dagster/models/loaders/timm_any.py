"""Any timm architecture: the `timm` family builds whatever `timm.list_models()` names, with its own pooling.

The checkpoint goes through the same audited path as every timm-built family (timm_family.py): safetensors or
torch.load(weights_only=True), prefixes stripped, ViT position embeddings fitted, every tensor accounted for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from focus_dagster.files import file_sha256
from focus_dagster.models.audit import load_audited
from focus_dagster.models.base import LoadedEncoder
from focus_dagster.models.loaders.timm_advice import mismatch_advice
from focus_dagster.models.loaders.timm_family import (
    PLATFORM_OPTIONS,
    VIT_SIZE_OPTIONS,
    config_beside_weights,
    create_timm_model,
    fit_pos_embed,
    read_state_dict,
    require_timm_architecture,
    strip_prefixes,
)
from focus_dagster.models.spec import ModelSpec, ModelSpecError

# keywords of timm.create_model that would fetch or reshape what the platform controls: refused as options
RESERVED_TIMM_KEYWORDS = (
    "pretrained",
    "pretrained_cfg",
    "pretrained_cfg_overlay",
    "checkpoint_path",
    "cache_dir",
    "features_only",
)
# the platform's pooling names -> timm's global_pool values; other values are passed to timm as they are
TIMM_GLOBAL_POOLS = {"cls": "token", "mean_patch": "avg"}
def load_timm(spec: ModelSpec) -> LoadedEncoder:
    """Any timm architecture (`options.model_name`, a `timm.list_models()` name), built with pretrained=False.

    Without options.model_name, the architecture (and its saved arguments) come from a timm `config.json` in
    the checkpoint's folder (as timm's save_for_hf / push_to_hub write it). Every other option except the
    platform's own (PLATFORM_OPTIONS) is a keyword of timm.create_model; one the architecture does not take is
    refused by name. The model keeps its classifier, so a checkpoint's head is audited too (a head absent from
    the checkpoint is reported as ignored); the embedding is timm's pre-logits features,
    `forward_head(forward_features(x), pre_logits=True)`, pooled the architecture's own way (`pooling:
    default`) or with timm's global_pool (cls -> token, mean_patch -> avg, or a timm value as is).
    """
    arch, saved_args = timm_architecture(spec)
    model = create_timm_model(spec, arch, timm_keywords(spec, saved_args)).eval()
    state_dict, path = read_state_dict(spec, ("state_dict", "model"))
    state_dict = strip_prefixes(state_dict, tuple(spec.options.get("strip_prefixes", ("module.",))))
    fit_classifier(model, state_dict, spec)
    if hasattr(getattr(model, "patch_embed", None), "grid_size") and hasattr(model, "num_prefix_tokens"):
        state_dict = fit_pos_embed(state_dict, model)
    report = load_audited(
        model,
        state_dict,
        model_id=spec.id,
        checkpoint=str(path),
        weights_sha256=file_sha256(path),
        optional_prefixes=classifier_prefixes(model),
        built=f"timm {arch!r}",
        advice=mismatch_advice(arch, state_dict, VIT_SIZE_OPTIONS + ("or any other timm.create_model keyword",)),
    )
    embed = pre_logits_forward(model)
    return LoadedEncoder(spec=spec, embed=embed, dim=pre_logits_width(model), report=report, modules=(model,))


def timm_architecture(spec: ModelSpec) -> tuple[str, dict]:
    """The architecture to build and the arguments it was saved with: options.model_name, else the timm
    config.json beside the checkpoint (spec.path a folder, or the hub snapshot)."""
    name = spec.options.get("model_name")
    saved: tuple[str, dict] | None = None
    if not name:
        saved = saved_timm_config(spec)
        if saved is None:
            raise ModelSpecError(
                f"model {spec.id!r}: family 'timm' needs `options.model_name`, the timm architecture the checkpoint "
                "was saved from (a name timm.list_models() gives, e.g. resnet50 or vit_base_patch16_224), unless "
                "`path:` is a folder holding timm's config.json (save_for_hf / push_to_hub write one)."
            )
        name = saved[0]
    require_timm_architecture(spec, name)
    return name, saved[1] if saved else {}


def saved_timm_config(spec: ModelSpec) -> tuple[str, dict] | None:
    """(architecture, saved model arguments) from a timm config.json beside the weights; None when there is none."""
    found = config_beside_weights(spec)
    if found is None:
        return None
    config_file, config = found
    if "architecture" not in config:
        kind = ""
        if "model_type" in config:
            kind = f" (a Hugging Face {config['model_type']!r} config: use `family: hf_vision`)"
        raise ModelSpecError(
            f"model {spec.id!r}: {config_file} is not a timm config (no 'architecture' key){kind}; set "
            "options.model_name to the timm architecture of the checkpoint."
        )
    from timm.models._hub import load_model_config_from_path

    pretrained_cfg, name, model_args = load_model_config_from_path(config_file.parent)
    arguments = dict(model_args or {})
    if "num_classes" not in arguments and pretrained_cfg.get("num_classes") is not None:
        arguments["num_classes"] = pretrained_cfg["num_classes"]
    return name, arguments


def timm_keywords(spec: ModelSpec, saved_args: Mapping) -> dict:
    """Keywords for timm.create_model: the saved arguments, then every non-platform option, then the pooling."""
    given = {key: value for key, value in spec.options.items() if key not in PLATFORM_OPTIONS}
    reserved = sorted(set(given) & set(RESERVED_TIMM_KEYWORDS))
    if reserved:
        raise ModelSpecError(
            f"model {spec.id!r}: option(s) {reserved} are set by the platform (weights come only from `path:`, "
            "never downloaded; the model is always built whole); remove them."
        )
    keywords = {**saved_args, **given}
    pool = timm_global_pool(spec)
    if pool is not None:
        if "global_pool" in given and given["global_pool"] != pool:
            raise ModelSpecError(
                f"model {spec.id!r}: pooling {spec.pooling!r} (timm global_pool {pool!r}) and options.global_pool "
                f"{given['global_pool']!r} disagree; set only `pooling:`, or `pooling: default` with "
                "options.global_pool."
            )
        keywords["global_pool"] = pool
    return keywords


def timm_global_pool(spec: ModelSpec) -> str | None:
    """timm's global_pool for the spec's pooling; None for `default` (the architecture's own pooling)."""
    if spec.pooling == "default":
        return None
    return TIMM_GLOBAL_POOLS.get(spec.pooling, spec.pooling)


def classifier_names(model) -> list[str]:
    """The model's classifier module names: its pretrained config's `classifier`, and get_classifier()'s."""
    declared = (getattr(model, "pretrained_cfg", None) or {}).get("classifier") or ()
    names = [declared] if isinstance(declared, str) else list(declared)
    head = model.get_classifier() if hasattr(model, "get_classifier") else None
    names += [name for name, module in model.named_modules() if head is not None and module is head and name]
    return list(dict.fromkeys(names))


def classifier_prefixes(model) -> tuple[str, ...]:
    """Tensor prefixes of the classifier: a checkpoint saved without its head leaves them at initial values."""
    return tuple(f"{name}." for name in classifier_names(model))


def fit_classifier(model, state_dict: Mapping, spec: ModelSpec) -> None:
    """Resize the classifier to the checkpoint's class count (a fine-tuned head) unless options.num_classes is
    set: the embedding is read before the head, so only the audit of the head's tensors depends on it."""
    if "num_classes" in spec.options or not hasattr(model, "reset_classifier"):
        return
    own = model.state_dict()
    for name in classifier_names(model):
        theirs, ours = state_dict.get(f"{name}.weight"), own.get(f"{name}.weight")
        if theirs is not None and ours is not None and theirs.ndim == ours.ndim and theirs.shape[0] != ours.shape[0]:
            model.reset_classifier(int(theirs.shape[0]))
            return


def pre_logits_forward(model) -> Callable:
    """pixels [B,3,H,W] -> timm's pre-logits features [B,D] (pooled, before the classifier), without autograd."""

    def embed(pixels):
        import torch

        with torch.no_grad():
            return model.forward_head(model.forward_features(pixels), pre_logits=True)

    return embed


def pre_logits_width(model) -> int:
    """The width forward_head(pre_logits=True) returns: timm's head_hidden_size where the head has a hidden
    layer or a wider pooling (MobileNetV3, catavgmax), num_features otherwise."""
    return int(getattr(model, "head_hidden_size", None) or model.num_features)
