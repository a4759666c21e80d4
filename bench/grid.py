"""Benchmark: every architecture of the reference grid at its true size on one GPU, and the projected wall time of
the whole grid.

Usage: .venv/bin/python bench/grid.py [--budget-s 420] [--only ARCH ...] [--json FILE]   (on a CUDA GPU)
       .venv/bin/python bench/grid.py --smoke [--only ARCH ...]                          (anywhere: the logic only)

The checkpoints cannot be downloaded here, and compute does not depend on weight values: each model is built with
random weights from its published configuration (the config.json values below, each naming its source), directly
on the GPU in the platform's dtype, and loaded through the platform's own loader (`load_model`),
where only the function that reads weights from disk builds the architecture instead (`random_weights`). Then:

  encoders  the engine's per-batch step (`_run_batch`: uint8 pixels on the device, normalised there, bf16
            autocast, the loader's `embed`) at the engine's batch size: images/s. Decoding is bench/encoders.py's
            to measure; with the pixel cache each image is decoded once per preprocessing, not once per model;
  MLLMs     the same step with the yes/no scorer (one forward pass, first-token logits, three questions per
            image): images/s and prompts/s; then `train_adapter` with the protocol's LoRA settings for two
            optimizer steps of 16 examples: examples/s of the second (the first pays for the allocations);

with the peak GPU memory of each. Models of the grid that share an architecture (RETFound MAE x4, RETFound DINOv2
x2, MedGemma-27B = Gemma-3-27B, MedGemma-4B = MedGemma-1.5-4B = Gemma-3-4B) are measured once.

Projection, per model of the grid, on the published split sizes (datasets.md): encoders embed every image of every
dataset once; MLLMs score each image once per task its dataset defines; each LoRA adapter of the platform's plan
trains one epoch on its training split; each adapted evaluation scores every image of its dataset on one task. The
sum is compared with the target: the whole grid in under three hours on one H200.

`--smoke` runs the same code on the CPU with every architecture shrunk (two layers, 32-wide, 32-64 px images, one
or two batches): it checks the script, its numbers say nothing. Only a CUDA run writes bench/results/grid_h200.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import platform
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from figures import save
from lora import MLLMS, SPLITS, TASKS, write_images  # TASKS: the three questions asked of each measured image

RESULT = Path(__file__).resolve().parent / "results" / "grid_h200.json"
TARGET_HOURS = 3.0
# The reference's own counts (protocol.md, the issue); the platform's plan has fewer adapters because mBRSET has no
# glaucoma label to train on (focus_dagster.adapter_plan).
REFERENCE_COUNTS = {"base_configurations": 532, "lora_adapters": 36, "lora_evaluations": 228}

# ------------------------------------------------------------------------------------------------ architectures

# Shrunk sizes for --smoke: two layers, 32 wide, two heads, 32 px images in 8 px patches.
SMOKE_VIT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
             "image_size": 32, "patch_size": 8}
SMOKE_TIMM = {"embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 32, "patch_size": 8}
SMOKE_OPENAI_VISUAL = {"embed_dim": 32, "image_size": 32, "patch_size": 8, "vision_width": 32, "vision_layers": 2,
                       "vision_heads": 2}
SMOKE_TEXT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
SMOKE_VOCAB = 4096  # above the in-process tokenizers' few hundred ids


@dataclass(frozen=True)
class Arch:
    """One architecture of the grid and the catalog models that share it.

    hub: config.json values for the hub families (the loader builds its class from them); None where the loader's
    own defaults are the published architecture (timm and ophthalmic families). processor: the image processor's
    published settings (MLLMs). smoke: what --smoke changes (hub config values, processor settings, or the spec's
    options), smoke_size: the image size it uses. reserve_s: what the budget guard keeps for it on an H200.
    """

    name: str
    models: tuple[str, ...]
    hub: dict | None = None
    processor: dict = field(default_factory=dict)
    smoke: dict = field(default_factory=dict)
    smoke_size: int = 32
    reserve_s: float = 12.0  # an encoder: build, a warm-up batch and 2 s of batches, with room to spare

    @property
    def is_mllm(self) -> bool:
        return self.name in MLLM_ARCHS


def mllm_reserve(billions: float) -> float:
    """Seconds an MLLM needs on the H200: about 10 s fixed (folder, processor, peft wrapping, adapter save) plus
    about 2 s per billion parameters (initialising them, three scoring batches of 24 prompts and two LoRA steps
    of 16 examples at some 400 TFLOP/s). An estimate for the budget guard, not a figure."""
    return 10.0 + 2.0 * billions


GEMMA3_VISION = {  # SigLIP-So400m at 896 px, as in google/gemma-3-4b-it and gemma-3-27b-it config.json
    "hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
    "image_size": 896, "patch_size": 14, "vision_use_head": False,
}
GEMMA3_PROCESSOR = {"image_size": 896, "tokens_per_image": 256}  # preprocessor_config.json / processor_config.json


def gemma3(**text) -> dict:
    """A Gemma-3 config.json: the text sizes given, and what every Gemma-3 size shares (its 262k vocabulary, a
    1024-token sliding window on five layers of six, linear RoPE scaling x8 on the global layers, SigLIP at 896 px
    giving 256 tokens per image)."""
    shared = {"sliding_window": 1024, "sliding_window_pattern": 6, "vocab_size": 262208,
              "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    return {"model_type": "gemma3", "text_config": {**shared, **text}, "vision_config": GEMMA3_VISION,
            "mm_tokens_per_image": 256}


GEMMA3_SMOKE = {
    "text_config": {**SMOKE_TEXT, "num_key_value_heads": 1, "head_dim": 16, "query_pre_attn_scalar": 16,
                    "vocab_size": SMOKE_VOCAB, "sliding_window_pattern": 2},
    "vision_config": SMOKE_VIT, "mm_tokens_per_image": 4,
    "processor": {"image_size": 32, "tokens_per_image": 4},
}


def siglip(*, width: int, mlp: int, layers: int, heads: int, image_size: int, patch_size: int, vocab_size: int) -> dict:
    """A SigLIP config.json: text and image towers of one transformer size, prompts of up to 64 tokens."""
    tower = {"hidden_size": width, "intermediate_size": mlp, "num_hidden_layers": layers, "num_attention_heads": heads}
    return {"model_type": "siglip", "text_config": {**tower, "max_position_embeddings": 64, "vocab_size": vocab_size},
            "vision_config": {**tower, "image_size": image_size, "patch_size": patch_size}}


SIGLIP_SMOKE = {"text_config": {**SMOKE_TEXT, "vocab_size": SMOKE_VOCAB}, "vision_config": SMOKE_VIT}

ARCHS = (
    # Multimodal LLMs, largest first: they carry most of the projected time, so the budget guard skips encoders first.
    # google/gemma-3-27b-it config.json (MedGemma-27B: the same)
    Arch("gemma3_27b", ("gemma3_27b", "medgemma_27b"), hub=gemma3(
        hidden_size=5376, intermediate_size=21504, num_hidden_layers=62, num_attention_heads=32,
        num_key_value_heads=16, head_dim=128, query_pre_attn_scalar=168),
        processor=GEMMA3_PROCESSOR, smoke=GEMMA3_SMOKE, reserve_s=mllm_reserve(27.4)),
    Arch("llava_next_llama3_8b", ("llava_next_llama3_8b",), hub={  # llava-hf/llama3-llava-next-8b-hf config.json
        "model_type": "llava_next",
        "text_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128320,
                        "rope_theta": 500000.0, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
                          "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
                          "projection_dim": 768},
        "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "tie_word_embeddings": False},
        processor={"tile": 336, "patch_size": 14},  # its preprocessor_config.json (CLIP ViT-L/14 at 336 px tiles)
        smoke={"text_config": {**SMOKE_TEXT, "num_key_value_heads": 1, "vocab_size": SMOKE_VOCAB},
               "vision_config": SMOKE_VIT,
               "image_grid_pinpoints": [[32, 64], [64, 32], [64, 64], [96, 32], [32, 96]],  # 32 px tiles
               "processor": {"tile": 32, "patch_size": 8}},
        smoke_size=64, reserve_s=mllm_reserve(8.4)),
    Arch("qwen3_vl_8b", ("qwen3_vl_8b",), hub={  # Qwen/Qwen3-VL-8B-Instruct config.json
        "model_type": "qwen3_vl",
        "text_config": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                        "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0,
                                            "mrope_section": [24, 20, 20], "mrope_interleaved": True}},
        "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                          "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 4096,
                          "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]},
        "tie_word_embeddings": False},
        # its preprocessor_config.json: 16 px patches merged 2x2, between 2^16 and 2^24 pixels per image
        processor={"patch_size": 16, "min_pixels": 65536, "max_pixels": 16777216},
        smoke={"text_config": {**SMOKE_TEXT, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": SMOKE_VOCAB,
                               "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                   "mrope_section": [4, 2, 2], "mrope_interleaved": True}},
               "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                                 "patch_size": 8, "out_hidden_size": 32, "num_position_embeddings": 64,
                                 "deepstack_visual_indexes": [0]},
               "processor": {"patch_size": 8, "min_pixels": 256, "max_pixels": 2304}},
        reserve_s=mllm_reserve(8.8)),
    # google/gemma-3-4b-it config.json (MedGemma-4B and MedGemma-1.5-4B: the same)
    Arch("gemma3_4b", ("medgemma_4b", "medgemma_1_5_4b"), hub=gemma3(
        hidden_size=2560, intermediate_size=10240, num_hidden_layers=34, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256),
        processor=GEMMA3_PROCESSOR, smoke=GEMMA3_SMOKE, reserve_s=mllm_reserve(4.3)),
    # Encoders, largest input first.
    Arch("flair", ("flair",), smoke={  # ResNet-50 + Bio_ClinicalBERT: ophthalmic_vlm.FLAIR_DEFAULTS
        "proj_dim": 32, "resnet_layers": (1, 1, 1, 1), "resnet_width_per_group": 8, "text_hidden": 32,
        "text_layers": 2, "text_heads": 2, "text_intermediate": 64, "text_vocab": SMOKE_VOCAB}),
    # google/medsiglip-448: SigLIP-So400m towers (siglip-so400m-patch14-384 config.json, its 32,000-token text
    # vocabulary) at 448 px; the model card: 400M + 400M parameters, 448 x 448 images, 64 text tokens
    Arch("medsiglip_448", ("medsiglip_448",), hub=siglip(
        width=1152, mlp=4304, layers=27, heads=16, image_size=448, patch_size=14, vocab_size=32000),
        smoke=SIGLIP_SMOKE),
    Arch("vit_large", ("vit_large",), hub={  # google/vit-large-patch16-224 config.json
        "model_type": "vit", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
        "intermediate_size": 4096, "image_size": 224, "patch_size": 16, "qkv_bias": True, "layer_norm_eps": 1e-12},
        smoke=SMOKE_VIT),
    Arch("dinov2_large", ("dinov2_large",), hub={  # facebook/dinov2-large config.json (518 px grid, used at 224)
        "model_type": "dinov2", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
        "mlp_ratio": 4, "image_size": 518, "patch_size": 14, "layerscale_value": 1.0, "layer_norm_eps": 1e-6},
        smoke={**SMOKE_VIT, "intermediate_size": None, "mlp_ratio": 2}),
    Arch("dinov3_vitl16", ("dinov3_vitl16",), hub={  # facebook/dinov3-vitl16-pretrain-lvd1689m config.json
        "model_type": "dinov3_vit", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
        "num_attention_heads": 16, "patch_size": 16, "image_size": 224, "num_register_tokens": 4,
        "layerscale_value": 1.0, "layer_norm_eps": 1e-5, "rope_theta": 100.0, "use_gated_mlp": False,
        "query_bias": True, "key_bias": False, "value_bias": True},
        smoke=SMOKE_VIT),
    # RETFound MAE: timm vit_large_patch16_224 (the loader's default architecture); the four checkpoints share it.
    Arch("retfound_mae", ("retfound_mae_naturecfp", "retfound_mae_natureoct", "retfound_mae_meh",
                          "retfound_mae_shanghai"), smoke=SMOKE_TIMM),
    # RETFound DINOv2: timm vit_large_patch14_dinov2 at 224 (the loader's default); two checkpoints.
    Arch("retfound_dinov2", ("retfound_dinov2_meh", "retfound_dinov2_shanghai"), smoke=SMOKE_TIMM),
    # google/siglip2-base-patch16-224 config.json: SigLIP's base sizes (its config's defaults), Gemma's vocabulary
    Arch("siglip2_base", ("siglip2_base",), hub=siglip(
        width=768, mlp=3072, layers=12, heads=12, image_size=224, patch_size=16, vocab_size=256000),
        smoke=SIGLIP_SMOKE),
    Arch("visionfm", ("visionfm",), smoke=SMOKE_TIMM),  # timm vit_base_patch16_224, the loader's default
    # EyeCLIP and RET-CLIP: OpenAI-CLIP ViT-B/16 image towers (ophthalmic_vlm's EYECLIP_ / RETCLIP_DEFAULTS).
    Arch("eyeclip", ("eyeclip",), smoke={**SMOKE_OPENAI_VISUAL, "text_width": 32, "text_layers": 2, "text_heads": 2,
                                         "vocab_size": SMOKE_VOCAB}),
    Arch("retclip", ("retclip",), smoke={**SMOKE_OPENAI_VISUAL, "text_hidden": 32, "text_layers": 2, "text_heads": 2,
                                         "text_intermediate": 64, "text_vocab": SMOKE_VOCAB}),
    Arch("clip_vit_b32", ("clip_vit_b32",), hub={  # openai/clip-vit-base-patch32 config.json
        "model_type": "clip", "projection_dim": 512,
        "text_config": {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12,
                        "num_attention_heads": 8, "max_position_embeddings": 77, "vocab_size": 49408},
        "vision_config": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                          "num_attention_heads": 12, "image_size": 224, "patch_size": 32}},
        smoke={"projection_dim": 32, "text_config": {**SMOKE_TEXT, "vocab_size": SMOKE_VOCAB},
               "vision_config": SMOKE_VIT}),
)
MLLM_ARCHS = ("gemma3_27b", "llava_next_llama3_8b", "qwen3_vl_8b", "gemma3_4b")
BY_NAME = {arch.name: arch for arch in ARCHS}


def merged(base: dict, changes: dict) -> dict:
    """`base` with `changes` applied, nested dicts merged key by key; a None value removes the key."""
    out = dict(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def arch_spec(arch: Arch, smoke: bool):
    """The catalog spec of the architecture's first model; for --smoke, shrunk images and (timm, ophthalmic
    families) shrunk architecture options."""
    from focus_dagster.models.catalog import CATALOG

    spec = CATALOG[arch.models[0]]
    if not smoke:
        return spec
    options = {} if arch.hub else {**spec.options, **arch.smoke}
    return replace(spec, preprocess=replace(spec.preprocess, size=arch.smoke_size), options=options)


def hub_settings(arch: Arch, smoke: bool) -> tuple[dict, dict]:
    """(config.json values, processor settings) of a hub architecture, shrunk for --smoke."""
    changes = dict(arch.smoke) if smoke else {}
    processor = merged(arch.processor, changes.pop("processor", {}))
    return merged(arch.hub, changes), processor


# --------------------------------------------------------------------------------- building instead of reading


def random_report(spec, model):
    """The load report of a model built with random weights: no checkpoint, nothing matched, nothing missing."""
    from focus_dagster.models.audit import LoadReport

    return LoadReport(model_id=spec.id, checkpoint="random weights (bench/grid.py)", weights_sha256="random",
                      model_tensors=len(model.state_dict()), matched=0)


@contextlib.contextmanager
def random_weights(device: str):
    """The platform's loaders, unchanged, except the function of each family that reads a checkpoint: it builds
    the architecture with random weights on `device` instead (hub families: from the folder's config.json, in the
    spec's dtype; timm ViTs: `build_vit` with the loader's own arguments; ophthalmic dual encoders: the loader's
    `build` with its published defaults and the spec's options)."""
    from unittest import mock

    import torch

    from focus_dagster.models.base import LoadedEncoder
    from focus_dagster.models.loaders import hub_family, mllm, ophthalmic_vlm, timm_family

    def pretrained(model_class, spec, folder):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(folder))
        build = getattr(model_class, "from_config", None) or model_class._from_config
        with torch.device(device):
            model = build(config, dtype=getattr(torch, spec.dtype))
        return model.eval(), random_report(spec, model)

    def vit_checkpoint(spec, *, default_arch, keys, prefixes=(), renames=None, default_img_size=None,
                       fresh_fc_norm=False):
        with torch.device(device):
            model = timm_family.build_vit(spec, default_arch, fc_norm=fresh_fc_norm, default_img_size=default_img_size)
        return LoadedEncoder(spec=spec, embed=timm_family.frozen_forward(model), dim=model.num_features,
                             report=random_report(spec, model), modules=(model,))

    def audited_checkpoint(spec, defaults, text_source, expected, keys, build, **_layout):
        options = {**defaults, **spec.options}
        longest = int(options.get("text_max_length", options.get("context_length", 77)))
        with torch.device(device):
            model = build(options)
        return options, hub_family.tiny_tokenizer(longest), model, random_report(spec, model), Path("random")

    with mock.patch.object(hub_family, "load_pretrained", pretrained), \
            mock.patch.object(mllm, "load_pretrained", pretrained), \
            mock.patch.object(timm_family, "load_vit_checkpoint", vit_checkpoint), \
            mock.patch.object(ophthalmic_vlm, "_audited_checkpoint", audited_checkpoint):
        yield


