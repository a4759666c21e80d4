"""Hub-format models (a folder with config.json and safetensors): ViT, DINOv2, DINOv3, CLIP, SigLIP, and
the vision tower of any of them (family `hf_vision`).

Weights come only from a local folder, through `from_pretrained(folder, local_files_only=True)`: the spec's
`path`, or the already-populated local hub cache for its `source` (looked up offline). Every load is
audited from the library's own loading info (missing / unexpected / shape-mismatched tensors against the
folder's safetensors), and a backbone tensor left missing raises `CheckpointError`. So does a folder whose
weights are a pickle that `torch.load(weights_only=True)` refuses: it is never loaded any other way.

Zero-shot scoring needs `logit_scale` (on the LoadedEncoder) and, for SigLIP-family models, a
`logit_bias`: it is carried by the text tower (`encoder.text.logit_bias`, None for CLIP). In the
two-prompt softmax of the protocol the bias cancels; it matters only for SigLIP's own per-prompt sigmoid.
SigLIP 2 fixed-resolution checkpoints (`google/siglip2-base-patch16-224`) and MedSigLIP are published with
`model_type: siglip` and load as `SiglipModel`; the variable-resolution NaFlex variants (`siglip2`) need
patch masks from their processor and are refused with an explanation.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

# Loading runs inside asset steps and the CLI: progress bars would only flood the run logs.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from focus_dagster.files import confined, file_sha256  # noqa: E402
from focus_dagster.models.audit import (  # noqa: E402
    TORCH_SUFFIXES,
    LoadReport,
    first_unreadable_safetensors,
    is_pickle_refusal,
    pickle_refused,
    unreadable_safetensors,
)
from focus_dagster.models.base import LoadedEncoder
from focus_dagster.models.quiet import quiet_transformers
from focus_dagster.models.spec import (
    CheckpointError,
    ModelSpec,
    ModelSpecError,
    WeightsNotFoundError,
)

# model_type values each family accepts (read from the folder's config.json before loading).
VISION_MODEL_TYPES = {"hf_vit": ("vit",), "hf_dinov2": ("dinov2",), "hf_dinov3": ("dinov3_vit",)}
DUAL_MODEL_TYPES = {"hf_clip": ("clip",), "hf_siglip": ("siglip",)}
# Model tensors a family may leave at their initial values because the benchmark never reads them:
# ViT classification checkpoints (google/vit-*) ship no pooler, and the ViT pooler is not our embedding.
IGNORED_PREFIXES = {"hf_vit": ("pooler.",)}
POOLINGS = ("cls", "mean_patch")
# family hf_vision: model_type -> the tower it loads ("auto": AutoModel; "clip" / "siglip": the vision tower
# class, which also reads the vision half of a full CLIP / SigLIP folder)
VISION_TOWERS = {
    "vit": "auto",
    "dinov2": "auto",
    "dinov2_with_registers": "auto",
    "dinov3_vit": "auto",
    "clip": "clip",
    "clip_vision_model": "clip",
    "siglip": "siglip",
    "siglip_vision_model": "siglip",
}
TOWER_POOLINGS = ("default", "pooler", "cls", "mean_patch", "projection")


class TextTower:
    """Prompts -> text embeddings [N, dim], in the image embeddings' space.

    logit_bias: the model's learned bias added to every image-text logit (SigLIP), None where it has none.
    wraps_prompts: True when the tower applies its own prompt template (callers then pass bare conditions).
    """

    def __init__(self, encode, logit_bias: float | None = None, wraps_prompts: bool = False):
        self._encode = encode
        self.logit_bias = logit_bias
        self.wraps_prompts = wraps_prompts

    def __call__(self, prompts: list[str]):
        return self._encode(list(prompts))


# --------------------------------------------------------------------------- finding and loading the folder


def resolve_folder(spec: ModelSpec) -> Path:
    """The local folder holding the spec's weights: its `path`, or the offline hub cache for its source."""
    if spec.path:
        folder = Path(spec.path).expanduser()
        if not (folder / "config.json").is_file():
            raise WeightsNotFoundError(_absent_message(spec, folder))
        return folder
    cached = _hub_cache_folder(spec)
    if cached is None:
        raise WeightsNotFoundError(_absent_message(spec, None))
    return cached


