"""Model-side speed on a GPU: an encoder's forward compiled with `torch.compile`, checked against eager.

On an H200 a ViT-L encoder in eager bf16 autocast reaches about half of the GPU's measured matrix-multiply
rate (bench/results/encoders_h200.json): between the matrix products, layer norms, GELUs, bias and residual
additions each read and write the whole activation in float32. Inductor fuses them. Two ways:

  blocks  regional compilation: every block of the model's repeated stack (a ViT's 24 transformer blocks, a
          CLIP tower's layers) compiled on its own. The blocks share one class and one shape, so they share
          one compiled program: the cost of compiling is one block's, not the model's;
  whole   the encoder's `embed` compiled as one graph (a convolutional network, whose stages differ in shape,
          has no repeated stack: `blocks` compiles it whole).

`auto` is `blocks` on CUDA and eager on a CPU, where the tests and the 2-core machines keep the eager path that
was measured there. Attention already runs in PyTorch's fused kernel (`scaled_dot_product_attention`, flash
attention on a GPU in bf16): timm's blocks use it by default and the hub models load with `sdpa`;
`attention_kernels` counts what each attention module uses, for the run's metadata.

A compiled forward is only used after it has been checked: one batch of seeded pixels through eager and compiled,
the rows compared (cosine and largest difference, tolerances by dtype); a compiled forward that differs, or a
compile that fails, is undone and the run stays eager, with the reason in its metadata. Batches are padded to the
next power of two, so a run compiles at most a handful of shapes (its batch size, the last partial batch, the
halved batches after a CUDA out-of-memory), never one per batch.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from focus_dagster.config import COMPILE_MODES

EAGER = "eager"
# How far compiled rows may be from eager ones. Reassociated float32 sums differ in the last bits; in bf16 every
# fused kernel rounds at other points than eager autocast does (2^-8 relative per rounding, over tens of layers).
TOLERANCES = {"float32": {"min_cosine": 1 - 1e-6, "max_relative": 1e-3},
              "bfloat16": {"min_cosine": 1 - 2e-3, "max_relative": 0.08}}
CHECK_SEED = 20260


@dataclass
class CompiledForward:
    """The forward a run uses, and how it got there.

    mode: what runs (eager, blocks or whole); requested: what the configuration asked for; blocks: the modules
    compiled one by one; seconds: compiling and checking; min_cosine / max_relative: compiled vs eager rows on the
    check batch (max_relative = the largest absolute difference over the largest absolute eager value);
    reason: why the run is eager when a compile was asked for."""

    forward: Callable
    mode: str
    requested: str
    device: str
    blocks: int = 0
    seconds: float = 0.0
    check_dtype: str = ""
    min_cosine: float | None = None
    max_relative: float | None = None
    attention: dict = field(default_factory=dict)
    reason: str = ""

    @property
    def is_compiled(self) -> bool:
        return self.mode != EAGER

    def summary(self) -> dict:
        data = asdict(self)
        data.pop("forward")
        return data


def resolve_mode(requested: str, device: str) -> str:
    """The mode a run uses: `auto` compiles block by block on CUDA and nothing on a CPU."""
    if requested not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {list(COMPILE_MODES)}, got {requested!r}")
    if requested == "auto":
        return "blocks" if device.startswith("cuda") else EAGER
    return EAGER if requested == "off" else requested


def compile_encoder(forward: Callable, modules: Sequence, preprocess, device: str, *, mode: str = "auto",
                    batch_size: int = 8, log: Callable[[str], None] | None = None) -> CompiledForward:
    """`forward` (normalised pixels [B, 3, H, W] -> [B, D]) compiled as `mode` says and checked against eager on
    one seeded batch of `batch_size` images; eager (with the reason) if the compile fails or its rows differ."""
    resolved = resolve_mode(mode, device)
    attention = attention_kernels(modules)
    if resolved == EAGER:
        return CompiledForward(forward, EAGER, mode, device, attention=attention)
    started = time.perf_counter()
    pixels = _check_batch(preprocess, device, batch_size)
    reference = _rows(forward, pixels, device, preprocess)
    swapped: list = []
    try:
        if resolved == "blocks":
            swapped = compile_blocks(modules)
            compiled = forward if swapped else _compile_whole(forward)
            resolved = "blocks" if swapped else "whole"
        else:
            compiled = _compile_whole(forward)
        compiled = padded_to_power_of_two(compiled)
        rows = _rows(compiled, pixels, device, preprocess)
    except Exception as exc:  # a compiler that cannot handle a model leaves it eager, and says why
        restore_blocks(swapped)
        return _eager(forward, mode, device, attention, started, f"compile failed: {type(exc).__name__}: {exc}", log)
    agreement = compare_rows(reference, rows, compute_dtype(reference, device))
    if not agreement["agrees"]:
        restore_blocks(swapped)
        reason = (f"compiled rows differ from eager on the check batch: min cosine {agreement['min_cosine']:.6f}, "
                  f"max relative difference {agreement['max_relative']:.2e} (tolerance {agreement['tolerance']})")
        return _eager(forward, mode, device, attention, started, reason, log, agreement)
    result = CompiledForward(explained(compiled, resolved), resolved, mode, device, blocks=len(swapped),
                             seconds=round(time.perf_counter() - started, 2), check_dtype=agreement["dtype"],
                             min_cosine=agreement["min_cosine"], max_relative=agreement["max_relative"],
                             attention=attention)
    if log:
        log(f"compiled ({resolved}, {len(swapped)} blocks) in {result.seconds:.1f} s; check batch: min cosine "
            f"{result.min_cosine:.6f}, max relative difference {result.max_relative:.2e}")
    return result


def _eager(forward, mode, device, attention, started, reason, log, agreement=None) -> CompiledForward:
    if log:
        log(f"running eager: {reason}")
    agreement = agreement or {}
    return CompiledForward(forward, EAGER, mode, device, seconds=round(time.perf_counter() - started, 2),
                           check_dtype=agreement.get("dtype", ""), min_cosine=agreement.get("min_cosine"),
                           max_relative=agreement.get("max_relative"), attention=attention, reason=reason)


def attention_kernels(modules: Sequence) -> dict[str, int]:
    """Attention modules by the kernel they call: timm's blocks by their `fused_attn` flag (sdpa, else eager), the hub
    models' by their configuration's attention implementation (sdpa, eager, flash_attention_2, ...)."""
    counts: dict[str, int] = {}
    for module in modules:
        for sub in module.modules():
            if hasattr(sub, "fused_attn"):
                kernel = "sdpa" if sub.fused_attn else "eager"
            elif type(sub).__name__.endswith("Attention") and hasattr(sub, "config"):
                kernel = str(getattr(sub.config, "_attn_implementation", None) or "eager")
            else:
                continue
            counts[kernel] = counts.get(kernel, 0) + 1
    return counts


def repeated_blocks(modules: Sequence) -> list[tuple[object, int]]:
    """(container, index) of every block of the models' repeated stacks: the children of a ModuleList or
    Sequential that are all of one class with parameters of one shape (two or more of them), outermost first;
    a stack inside a chosen block is not chosen again."""
    import torch

    found: list[tuple[object, int]] = []
    inside: set[int] = set()
    for module in modules:
        for container in module.modules():
            if id(container) in inside or not isinstance(container, (torch.nn.ModuleList, torch.nn.Sequential)):
                continue
            children = list(container)
            if len(children) < 2 or not _same_block(children):
                continue
            found.extend((container, index) for index in range(len(children)))
            inside.update(id(sub) for child in children for sub in child.modules())
    return found


def _same_block(children: list) -> bool:
    import torch

    first = children[0]
    if isinstance(first, (torch.nn.ModuleList, torch.nn.Sequential)) or not any(True for _ in first.parameters()):
        return False
    shapes = [tuple(tuple(p.shape) for p in child.parameters()) for child in children]
    return all(type(child) is type(first) for child in children) and len(set(shapes)) == 1


def compile_blocks(modules: Sequence) -> list[tuple[object, int, object]]:
    """Replace every repeated block by its compiled form (shapes fixed: dynamic=False); returns what
    `restore_blocks` needs to put the originals back."""
    import torch

    swapped = []
    for container, index in repeated_blocks(modules):
        original = container[index]
        container[index] = torch.compile(original, dynamic=False)
        swapped.append((container, index, original))
    return swapped


def restore_blocks(swapped: list) -> None:
    for container, index, original in swapped:
        container[index] = original


def _compile_whole(forward: Callable) -> Callable:
    import torch

    return torch.compile(forward, dynamic=False)


def padded_to_power_of_two(forward: Callable) -> Callable:
    """forward on a batch padded with zero images to the next power of two, the padding's rows dropped: encoders in
    eval mode treat every image on its own, so the kept rows are what the unpadded batch gives."""
    import torch

    def padded(pixels):
        n = pixels.shape[0]
        size = 1 << max(0, (n - 1).bit_length())
        if size == n:
            return forward(pixels)
        filler = torch.zeros((size - n, *pixels.shape[1:]), dtype=pixels.dtype, device=pixels.device)
        return forward(torch.cat([pixels, filler]).contiguous(memory_format=torch.channels_last))[:n]

    return padded


def explained(forward: Callable, mode: str) -> Callable:
    """forward, whose failures on a later batch shape (a recompile the check batch did not exercise) name the way
    back to eager; a CUDA out-of-memory passes as it is, for the engine to halve the batch."""
    import torch

    def run(pixels):
        try:
            return forward(pixels)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            raise RuntimeError(f"the compiled forward ({mode}) failed on a batch of shape {tuple(pixels.shape)}: "
                               f"{type(exc).__name__}: {exc}. Set `compile: off` in focus.yaml to run this model "
                               "eager.") from exc

    return run


def compute_dtype(reference, device: str) -> str:
    """The dtype the model computed in: bf16 under the engine's CUDA autocast, whatever dtype its last layer (a layer
    norm, which autocast runs in float32) hands back; else the output's own."""
    import torch

    return "bfloat16" if device.startswith("cuda") or reference.dtype == torch.bfloat16 else "float32"