def hub_folder(arch: Arch, smoke: bool, folder: Path) -> Path:
    """A hub-layout folder with the architecture's config.json (and for a dual encoder an in-process word-level
    tokenizer; for an MLLM its processor: image processor at the published settings, a byte-level BPE tokenizer
    trained in-process and the family's chat template), so the loader finds what it reads besides weights."""
    from transformers import AutoConfig

    from focus_dagster.models.loaders.hub_family import tiny_tokenizer

    config_values, processor_values = hub_settings(arch, smoke)
    config_values = dict(config_values)
    model_type = config_values.pop("model_type")
    if arch.is_mllm:
        if "image_grid_pinpoints" in config_values:  # the processor tiles images as the model expects them
            processor_values = {**processor_values, "pinpoints": config_values["image_grid_pinpoints"]}
        processor, token_ids = mllm_processor(model_type, processor_values)
        config_values.update(token_ids)
        processor.save_pretrained(folder)
    elif model_type in ("clip", "siglip"):
        tokenizer = tiny_tokenizer(int(config_values["text_config"]["max_position_embeddings"]))
        tokenizer.save_pretrained(folder)
        vocab = tokenizer.get_vocab()  # the text tower pools at the end token: it must be this tokenizer's
        config_values["text_config"] = {**config_values["text_config"], "pad_token_id": vocab["[PAD]"],
                                        "bos_token_id": vocab["[BOS]"], "eos_token_id": vocab["[EOS]"]}
    AutoConfig.for_model(model_type, **config_values).save_pretrained(folder)
    return folder


