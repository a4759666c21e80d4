"""Benchmark: the bf16 check of compiled encoders against honest compiles and against miscompiles.

Usage: .venv/bin/python bench/compiled_bf16_tolerance.py [--device cpu] [--models ...] [--seeds 5] [--json FILE]

Each model runs in bf16 autocast (CPU autocast on a CPU: it rounds as CUDA's does) on the platform's check batch
(focus_dagster/inference/compiled.py):

  rounding    the model's own bf16 rounding as the check measures it (`measured_rounding`: eager rows against eager
              rows of the inputs moved to their other bf16 neighbours) and, beside it, eager bf16 against float32;
  tolerance   the one the check derives from it (`bf16_tolerance`), and the fixed one used before (BF16_CEILING);
  cases       compiled: the real compile (torch.compile, the repeated blocks or the whole forward) through the
              platform's check; re-rounded: stand-ins for a compiler rounding at other points, each block's output
              stored in bf16 (one rounding more per block) or each linear layer's product handed on unrounded
              (one rounding fewer, as a kernel fusing the product with what follows); float32 blocks: each block
              computed in float32 and rounded once at its output, a more precise computation rather than other
              rounding points; leaks: each feature leaking 2% or 5% into its neighbour, once at the rows or in
              every block.

Every case gives its min row cosine and largest relative difference against eager, both as ratios to the measured
rounding (row angle, difference) and as a share of the tolerance (the larger of the two; over 1 is refused), and the
verdicts of the measured tolerance and of the fixed one. With --seeds N, N more batches repeat the compiled forward
(reused: nothing recompiles) and the 2% leak at the rows, for how much the figures move from batch to batch.
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from pathlib import Path

from figures import save

MODELS = ("toy_vit_3", "vit_12", "tiny_vit", "tiny_clip", "vit_tiny_224", "vit_small_224", "efficientnet_lite0")
LEAKS = (0.02, 0.05)


def build(name: str):
    """(forward, modules, preprocess) of a model the tests or the defaults use; timm ViTs seeded, no weights."""
    import timm
    import torch

    from focus_dagster.models.spec import Preprocess

    vits = {"toy_vit_3": (dict(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2), 32),  # test_compiled
            "vit_12": (dict(img_size=64, embed_dim=128, depth=12, num_heads=4), 64),  # its compiled bf16 test
            "vit_tiny_224": ({}, 224)}
    if name in vits or name == "vit_small_224":
        options, size = vits.get(name, ({}, 224))
        torch.manual_seed(0)
        architecture = "vit_small_patch16_224" if name == "vit_small_224" else "vit_tiny_patch16_224"
        model = timm.create_model(architecture, pretrained=False, num_classes=0, **options).eval()
        return model, [model], Preprocess(size=size, resize_to=size + size // 8)
    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.models.registry import load_encoder

    encoder = load_encoder(CATALOG[name]).to("cpu")
    return encoder.embed, list(encoder.modules), encoder.spec.preprocess


def replacing(block, change):
    """A module in `block`'s place whose forward is `change(block, args, kwargs)`."""
    import torch

    class Changed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, *args, **kwargs):
            return change(self.block, args, kwargs)

    return Changed()


def leak(share: float):
    def change(block, args, kwargs):
        out = block(*args, **kwargs)
        return out + share * out.roll(1, dims=-1)

    return change


def stored(block, args, kwargs):
    out = block(*args, **kwargs)
    return out.bfloat16().to(out.dtype)


def unrounded_products():
    """A change of blocks whose linear layers hand their product on in float32, unrounded: bf16 operands, float32
    sums, as a kernel fusing a matrix product with what follows it keeps it (eager autocast rounds it to bf16). Each
    block is changed on a copy of itself."""
    import copy

    import torch

    def linear(layer, args, kwargs):
        with torch.autocast(args[0].device.type, enabled=False):
            bias = None if layer.bias is None else layer.bias.float()
            return torch.nn.functional.linear(args[0].bfloat16().float(), layer.weight.bfloat16().float(), bias)

    copies = {}

    def change(block, args, kwargs):
        if id(block) not in copies:
            changed = copy.deepcopy(block)
            for parent in list(changed.modules()):
                for name, child in list(parent.named_children()):
                    if isinstance(child, torch.nn.Linear):
                        setattr(parent, name, replacing(child, linear))
            copies[id(block)] = changed
        return copies[id(block)](*args, **kwargs)

    return change


def float32_blocks(block, args, kwargs):
    import torch

    with torch.autocast(args[0].device.type, enabled=False):
        out = block(args[0].float(), *args[1:], **kwargs)
    return out.bfloat16().to(args[0].dtype)