def compare_rows(reference, rows, dtype: str | None = None) -> dict:
    """Eager vs compiled rows: the smallest row cosine, the largest absolute difference over the largest absolute
    eager value, and whether both are within the tolerance of `dtype`, the dtype eager computed in (default: the
    reference's own)."""
    import torch

    dtype = dtype or compute_dtype(reference, "")
    a, b = reference.float(), rows.float()
    if a.shape != b.shape:
        return {"agrees": False, "dtype": dtype, "min_cosine": float("nan"), "max_relative": float("inf"),
                "tolerance": TOLERANCES[dtype], "shapes": [list(a.shape), list(b.shape)]}
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=1, eps=1e-12).min().item()
    relative = ((a - b).abs().max() / a.abs().max().clamp_min(1e-12)).item()
    tolerance = TOLERANCES[dtype]
    agrees = cosine >= tolerance["min_cosine"] and relative <= tolerance["max_relative"]
    return {"agrees": bool(agrees), "dtype": dtype, "min_cosine": round(cosine, 7), "max_relative": relative,
            "tolerance": tolerance}


def _check_batch(preprocess, device: str, batch_size: int):
    """Seeded uint8 pixels at the model's input size: the check compares arithmetic, not image content."""
    import torch

    generator = torch.Generator().manual_seed(CHECK_SEED)
    return torch.randint(0, 256, (batch_size, 3, preprocess.size, preprocess.size), dtype=torch.uint8,
                         generator=generator)


def _rows(forward, pixels, device: str, preprocess):
    """The engine's step (engine._run_batch): inference mode, bf16 autocast on CUDA, pixels normalised on the
    device and channels-last."""
    import torch

    from focus_dagster.inference.engine import _autocast, model_input

    with torch.inference_mode(), _autocast(device):
        return forward(model_input(pixels, device, preprocess)).detach()