def mllm_processor(model_type: str, values: dict):
    """(processor, the config's special-token ids) of a multimodal LLM family at the given image settings."""
    from focus_dagster.models.tiny_mllm import train_tiny_tokenizer

    builders = {"gemma3": gemma3_processor, "qwen3_vl": qwen3_vl_processor, "llava_next": llava_next_processor}
    # The tiny-model families are named by model type; their tokenizers know each family's special tokens and turns.
    return builders[model_type](train_tiny_tokenizer(model_type), values)


def gemma3_processor(tokenizer, values: dict):
    """Gemma-3's processor: one square image, no pan-and-scan, `tokens_per_image` soft tokens."""
    from transformers import Gemma3ImageProcessor, Gemma3Processor

    size = int(values["image_size"])
    images = Gemma3ImageProcessor(size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                  do_pan_and_scan=False)
    processor = Gemma3Processor(image_processor=images, tokenizer=tokenizer, chat_template=tokenizer.chat_template,
                                image_seq_length=int(values["tokens_per_image"]))
    ids = {"boi_token_index": tokenizer.boi_token_id, "eoi_token_index": tokenizer.eoi_token_id,
           "image_token_index": tokenizer.image_token_id}
    return processor, ids


def qwen3_vl_processor(tokenizer, values: dict):
    """Qwen3-VL's processor: native-resolution patches merged 2x2 (its video processor is required, never used)."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    shared = {"patch_size": int(values["patch_size"]), "temporal_patch_size": 2, "merge_size": 2,
              "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
              "size": {"shortest_edge": int(values["min_pixels"]), "longest_edge": int(values["max_pixels"])}}
    processor = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(**shared), tokenizer=tokenizer,
                                 video_processor=Qwen3VLVideoProcessor(**shared), chat_template=tokenizer.chat_template)
    ids = {"image_token_id": tokenizer.image_token_id, "video_token_id": tokenizer.video_token_id,
           "vision_start_token_id": tokenizer.vision_start_token_id,
           "vision_end_token_id": tokenizer.vision_end_token_id}
    return processor, ids


def llava_next_processor(tokenizer, values: dict):
    """LLaVA-NeXT's processor: any-resolution tiles of `tile` px plus the whole image, CLIP normalisation."""
    from transformers import LlavaNextImageProcessor, LlavaNextProcessor

    tile = int(values["tile"])
    images = LlavaNextImageProcessor(size={"shortest_edge": tile}, crop_size={"height": tile, "width": tile},
                                     image_grid_pinpoints=values["pinpoints"])
    processor = LlavaNextProcessor(image_processor=images, tokenizer=tokenizer, patch_size=int(values["patch_size"]),
                                   vision_feature_select_strategy="default", num_additional_image_tokens=1,
                                   chat_template=tokenizer.chat_template)
    return processor, {"image_token_index": tokenizer.image_token_id}


