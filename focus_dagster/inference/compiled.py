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
the rows compared (cosine and largest difference); a compiled forward that differs, or a compile that fails, is
undone and the run stays eager, with the reason in its metadata. The tolerance is fixed in float32 and measured on
the model itself in bf16 (`bf16_tolerance`); the metadata and the log line give it, and in bf16 what it was measured
from. Batches are padded to the next power of two, so a run compiles at most a handful of shapes (its batch size,
the last partial batch, the halved batches after a CUDA out-of-memory), never one per batch.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from focus_dagster.config import COMPILE_MODES

EAGER = "eager"
# How far compiled rows may be from eager ones in float32: reassociated sums differ in the last bits.
FLOAT32_TOLERANCE = {"min_cosine": 1 - 1e-6, "max_relative": 1e-3}
# In bf16 a compiled program rounds at other points than eager autocast does, and how far that moves the rows depends
# on the model: on the 2-core CPU, compiled rows of the check batch ranged from identical to eager's (toy ViTs) to
# about 1% away (EfficientNet-Lite0), where a 2% leak of every feature into its neighbour moves them by 2%
# (bench/results/compiled_bf16_tolerance_cpu_2core.json). No fixed tolerance tells the two apart on every model, so
# the check measures the model's own bf16 rounding on the same batch (`measured_rounding`) and allows
# ROUNDING_MULTIPLE times it, in row angle and in largest difference. On 7 models and 6 batches each, the real
# compiles came to at most 0.79 of the tolerance so derived and every 2% leak to at least 1.22 times it (the larger
# of the two distances decides). It is never tighter than BF16_FLOOR nor looser than BF16_CEILING, the fixed
# tolerance used before, which let a 5% leak through.
ROUNDING_MULTIPLE = 1.25
BF16_CEILING = {"min_cosine": 1 - 2e-3, "max_relative": 0.08}
# Rows a model's last linear layer hands back in bf16 differ by whole bf16 steps: the largest difference may be one
# step of the largest value (at most 2^-7 of it) whatever was measured.
BF16_FLOOR = {"min_cosine": FLOAT32_TOLERANCE["min_cosine"], "max_relative": 2**-7}
CHECK_SEED = 20260


@dataclass
class CompiledForward:
    """The forward a run uses, and how it got there.

    mode: what runs (eager, blocks or whole); requested: what the configuration asked for; blocks: the modules
    compiled one by one; seconds: compiling and checking; min_cosine / max_relative: compiled vs eager rows on the
    check batch (max_relative = the largest absolute difference over the largest absolute eager value);
    tolerance: the bounds they were held to; rounding: in bf16, the model's own rounding on the batch that the
    tolerance was derived from (`bf16_tolerance`); reason: why the run is eager when a compile was asked for."""

    forward: Callable
    mode: str
    requested: str
    device: str
    blocks: int = 0
    seconds: float = 0.0
    check_dtype: str = ""
    min_cosine: float | None = None
    max_relative: float | None = None
    tolerance: dict = field(default_factory=dict)
    rounding: dict = field(default_factory=dict)
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
                    batch_size: int = 8, dtype: str | None = None,
                    log: Callable[[str], None] | None = None) -> CompiledForward:
    """`forward` (normalised pixels [B, 3, H, W] -> [B, D]) compiled as `mode` says and checked against eager on
    one seeded batch of `batch_size` images; eager (with the reason) if the compile fails or its rows differ.
    dtype: what the check computes in, by default what the engine computes in on `device` (bf16 autocast on CUDA,
    float32 on a CPU); `bfloat16` on a CPU runs CPU autocast, which rounds as CUDA's does."""
    from focus_dagster.inference.engine import compute_dtype

    resolved = resolve_mode(mode, device)
    attention = attention_kernels(modules)
    if resolved == EAGER:
        return CompiledForward(forward, EAGER, mode, device, attention=attention)
    started = time.perf_counter()
    dtype = dtype or compute_dtype(device)
    inputs = check_inputs(preprocess, batch_size, device)
    reference = _rows(forward, inputs, device, dtype)
    rounding = measured_rounding(forward, inputs, device, reference) if dtype == "bfloat16" else None
    swapped: list = []
    try:
        if resolved == "blocks":
            swapped = compile_blocks(modules)
            compiled = forward if swapped else _compile_whole(forward)
            resolved = "blocks" if swapped else "whole"
        else:
            compiled = _compile_whole(forward)
        compiled = padded_to_power_of_two(compiled)
        rows = _rows(compiled, inputs, device, dtype)
    except Exception as exc:  # a compiler that cannot handle a model leaves it eager, and says why
        restore_blocks(swapped)
        return _eager(forward, mode, device, attention, started, f"compile failed: {type(exc).__name__}: {exc}", log)
    agreement = compare_rows(reference, rows, rounding)
    if not agreement["agrees"]:
        restore_blocks(swapped)
        reason = (f"compiled rows differ from eager on the check batch: {_distances(agreement)} "
                  f"({_tolerance_text(agreement)})")
        return _eager(forward, mode, device, attention, started, reason, log, agreement)
    result = CompiledForward(explained(compiled, resolved), resolved, mode, device, blocks=len(swapped),
                             seconds=round(time.perf_counter() - started, 2), **_checked(agreement),
                             attention=attention)
    if log:
        log(f"compiled ({resolved}, {len(swapped)} blocks) in {result.seconds:.1f} s; check batch: "
            f"{_distances(agreement)}, within the {_tolerance_text(agreement)}")
    return result


