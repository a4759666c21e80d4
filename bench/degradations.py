"""Benchmark: the fundus degradations alone against the default encoder alone, measured side by side in one run.

Usage: .venv/bin/python bench/degradations.py [--images 6] [--severity 3] [--json FILE]

For each registered degradation (controls left out) it prints images/s of `degrade()` where the engine applies it:
on an image's pixels on the model's grid (EfficientNet-Lite0's 224 px, from rendered look-alikes at BRSET's
2048 x 1536 and IDRiD's 4288 x 2848 resized by the model's library; decoding and resizing are not timed: the
engine does them once per image for every degradation, and the clean run has done them already). Beside it, the
same degradation on the photograph at full size (where registry 1 applied it), and EfficientNet-Lite0 alone on
ready 224 px input (the model's ceiling on the same device). Target: every degradation at least 2x the model's
rate. Then the projected time of the whole robustness grid: every test image of the ten published splits (4,554
images, shared/datasets.md) x degradations x severities, degraded once per model grid and scored by each of the
grid's models at the measured model rate (a stated stand-in: EfficientNet-Lite0's rate for every model).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from encoders import model_alone
from figures import save
from focus_dagster.degradations import DEGRADATIONS, REGISTRY_VERSION, degrade
from focus_dagster.inference.engine import default_batch_size, pick_device
from focus_dagster.inference.transforms import library_pixels
from focus_dagster.synthetic.render import CAMERAS, FundusSpec, render_fundus

SIZES = {"brset": (2048, 1536), "idrid": (4288, 2848)}
TEST_IMAGES = 4554  # the published split files' test images over the ten datasets (shared/datasets.md)
GRID_MODELS = 22  # 16 encoders + 6 multimodal LLMs of the reference grid (protocol.md)


def photographs(per_size: int) -> dict[str, list[np.ndarray]]:
    """Rendered look-alikes at each full size, decoded (H x W x 3 uint8)."""
    out = {}
    for name, (width, height) in SIZES.items():
        spec = FundusSpec(width=width, height=height, camera=CAMERAS["canon_cr"], dr_grade=2)
        out[name] = [np.asarray(render_fundus(spec, seed=i).convert("RGB")) for i in range(per_size)]
    return out


def on_model_grid(images: list[np.ndarray], preprocess) -> list[np.ndarray]:
    """Each photograph as the engine hands it to a degradation: the model library's pixels, H x W x 3."""
    return [np.ascontiguousarray(library_pixels(Image.fromarray(image), preprocess).transpose(1, 2, 0))
            for image in images]


def degradation_rate(images: list[np.ndarray], name: str, severity: int, device: str) -> float:
    degrade(images[0], name, severity, "warm-up", device)  # first call: kernels, FFT plans
    _sync(device)
    started = time.perf_counter()
    for index, image in enumerate(images):
        degrade(image, name, severity, f"image-{index}", device)
    _sync(device)
    return len(images) / (time.perf_counter() - started)


def encoder(device: str):
    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.models.registry import load_encoder

    return load_encoder(CATALOG["efficientnet_lite0"]).to(device)


def projected_hours(rates: dict[str, float], model_rate: float, severities: int) -> dict:
    degraded = TEST_IMAGES * len(rates) * severities
    # each model degrades on its own grid: counted once per model (models sharing an input size share the cache)
    degrading = GRID_MODELS * sum(TEST_IMAGES * severities / rate for rate in rates.values())
    scoring = GRID_MODELS * degraded / model_rate
    return {"degraded_images": degraded, "degrading_h": round(degrading / 3600, 2),
            "scoring_h": round(scoring / 3600, 2), "total_h": round((degrading + scoring) / 3600, 2)}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=6, help="photographs per size (two sizes)")
    parser.add_argument("--severity", type=int, default=3, choices=range(1, 6))
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args()
    device = pick_device()
    print(f"device {device}, {os.cpu_count()} CPU cores, torch threads {torch.get_num_threads()}, "
          f"{args.images} photographs per size, severity {args.severity}")
    model = encoder(device)
    preprocess = model.spec.preprocess
    model_rate = model_alone(model.embed, preprocess, device, default_batch_size(device))
    print(f"EfficientNet-Lite0 alone: {model_rate:8.1f} img/s (target for each degradation: >= {2 * model_rate:.1f} "
          "img/s)")
    full = photographs(args.images)
    grid = {size: on_model_grid(images, preprocess) for size, images in full.items()}
    figures: dict = {"device": device, "cpu_cores": os.cpu_count(), "severity": args.severity,
                     "model_alone_img_s": round(model_rate, 1), "model_grid_px": preprocess.size,
                     "registry": REGISTRY_VERSION, "degradations": {}}
    for name, spec in DEGRADATIONS.items():
        if spec.control:
            continue
        row = {}
        for size in SIZES:
            on_grid = degradation_rate(grid[size], name, args.severity, device)
            at_full_size = degradation_rate(full[size], name, args.severity, device)
            row[size] = {"model_grid_img_s": round(on_grid, 1), "over_model": round(on_grid / model_rate, 2),
                         "full_size_img_s": round(at_full_size, 2)}
        figures["degradations"][name] = row
        print(f"{name:<20} " + " | ".join(
            f"{size} {row[size]['model_grid_img_s']:7.1f} img/s ({row[size]['over_model']:.2f}x model; "
            f"full size {row[size]['full_size_img_s']:.2f})" for size in SIZES))
    slowest = min(row[size]["over_model"] for row in figures["degradations"].values() for size in SIZES)
    figures["slowest_over_model"] = slowest
    print(f"slowest degradation on the model's grid: {slowest:.2f}x the model's rate (target >= 2x): "
          + ("met" if slowest >= 2 else "NOT met"))
    rates = {name: row["brset"]["model_grid_img_s"] for name, row in figures["degradations"].items()}
    figures["projection_5_severities"] = projected_hours(rates, model_rate, severities=5)
    print("whole robustness grid, 5 severities:", figures["projection_5_severities"])
    save(args.json, figures)


if __name__ == "__main__":
    main()