def _hub_cache_folder(spec: ModelSpec) -> Path | None:
    """The cached snapshot of `spec.source`, without touching the network (None when absent)."""
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(spec.source, revision=spec.revision, local_files_only=True))
    except (ImportError, OSError, ValueError):  # not cached, or not a hub id: the caller says where it looked
        return None
    return folder if (folder / "config.json").is_file() else None


def _absent_message(spec: ModelSpec, folder: Path | None) -> str:
    where = str(folder) if folder is not None else f"the local hub cache for {spec.source!r} ({_hub_cache_dir()})"
    return (
        f"model {spec.id!r}: no hub-format weights (config.json + *.safetensors) at {where}. Nothing is "
        f"downloaded at run time: fetch the folder once on a machine with network (e.g. `hf download "
        f"{spec.source} --local-dir <folder>`), copy it here, and set `path: <folder>` for this model in "
        "focus.yaml."
    )


def _hub_cache_dir() -> str:
    try:
        from huggingface_hub.constants import HF_HUB_CACHE

        return str(HF_HUB_CACHE)
    except ImportError:
        return os.environ.get("HF_HUB_CACHE", "~/.cache/huggingface/hub")


def read_model_type(folder: Path, spec: ModelSpec, accepted: tuple[str, ...]) -> str:
    """The folder's `model_type`, checked against what the spec's family can load."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"model {spec.id!r}: {folder / 'config.json'} is not readable JSON ({exc}).") from exc
    model_type = config.get("model_type")
    if model_type not in accepted:
        hint = ""
        if model_type == "siglip2":
            hint = " (NaFlex SigLIP 2 needs patch masks from its processor; use a fixed-resolution checkpoint)"
        elif model_type is None and "architecture" in config:
            hint = f" (a timm folder, architecture {config['architecture']!r}: use `family: timm`)"
        raise CheckpointError(
            f"model {spec.id!r}: {folder} holds a {model_type!r} model, but family {spec.family!r} loads "
            f"{list(accepted)}{hint}. Check the spec's family."
        )
    return model_type


def pretrained_kwargs(spec: ModelSpec, folder: Path) -> dict:
    """Keyword arguments for `from_pretrained`: offline, safetensors where present, remote code only on opt-in."""
    import torch

    kwargs = {
        "local_files_only": True,
        "trust_remote_code": bool(spec.trust_remote_code),
        "output_loading_info": True,
        "dtype": getattr(torch, spec.dtype),
    }
    if any(folder.glob("*.safetensors")):
        kwargs["use_safetensors"] = True
    if spec.revision and not spec.path:
        kwargs["revision"] = spec.revision
    return kwargs


def load_pretrained(
    model_class, spec: ModelSpec, folder: Path, ignored_prefixes: tuple[str, ...] | None = None, **overrides
):
    """`model_class.from_pretrained` on the local folder, with its audit; raises on any missing tensor.

    ignored_prefixes: model tensors the folder may lack (default: the family's IGNORED_PREFIXES); overrides:
    further from_pretrained keywords (e.g. a `config`)."""
    quiet_transformers()
    try:
        model, info = model_class.from_pretrained(str(folder), **{**pretrained_kwargs(spec, folder), **overrides})
    except Exception as exc:
        if is_pickle_refusal(exc):
            # Raised from None: PyTorch's advice to set weights_only=False must not reach the user as if it were ours.
            raise pickle_refused(spec.id, _weights_files(folder), exc) from None
        unreadable = first_unreadable_safetensors(folder)
        if unreadable is not None:  # safetensors' own error names neither the model nor the file
            raise unreadable_safetensors(spec.id, *unreadable) from exc
        if not isinstance(exc, (OSError, RuntimeError, ValueError)):
            raise
        raise CheckpointError(f"model {spec.id!r}: {folder} could not be loaded as {model_class.__name__}: {exc}") from exc
    report = loading_report(model, info, spec, folder, ignored_prefixes)
    return model.eval(), report


def _weights_files(folder: Path) -> str:
    """The folder's pickled weights files, as an error names them."""
    names = sorted(p.name for p in folder.iterdir() if p.suffix in TORCH_SUFFIXES)
    return f"{folder} ({', '.join(names)})" if names else str(folder)


def loading_report(
    model, info: dict, spec: ModelSpec, folder: Path, ignored_prefixes: tuple[str, ...] | None = None
) -> LoadReport:
    """A LoadReport from transformers' loading info (which compares the folder's tensors with the model's)."""
    own = model.state_dict()
    if ignored_prefixes is None:
        ignored_prefixes = IGNORED_PREFIXES.get(spec.family, ())
    missing_all = sorted(set(info.get("missing_keys", ())))
    ignored = [name for name in missing_all if ignored_prefixes and name.startswith(ignored_prefixes)]
    mismatched = [_mismatch_text(entry) for entry in info.get("mismatched_keys", ())]
    report = LoadReport(
        model_id=spec.id,
        checkpoint=str(folder),
        weights_sha256=file_sha256(folder),
        model_tensors=len(own),
        matched=len(own) - len(missing_all),
        missing=[name for name in missing_all if name not in ignored],
        unexpected=sorted(set(info.get("unexpected_keys", ()))),
        shape_mismatched=mismatched,
        ignored_missing=ignored,
    )
    if not report.clean:
        raise CheckpointError(
            f"model {spec.id!r}: {folder} filled only {report.matched} of {report.model_tensors} model tensors; "
            f"missing {len(report.missing)} (e.g. {report.missing[:5]}), shape mismatches {report.shape_mismatched[:3]}. "
            "A partial load is never accepted: check that the folder is complete and matches the spec's family."
        )
    return report


def _mismatch_text(entry) -> str:
    """One shape mismatch as text: the library gives (name, checkpoint shape, model shape)."""
    if isinstance(entry, tuple) and len(entry) == 3:
        return f"{entry[0]}: checkpoint {tuple(entry[1])} vs model {tuple(entry[2])}"
    return str(entry)


# --------------------------------------------------------------------------- vision encoders


def load_hf_vision(spec: ModelSpec) -> LoadedEncoder:
    """ViT / DINOv2 / DINOv3 from a hub folder; embedding = normed CLS (`cls`) or mean of patch tokens."""
    from transformers import AutoModel

    if spec.pooling not in POOLINGS:
        raise ModelSpecError(f"model {spec.id!r}: pooling {spec.pooling!r} not supported here; use one of {POOLINGS}")
    folder = resolve_folder(spec)
    read_model_type(folder, spec, VISION_MODEL_TYPES[spec.family])
    model, report = load_pretrained(AutoModel, spec, folder)
    first_patch = 1 + int(getattr(model.config, "num_register_tokens", 0) or 0)
    uses_pooler = spec.family != "hf_vit"  # DINOv2/v3 pooler = normed CLS; the ViT pooler is an unused head

    def embed(pixels):
        out = model(pixel_values=pixels.to(model.dtype))
        if spec.pooling == "mean_patch":
            return out.last_hidden_state[:, first_patch:].mean(dim=1)
        if uses_pooler and getattr(out, "pooler_output", None) is not None:
            return out.pooler_output
        return out.last_hidden_state[:, 0]  # already through the final LayerNorm in these models

    return LoadedEncoder(spec=spec, embed=embed, dim=int(model.config.hidden_size), report=report, modules=(model,))


# --------------------------------------------------------------------------- any vision tower


def load_hf_vision_tower(spec: ModelSpec) -> LoadedEncoder:
    """The vision tower of a hub folder (VISION_TOWERS: ViT, DINOv2 with or without registers, DINOv3, CLIP,
    SigLIP; a full CLIP / SigLIP folder gives its vision tower), loaded offline and audited.

    Pooling: `default` / `pooler`: the model's pooler_output (DINOv2/v3: the normed CLS token; CLIP: the CLS
    token after post_layernorm; SigLIP: its attention-pooling head; ViT: its pooler, or the CLS token when the
    folder has no pooler weights, reported as ignored_missing). `cls`: token 0 of last_hidden_state as the
    library returns it (ViT/DINO: after the final LayerNorm; CLIP: before post_layernorm). `mean_patch`: mean
    of the patch tokens (class and register tokens excluded). `projection`: CLIP's projected image features
    (SigLIP: its pooler, the space its text tower shares).
    """
    folder = resolve_folder(spec)
    model_type = read_model_type(folder, spec, tuple(VISION_TOWERS))
    tower = VISION_TOWERS[model_type]
    pooling = tower_pooling(spec, tower)
    model_class, overrides = tower_class(tower, pooling, folder, model_type)
    ignored = ("pooler.",) if model_type == "vit" and pooling != "pooler" else ()
    model, report = load_pretrained(model_class, spec, folder, ignored_prefixes=ignored, **overrides)
    if model_type == "vit" and pooling == "default" and report.ignored_missing:
        pooling = "cls"  # the folder has no pooler (a classification checkpoint): its CLS token instead
    if tower == "siglip" and pooling in ("default", "pooler") and not getattr(model.config, "vision_use_head", True):
        raise ModelSpecError(
            f"model {spec.id!r}: the SigLIP tower in {folder} has no pooling head (vision_use_head: false); "
            "use `pooling: mean_patch`."
        )
    registers = int(getattr(model.config, "num_register_tokens", 0) or 0)
    first_patch = (0 if tower == "siglip" else 1) + registers
    dim = int(model.config.projection_dim) if pooling == "projection" else int(model.config.hidden_size)
    embed = tower_embed(model, pooling, first_patch)
    return LoadedEncoder(spec=spec, embed=embed, dim=dim, report=report, modules=(model,))


def tower_pooling(spec: ModelSpec, tower: str) -> str:
    """The spec's pooling, checked against what the tower has (SigLIP: no class token; projection: CLIP)."""
    pooling = spec.pooling
    if pooling not in TOWER_POOLINGS:
        raise ModelSpecError(
            f"model {spec.id!r}: pooling {pooling!r} is not one of {TOWER_POOLINGS} (family {spec.family!r})."
        )
    if tower == "siglip" and pooling == "cls":
        raise ModelSpecError(
            f"model {spec.id!r}: a SigLIP tower has no class token; use `pooling: default` (its attention-pooling "
            "head) or `pooling: mean_patch`."
        )
    if pooling == "projection" and tower != "clip":
        if tower == "siglip":
            return "pooler"  # SigLIP's image features are its pooler output: no projection
        raise ModelSpecError(
            f"model {spec.id!r}: `pooling: projection` needs a CLIP folder (a projection head); use `pooling: default`."
        )
    return pooling


def tower_class(tower: str, pooling: str, folder: Path, model_type: str) -> tuple:
    """The transformers class that loads the tower, and from_pretrained overrides (CLIP's projection width)."""
    import transformers

    if tower == "siglip":
        return transformers.SiglipVisionModel, {}
    if tower == "clip" and pooling == "projection":
        config = transformers.CLIPVisionConfig.from_pretrained(str(folder), local_files_only=True)
        if model_type == "clip":  # the projection width is a top-level setting of a full CLIP config
            top = json.loads((folder / "config.json").read_text())
            config.projection_dim = int(top.get("projection_dim", config.projection_dim))
        return transformers.CLIPVisionModelWithProjection, {"config": config}
    if tower == "clip":
        return transformers.CLIPVisionModel, {}
    return transformers.AutoModel, {}


def tower_embed(model, pooling: str, first_patch: int):
    """pixels [B,3,H,W] -> the tower's pooled features [B,D], without autograd."""

    def embed(pixels):
        import torch

        with torch.no_grad():
            out = model(pixel_values=pixels.to(model.dtype))
            if pooling == "projection":
                return out.image_embeds
            if pooling == "cls":
                return out.last_hidden_state[:, 0]
            if pooling == "mean_patch":
                return out.last_hidden_state[:, first_patch:].mean(dim=1)
            return out.pooler_output

    return embed


# --------------------------------------------------------------------------- dual encoders


def load_hf_dual_encoder(spec: ModelSpec) -> LoadedEncoder:
    """CLIP / SigLIP from a hub folder with its tokenizer: image features, text features, logit scale."""
    from transformers import AutoTokenizer, CLIPModel, SiglipModel

    folder = resolve_folder(spec)
    model_type = read_model_type(folder, spec, DUAL_MODEL_TYPES.get(spec.family, ("clip", "siglip")))
    model_class = SiglipModel if model_type == "siglip" else CLIPModel
    model, report = load_pretrained(model_class, spec, folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            str(folder), local_files_only=True, trust_remote_code=bool(spec.trust_remote_code)
        )
    except (OSError, ValueError) as exc:
        raise WeightsNotFoundError(
            f"model {spec.id!r}: no usable tokenizer in {folder} ({exc}). Copy the model's tokenizer files "
            "(tokenizer.json / tokenizer_config.json, or its sentencepiece model) into that folder."
        ) from exc

    def embed(pixels):
        return _features(model.get_image_features(pixel_values=pixels.to(model.dtype)))

    encode = _siglip_text_encoder(model, tokenizer) if model_type == "siglip" else _clip_text_encoder(model, tokenizer)
    bias = getattr(model, "logit_bias", None)
    return LoadedEncoder(
        spec=spec,
        embed=embed,
        dim=int(model.config.projection_dim) if model_type == "clip" else int(model.config.vision_config.hidden_size),
        report=report,
        modules=(model,),
        text=TextTower(encode, logit_bias=float(bias.detach().reshape(-1)[0]) if bias is not None else None),
        logit_scale=float(model.logit_scale.detach().exp()),
    )


def _features(output):
    """Projected features, whether the library returns a tensor or an output whose pooler holds them."""
    return output if hasattr(output, "shape") else output.pooler_output


def _clip_text_encoder(model, tokenizer):
    """CLIP pools at the end-of-text token, so padding to the longest prompt (with its mask) is exact."""
    max_length = int(model.config.text_config.max_position_embeddings)

    def encode(prompts):
        tokens = tokenizer(prompts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        device = next(model.parameters()).device
        return _features(
            model.get_text_features(input_ids=tokens["input_ids"].to(device), attention_mask=tokens["attention_mask"].to(device))
        )

    return encode


def _siglip_text_encoder(model, tokenizer):
    """SigLIP pools the last position and was trained on prompts padded to max length, without a mask."""
    max_length = int(model.config.text_config.max_position_embeddings)

    def encode(prompts):
        tokens = tokenizer(prompts, padding="max_length", truncation=True, max_length=max_length, return_tensors="pt")
        device = next(model.parameters()).device
        return _features(model.get_text_features(input_ids=tokens["input_ids"].to(device)))

    return encode


# --------------------------------------------------------------------------- pipeline-check dual encoder

TINY_CLIP_DEFAULTS = {"hidden": 32, "layers": 2, "heads": 2, "projection": 32, "patch": 8, "seed": 0, "max_text": 32}
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
FUNDUS_WORDS = (
    "a", "an", "and", "cup", "diabetic", "disc", "exudate", "eye", "fundus", "glaucoma", "haemorrhage", "healthy",
    "lesion", "macula", "no", "normal", "of", "optic", "or", "photograph", "referable", "retina", "retinopathy",
    "showing", "signs", "the", "with", "without",
)


def load_tiny_clip(spec: ModelSpec) -> LoadedEncoder:
    """The seeded pipeline-check dual encoder: built once into `spec.path`, then loaded like any hub CLIP.

    Its numbers test the plumbing only (random weights, a word-level tokenizer over fundus prompt words).
    The folder is created when missing; an existing complete folder is reused as is.
    """
    folder = Path(spec.path).expanduser() if spec.path else _default_cache(spec)
    if not (folder / "config.json").is_file() or not (folder / "tokenizer.json").is_file():
        build_tiny_clip(folder, spec)
    clip_spec = replace(spec, family="hf_clip", path=str(folder), trust_remote_code=False)
    loaded = load_hf_dual_encoder(clip_spec)
    loaded.spec = spec
    loaded.report.model_id = spec.id
    return loaded


def _default_cache(spec: ModelSpec) -> Path:
    home = Path(os.environ.get("FOCUS_HOME") or ".focus").expanduser()
    return confined(home / "models", spec.id, f"the model cache folder of {spec.id!r}")


def build_tiny_clip(folder: Path, spec: ModelSpec) -> Path:
    """Write a seeded tiny CLIPModel and its tokenizer into `folder` (hub layout), deterministically."""
    quiet_transformers()
    import torch
    from transformers import CLIPConfig, CLIPModel

    options = {**TINY_CLIP_DEFAULTS, **spec.options}
    tokenizer = tiny_tokenizer(int(options["max_text"]))
    vocab = tokenizer.get_vocab()
    config = CLIPConfig(
        text_config={
            "vocab_size": len(vocab),
            "hidden_size": options["hidden"],
            "intermediate_size": 2 * options["hidden"],
            "num_hidden_layers": options["layers"],
            "num_attention_heads": options["heads"],
            "max_position_embeddings": options["max_text"],
            "pad_token_id": vocab["[PAD]"],
            "bos_token_id": vocab["[BOS]"],
            "eos_token_id": vocab["[EOS]"],
        },
        vision_config={
            "hidden_size": options["hidden"],
            "intermediate_size": 2 * options["hidden"],
            "num_hidden_layers": options["layers"],
            "num_attention_heads": options["heads"],
            "image_size": int(options.get("image_size", spec.preprocess.size)),
            "patch_size": options["patch"],
        },
        projection_dim=options["projection"],
    )
    torch.manual_seed(int(options["seed"]))
    model = CLIPModel(config).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    return folder


def tiny_vocabulary() -> list[str]:
    """The tiny tokenizer's words: every word of the registered prompts plus common fundus terms, sorted."""
    from focus_dagster.prompts import PROMPTS

    words = {".", ","} | set(FUNDUS_WORDS)
    for pair in PROMPTS.values():
        for prompt in (pair.negative, pair.positive):
            words |= set(_words(prompt.text)) | set(_words(prompt.condition))
    return sorted(words)


def _words(text: str) -> list[str]:
    return [w for w in "".join(c.lower() if c.isalnum() else " " for c in text).split() if w]


def tiny_tokenizer(max_length: int):
    """A word-level tokenizer trained in-process on the fixed vocabulary (lower-cased, punctuation split)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from tokenizers.trainers import WordLevelTrainer
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(WordLevel(unk_token="[UNK]"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.train_from_iterator([" ".join(tiny_vocabulary())], WordLevelTrainer(special_tokens=list(SPECIAL_TOKENS)))
    bos, eos = backend.token_to_id("[BOS]"), backend.token_to_id("[EOS]")
    backend.post_processor = processors.TemplateProcessing(
        single="[BOS] $A [EOS]", special_tokens=[("[BOS]", bos), ("[EOS]", eos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        bos_token="[BOS]",
        eos_token="[EOS]",
        model_max_length=max_length,
    )