def rows(forward, inputs, device: str):
    from focus_dagster.inference.compiled import _rows

    return _rows(forward, inputs, device, "bfloat16")


def with_blocks(forward, modules, inputs, device: str, change):
    """Rows with every repeated block replaced by `change` of it (None when the model has no repeated stack)."""
    from focus_dagster.inference.compiled import repeated_blocks, restore_blocks

    swapped = []
    for container, index in repeated_blocks(modules):
        swapped.append((container, index, container[index]))
        container[index] = replacing(container[index], change)
    try:
        return rows(forward, inputs, device) if swapped else None
    finally:
        restore_blocks(swapped)


def case(eager, other, rounding: dict) -> dict:
    """Distances of `other` from eager, as ratios to the measured rounding and as a share of the tolerance, and both
    tolerances' verdicts."""
    from focus_dagster.inference.compiled import compare_rows

    outcome = compare_rows(eager, other, rounding)
    return verdicts(outcome, outcome["agrees"], rounding)


def verdicts(distance: dict, accepted: bool, rounding: dict) -> dict:
    from focus_dagster.inference.compiled import BF16_CEILING, bf16_tolerance

    tolerance = bf16_tolerance(rounding)
    share = max(_angle(distance) / _angle(tolerance), distance["max_relative"] / tolerance["max_relative"])
    return {"min_cosine": distance["min_cosine"], "max_relative": distance["max_relative"],
            "angle_ratio": round(_angle(distance) / _angle(rounding), 3),
            "relative_ratio": round(distance["max_relative"] / rounding["max_relative"], 3),
            "share_of_tolerance": round(share, 3), "accepted": bool(accepted),
            "accepted_by_fixed_tolerance": distance["min_cosine"] >= BF16_CEILING["min_cosine"]
            and distance["max_relative"] <= BF16_CEILING["max_relative"]}


def _angle(distance: dict) -> float:
    return math.acos(min(1.0, distance["min_cosine"]))


def unwrapped_blocks(modules):
    """(container, index, compiled) of every block torch.compile wrapped, for putting the originals back a while."""
    import torch

    found = []
    for module in modules:
        for container in module.modules():
            if isinstance(container, (torch.nn.ModuleList, torch.nn.Sequential)):
                found.extend((container, i, child) for i, child in enumerate(container) if hasattr(child, "_orig_mod"))
    return found


def measure(name: str, device: str, batch: int, seeds: int) -> dict:
    import torch

    from focus_dagster.inference.compiled import (
        BF16_CEILING,
        _rows,
        bf16_tolerance,
        check_inputs,
        compile_encoder,
        measured_rounding,
        row_distance,
    )

    forward, modules, preprocess = build(name)
    for module in modules:
        module.to(device)
    inputs = check_inputs(preprocess, batch, device)
    eager = rows(forward, inputs, device)
    rounding = measured_rounding(forward, inputs, device, eager)
    figures = {"check_batch": batch, "rounding": rounding,
               "bf16_vs_float32": row_distance(_rows(forward, inputs, device, "float32"), eager),
               "tolerance": bf16_tolerance(rounding), "fixed_tolerance_before": BF16_CEILING, "cases": {}}
    cases = figures["cases"]
    for share in LEAKS:
        cases[f"leak {share:.0%} at the rows"] = case(eager, eager + share * eager.roll(1, dims=-1), rounding)
        leaked = with_blocks(forward, modules, inputs, device, leak(share))
        if leaked is not None:
            cases[f"leak {share:.0%} in every block"] = case(eager, leaked, rounding)
    for label, change in (("re-rounded: block outputs stored in bf16", stored),
                          ("re-rounded: linear products unrounded", unrounded_products()),
                          ("float32 blocks", float32_blocks)):
        changed = with_blocks(forward, modules, inputs, device, change)
        if changed is not None:
            cases[label] = case(eager, changed, rounding)
    started = time.perf_counter()
    result = compile_encoder(forward, modules, preprocess, device, mode="blocks", dtype="bfloat16", batch_size=batch)
    figures.update(compiled_as=result.mode if result.is_compiled else "refused", compile_s=round(
        time.perf_counter() - started, 1), reason=result.reason)
    checked = {"min_cosine": result.min_cosine, "max_relative": result.max_relative}
    cases["compiled"] = verdicts(checked, result.is_compiled, rounding)
    if result.is_compiled and seeds:
        figures["other_batches"] = other_batches(forward, result.forward, modules, preprocess, device, batch, seeds)
    return figures


