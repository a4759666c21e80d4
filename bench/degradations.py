"""Benchmark: the fundus degradations alone against the default encoder alone, measured side by side in one run.

Usage: .venv/bin/python bench/degradations.py [--images 6] [--severity 3] [--json FILE]

For each registered degradation (controls left out) it prints images/s of `degrade()` on decoded full-size
photographs (rendered look-alikes at BRSET's 2048 x 1536 and IDRiD's 4288 x 2848; decoding is not timed: the
engine decodes once for every degradation), on the best device there is, next to images/s of EfficientNet-Lite0
alone on ready 224 px input (the model's ceiling on the same device). Target: every degradation at least 2x the
model's rate. Then the projected time of the whole robustness grid: every test image of the ten published splits
(4,554 images, shared/datasets.md) x degradations x severities, degraded once and scored by each of the grid's
models at the measured model rate (a stated stand-in: EfficientNet-Lite0's rate for every model).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

from encoders import model_alone
from figures import save
from focus_dagster.degradations import DEGRADATIONS, degrade
from focus_dagster.inference.engine import default_batch_size, pick_device
from focus_dagster.synthetic.render import CAMERAS, FundusSpec, render_fundus

SIZES = {"brset": (2048, 1536), "idrid": (4288, 2848)}
TEST_IMAGES = 4554  # the published split files' test images over the ten datasets (shared/datasets.md)
GRID_MODELS = 22  # 16 encoders + 6 multimodal LLMs of the reference grid (protocol.md)


def photographs(per_size: int) -> dict[str, list[np.ndarray]]:
    """Rendered look-alikes at each full size, decoded (the engine hands degrade() decoded pixels)."""
    out = {}
    for name, (width, height) in SIZES.items():
        spec = FundusSpec(width=width, height=height, camera=CAMERAS["canon_cr"], dr_grade=2)
        out[name] = [np.asarray(render_fundus(spec, seed=i).convert("RGB")) for i in range(per_size)]
    return out


def degradation_rate(images: list[np.ndarray], name: str, severity: int, device: str) -> float:
    degrade(images[0], name, severity, "warm-up", device)  # first call: kernels, FFT plans
    _sync(device)
    started = time.perf_counter()
    for index, image in enumerate(images):
        degrade(image, name, severity, f"image-{index}", device)
    _sync(device)
    return len(images) / (time.perf_counter() - started)


def encoder_rate(device: str) -> float:
    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.models.registry import load_encoder

    encoder = load_encoder(CATALOG["efficientnet_lite0"]).to(device)
    return model_alone(encoder.embed, encoder.spec.preprocess, device, default_batch_size(device))


def projected_hours(rates: dict[str, float], model_rate: float, severities: int) -> dict:
    degraded = TEST_IMAGES * len(rates) * severities
    degrading = sum(TEST_IMAGES * severities / rate for rate in rates.values())
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
    model = encoder_rate(device)
    print(f"EfficientNet-Lite0 alone: {model:8.1f} img/s (target for each degradation: >= {2 * model:.1f} img/s)")
    images = photographs(args.images)
    figures: dict = {"device": device, "cpu_cores": os.cpu_count(), "severity": args.severity,
                     "model_alone_img_s": round(model, 1), "degradations": {}}
    for name, spec in DEGRADATIONS.items():
        if spec.control:
            continue
        row = {size: round(degradation_rate(batch, name, args.severity, device), 2) for size, batch in images.items()}
        row["over_model"] = {size: round(rate / model, 3) for size, rate in row.items()}
        figures["degradations"][name] = row
        print(f"{name:<20} " + " | ".join(f"{size} {row[size]:7.2f} img/s ({row['over_model'][size]:.3f}x model)"
                                          for size in SIZES))
    brset = {name: row["brset"] for name, row in figures["degradations"].items()}
    figures["projection_5_severities_brset_size"] = projected_hours(brset, model, severities=5)
    print("whole robustness grid, 5 severities, BRSET-sized photographs:", figures["projection_5_severities_brset_size"])
    save(args.json, figures)


if __name__ == "__main__":
    main()
