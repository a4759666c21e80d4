"""Benchmark: image-embedding throughput of the default encoders, measured side by side in one run.

Usage: .venv/bin/python bench/encoders.py [--images 100] [--out bench/out] [--models efficientnet_lite0 tiny_vit]

First the CPU decoders alone: core milliseconds per image, from JPEG bytes to the model's resized pixels (a full
decode, then timm's transform), of Pillow and of simplejpeg, interleaved image by image, with the largest pixel
difference between them.
Then for each model it prints images/s of
  model alone      the model on pre-made input tensors (the ceiling),
  pipeline         the platform's engine: decode + preprocess in worker processes + model, no pixel cache,
                   with the default CPU decoder (and, beside it, with Pillow's),
  first encoder    the engine as image_embeddings runs it on a dataset no model has read yet: decoding every
                   JPEG and filling the pixel cache,
  later encoders   the same on the second..Nth model with this preprocessing: pixels read from the cache,
  reference loop   batch 16, images decoded one by one in the main process and put through timm's transform,
                   then the model (what a user of timm writes),
and the ratios pipeline / model-alone (target >= 0.9 on the 2-core CPU), later / first encoder, and
pipeline / reference loop (target >= 1.5).
Images are synthetic fundus JPEGs written at the real datasets' resolutions (1,634-4,288 px).
On a CUDA GPU the encoders run as image_embeddings runs them there (their repeated blocks compiled,
focus_dagster/inference/compiled.py), and a ViT-L/16-sized model in bf16 is timed eager, compiled block by block
and compiled whole: images/s, the fraction of the GPU's measured bf16 matrix-multiply rate its FLOPs reach
(target >= 0.6), the compiled rows' agreement with eager, and its pipeline on the full-size images against the
model alone (target >= 0.5). `--vit-large-only` runs just that part.
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

from figures import save
from focus_dagster.inference.compiled import compile_encoder
from focus_dagster.inference.device_decode import Decoder, choose_decoder
from focus_dagster.inference.engine import (
    default_batch_size,
    default_workers,
    model_input,
    pick_device,
    run_on_images,
)
from focus_dagster.inference.images import CPU_DECODERS, pixels_from_bytes, to_array
from focus_dagster.inference.pixel_cache import KnownHashes, content_hash_of
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
        embed(pixels)  # warm-up (a compiled forward compiles this batch shape here)
        embed(pixels)
        _sync(device)
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            embed(pixels)
            done += batch
        _sync(device)
    return done / (time.perf_counter() - started)


def pipeline(embed, items, preprocess: Preprocess, device: str, batch: int, decoder: Decoder | None = None) -> float:
    with tempfile.TemporaryDirectory() as work:
        run = run_on_images(embed, items, preprocess, work_dir=Path(work), fingerprint="bench", device=device,
                            batch_size=batch, shard_size=len(items), decoder=decoder)
    assert not run.failed, run.failed
    return run.images_per_second


def decode_once(embed, items, preprocess: Preprocess, device: str, batch: int) -> dict:
    """The first encoder on a dataset (decodes, fills the pixel cache) and a later one (reads it), as
    image_embeddings runs them: the labels' content hashes known, a fresh work folder per model."""
    known = KnownHashes({path: content_hash_of(Path(path).read_bytes()) for _, path in items}, time.time_ns())
    with tempfile.TemporaryDirectory() as folder:
        runs = []
        for name in ("first", "later"):
            run = run_on_images(embed, items, preprocess, work_dir=Path(folder) / name, fingerprint=name,
                                device=device, batch_size=batch, shard_size=len(items),
                                pixel_cache=Path(folder) / "pixels", known_hashes=known)
            assert not run.failed, run.failed
            runs.append(run)
    first, later = runs
    assert (first.pixels_decoded, later.pixels_from_cache) == (len(items), len(items))
    return {"first_encoder": round(first.images_per_second, 1), "first_encoder_s": round(first.seconds, 2),
            "later_encoders": round(later.images_per_second, 1), "later_encoders_s": round(later.seconds, 2)}


