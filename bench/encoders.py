"""Benchmark: image-embedding throughput of the default encoders, measured side by side in one run.

Usage: .venv/bin/python bench/encoders.py [--images 100] [--out bench/out] [--models efficientnet_lite0 tiny_vit]

For each model it prints images/s of
  model alone     the model on pre-made input tensors (the ceiling),
  pipeline        the platform's engine: decode + preprocess in worker processes + model,
  reference loop  batch 16, images decoded one by one in the main process (full decode), then the model,
and the ratios pipeline / model-alone (target >= 0.8) and pipeline / reference loop (target >= 1.5).
Images are synthetic fundus JPEGs written at the real datasets' resolutions (1,634-4,288 px).
On a CUDA GPU it also times a ViT-L/16-sized model in bf16 and reports the fraction of the GPU's measured
bf16 matrix-multiply rate that the model's FLOPs reach.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from focus_dagster.inference.engine import (
    default_workers,
    model_input,
    pick_device,
    run_on_images,
)
from focus_dagster.inference.images import to_array
from focus_dagster.models.spec import Preprocess

FULL_SIZE_DATASETS = ("brset", "idrid", "refuge")  # 2048x1536, 4288x2848, 2124x2056 / 1634x1634


def full_size_images(out: Path, per_dataset: int) -> list[tuple[str, str]]:
    from focus_dagster.synthetic import is_synthetic_root, read_manifest, synthesize

    roots = [out / key for key in FULL_SIZE_DATASETS]
    fresh = all(is_synthetic_root(r) and read_manifest(r)["per_dataset"] == per_dataset and read_manifest(r)["scale"] == 1.0
                for r in roots)
    if not fresh:
        started = time.perf_counter()
        synthesize(out, FULL_SIZE_DATASETS, per_dataset=per_dataset, seed=0, scale=1.0)
        print(f"wrote full-size look-alikes in {time.perf_counter() - started:.0f}s")
    paths = sorted(p for r in roots for p in r.rglob("*") if p.suffix.lower() in (".jpg", ".png"))
    return [(p.relative_to(out).as_posix(), str(p)) for p in paths]


def model_alone(embed, preprocess: Preprocess, device: str, batch: int, seconds: float = 8.0) -> float:
    import torch

    pixels = model_input(torch.randn(batch, 3, preprocess.size, preprocess.size), device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.startswith("cuda") else _null()
    with torch.inference_mode(), autocast:
        embed(pixels)  # warm-up
        _sync(device)
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            embed(pixels)
            done += batch
        _sync(device)
    return done / (time.perf_counter() - started)


def pipeline(embed, items, preprocess: Preprocess, device: str, batch: int) -> float:
    with tempfile.TemporaryDirectory() as work:
        run = run_on_images(embed, items, preprocess, work_dir=Path(work), fingerprint="bench", device=device,
                            batch_size=batch, shard_size=len(items))
    assert not run.failed, run.failed
    return run.images_per_second


def reference_loop(embed, items, preprocess: Preprocess, device: str, batch: int = 16) -> float:
    """The reference implementation's shape: serial full decode in the main process, batches of 16."""
    import torch

    started = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(items), batch):
            arrays = [to_array(full_decode_resize(p, preprocess), preprocess) for _, p in items[i : i + batch]]
            embed(model_input(torch.from_numpy(np.stack(arrays)), device))
        _sync(device)
    return len(items) / (time.perf_counter() - started)