def load_arch(arch: Arch, smoke: bool, device: str, folder: Path):
    """The architecture as the platform loads it (LoadedEncoder or LoadedMLLM), random weights, on `device`."""
    from focus_dagster.models.registry import load_model

    spec = arch_spec(arch, smoke)
    if arch.hub:
        spec = spec.with_path(hub_folder(arch, smoke, folder))
    with random_weights(device):
        loaded = load_model(spec)
    return loaded.to(device)


# ------------------------------------------------------------------------------------------------- measurement


def synced(device: str) -> float:
    """The clock, once the device has finished its queued work."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter()


def reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: str) -> float | None:
    """Peak GPU memory since the last reset, GiB (None on a CPU)."""
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.startswith("cuda") else None


def engine_rate(forward, preprocess, device: str, batch: int, measured: int, min_seconds: float = 0.0):
    """Images/s of the engine's per-batch step over `forward` on uint8 pixels already on the device: one warm-up
    batch, then at least `measured` batches and `min_seconds`. Returns the rate, the last batch's outputs [batch, D]
    and the batch size that fitted in one forward pass (the engine halves it on a CUDA out-of-memory and runs the
    batch in parts)."""
    import numpy as np
    import torch

    from focus_dagster.inference.engine import _run_batch  # the engine's step, minus decoding (bench/encoders.py's)

    generator = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (batch, 3, preprocess.size, preprocess.size), dtype=torch.uint8,
                           generator=generator).to(device)
    indices = list(range(batch))

    def step(size):
        rows: dict = {}
        size = _run_batch(lambda x, _positions: forward(x), pixels, indices, rows, device, size, preprocess)
        return size, np.stack([rows[i] for i in indices])

    fitted, out = step(batch)  # warm-up: allocations, kernel selection
    started, done = synced(device), 0
    while done < measured * batch or time.perf_counter() - started < min_seconds:
        fitted, out = step(fitted)
        done += batch
    return done / (synced(device) - started), out, fitted


def check_outputs(out, rows: int, columns: int, name: str, finite=None) -> dict:
    """Shape and finiteness of a model's outputs (of the `finite` columns, default all): a wrong shape or a NaN
    is an error, never a figure."""
    import numpy as np

    values = out if finite is None else out[:, finite]
    if out.shape != (rows, columns) or not np.isfinite(values).all():
        raise RuntimeError(f"{name}: outputs of shape {out.shape} (expected {(rows, columns)}), "
                           f"finite: {bool(np.isfinite(values).all())}")
    return {"output_shape": list(out.shape), "finite": True}


def measure_encoder(encoder, device: str, batch: int, measured: int, min_seconds: float, compile_mode: str) -> dict:
    """Images/s of the engine over the encoder's forward (its `embed`, compiled as `compile_mode` says: the seconds
    compiling and checking took count once per dataset in the projection), and its peak memory."""
    from focus_dagster.inference.compiled import compile_encoder

    reset_peak(device)
    forward = compile_encoder(encoder.embed, encoder.modules, encoder.spec.preprocess, device, mode=compile_mode,
                              batch_size=batch)
    rate, out, used = engine_rate(forward.forward, encoder.spec.preprocess, device, batch, measured, min_seconds)
    compiled = {"forward": forward.mode} | ({"compile_s": forward.seconds} if forward.is_compiled else {}) | (
        {"compile_reason": forward.reason} if forward.reason else {})
    return {"images_per_s": round(rate, 2), "batch": used, "embedding_dim": encoder.dim, **compiled,
            "peak_gib": peak_gib(device), **check_outputs(out, batch, encoder.dim, encoder.spec.id)}


def measure_mllm(mllm, device: str, batch: int, measured: int, images: list[Path]) -> dict:
    """Yes/no scoring (images/s, prompts/s) and one LoRA training step (examples/s), each with its peak memory."""
    from focus_dagster.inference.yes_no import VALUES, yes_no_scorer
    from focus_dagster.questions import QuestionBook

    questions = [QuestionBook().question(task, "brset").text for task in TASKS]
    scorer = yes_no_scorer(mllm, questions)
    reset_peak(device)
    rate, out, used = engine_rate(scorer, mllm.spec.preprocess, device, batch, measured)
    scores = out.reshape(batch, len(TASKS), len(VALUES))[:, :, 0]
    if not ((scores >= 0) & (scores <= 1)).all():
        raise RuntimeError(f"{mllm.spec.id}: p_yes outside [0, 1]")
    # No answer is generated (first-token scoring only): its column is NaN by design, the others must be finite.
    read = [i for i in range(out.shape[1]) if VALUES[i % len(VALUES)] != "answer_code"]
    tokens = prompt_tokens(scorer, mllm.spec.preprocess.size, questions[0])
    scoring = {"images_per_s": round(rate, 3), "prompts_per_s": round(rate * len(TASKS), 3), "batch_images": used,
               "questions_per_image": len(TASKS), "prompt_tokens": tokens, "scoring_peak_gib": peak_gib(device),
               **check_outputs(out, batch, len(TASKS) * len(VALUES), mllm.spec.id, read)}
    return {**scoring, **lora_step(mllm, device, questions[0], images)}


def prompt_tokens(scorer, size: int, question: str) -> int:
    """Tokens of one prompt as the scorer builds it (the image's tokens, the chat turns, the question): the length
    every scored prompt and training example costs."""
    import torch

    return int(scorer.inputs([torch.zeros(3, size, size)], [scorer.prompt(question)])["input_ids"].shape[1])


def lora_step(mllm, device: str, question: str, images: list[Path]) -> dict:
    """`train_adapter` with the protocol's settings for two optimizer steps of 16 examples; the rate of the second,
    timed between the trainer's own step lines (the first step pays for the optimizer state and allocations)."""
    from focus_dagster.lora.settings import LoraSettings
    from focus_dagster.lora.train import Example, train_adapter

    examples = [Example(p.stem, p, question, "yes" if i % 3 == 0 else "no") for i, p in enumerate(images)]
    stamps: list[float] = []

    def progress(line: str) -> None:
        if line.startswith("step "):
            stamps.append(synced(device))

    settings = LoraSettings(max_steps=2, checkpoint_every=0)
    reset_peak(device)
    with tempfile.TemporaryDirectory() as work, warnings.catch_warnings():
        # peft looks for the base model's config beside the adapter to tell whether the vocabulary was resized: it
        # was not, and the note would fill the output.
        warnings.filterwarnings("ignore", message="Could not find a config file")
        trained = train_adapter(mllm, examples[: 2 * settings.effective_batch], settings, Path(work), device=device,
                                progress=progress)
    if len(stamps) != 2 or not all(math.isfinite(loss) for loss in trained.losses):
        raise RuntimeError(f"{mllm.spec.id}: LoRA steps {len(stamps)} timed, losses {trained.losses}")
    return {"train_examples_per_s": round(settings.effective_batch / (stamps[1] - stamps[0]), 3),
            "train_micro_batch": trained.micro_batch, "train_peak_gib": peak_gib(device),
            "train_losses": [round(loss, 4) for loss in trained.losses]}


def run_arch(arch: Arch, args, device: str, images: list[Path]) -> dict:
    """Build, load, measure and free one architecture; its row of figures."""
    import torch

    started = synced(device)
    reset_peak(device)
    with tempfile.TemporaryDirectory() as folder:
        loaded = load_arch(arch, args.smoke, device, Path(folder))
    model = loaded.model if arch.is_mllm else loaded.modules[0]
    row = {"models": list(arch.models), "parameters": sum(p.numel() for p in model.parameters()),
           "build_s": round(synced(device) - started, 1), "build_peak_gib": peak_gib(device)}
    if arch.is_mllm:
        row.update(measure_mllm(loaded, device, args.mllm_batch, args.batches, images))
    else:
        row.update(measure_encoder(loaded, device, args.batch, args.batches, args.seconds, args.compile))
    del loaded, model
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


# -------------------------------------------------------------------------------------------------- projection


def grid_projection(rates: dict, grid: list[tuple[str, str, str]], sizes: dict, tasks: dict,
                    adapters: list[tuple[str, str, str]], evaluations: list[tuple[str, str]]) -> dict:
    """Hours of the whole grid at measured rates.

    rates: architecture -> {"images_per_s"} (encoders) or {"prompts_per_s", "train_examples_per_s"} (MLLMs);
    grid: (model, architecture, interface "vm" / "vlm" / "mllm"); sizes: dataset -> (train, val, test) images;
    tasks: dataset -> the tasks it defines; adapters: (model, training dataset, task); evaluations: (model,
    evaluated dataset) of each adapter evaluation. A model whose architecture has no rate gets None and the total
    is marked incomplete.
    """
    images = {dataset: sum(split) for dataset, split in sizes.items()}
    rows = []
    for model, arch, interface in grid:
        rate = rates.get(arch)
        if interface == "mllm":
            work = {"prompts": sum(images[d] * len(tasks[d]) for d in sizes),
                    "training_examples": sum(sizes[d][0] for m, d, _ in adapters if m == model),
                    "adapted_prompts": sum(images[d] for m, d in evaluations if m == model)}
            seconds = None if rate is None else {
                "scoring": work["prompts"] / rate["prompts_per_s"],
                "training": work["training_examples"] / rate["train_examples_per_s"],
                "adapted_scoring": work["adapted_prompts"] / rate["prompts_per_s"]}
        else:
            work = {"images": sum(images.values())}
            seconds = None if rate is None else {"embedding": work["images"] / rate["images_per_s"]}
            if seconds is not None and rate.get("compile_s"):  # each dataset is a step of its own, compiling again
                seconds["compiling"] = rate["compile_s"] * len(sizes)
        hours = None if seconds is None else {phase: s / 3600 for phase, s in seconds.items()}
        rows.append({"model": model, "architecture": arch, "interface": interface, **work, "hours": hours,
                     "total_hours": None if hours is None else sum(hours.values())})
    measured = [row for row in rows if row["hours"] is not None]
    phases: dict[str, float] = {}
    for row in measured:
        for phase, value in row["hours"].items():
            phases[phase] = phases.get(phase, 0.0) + value
    total = sum(phases.values())
    return {"models": rows, "phase_hours": phases, "total_hours": total, "target_hours": TARGET_HOURS,
            "within_target": total < TARGET_HOURS if len(measured) == len(rows) else None,
            "unmeasured": [row["model"] for row in rows if row["hours"] is None],
            "adapters": len(adapters), "evaluations": len(evaluations)}


def platform_grid() -> tuple[list, dict, list, list]:
    """(grid rows, tasks per dataset, adapters, evaluations) of the platform's reference grid over the ten datasets."""
    from focus_dagster.adapter_plan import LoraPlan, evaluations
    from focus_dagster.labels.rule_lookup import rule_for
    from focus_dagster.models.catalog import CATALOG

    arch_of = {model: arch.name for arch in ARCHS for model in arch.models}
    grid = [(model, arch_of[model], CATALOG[model].interface) for model in arch_of]
    tasks = {dataset: list(rule_for(dataset).tasks) for dataset in SPLITS}
    adapters = LoraPlan().adapters(list(MLLMS), list(SPLITS))
    scored = evaluations(adapters, list(SPLITS))
    return (grid, tasks, [(a.model, a.dataset, a.task) for a in adapters],
            [(e.adapter.model, e.dataset) for e in scored])


def base_configurations(grid: list, tasks: dict) -> int:
    """In-domain configurations: (dataset, task) pairs x one method per VM and MLLM, two per VLM (probe, zero-shot)."""
    pairs = sum(len(t) for t in tasks.values())
    return sum(pairs * (2 if interface == "vlm" else 1) for _, _, interface in grid)


# ------------------------------------------------------------------------------------------------------ output


def rate_text(row: dict) -> str:
    if "prompts_per_s" in row:
        return (f"{row['images_per_s']:8.2f} images/s = {row['prompts_per_s']:8.2f} prompts/s of "
                f"{row['prompt_tokens']} tokens (batch {row['batch_images']} images); "
                f"LoRA {row['train_examples_per_s']:.2f} examples/s")
    compiled = f", compiled {row['forward']} in {row['compile_s']:.0f} s" if row.get("compile_s") else ""
    return f"{row['images_per_s']:9.1f} images/s (batch {row['batch']}, {row['embedding_dim']}-d{compiled})"


def memory_text(row: dict) -> str:
    if row.get("build_peak_gib") is None:
        return ""
    if "prompts_per_s" in row:
        return f"; peak {row['scoring_peak_gib']} GiB scoring, {row['train_peak_gib']} GiB training"
    return f"; peak {row['peak_gib']} GiB"


def print_projection(projection: dict, smoke: bool) -> None:
    label = " (smoke: shrunk models, meaningless)" if smoke else ""
    print(f"\nprojected grid{label}: {projection['adapters']} LoRA adapters, {projection['evaluations']} evaluations")
    for row in projection["models"]:
        hours = "not measured" if row["total_hours"] is None else f"{row['total_hours']:7.3f} h"
        work = (f"{row['prompts']:,} prompts, {row['training_examples']:,} training examples, "
                f"{row['adapted_prompts']:,} adapted prompts" if row["interface"] == "mllm"
                else f"{row['images']:,} images")
        print(f"  {row['model']:<26} {hours:>12}  ({work})")
    phases = ", ".join(f"{phase} {hours:.2f} h" for phase, hours in projection["phase_hours"].items())
    verdict = ("incomplete: " + ", ".join(projection["unmeasured"]) if projection["unmeasured"]
               else ("within" if projection["within_target"] else "over") + f" the {TARGET_HOURS:g} h target")
    print(f"  total {projection['total_hours']:.2f} h ({phases}); {verdict}")


# -------------------------------------------------------------------------------------------------------- main


def parse(argv):
    from focus_dagster.config import COMPILE_MODES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, every architecture shrunk: checks the logic only")
    parser.add_argument("--only", nargs="+", choices=[arch.name for arch in ARCHS], help="these architectures only")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="skip the remaining architectures rather than run past this many seconds")
    parser.add_argument("--batch", type=int, help="encoder images per batch (default: the engine's)")
    parser.add_argument("--mllm-batch", type=int, help="MLLM images per batch, x 3 questions (default 8; smoke 2)")
    parser.add_argument("--batches", type=int, help="measured batches after the warm-up (default 2; smoke 1)")
    parser.add_argument("--seconds", type=float, help="encoders: measure at least this long (default 2; smoke 0)")
    parser.add_argument("--compile", choices=COMPILE_MODES, default="off",
                        help="encoders' forward (focus_dagster/inference/compiled.py; default off: eager rates bound "
                             "the encoders' share from above, and compiling twelve architectures would not fit the "
                             "8-minute run; bench/encoders.py --vit-large-only measures what compiling gains)")
    parser.add_argument("--json", type=Path, help=f"write the figures here (default on a GPU: {RESULT})")
    args = parser.parse_args(argv)
    defaults = {"mllm_batch": 2, "batches": 1, "seconds": 0.0} if args.smoke else {"mllm_batch": 8, "batches": 2,
                                                                                 "seconds": 2.0}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def machine(device: str) -> str:
    import torch
    import transformers

    where = torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU {platform.machine()}"
    return f"{where}; torch {torch.__version__}, transformers {transformers.__version__}"