def cpu_decoders(items, preprocess: Preprocess) -> dict:
    """Core ms per image of each CPU decoder (bytes to resized pixels), interleaved image by image so that a
    busy moment weighs on both alike, and the largest difference between their pixels."""
    seconds = {name: 0.0 for name in CPU_DECODERS}
    largest = 0
    for _, path in items:
        data = Path(path).read_bytes()
        pixels = {}
        for name in (*CPU_DECODERS, *reversed(CPU_DECODERS)):
            started = time.process_time()
            pixels[name] = pixels_from_bytes(data, preprocess, name)
            seconds[name] += time.process_time() - started
        first, second = (pixels[name].astype(np.int16) for name in CPU_DECODERS)
        largest = max(largest, int(np.abs(first - second).max()))
    per_image = {name: round(total / (2 * len(items)) * 1000, 2) for name, total in seconds.items()}
    return {"core_ms_per_image": per_image, "largest_pixel_difference": largest}


def model_row(embed, items, preprocess: Preprocess, device: str, batch: int, decoder: Decoder) -> dict:
    """Every figure of one model; model alone is the mean of a run before and a run after the pipelines, so that
    a machine that gets busier or quieter meanwhile moves the ceiling with them."""
    before = model_alone(embed, preprocess, device, batch)
    piped = pipeline(embed, items, preprocess, device, batch, decoder)
    pillow = pipeline(embed, items, preprocess, device, batch, Decoder(cpu="pil"))
    once = decode_once(embed, items, preprocess, device, batch)
    alone = (before + model_alone(embed, preprocess, device, batch)) / 2
    reference = reference_loop(embed, items, preprocess, device)
    return {"model_alone": round(alone, 1), "pipeline": round(piped, 1), "pipeline_pillow": round(pillow, 1), **once,
            "reference_loop": round(reference, 1),
            "pipeline_over_model_alone": round(piped / alone, 2),
            "pipeline_pillow_over_model_alone": round(pillow / alone, 2),
            "first_encoder_over_model_alone": round(once["first_encoder"] / alone, 2),
            "later_encoders_over_model_alone": round(once["later_encoders"] / alone, 2),
            "later_over_first_encoder": round(once["later_encoders"] / once["first_encoder"], 2),
            "pipeline_over_reference": round(piped / reference, 2)}


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
    """A user's own image path: the image opened with Pillow and put through the library's transform."""
    from PIL import Image

    from focus_dagster.inference.transforms import library_pixels

    with Image.open(path) as image:
        return library_pixels(image.convert("RGB"), preprocess)