def _eager(forward, mode, device, attention, started, reason, log, agreement=None) -> CompiledForward:
    if log:
        log(f"running eager: {reason}")
    checked = _checked(agreement) if agreement else {}
    return CompiledForward(forward, EAGER, mode, device, seconds=round(time.perf_counter() - started, 2),
                           **checked, attention=attention, reason=reason)


def _checked(agreement: dict) -> dict:
    """The CompiledForward fields a check fills."""
    return {"check_dtype": agreement["dtype"], "min_cosine": agreement["min_cosine"],
            "max_relative": agreement["max_relative"], "tolerance": agreement["tolerance"],
            "rounding": agreement.get("rounding", {})}


def _distances(distance: dict) -> str:
    return f"min cosine {distance['min_cosine']:.6f}, max relative difference {distance['max_relative']:.2e}"


def _tolerance_text(agreement: dict) -> str:
    """The tolerance a check applied, and in bf16 the measurement it came from, in words (log lines, reasons)."""
    text = f"{agreement['dtype']} tolerance: {_distances(agreement['tolerance'])}"
    if agreement.get("rounding"):
        text += (f", {ROUNDING_MULTIPLE:g}x the model's own bf16 rounding on the batch: "
                 f"{_distances(agreement['rounding'])}")
    return text


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


def row_distance(reference, rows) -> dict:
    """The smallest row cosine (computed in float64: float32's own cosine of a row with itself can be 1 - 2e-7) and
    the largest absolute difference over the largest absolute reference value."""
    import torch

    a, b = reference.double(), rows.double()
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=1, eps=1e-12).min().item()
    relative = ((a - b).abs().max() / a.abs().max().clamp_min(1e-12)).item()
    return {"min_cosine": cosine, "max_relative": relative}


def bf16_tolerance(rounding: dict) -> dict:
    """How far compiled bf16 rows may be from eager ones, given the model's own bf16 rounding on the check batch
    (`measured_rounding`): ROUNDING_MULTIPLE times its row angle and its largest difference, between BF16_FLOOR and
    BF16_CEILING. Angles, not 1 - cosine, are what scale: 1 - cosine grows with the square."""
    angle = ROUNDING_MULTIPLE * math.acos(max(-1.0, min(1.0, rounding["min_cosine"])))
    min_cosine = math.cos(min(angle, math.pi))
    relative = ROUNDING_MULTIPLE * rounding["max_relative"]
    return {"min_cosine": min(max(min_cosine, BF16_CEILING["min_cosine"]), BF16_FLOOR["min_cosine"]),
            "max_relative": max(min(relative, BF16_CEILING["max_relative"]), BF16_FLOOR["max_relative"])}


def compare_rows(reference, rows, rounding: dict | None = None) -> dict:
    """Eager vs compiled rows (`row_distance`) and whether both distances are within the tolerance: float32's, or
    with `rounding` (the model's own bf16 rounding on the batch, `measured_rounding`) the bf16 one derived from it."""
    dtype = "bfloat16" if rounding is not None else "float32"
    tolerance = bf16_tolerance(rounding) if rounding is not None else dict(FLOAT32_TOLERANCE)
    extra = {"rounding": rounding} if rounding is not None else {}
    if tuple(reference.shape) != tuple(rows.shape):
        return {"agrees": False, "dtype": dtype, "min_cosine": float("nan"), "max_relative": float("inf"),
                "tolerance": tolerance, **extra, "shapes": [list(reference.shape), list(rows.shape)]}
    distance = row_distance(reference, rows)
    agrees = distance["min_cosine"] >= tolerance["min_cosine"] and distance["max_relative"] <= tolerance["max_relative"]
    return {"agrees": bool(agrees), "dtype": dtype, **distance, "tolerance": tolerance, **extra}


def measured_rounding(forward, inputs, device: str, reference) -> dict:
    """How far the model's own bf16 rounding moves its rows (`row_distance`): `reference` (eager bf16 rows of
    `inputs`) against eager bf16 rows of the same inputs, each value moved to its other bf16 neighbour, so that the
    first rounding autocast makes goes the other way for every value. Both are bf16 computations of the same
    image, a step apart in each input value; how far apart their rows end is how strongly the model carries one
    layer's rounding differences to its output, which is what rounding at other points does to a compiled one."""
    return row_distance(reference, _rows(forward, other_bf16_neighbour(inputs), device, "bfloat16"))


def other_bf16_neighbour(values):
    """Each value moved to the bf16 value on its other side from the one rounding to nearest gives (a value bf16
    holds exactly moves one step up), in the values' own dtype and memory format."""
    import torch

    nearest = values.to(torch.bfloat16)
    direction = torch.where(nearest.float() <= values, math.inf, -math.inf).to(torch.bfloat16)
    # element-wise steps keep the values' layout (channels-last pixels stay channels-last)
    return torch.nextafter(nearest, direction).to(values.dtype)


def check_inputs(preprocess, batch_size: int, device: str, seed: int = CHECK_SEED):
    """The check batch as the model gets it: seeded uint8 pixels at its input size (the check compares arithmetic,
    not image content), normalised on the device and channels-last as the engine does."""
    import torch

    from focus_dagster.inference.engine import model_input

    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (batch_size, 3, preprocess.size, preprocess.size), dtype=torch.uint8,
                           generator=generator)
    return model_input(pixels, device, preprocess)


def _rows(forward, inputs, device: str, dtype: str):
    """The engine's step (engine._run_batch) on model inputs (normalised on the device, channels-last): inference
    mode, autocast to `dtype` unless float32."""
    import torch

    from focus_dagster.inference.engine import _autocast

    with torch.inference_mode(), _autocast(device, dtype):
        return forward(inputs).detach()
