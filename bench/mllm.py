"""Benchmark: batched single-forward yes/no scoring vs the reference benchmark's generate loop.

Usage: .venv/bin/python bench/mllm.py [--images 48] [--family llava] [--json FILE]

Both paths score the same images, on the same tiny model (a seeded model of the family's real
architecture, built locally), with the same three task questions:

  batched    the platform's scorer: one forward pass per batch of images x questions, left padding,
             logits at the first generated position only;
  reference  one `generate` call per image and question with max_new_tokens=128 and output_scores=True,
             reading the first step's scores (how the reference benchmark did it); the seeded model never
             emits its end token, so it generates all 128: a trained model stops earlier, and the same loop
             with 2-token answers (its best case) is timed as well.

It prints images/s for each (an image = all three questions), the ratio (target >= 10x), and the largest
absolute difference between the two p_yes values, summed and max-over-variants (must agree to float
tolerance). Images are synthetic fundus photographs, decoded once beforehand for both paths alike.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

from figures import save

TASKS = ("any_dr", "referable_dr", "gon")


def fundus_pixels(n: int, size: int):
    """n rendered fundus images as [n, 3, size, size] floats in [0, 1]."""
    import numpy as np
    import torch

    from focus_dagster.synthetic.render import CAMERAS, FundusSpec, render_fundus

    camera = next(iter(CAMERAS.values()))
    images = []
    for i in range(n):
        spec = FundusSpec(width=4 * size, height=4 * size, camera=camera, dr_grade=i % 5, cup_disc_ratio=0.3 + 0.1 * (i % 4))
        image = render_fundus(spec, seed=i).resize((size, size))
        images.append(np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0)
    return torch.from_numpy(np.stack(images))


def batched(scorer, pixels, batch: int) -> tuple[float, "object"]:
    import torch

    scorer(pixels[:2])  # warm-up
    started = time.perf_counter()
    with torch.inference_mode():
        out = torch.cat([scorer(pixels[i : i + batch]) for i in range(0, len(pixels), batch)])
    return time.perf_counter() - started, out


def reference_loop(loaded, questions, pixels, max_new_tokens: int = 128) -> tuple[float, list, int]:
    from focus_dagster.inference.yes_no import reference_style_scores

    reference_style_scores(loaded.model, loaded.processor, loaded.tokens, pixels[0], questions[0], max_new_tokens=2)
    rows, generated = [], 0
    started = time.perf_counter()
    for image in pixels:
        for question in questions:
            p_yes, p_yes_max, _, n_tokens = reference_style_scores(loaded.model, loaded.processor, loaded.tokens, image, question,
                                                            max_new_tokens)
            rows.append((p_yes, p_yes_max))
            generated += n_tokens
    return time.perf_counter() - started, rows, generated


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--family", default="llava", help="tiny model family: llava, llava_next, gemma3, qwen3_vl")
    parser.add_argument("--batch", type=int, default=16, help="images per batched forward (x 3 questions)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    import torch

    from focus_dagster.inference.yes_no import VALUES, yes_no_scorer
    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.models.registry import load_model
    from focus_dagster.models.spec import ModelSpec
    from focus_dagster.models.tiny_mllm import build_tiny_mllm
    from focus_dagster.questions import QuestionBook

    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()  # what a pipeline check costs before its first image: build, save, load
        folder = build_tiny_mllm(Path(tmp) / "model", args.family, seed=0)
        spec = ModelSpec(id=f"tiny_{args.family}", interface="mllm", domain="pipeline-check", family="hf_mllm",
                         source="local", path=str(folder), preprocess=CATALOG["tiny_llava"].preprocess)
        loaded = load_model(spec).to("cpu")
        build_and_load = time.perf_counter() - started
        on_disk = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        questions = [QuestionBook().question(task, "brset").text for task in TASKS]
        pixels = fundus_pixels(args.images, spec.preprocess.size)

        fast_seconds, fast = batched(yes_no_scorer(loaded, questions), pixels, args.batch)
        slow_seconds, slow, generated = reference_loop(loaded, questions, pixels)
        # A trained model usually stops after "Yes." (end of turn): the loop with a 2-token answer is the
        # reference's best case, so the batching gain alone is shown too.
        short_seconds, _, _ = reference_loop(loaded, questions, pixels, max_new_tokens=2)

    fast = fast.reshape(len(pixels), len(TASKS), len(VALUES))
    slow_t = torch.tensor(slow, dtype=torch.float64).reshape(len(pixels), len(TASKS), 2)
    diff_sum = float((fast[..., 0].double() - slow_t[..., 0]).abs().max())
    diff_max = float((fast[..., 2].double() - slow_t[..., 1]).abs().max())
    figures = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip() + f", torch threads {torch.get_num_threads()}",
        "family": args.family,
        "build_and_load_s": round(build_and_load, 2),
        "bytes_on_disk": on_disk,
        "images": len(pixels),
        "questions_per_image": len(TASKS),
        "batched_images_per_s": round(len(pixels) / fast_seconds, 2),
        "reference_images_per_s": round(len(pixels) / slow_seconds, 3),
        "speedup": round(slow_seconds / fast_seconds, 1),
        "reference_2_token_answers_images_per_s": round(len(pixels) / short_seconds, 3),
        "speedup_vs_2_token_answers": round(short_seconds / fast_seconds, 1),
        "reference_mean_generated_tokens": round(generated / (len(pixels) * len(TASKS)), 1),
        "max_abs_diff_p_yes_summed": diff_sum,
        "max_abs_diff_p_yes_reference_max": diff_max,
    }
    print(f"tiny {args.family}: built, saved and loaded in {build_and_load:.2f} s, {on_disk / 2**20:.2f} MiB on disk")
    print(f"tiny {args.family}, {len(pixels)} images x {len(TASKS)} questions (CPU, float32)")
    print(f"  batched single forward  {figures['batched_images_per_s']:>9.2f} images/s")
    print(f"  reference generate loop {figures['reference_images_per_s']:>9.3f} images/s "
          f"(max_new_tokens=128; {figures['reference_mean_generated_tokens']} tokens generated on average)")
    print(f"  reference, 2-token answers {figures['reference_2_token_answers_images_per_s']:>6.3f} images/s "
          "(the loop's best case: a model that stops right after its answer)")
    print(f"  speedup                 {figures['speedup']:>9.1f}x (target >= 10x); "
          f"{figures['speedup_vs_2_token_answers']:.1f}x against the best case")
    print(f"  max |p_yes batched - p_yes reference|: summed {diff_sum:.2e}, max-over-variants {diff_max:.2e}")
    save(args.json, figures)
    return figures


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