def gpu_vit_large(device: str, items, decoder: Decoder, modes=("off", "blocks", "whole"), batches=(256,),
                  seconds: float = 6.0, pipeline_batch: int = 128) -> dict:
    """ViT-L/16 at 224 in bf16 autocast through the platform's forward (compiled.compile_encoder, each mode on a fresh
    model): images/s, the fraction of the measured bf16 matmul rate its FLOPs reach (target >= 0.6), the seconds
    compiling and checking took, and the check batch's agreement with eager (min cosine, max relative difference).
    With the mode the platform uses on CUDA (auto = blocks), also the pipeline on the full-size images at the engine's
    batch size, against the model alone (target >= 0.5)."""
    import timm
    import torch

    matmul_tflops = measured_bf16_matmul_tflops(device)
    preprocess = Preprocess(size=224, resize_to=256)
    flops_per_image = None
    by_mode = {}
    for mode in modes:
        torch.manual_seed(0)
        model = timm.create_model("vit_large_patch16_224", pretrained=False, num_classes=0).to(device).eval()
        flops_per_image = vit_flops(model, tokens=197)
        forward = compile_encoder(model, [model], preprocess, device, mode=mode, batch_size=max(batches))
        row = {"forward": forward.mode, "compile_s": forward.seconds, "min_cosine": forward.min_cosine,
               "max_relative": forward.max_relative, "tolerance": forward.tolerance, "rounding": forward.rounding,
               "attention": forward.attention, "reason": forward.reason,
               "by_batch": {}}
        for batch in batches:
            rate = model_alone(forward.forward, preprocess, device, batch, seconds=seconds)
            tflops = rate * flops_per_image / 1e12
            row["by_batch"][batch] = {"images_per_s": round(rate, 1), "model_tflops": round(tflops, 1),
                                      "fraction_of_matmul_rate": round(tflops / matmul_tflops, 3)}
        if mode == "blocks":
            alone = model_alone(forward.forward, preprocess, device, pipeline_batch, seconds=seconds)
            rate = pipeline(forward.forward, items, preprocess, device, pipeline_batch, decoder)
            row.update(pipeline_batch=pipeline_batch, model_alone=round(alone, 1), pipeline=round(rate, 1),
                       pipeline_over_model_alone=round(rate / alone, 3))
        by_mode[mode] = row
        print(f"ViT-L/16 bf16 {mode:<7} ({forward.mode}, {forward.seconds:.0f} s to compile and check): "
              + ", ".join(f"batch {b} {v['images_per_s']:.0f} img/s = {v['fraction_of_matmul_rate']:.3f} of matmul"
                          for b, v in row["by_batch"].items()) + " (target >= 0.6)"
              + (f"; pipeline {row['pipeline']:.0f} img/s = {row['pipeline_over_model_alone']:.2f} of model alone "
                 "(target >= 0.5)" if "pipeline" in row else ""))
        del model, forward
        torch.cuda.empty_cache()
    return {"measured_bf16_matmul_tflops": round(matmul_tflops, 1), "gflops_per_image": round(flops_per_image / 1e9, 1),
            "by_mode": by_mode}


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
    parser.add_argument("--vit-modes", nargs="+", default=["off", "blocks", "whole"],
                        choices=["off", "blocks", "whole"], help="the ViT-L/16 forwards to time on a GPU")
    parser.add_argument("--vit-large-only", action="store_true",
                        help="on a GPU: only the ViT-L/16 forward modes and its pipeline (skip the decoders and the "
                             "default encoders)")
    args = parser.parse_args()

    from focus_dagster.models.registry import load_encoder
    from focus_dagster.models.selection import resolve_models

    device = pick_device()
    items = full_size_images(args.out, args.images)
    decoder = choose_decoder(device)
    print(f"device {device}, {os.cpu_count()} CPU cores, {default_workers()} decode workers, {len(items)} full-size "
          f"images, decoder {decoder.id}")
    figures: dict = {"device": device, "cpu_cores": os.cpu_count(), "images": len(items), "decoder": decoder.id,
                     "models": {}}
    if args.vit_large_only and device.startswith("cuda"):
        figures["vit_large_bf16"] = gpu_vit_large(device, items, decoder, modes=args.vit_modes)
        return save(args.json, figures)
    figures["cpu_decoders"] = cpu_decoders(items, Preprocess(size=224, resize_to=256))
    print("CPU decoders, core ms per image (bytes to 224 px pixels):", json.dumps(figures["cpu_decoders"]))
    specs = resolve_models(args.models, args.out.parent / "models")
    for model_id, spec in specs.items():
        if spec.interface == "mllm":
            continue
        encoder = load_encoder(spec).to(device)
        batch = default_batch_size(device)
        # The forward image_embeddings runs: eager on a CPU, the repeated blocks compiled on CUDA.
        preprocess = encoder.spec.preprocess  # resolved from the model's own configuration
        forward = compile_encoder(encoder.embed, encoder.modules, preprocess, device, batch_size=batch)
        row = model_row(forward.forward, items, preprocess, device, batch, decoder) | {"forward": forward.mode,
                                                                                     "preprocess": preprocess.values()}
        figures["models"][model_id] = row
        targets = ("(pipeline-check model: decode-bound by design, no target)" if spec.is_pipeline_check
                   else "(targets >= 0.9 and >= 1.5)")
        print(f"{model_id:<20} model alone {row['model_alone']:8.1f} img/s | pipeline {row['pipeline']:7.1f} img/s "
              f"(Pillow decoder {row['pipeline_pillow']:7.1f}) | first encoder {row['first_encoder']:7.1f} img/s "
              f"({row['first_encoder_s']:.1f} s) | later encoders {row['later_encoders']:7.1f} img/s "
              f"({row['later_encoders_s']:.1f} s) | reference loop {row['reference_loop']:7.1f} img/s")
        print(f"{'':<20} pipeline/model {row['pipeline_over_model_alone']:.2f} | first/model "
              f"{row['first_encoder_over_model_alone']:.2f} | later/model {row['later_encoders_over_model_alone']:.2f} "
              f"| later/first {row['later_over_first_encoder']:.2f}x | pipeline/reference "
              f"{row['pipeline_over_reference']:.2f} {targets}")
    if device.startswith("cuda"):
        figures["vit_large_bf16"] = gpu_vit_large(device, items, decoder, modes=args.vit_modes)
    return save(args.json, figures)


if __name__ == "__main__":
    sys.exit(main())
