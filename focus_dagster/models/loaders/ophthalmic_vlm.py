"""Ophthalmic dual encoders from their published checkpoints: FLAIR, EyeCLIP and RET-CLIP.

FLAIR (jusiro/FLAIR, `flair_resnet.pth`): a plain state dict of `FLAIRModel` —
`vision_model.model.*` (torchvision ResNet-50 with `fc` replaced by identity),
`vision_model.projection_head_vision.projection.weight` (2048 -> 512, no bias),
`text_model.model.*` (a BERT: Bio_ClinicalBERT), `text_model.projection_head_text.projection.weight`
(768 -> 512, no bias) and `logit_scale`. Each projection head L2-normalises its input, projects, and
L2-normalises again. The text embedding is the mean over tokens of hidden states 1, 2 and the last,
averaged. FLAIR wraps every prompt as "A fundus photograph of [X]" itself: its text tower says so
(`wraps_prompts`), and callers pass bare conditions (see focus_dagster.prompts). Its images are scaled /255
only, longest side to 512 and zero-padded (the spec's preprocess); nothing else is done here.

The checkpoint holds the BERT weights but not its configuration or vocabulary: the tokenizer comes from
a local Bio_ClinicalBERT folder (`options.tokenizer`), or from the offline hub cache.

EyeCLIP (Michi-3000/EyeCLIP): an OpenAI-CLIP model (the `clip` package's `model.py`, ViT-B/16) whose
state dict sits under `model_state_dict`. It is rebuilt here with the OpenAI module names (`visual.conv1`,
`visual.transformer.resblocks.N.attn.in_proj_weight`, `token_embedding`, `ln_final`, `text_projection`,
...), so the audit compares the checkpoint with the published layout tensor by tensor. The BPE tokenizer is
not in the checkpoint: it comes from a local `openai/clip-vit-base-patch16` folder or the offline hub cache.

RET-CLIP (sStonemason/RET-CLIP): built on Chinese-CLIP. Its state dict sits under `state_dict` with the
`module.` prefix of distributed training: `visual.*` (the OpenAI-CLIP ViT), `bert.*` (a BERT with
RoBERTa-wwm-ext-base-chinese weights), `text_projection` / `_left` / `_right` (each Linear-ReLU-Linear),
`logit_scale` / `_left` / `_right`, and the binocular `global_feature_mapping` / `single_feature_mapping`.
That layout is read from the public code (`Code_of_RET-CLIP/RET_CLIP/clip/model.py`), not checked against
the released file: any difference fails the audit loudly. A single fundus image is embedded as RET-CLIP's
monocular path does (`visual` output, no feature mapping), prompts through `text_projection` at [CLS].
RET-CLIP was trained on Chinese reports: English prompts are outside what its text tower learned.
"""

from __future__ import annotations

from pathlib import Path

from focus_dagster.files import file_sha256
from focus_dagster.models.audit import (
    load_audited,
    read_weights,
    select_state_dict,
)
from focus_dagster.models.base import LoadedEncoder
from focus_dagster.models.loaders.hub_family import TextTower
from focus_dagster.models.spec import CheckpointError, ModelSpec, WeightsNotFoundError

FLAIR_CAPTION = "A fundus photograph of [CLS]"
FLAIR_TEXT_SOURCE = "emilyalsentzer/Bio_ClinicalBERT"
# Published architecture (ResNet-50 + Bio_ClinicalBERT, 512-d joint space); tests shrink it via spec.options.
FLAIR_DEFAULTS = {
    "proj_dim": 512,
    "resnet_layers": (3, 4, 6, 3),
    "resnet_width_per_group": 64,
    "text_hidden": 768,
    "text_layers": 12,
    "text_heads": 12,
    "text_intermediate": 3072,
    "text_vocab": 28996,
    "text_max_positions": 512,
    "text_max_length": 77,
}
# FLAIR clamps its log temperature to [0, ln 100] before use.
FLAIR_MAX_LOG_SCALE = 4.6052


def _weights_file(spec: ModelSpec, expected: str) -> Path:
    """The spec's checkpoint file, or an error saying where it was looked for and how to provide it."""
    if not spec.path or not Path(spec.path).expanduser().is_file():
        where = spec.path or "(no `path` set)"
        raise WeightsNotFoundError(
            f"model {spec.id!r}: no checkpoint file at {where}. Nothing is downloaded at run time: obtain "
            f"{expected} (published with {spec.source!r}), copy it to this machine, and set `path:` to that "
            "file for this model in focus.yaml."
        )
    return Path(spec.path).expanduser()