def full_decode_resize(path: str, preprocess: Preprocess):
    """The reference implementation's image path: a full decode, then one plain resize and a crop."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    short = preprocess.resize_to or preprocess.size
    w, h = image.size
    scale = short / min(w, h)
    image = image.resize((round(w * scale), round(h * scale)), Image.BICUBIC)
    left, top = (image.width - preprocess.size) // 2, (image.height - preprocess.size) // 2
    return image.crop((left, top, left + preprocess.size, top + preprocess.size))


def gpu_vit_large(device: str) -> dict:
    """ViT-L/16 at 224 in bf16: images/s and the fraction of the measured bf16 matmul rate its FLOPs reach."""
    import timm
    import torch

    model = timm.create_model("vit_large_patch16_224", pretrained=False, num_classes=0).to(device).eval()
    matmul_tflops = measured_bf16_matmul_tflops(device)
    flops_per_image = vit_flops(model, tokens=197)
    results = {}
    for batch in (64, 256):
        pixels = torch.randn(batch, 3, 224, 224, device=device)
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
            for _ in range(3):
                model(pixels)
            torch.cuda.synchronize()
            started, n = time.perf_counter(), 0
            while time.perf_counter() - started < 10:
                model(pixels)
                n += batch
            torch.cuda.synchronize()
        rate = n / (time.perf_counter() - started)
        results[batch] = {"images_per_s": round(rate, 1),
                          "model_tflops": round(rate * flops_per_image / 1e12, 1),
                          "fraction_of_matmul_rate": round(rate * flops_per_image / 1e12 / matmul_tflops, 3)}
    return {"measured_bf16_matmul_tflops": round(matmul_tflops, 1), "gflops_per_image": round(flops_per_image / 1e9, 1),
            "by_batch": results}


def measured_bf16_matmul_tflops(device: str, n: int = 8192) -> float:
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    started, reps = time.perf_counter(), 20
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - started) / 1e12


def vit_flops(model, tokens: int) -> float:
    """Multiply-accumulate count x 2 of a ViT forward (linear layers + attention matmuls)."""
    dim, depth = model.embed_dim, len(model.blocks)
    mlp = model.blocks[0].mlp.fc1.out_features
    per_block = tokens * (4 * dim * dim + 2 * dim * mlp) + 2 * tokens * tokens * dim
    patch = tokens * 3 * 16 * 16 * dim
    return 2.0 * (depth * per_block + patch)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=100, help="full-size images per dataset (3 datasets)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "full-size")
    parser.add_argument("--models", nargs="+", default=None,
                        help="catalog ids (default: the default encoders; pipeline-check models are decode-bound by "
                             "design, so the targets apply to the others)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    from focus_dagster.models.registry import load_encoder
    from focus_dagster.models.selection import resolve_models

    device = pick_device()
    items = full_size_images(args.out, args.images)
    print(f"device {device}, {os.cpu_count()} CPU cores, {default_workers()} decode workers, {len(items)} full-size images")
    figures: dict = {"device": device, "cpu_cores": os.cpu_count(), "images": len(items), "models": {}}
    specs = resolve_models(args.models, args.out.parent / "models")
    for model_id, spec in specs.items():
        if spec.interface == "mllm":
            continue
        encoder = load_encoder(spec).to(device)
        batch = 128 if device.startswith("cuda") else 32
        alone = model_alone(encoder.embed, spec.preprocess, device, batch)
        piped = pipeline(encoder.embed, items, spec.preprocess, device, batch)
        reference = reference_loop(encoder.embed, items, spec.preprocess, device)
        row = {"model_alone": round(alone, 1), "pipeline": round(piped, 1), "reference_loop": round(reference, 1),
               "pipeline_over_model_alone": round(piped / alone, 2), "pipeline_over_reference": round(piped / reference, 2)}
        figures["models"][model_id] = row
        targets = ("(pipeline-check model: decode-bound by design, no target)" if spec.is_pipeline_check
                   else "(targets >= 0.8 and >= 1.5)")
        print(f"{model_id:<20} model alone {alone:8.1f} img/s | pipeline {piped:7.1f} img/s | reference loop "
              f"{reference:7.1f} img/s | pipeline/model {row['pipeline_over_model_alone']:.2f} | "
              f"pipeline/reference {row['pipeline_over_reference']:.2f} {targets}")
    if device.startswith("cuda"):
        figures["vit_large_bf16"] = gpu_vit_large(device)
        print("ViT-L/16 bf16:", json.dumps(figures["vit_large_bf16"]))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    sys.exit(main())
