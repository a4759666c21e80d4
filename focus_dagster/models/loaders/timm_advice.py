"""What a failed timm checkpoint audit suggests: the options that choose the architecture, and what the
checkpoint's tensors look like (a hint from names and shapes, for the common layouts)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

# timm ViT widths -> the size word of their names (vit_<size>_patch<p>_<img>)
VIT_WIDTH_NAMES = {192: "tiny", 384: "small", 768: "base", 1024: "large", 1280: "huge", 1408: "giant", 1536: "giant"}
# (block type, blocks per stage) -> timm ResNet
RESNET_DEPTHS = {
    ("basic", (2, 2, 2, 2)): "resnet18",
    ("basic", (3, 4, 6, 3)): "resnet34",
    ("bottleneck", (3, 4, 6, 3)): "resnet50",
    ("bottleneck", (3, 4, 23, 3)): "resnet101",
    ("bottleneck", (3, 8, 36, 3)): "resnet152",
}


def mismatch_advice(arch: str, state_dict: Mapping, size_options: Iterable[str]) -> Callable:
    """The fix a failed audit suggests: the options that choose the architecture, the checkpoint's layout
    options when nothing matched, and what the checkpoint's tensors look like."""
    sizes = ", ".join(size_options)

    def advice(report) -> str:
        parts = [
            f"set options.model_name to the timm architecture the checkpoint was saved from (now {arch!r}; "
            "timm.list_models() lists them)" + (f" and the options it was built with ({sizes})" if sizes else "")
        ]
        if report.matched == 0 and not report.shape_mismatched:
            parts.append("no tensor name matched: where the names above differ only by a prefix, or the weights sit "
                         "under another key of the file, set options.strip_prefixes or options.checkpoint_key")
        if any(n.startswith("fc_norm.") for n in report.missing) and "norm.weight" in report.unexpected:
            parts.append("the checkpoint has a final norm but no fc_norm: set options.fc_norm: false, or pooling: cls")
        guess = guess_architecture(state_dict)
        if guess:
            parts.append(f"the checkpoint looks like {guess}")
        return "; ".join(parts) + "."

    return advice


def guess_architecture(state_dict: Mapping) -> str:
    """A short description of a checkpoint's architecture from its tensor names and shapes ('' if unknown).

    Covers the common layouts only (timm ViT, ResNet, ConvNeXt, EfficientNet/MobileNet): a hint, not a rule.
    """
    for describe in (describe_vit, describe_resnet, describe_convnext, describe_efficientnet):
        text = describe(state_dict)
        if text:
            return text
    return ""


def blocks_per_stage(state_dict: Mapping, pattern: str) -> list[int]:
    """Block counts per stage from tensor names matching `pattern` (groups: stage, block)."""
    found: dict[int, set] = {}
    for name in state_dict:
        match = re.match(pattern, name)
        if match:
            found.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    return [len(found[stage]) for stage in sorted(found)]


def describe_vit(state_dict: Mapping) -> str:
    proj = state_dict.get("patch_embed.proj.weight")
    depth = len({m.group(1) for name in state_dict if (m := re.match(r"blocks\.(\d+)\.", name))})
    if proj is None or proj.ndim != 4 or not depth:
        return ""
    width, patch = int(proj.shape[0]), int(proj.shape[-1])
    size = vit_image_size(state_dict, patch)
    named = VIT_WIDTH_NAMES.get(width)
    example = f" (e.g. vit_{named}_patch{patch}_{size or 224})" if named else ""
    at = f", img_size {size}" if size else ""
    return (f"a timm ViT with embed_dim {width}, depth {depth}, patch_size {patch}{at}{example}; num_heads is not "
            "recorded in the tensors")


def vit_image_size(state_dict: Mapping, patch: int) -> int | None:
    """The square image size a ViT's position embeddings were trained at, when they form a square grid."""
    pos = state_dict.get("pos_embed")
    if pos is None or pos.ndim != 3:
        return None
    prefix = int("cls_token" in state_dict) + int(state_dict["reg_token"].shape[1] if "reg_token" in state_dict else 0)
    for tokens in (pos.shape[1] - prefix, pos.shape[1]):
        side = round(tokens**0.5) if tokens > 0 else 0
        if side and side * side == tokens:
            return side * patch
    return None


def describe_resnet(state_dict: Mapping) -> str:
    if "conv1.weight" not in state_dict or "layer1.0.conv1.weight" not in state_dict:
        return ""
    depths = tuple(blocks_per_stage(state_dict, r"layer(\d+)\.(\d+)\."))
    block = "bottleneck" if "layer1.0.conv3.weight" in state_dict else "basic"
    name = RESNET_DEPTHS.get((block, depths))
    return f"a ResNet with {block} blocks {depths}" + (f" ({name})" if name else "")


def describe_convnext(state_dict: Mapping) -> str:
    if "stem.0.weight" not in state_dict or "stages.0.blocks.0.conv_dw.weight" not in state_dict:
        return ""
    depths = blocks_per_stage(state_dict, r"stages\.(\d+)\.blocks\.(\d+)\.")
    dims = [int(state_dict[f"stages.{i}.blocks.0.conv_dw.weight"].shape[0]) for i in range(len(depths))
            if f"stages.{i}.blocks.0.conv_dw.weight" in state_dict]
    return f"a ConvNeXt with depths {tuple(depths)} and dims {tuple(dims)} (timm convnext_* options depths, dims)"


def describe_efficientnet(state_dict: Mapping) -> str:
    if "conv_stem.weight" not in state_dict or not any(name.startswith("blocks.0.0.") for name in state_dict):
        return ""
    head = state_dict.get("conv_head.weight")
    width = f", head width {int(head.shape[0])}" if head is not None else ""
    return f"an EfficientNet / MobileNet-style network (conv_stem, blocks.<stage>.<block>){width}"