def _tokenizer_folder(spec: ModelSpec, source: str) -> Path:
    """The text tower's tokenizer folder: `options.tokenizer`, or the offline hub cache for `source`."""
    given = spec.options.get("tokenizer")
    if given:
        folder = Path(given).expanduser()
        if folder.is_dir():
            return folder
    else:
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(source, local_files_only=True))
        except (ImportError, OSError, ValueError):  # not cached: reported below
            pass
    raise WeightsNotFoundError(
        f"model {spec.id!r}: no tokenizer for its text tower at {given or f'the local hub cache for {source!r}'}. "
        f"Copy the {source} tokenizer files (vocab.txt, tokenizer_config.json) to a folder and set "
        "`options: {tokenizer: <folder>}` for this model in focus.yaml."
    )


# --------------------------------------------------------------------------- FLAIR


def build_flair(options: dict):
    """An untrained FLAIR module whose state-dict names are the published checkpoint's."""
    import torch
    from torchvision.models.resnet import Bottleneck, ResNet
    from transformers import BertConfig, BertModel

    vision = torch.nn.Module()
    vision.model = ResNet(Bottleneck, list(options["resnet_layers"]), width_per_group=int(options["resnet_width_per_group"]))
    vision.model.fc = torch.nn.Identity()
    vision.projection_head_vision = torch.nn.Module()
    vision.projection_head_vision.projection = torch.nn.Linear(2048, int(options["proj_dim"]), bias=False)

    bert_config = BertConfig(
        vocab_size=int(options["text_vocab"]),
        hidden_size=int(options["text_hidden"]),
        num_hidden_layers=int(options["text_layers"]),
        num_attention_heads=int(options["text_heads"]),
        intermediate_size=int(options["text_intermediate"]),
        max_position_embeddings=int(options["text_max_positions"]),
    )
    text = torch.nn.Module()
    text.model = BertModel(bert_config)
    text.projection_head_text = torch.nn.Module()
    text.projection_head_text.projection = torch.nn.Linear(int(options["text_hidden"]), int(options["proj_dim"]), bias=False)

    model = torch.nn.Module()
    model.vision_model = vision
    model.text_model = text
    model.logit_scale = torch.nn.Parameter(torch.log(torch.tensor(1 / 0.07)))
    return model.eval()


def _project(head, features):
    """FLAIR's projection head: normalise, project, normalise."""
    import torch

    features = torch.nn.functional.normalize(features, dim=-1)
    return torch.nn.functional.normalize(head.projection(features), dim=-1)


def _audited_checkpoint(spec: ModelSpec, defaults: dict, text_source: str, expected: str, keys: tuple,
                        build, *, strip_prefix: bool = False, optional_prefixes: tuple = ()):
    """What the three loaders share: options, the checkpoint file, the local tokenizer, the model built from
    the options and filled from the checkpoint under `keys`, audited. Returns (options, tokenizer, model,
    report, path)."""
    from transformers import AutoTokenizer

    options = {**defaults, **spec.options}
    path = _weights_file(spec, expected)
    tokenizer = AutoTokenizer.from_pretrained(
        str(_tokenizer_folder(spec, options.get("text_source", text_source))), local_files_only=True
    )
    model = build(options)
    state = select_state_dict(read_weights(path, spec.id), keys, spec.id, str(path))
    if strip_prefix:  # a checkpoint saved from a DataParallel wrapper carries `module.`; the tensors are the same
        state = strip_distributed_prefix(state)
    report = load_audited(model, state, model_id=spec.id, checkpoint=str(path), weights_sha256=file_sha256(path),
                          optional_prefixes=optional_prefixes)
    return options, tokenizer, model, report, path


def _clip_style_encoder(spec: ModelSpec, model, report, dim: int, embed, encode) -> LoadedEncoder:
    """A CLIP-layout dual encoder (EyeCLIP, RET-CLIP): raw prompts, the model's own learned temperature."""
    return LoadedEncoder(
        spec=spec,
        embed=embed,
        dim=dim,
        report=report,
        modules=(model,),
        text=TextTower(encode, logit_bias=None, wraps_prompts=False),
        logit_scale=float(model.logit_scale.detach().exp()),
    )