@contextlib.contextmanager
def library_errors_only():
    """transformers' notes on the default configs it builds on the way (a SigLIP text config with CLIP's token ids)
    are noise here: errors only, while the architectures run, then the caller's verbosity again."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def run_all(archs: list[Arch], args, device: str, measured=None) -> tuple[dict, dict]:
    """Each architecture's figures, in order, skipping (with a line saying so) those the budget has no room for;
    `measured(rows, skipped)` is called after each, so that a run stopped from outside keeps what it measured."""
    from focus_dagster.lora.settings import LoraSettings

    started, rows, skipped = time.perf_counter(), {}, {}
    with tempfile.TemporaryDirectory() as tmp, library_errors_only():
        # Two optimizer steps' worth of training images (rendered fundus photographs, decoded by the trainer).
        examples = 2 * LoraSettings().effective_batch
        images = write_images(Path(tmp), examples, 256) if any(a.is_mllm for a in archs) else []
        for arch in archs:
            elapsed = time.perf_counter() - started
            if elapsed + arch.reserve_s > args.budget_s:
                skipped[arch.name] = (f"{elapsed:.0f} s of the {args.budget_s:.0f} s budget used; "
                                      f"needs ~{arch.reserve_s:.0f} s")
                print(f"  SKIPPED {arch.name} ({', '.join(arch.models)}): {skipped[arch.name]}", flush=True)
                continue
            row = rows[arch.name] = run_arch(arch, args, device, images)
            if measured:
                measured(rows, skipped)
            print(f"  {arch.name:<22} {row['parameters'] / 1e6:10.2f} M params, built in {row['build_s']:5.1f} s: "
                  f"{rate_text(row)}{memory_text(row)}", flush=True)
    return rows, skipped


def main(argv=None) -> dict:
    args = parse(argv)
    import torch

    from focus_dagster.inference.engine import default_batch_size

    device = "cpu" if args.smoke else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and not args.smoke:
        print("no CUDA GPU: the true-size grid needs one (--smoke checks the script on a CPU)")
        return {}
    args.batch = args.batch or (4 if args.smoke else default_batch_size(device))
    archs = [BY_NAME[name] for name in args.only] if args.only else list(ARCHS)
    print(f"{machine(device)}; {'smoke run' if args.smoke else 'true sizes'}, budget {args.budget_s:.0f} s")
    started = time.perf_counter()
    # Only a GPU run writes the result file by default: smoke and CPU figures are not the figures.
    path = args.json or (RESULT if device.startswith("cuda") and not args.smoke else None)
    grid, tasks, adapters, evaluations = platform_grid()

    def figures_of(rows: dict, skipped: dict, complete: bool) -> dict:
        return {"machine": machine(device), "mode": "smoke" if args.smoke else "true sizes",
                "budget_s": args.budget_s, "seconds": round(time.perf_counter() - started, 1), "complete": complete,
                "architectures": rows, "skipped": skipped,
                "projection": grid_projection(rows, grid, SPLITS, tasks, adapters, evaluations),
                "base_configurations": base_configurations(grid, tasks), "reference_counts": REFERENCE_COUNTS}

    # After each architecture the file holds what is measured so far: a run stopped from outside loses nothing.
    rows, skipped = run_all(archs, args, device, lambda rows, skipped: save(path, figures_of(rows, skipped, False)))
    figures = figures_of(rows, skipped, True)
    print_projection(figures["projection"], args.smoke)
    save(path, figures)
    return figures


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
