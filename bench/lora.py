"""Benchmark: LoRA training and adapted yes/no scoring on this machine, and the projected time of the study.

Usage: .venv/bin/python bench/lora.py [--examples 64] [--images 96] [--rounds 3] [--family llava] [--json FILE]

On a seeded tiny model of the family's real architecture (built locally; `tiny_llava` is the platform's default),
with synthetic fundus photographs written as JPEG files:

  training   `focus_dagster.lora.train.train_adapter` with the protocol's settings (LoRA r 8, alpha 16, all
             linear layers, lm_head + embed_tokens in full, effective batch 16 = 4 x 4), one epoch over
             --examples examples, checkpoints every 5 steps as in the asset: examples/s;
  scoring    the platform's batched first-token yes/no path on --images images, three questions each, with
             the base model, the adapter unmerged (peft layers in the forward) and merged into the weights,
             interleaved over --rounds rounds (best of each): images/s of each, and the largest |p_yes|
             difference between unmerged and merged (float tolerance).

Then the projected wall time of the study on this machine at these rates: the platform's grid for the
reference's six multimodal LLMs (x {BRSET, mBRSET} x the tasks each defines: 30 adapters, as mBRSET has no
glaucoma label; the reference counted 36) trained one epoch on the train split of the reference's published
splits (datasets.md), and every adapter scored on every dataset that defines its task (192 evaluations; the
reference counted 228), all images of the dataset. The tiny model's rates say nothing about a 4B-27B model's:
the projection is labelled as the tiny model's; real architectures need the GPU figures.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from figures import save

TASKS = ("any_dr", "referable_dr", "gon")
MLLMS = ("gemma3_27b", "qwen3_vl_8b", "llava_next_llama3_8b", "medgemma_4b", "medgemma_27b", "medgemma_1_5_4b")
# The reference benchmark's published split sizes (datasets.md): train / val / test images per dataset. An
# adapter trains on its dataset's train split; an evaluation scores every image of its dataset, as the
# platform's scoring assets do.
SPLITS = {"brset": (1417, 394, 768), "mbrset": (1424, 386, 772), "papila": (293, 0, 195), "rfmid": (1920, 640, 640),
          "rfmid_2": (507, 177, 170), "idrid": (413, 0, 103), "messidor_2": (1046, 0, 698), "refuge": (400, 0, 400),
          "g1020": (612, 0, 408), "jsiec1000": (600, 0, 400)}


def write_images(folder: Path, n: int, size: int) -> list[Path]:
    """n rendered fundus photographs as JPEG files (decoded by the same path as real images)."""
    from focus_dagster.synthetic.render import CAMERAS, FundusSpec, render_fundus

    camera = next(iter(CAMERAS.values()))
    paths = []
    for i in range(n):
        spec = FundusSpec(width=size, height=size, camera=camera, dr_grade=i % 5, cup_disc_ratio=0.3 + 0.1 * (i % 4))
        path = folder / f"img{i:04d}.jpg"
        render_fundus(spec, seed=i).save(path, quality=90)
        paths.append(path)
    return paths


def score_rate(mllm, questions: list[str], paths: list[Path], batch: int = 16) -> tuple[float, object]:
    """Images/s of the batched yes/no path over the files (decoded once beforehand), and its output."""
    import torch

    from focus_dagster.inference.yes_no import yes_no_scorer
    from focus_dagster.lora.batches import load_pixels

    pixels = load_pixels([str(p) for p in paths], mllm.spec.preprocess)
    scorer = yes_no_scorer(mllm, questions)
    scorer(pixels[:2])  # warm-up
    started = time.perf_counter()
    with torch.inference_mode():
        out = torch.cat([scorer(pixels[i: i + batch]) for i in range(0, len(pixels), batch)])
    return len(paths) / (time.perf_counter() - started), out


def projection(train_rate: float, score_rate: float) -> dict:
    """The platform's grid for the six multimodal LLMs of the reference (adapters: focus_dagster.adapter_plan's
    default; evaluations: every dataset defining the adapter's task) and its hours at these rates."""
    from focus_dagster.adapter_plan import LoraPlan, evaluations

    adapters = LoraPlan().adapters(list(MLLMS), list(SPLITS))
    scored = evaluations(adapters, list(SPLITS))
    examples = sum(SPLITS[a.dataset][0] for a in adapters)
    images = sum(sum(SPLITS[e.dataset]) for e in scored)
    return {"adapters": len(adapters), "evaluations": len(scored), "training_examples": examples,
            "training_hours": examples / train_rate / 3600, "scoring_images": images,
            "scoring_hours": images / score_rate / 3600}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=64, help="training examples (one epoch)")
    parser.add_argument("--images", type=int, default=96, help="images scored per model variant")
    parser.add_argument("--family", default="llava", help="tiny model family: llava, llava_next, gemma3, qwen3_vl")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved scoring rounds (best of each variant)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    import torch

    from focus_dagster.lora.settings import LoraSettings
    from focus_dagster.lora.train import Example, load_adapted, train_adapter, write_adapter
    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.models.registry import load_model
    from focus_dagster.models.tiny_mllm import build_tiny_mllm
    from focus_dagster.questions import QuestionBook

    book = QuestionBook()
    questions = [book.question(task, "brset").text for task in TASKS]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "images").mkdir()
        paths = write_images(tmp / "images", max(args.examples, args.images), 512)
        folder = build_tiny_mllm(tmp / "model", args.family, seed=0)
        spec = replace(CATALOG["tiny_llava"], id=f"tiny_{args.family}", family="hf_mllm", path=str(folder))

        def fresh():
            return load_model(spec).to("cpu")

        examples = [Example(p.stem, p, questions[0], "yes" if i % 3 == 0 else "no")
                    for i, p in enumerate(paths[: args.examples])]
        trained = train_adapter(fresh(), examples, LoraSettings(), tmp / "work")
        write_adapter(trained, tmp / "adapter", {})
        variants = {"base": fresh(), "unmerged": load_adapted(fresh(), tmp / "adapter"),
                    "merged": load_adapted(fresh(), tmp / "adapter", merge=True)}
        rates, outputs = {name: 0.0 for name in variants}, {}
        for _ in range(args.rounds):  # interleaved rounds, best of each: the same load on every variant
            for name, mllm in variants.items():
                rate, outputs[name] = score_rate(mllm, questions, paths[: args.images])
                rates[name] = max(rates[name], rate)
        base_rate, unmerged_rate, merged_rate = rates["base"], rates["unmerged"], rates["merged"]
        unmerged, merged = outputs["unmerged"], outputs["merged"]
    difference = float((unmerged[:, 0::6] - merged[:, 0::6]).abs().max())  # p_yes of every question
    projected = projection(trained.examples_per_second, max(unmerged_rate, merged_rate))
    figures = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip()
        + f", torch threads {torch.get_num_threads()}",
        "model": f"tiny {args.family} (pipeline-check, float32, CPU)",
        "training_examples": len(examples), "training_steps": trained.steps,
        "training_examples_per_s": round(trained.examples_per_second, 2),
        "training_seconds": round(trained.seconds, 2),
        "scoring_images": args.images, "questions_per_image": len(questions),
        "base_images_per_s": round(base_rate, 2), "unmerged_images_per_s": round(unmerged_rate, 2),
        "merged_images_per_s": round(merged_rate, 2), "max_abs_diff_p_yes_unmerged_vs_merged": difference,
        "projection_tiny_model": {key: round(value, 2) if isinstance(value, float) else value
                                  for key, value in projected.items()},
    }
    print(f"{figures['model']}; {figures['machine']}")
    print(f"  training   {figures['training_examples_per_s']:>8.2f} examples/s ({len(examples)} examples, "
          f"{trained.steps} steps of 16, {figures['training_seconds']} s)")
    print(f"  scoring    base {base_rate:.1f}, adapter unmerged {unmerged_rate:.1f}, merged {merged_rate:.1f} images/s "
          f"({args.images} images x {len(questions)} questions); max |p_yes unmerged - merged| {difference:.1e}")
    print(f"  projected, six MLLMs ({projected['adapters']} adapters, {projected['evaluations']} evaluations) at "
          f"the tiny model's rates: training {projected['training_examples']:,} examples = "
          f"{projected['training_hours']:.2f} h, scoring {projected['scoring_images']:,} images = "
          f"{projected['scoring_hours']:.2f} h (real 4B-27B models: the GPU figures, not these)")
    save(args.json, figures)
    return figures


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