def load_flair(spec: ModelSpec) -> LoadedEncoder:
    """FLAIR from its `.pth` state dict (weights_only) and a local Bio_ClinicalBERT tokenizer."""
    import torch

    options, tokenizer, model, report, path = _audited_checkpoint(
        spec, FLAIR_DEFAULTS, FLAIR_TEXT_SOURCE, "flair_resnet.pth", ("model_state_dict", "state_dict"), build_flair
    )
    vision, text = model.vision_model, model.text_model
    max_length = int(options["text_max_length"])

    def embed(pixels):
        return _project(vision.projection_head_vision, vision.model(pixels.to(next(vision.parameters()).dtype)))

    def encode_one(sentence: str):
        # One prompt at a time, as FLAIR embeds each class description: its token mean includes padding.
        tokens = tokenizer([sentence], truncation=True, max_length=max_length, return_tensors="pt")
        device = next(text.parameters()).device
        out = text.model(
            input_ids=tokens["input_ids"].to(device),
            attention_mask=tokens["attention_mask"].to(device),
            output_hidden_states=True,
        )
        hidden = torch.stack([out.hidden_states[1], out.hidden_states[2], out.hidden_states[-1]])
        return _project(text.projection_head_text, hidden.permute(1, 0, 2, 3).mean(2).mean(1))

    def encode(conditions):
        return torch.cat([encode_one(FLAIR_CAPTION.replace("[CLS]", c)) for c in conditions])

    scale = float(model.logit_scale.detach().clamp(0, FLAIR_MAX_LOG_SCALE).exp())
    return LoadedEncoder(
        spec=spec,
        embed=embed,
        dim=int(options["proj_dim"]),
        report=report,
        modules=(model,),
        text=TextTower(encode, logit_bias=None, wraps_prompts=True),
        logit_scale=scale,
    )


# --------------------------------------------------------------------------- OpenAI-CLIP building blocks


def openai_transformer(width: int, layers: int, heads: int):
    """OpenAI CLIP's `Transformer`: `resblocks.N.{attn, ln_1, mlp.c_fc, mlp.c_proj, ln_2}`."""
    import torch

    blocks = torch.nn.ModuleList()
    for _ in range(layers):
        block = torch.nn.Module()
        block.attn = torch.nn.MultiheadAttention(width, heads)
        block.ln_1 = torch.nn.LayerNorm(width)
        block.mlp = torch.nn.Module()
        block.mlp.c_fc = torch.nn.Linear(width, 4 * width)
        block.mlp.c_proj = torch.nn.Linear(4 * width, width)
        block.ln_2 = torch.nn.LayerNorm(width)
        blocks.append(block)
    transformer = torch.nn.Module()
    transformer.resblocks = blocks
    return transformer


def run_openai_transformer(transformer, x, attn_mask=None):
    """Pre-norm residual blocks with QuickGELU, on batch-first tokens [B, L, D]."""
    import torch

    x = x.transpose(0, 1)  # the attention modules are sequence-first, as in the original code
    for block in transformer.resblocks:
        h = block.ln_1(x)
        x = x + block.attn(h, h, h, need_weights=False, attn_mask=attn_mask)[0]
        h = block.mlp.c_fc(block.ln_2(x))
        x = x + block.mlp.c_proj(h * torch.sigmoid(1.702 * h))
    return x.transpose(0, 1)