def other_batches(forward, compiled, modules, preprocess, device: str, batch: int, seeds: int) -> dict:
    """The compiled forward and a 2% leak at the rows on `seeds` more batches: ratios to each batch's rounding."""
    from focus_dagster.inference.compiled import check_inputs, measured_rounding

    swapped = unwrapped_blocks(modules)
    per_batch = []
    for seed in range(1, seeds + 1):
        inputs = check_inputs(preprocess, batch, device, seed=seed)
        for container, index, block in swapped:
            container[index] = block._orig_mod
        try:
            eager = rows(forward, inputs, device)
            rounding = measured_rounding(forward, inputs, device, eager)
        finally:
            for container, index, block in swapped:
                container[index] = block
        per_batch.append({"seed": seed, "compiled": case(eager, rows(compiled, inputs, device), rounding),
                          "leak 2% at the rows": case(eager, eager + 0.02 * eager.roll(1, dims=-1), rounding)})
    return {"batches": per_batch,
            "compiled_largest_share": max(b["compiled"]["share_of_tolerance"] for b in per_batch),
            "leak_2pct_smallest_share": min(b["leak 2% at the rows"]["share_of_tolerance"] for b in per_batch),
            "compiled_accepted": sum(b["compiled"]["accepted"] for b in per_batch),
            "leak_2pct_refused": sum(not b["leak 2% at the rows"]["accepted"] for b in per_batch)}


def summary(by_model: dict) -> dict:
    """Across models and batches, as shares of each one's tolerance (over 1 is refused): the largest of the real
    compiles, the largest of the re-rounded stand-ins, the smallest of the 2% leaks; and how many were accepted."""
    shares = {"compiled": [], "re-rounded": [], "leak 2%": []}
    for figures in by_model.values():
        for label, c in figures["cases"].items():
            kind = next((k for k in shares if label.startswith(k)), None)
            if kind:
                shares[kind].append(c["share_of_tolerance"])
        other = figures.get("other_batches", {})
        shares["compiled"] += [b["compiled"]["share_of_tolerance"] for b in other.get("batches", [])]
        shares["leak 2%"] += [b["leak 2% at the rows"]["share_of_tolerance"] for b in other.get("batches", [])]
    return {"compiled_largest_share": max(shares["compiled"]),
            "compiled_accepted": f"{sum(s <= 1 for s in shares['compiled'])}/{len(shares['compiled'])}",
            "rerounded_largest_share": max(shares["re-rounded"]),
            "rerounded_accepted": f"{sum(s <= 1 for s in shares['re-rounded'])}/{len(shares['re-rounded'])}",
            "leak_2pct_smallest_share": min(shares["leak 2%"]),
            "leak_2pct_refused": f"{sum(s > 1 for s in shares['leak 2%'])}/{len(shares['leak 2%'])}"}


def main() -> None:
    import torch

    from focus_dagster.inference.compiled import ROUNDING_MULTIPLE

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--batch", type=int, default=8, help="check batch (the check's default on a CPU)")
    parser.add_argument("--seeds", type=int, default=5, help="more batches for the compiled forward and the 2%% leak")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    by_model = {}
    for name in args.models:
        started = time.perf_counter()
        figures = by_model[name] = measure(name, args.device, args.batch, args.seeds)
        print(f"{name}: rounding angle {_angle(figures['rounding']):.2e}, max relative "
              f"{figures['rounding']['max_relative']:.2e} (bf16 vs float32 {_angle(figures['bf16_vs_float32']):.2e}, "
              f"{figures['bf16_vs_float32']['max_relative']:.2e}); compiled {figures['compiled_as']} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        for label, c in figures["cases"].items():
            print(f"  {label:<42} ratio angle {c['angle_ratio']:5.2f} relative {c['relative_ratio']:5.2f}, "
                  f"{c['share_of_tolerance']:5.2f} of the tolerance: {'accepted' if c['accepted'] else 'refused '} "
                  f"(fixed tolerance before: {'accepted' if c['accepted_by_fixed_tolerance'] else 'refused'})",
                  flush=True)
    overall = summary(by_model)
    print(f"multiple {ROUNDING_MULTIPLE:g}, shares of the tolerance: compiled at most "
          f"{overall['compiled_largest_share']:.2f} ({overall['compiled_accepted']} accepted), re-rounded at most "
          f"{overall['rerounded_largest_share']:.2f} ({overall['rerounded_accepted']}), 2% leaks at least "
          f"{overall['leak_2pct_smallest_share']:.2f} ({overall['leak_2pct_refused']} refused)")
    save(args.json, {"machine": f"{platform.machine()}, {args.device}, torch {torch.__version__}, threads "
                                f"{torch.get_num_threads()}",
                     "rounding_multiple": ROUNDING_MULTIPLE, **overall, "models": by_model})


if __name__ == "__main__":
    main()