def openai_visual(options: dict):
    """OpenAI CLIP's `VisionTransformer` (also Chinese-CLIP's `VisualTransformer`), untrained."""
    import torch

    width, patch, size = int(options["vision_width"]), int(options["patch_size"]), int(options["image_size"])
    visual = torch.nn.Module()
    visual.conv1 = torch.nn.Conv2d(3, width, kernel_size=patch, stride=patch, bias=False)
    visual.class_embedding = torch.nn.Parameter(torch.zeros(width))
    visual.positional_embedding = torch.nn.Parameter(torch.zeros((size // patch) ** 2 + 1, width))
    visual.ln_pre = torch.nn.LayerNorm(width)
    visual.transformer = openai_transformer(width, int(options["vision_layers"]), int(options["vision_heads"]))
    visual.ln_post = torch.nn.LayerNorm(width)
    visual.proj = torch.nn.Parameter(torch.zeros(width, int(options["embed_dim"])))
    return visual


def encode_openai_image(visual, pixels):
    """The projected, normed class token: OpenAI CLIP's `encode_image`."""
    import torch

    x = visual.conv1(pixels.to(visual.conv1.weight.dtype)).flatten(2).transpose(1, 2)  # [B, grid**2, width]
    cls = visual.class_embedding.to(x.dtype).expand(x.shape[0], 1, -1)
    x = torch.cat([cls, x], dim=1) + visual.positional_embedding.to(x.dtype)
    x = run_openai_transformer(visual.transformer, visual.ln_pre(x))
    return visual.ln_post(x[:, 0]) @ visual.proj


# --------------------------------------------------------------------------- EyeCLIP

EYECLIP_TEXT_SOURCE = "openai/clip-vit-base-patch16"
# OpenAI CLIP ViT-B/16, which EyeCLIP fine-tunes; tests shrink it via spec.options.
EYECLIP_DEFAULTS = {
    "embed_dim": 512,
    "image_size": 224,
    "patch_size": 16,
    "vision_width": 768,
    "vision_layers": 12,
    "vision_heads": 12,
    "context_length": 77,
    "vocab_size": 49408,
    "text_width": 512,
    "text_layers": 12,
    "text_heads": 8,
}


def build_openai_clip(options: dict):
    """An untrained OpenAI-CLIP ViT model whose state-dict names are those of `clip/model.py`."""
    import torch

    options = {**EYECLIP_DEFAULTS, **options}
    width = int(options["text_width"])
    model = torch.nn.Module()
    model.visual = openai_visual(options)
    model.token_embedding = torch.nn.Embedding(int(options["vocab_size"]), width)
    model.positional_embedding = torch.nn.Parameter(torch.zeros(int(options["context_length"]), width))
    model.transformer = openai_transformer(width, int(options["text_layers"]), int(options["text_heads"]))
    model.ln_final = torch.nn.LayerNorm(width)
    model.text_projection = torch.nn.Parameter(torch.zeros(width, int(options["embed_dim"])))
    model.logit_scale = torch.nn.Parameter(torch.log(torch.tensor(1 / 0.07)))
    return model.eval()


def end_of_text_positions(input_ids, eos_token_id):
    """Where each prompt's end-of-text token is (its first occurrence: CLIP pads with the same token).

    OpenAI's own code takes the largest token id, which is the end-of-text token in its vocabulary;
    the explicit id gives the same position there and stays right for any tokenizer.
    """
    is_end = input_ids == eos_token_id if eos_token_id is not None else None
    if is_end is None or not bool(is_end.any(dim=1).all()):
        return input_ids.argmax(dim=1)
    return is_end.int().argmax(dim=1)


def encode_openai_text(model, input_ids, eos_token_id):
    """OpenAI CLIP's `encode_text`: causal transformer, final norm, projection at the end-of-text token."""
    import torch

    length = input_ids.shape[1]
    x = model.token_embedding(input_ids) + model.positional_embedding[:length]
    causal = torch.full((length, length), float("-inf"), device=x.device, dtype=x.dtype).triu(1)
    x = model.ln_final(run_openai_transformer(model.transformer, x, attn_mask=causal))
    pooled = x[torch.arange(x.shape[0], device=x.device), end_of_text_positions(input_ids, eos_token_id)]
    return pooled @ model.text_projection


def load_eyeclip(spec: ModelSpec) -> LoadedEncoder:
    """EyeCLIP from its `.pt` checkpoint (`model_state_dict`, weights_only) and a local CLIP BPE tokenizer."""
    options, tokenizer, model, report, path = _audited_checkpoint(
        spec, EYECLIP_DEFAULTS, EYECLIP_TEXT_SOURCE,
        "the EyeCLIP checkpoint (an OpenAI-CLIP state dict under `model_state_dict`)", ("model_state_dict",),
        build_openai_clip, strip_prefix=True,
    )
    context = int(options["context_length"])

    def embed(pixels):
        return encode_openai_image(model.visual, pixels)

    def encode(prompts):
        tokens = tokenizer(prompts, padding=True, truncation=True, max_length=context, return_tensors="pt")
        # Padding after the end-of-text token cannot change it: the text transformer is causal.
        return encode_openai_text(model, tokens["input_ids"].to(model.token_embedding.weight.device), tokenizer.eos_token_id)

    return _clip_style_encoder(spec, model, report, int(options["embed_dim"]), embed, encode)


# --------------------------------------------------------------------------- RET-CLIP

RETCLIP_TEXT_SOURCE = "hfl/chinese-roberta-wwm-ext"
# The released RET-CLIP: ViT-B/16 image tower, RoBERTa-wwm-ext-base-chinese text tower, 512-d joint space,
# Chinese-CLIP's 52-token context.
RETCLIP_DEFAULTS = {
    "embed_dim": 512,
    "image_size": 224,
    "patch_size": 16,
    "vision_width": 768,
    "vision_layers": 12,
    "vision_heads": 12,
    "text_hidden": 768,
    "text_layers": 12,
    "text_heads": 12,
    "text_intermediate": 3072,
    "text_vocab": 21128,
    "text_max_positions": 512,
    "text_type_vocab": 2,
    "context_length": 52,
}
RETCLIP_PROJECTIONS = ("text_projection", "text_projection_left", "text_projection_right")
# RET-CLIP's BERT carries a pooler its CLIP never calls (text features are read at [CLS]).
RETCLIP_UNUSED = ("bert.pooler.",)
DISTRIBUTED_PREFIX = "module."


def build_retclip(options: dict):
    """An untrained RET-CLIP module whose state-dict names are those of its public code (`module.` removed)."""
    import torch
    from transformers import BertConfig, BertModel

    options = {**RETCLIP_DEFAULTS, **options}
    embed_dim, hidden = int(options["embed_dim"]), int(options["text_hidden"])
    model = torch.nn.Module()
    model.visual = openai_visual(options)
    model.bert = BertModel(
        BertConfig(
            vocab_size=int(options["text_vocab"]),
            hidden_size=hidden,
            num_hidden_layers=int(options["text_layers"]),
            num_attention_heads=int(options["text_heads"]),
            intermediate_size=int(options["text_intermediate"]),
            max_position_embeddings=int(options["text_max_positions"]),
            type_vocab_size=int(options["text_type_vocab"]),
            layer_norm_eps=1e-12,
        )
    )
    for name in RETCLIP_PROJECTIONS:
        projection = torch.nn.Sequential(
            torch.nn.Linear(hidden, embed_dim), torch.nn.ReLU(), torch.nn.Linear(embed_dim, embed_dim)
        )
        setattr(model, name, projection)
    for name in ("logit_scale", "logit_scale_left", "logit_scale_right"):
        setattr(model, name, torch.nn.Parameter(torch.log(torch.tensor(1 / 0.07))))
    # Binocular heads: loaded so the audit covers the whole checkpoint, unused for a single image.
    model.global_feature_mapping = torch.nn.Linear(2 * embed_dim, embed_dim)
    model.single_feature_mapping = torch.nn.Linear(embed_dim, embed_dim)
    return model.eval()


def strip_distributed_prefix(state: dict) -> dict:
    """Tensor names without DistributedDataParallel's `module.` prefix (names without it are kept)."""
    return {name.removeprefix(DISTRIBUTED_PREFIX): tensor for name, tensor in state.items()}


def _refuse_resnet_embedding(report, spec: ModelSpec, path: Path) -> None:
    """RET-CLIP's optional ResNet-34 patch embedding changes the image path, which is not rebuilt here."""
    extra = [name for name in report.unexpected if name.startswith("visual.resnet34.")]
    if extra:
        raise CheckpointError(
            f"model {spec.id!r}: {path} has a ResNet-34 patch embedding ({len(extra)} tensors, e.g. {extra[:3]}); "
            "only the plain ViT image tower of the released RET-CLIP is supported."
        )


def load_retclip(spec: ModelSpec) -> LoadedEncoder:
    """RET-CLIP from its `.pt` checkpoint (`state_dict`, `module.` prefix, weights_only) and a BERT tokenizer."""
    options, tokenizer, model, report, path = _audited_checkpoint(
        spec, RETCLIP_DEFAULTS, RETCLIP_TEXT_SOURCE, "the RET-CLIP checkpoint (a state dict under `state_dict`)",
        ("state_dict",), build_retclip, strip_prefix=True, optional_prefixes=RETCLIP_UNUSED,
    )
    _refuse_resnet_embedding(report, spec, path)
    context = int(options["context_length"])

    def embed(pixels):
        return encode_openai_image(model.visual, pixels)

    def encode(prompts):
        tokens = tokenizer(prompts, padding=True, truncation=True, max_length=context, return_tensors="pt")
        device = model.bert.embeddings.word_embeddings.weight.device
        # RET-CLIP masks exactly the [PAD] positions, as the tokenizer's attention mask does.
        hidden = model.bert(
            input_ids=tokens["input_ids"].to(device), attention_mask=tokens["attention_mask"].to(device)
        ).last_hidden_state
        return model.text_projection(hidden[:, 0])

    return _clip_style_encoder(spec, model, report, int(options["embed_dim"]), embed, encode)
