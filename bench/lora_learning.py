"""Does LoRA on the seeded tiny LLaVA learn a look-alike's lesions? Adapted vs base on the held-out split.

Usage: .venv/bin/python bench/lora_learning.py [--dataset idrid] [--records 500] [--task referable_dr]
       [--epochs 20] [--lr 3e-3] [--schedule constant] [--seed 0 | --seeds 0,1,2] [--json FILE]

The platform's path, as tests/core/lora/test_lora_look_alike.py takes it: the dataset's look-alike (`focus_dagster.synthetic`),
its reader, label rule and split (`harmonise`), the question `yes_no_questions` renders, the training set of
`lora_adapters` (`training_set`), `train_adapter` (LoRA r 8, alpha 16, all linear layers, lm_head + embed_tokens;
micro-batch 8 x 2), the first-token yes/no scorer on the test split, and the paired bootstrap of `lora_effects`
(`paired_deltas`, the same stratified resamples for both sides). Two adapters: one on the true labels, one on the
same labels shuffled within the training split. A fine-tune that finds the lesions shows an AUROC delta whose
interval excludes zero with the true labels and not with the shuffled ones. Prints, for each, the loss from first
to last step, AUROC base -> adapted and the delta with its 95% interval and p.

`--seeds` runs the whole study once per seed and adds a summary: per labelling, the mean delta, its spread and how
many seeds' intervals lie above zero, so a conclusion drawn from one seed can be read against the others.

The BRSET look-alike draws women's lesions at 45% contrast (its planted fairness effect; most of its patients
are women), so at the tiny model's 32 px most of its positives are faint: compare `--dataset brset`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.figures import save  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="idrid")
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--task", choices=("any_dr", "referable_dr"), default="referable_dr")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--schedule", choices=("linear", "constant"), default="constant")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the look-alike, the tiny model, the training order and the shuffled labels")
    parser.add_argument("--seeds", help="comma-separated seeds: the study once per seed, with a summary across them")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.seeds is None:
        save(args.json, _one_seed(args))
        return 0
    seeds = [int(seed) for seed in args.seeds.split(",")]
    runs = []
    for seed in seeds:  # the figures so far are written after each seed: a run cut short keeps what it measured
        runs.append(_one_seed(replace_seed(args, seed)))
        figures = {"seeds": [r["seed"] for r in runs], "of_seeds": seeds, "summary": across_seeds(runs), "runs": runs}
        save(args.json, figures)
    for name, row in figures["summary"].items():
        print(f"{name:<16} over {row['seeds']} seeds: mean delta {row['mean_delta']:+.3f} (sd {row['sd_delta']:.3f}, "
              f"{row['min_delta']:+.3f} to {row['max_delta']:+.3f}); interval above zero on {row['above_zero']} "
              "seed(s)")
    return 0


def _one_seed(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return run(Path(tmp), args)


def replace_seed(args, seed: int) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "seed": seed})


def across_seeds(runs: list[dict]) -> dict:
    """Per labelling (true, shuffled): how the AUROC delta varies over the seeds, and on how many seeds the paired
    interval lies wholly above zero."""
    summary = {}
    for name in ("true labels", "shuffled labels"):
        deltas = np.array([r[name]["delta"] for r in runs])
        summary[name] = {"seeds": len(runs), "mean_delta": float(deltas.mean()),
                         "sd_delta": float(deltas.std(ddof=1)) if len(runs) > 1 else 0.0,
                         "min_delta": float(deltas.min()), "max_delta": float(deltas.max()),
                         "above_zero": int(sum(r[name]["ci_low"] > 0 for r in runs)),
                         "deltas": {str(r["seed"]): round(r[name]["delta"], 4) for r in runs}}
    return summary


def run(tmp: Path, args) -> dict:
    from focus_dagster.lora.settings import LoraSettings
    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.models.registry import load_model
    from focus_dagster.models.tiny_mllm import build_tiny_mllm

    training, question, held_out, y = _study(tmp, args.dataset, args.records, args.task, args.seed)
    spec = replace(CATALOG["tiny_llava"], path=str(build_tiny_mllm(tmp / "model", "llava", seed=args.seed)))
    base_scores = _scores(load_model(spec).to("cpu"), held_out, question)
    settings = LoraSettings(learning_rate=args.lr, epochs=args.epochs, micro_batch=8, accumulation=2,
                            checkpoint_every=0, lr_schedule=args.schedule, seed=args.seed)
    answers = [answer for *_, answer in training.rows]
    figures = {"dataset": args.dataset, "records": args.records, "task": args.task, "seed": args.seed,
               "train_images": len(answers), "train_positives": training.positives,
               "held_out_images": len(y), "held_out_positives": int(y.sum()), "settings": settings.as_dict()}
    print(f"tiny_llava on the {args.dataset} look-alike ({args.records} records), {args.task}: {len(answers)} training "
          f"images ({training.positives} positive), {len(y)} held out ({int(y.sum())} positive); lr {args.lr} "
          f"({args.schedule}), {args.epochs} epochs, effective batch 16")
    shuffled = list(np.random.default_rng(args.seed + 1).permutation(answers))
    for name, labels in (("true labels", answers), ("shuffled labels", shuffled)):
        # A fresh load for each adapter: an applied adapter stays in the model it was applied to.
        row = figures[name] = _adapted(load_model(spec).to("cpu"), training, labels, held_out, y, base_scores, question, settings,
                                       tmp / name.replace(" ", "_"))
        print(f"  {name:<16} {row['steps']} steps in {row['seconds']:.0f} s, loss {row['loss_first']:.3f} -> "
              f"{row['loss_last']:.3f} | AUROC {row['auroc_base']:.3f} -> {row['auroc_adapted']:.3f}, delta "
              f"{row['delta']:+.3f} (95% CI {row['ci_low']:+.3f} to {row['ci_high']:+.3f}, p {row['p_value']:.3g})")
    return figures


def _study(tmp: Path, dataset: str, records: int, task: str, seed: int = 0):
    """The training set, the question and the held-out images with their labels, as the platform makes them."""
    from focus_dagster.adapter_plan import training_set
    from focus_dagster.datasets import read_dataset
    from focus_dagster.labels import harmonise
    from focus_dagster.questions import question_book
    from focus_dagster.synthetic import synthesize

    synthesize(tmp / "data", [dataset], per_dataset=records, seed=seed)
    read = read_dataset(dataset, tmp / "data" / dataset)
    labels = harmonise(dataset, read.records, read.quarantine, root=read.root).labels
    (question,) = question_book(None).for_dataset(dataset, [task])
    asked = pd.DataFrame({"image_id": labels["image_id"], "task": task,
                          "question": [question.render(row) for row in labels.to_dict("records")]})
    test = labels.loc[(labels["split"] == "test") & labels[task].notna()].sort_values("image_id")
    held_out = [read.root / path for path in test["image_path"]]
    return training_set(labels, asked, task, read.root), question.text, held_out, test[task].astype(int).to_numpy()


def _scores(mllm, paths: list[Path], question: str) -> np.ndarray:
    """P(yes) / (P(yes) + P(no)) of the first answer token, through the platform's scorer."""
    from focus_dagster.inference.yes_no import yes_no_scorer
    from focus_dagster.lora.batches import load_pixels

    values = yes_no_scorer(mllm, [question])(load_pixels([str(p) for p in paths], mllm.spec.preprocess))
    return (values[:, 0] / (values[:, 0] + values[:, 1])).numpy()


def _adapted(base, training, answers, held_out, y, base_scores, question, settings, folder: Path) -> dict:
    from focus_dagster.evaluation.paired import paired_deltas
    from focus_dagster.lora.train import Example, load_adapted, train_adapter, write_adapter

    examples = [Example(image_id, path, text, answer)
                for (image_id, path, text, _), answer in zip(training.rows, answers)]
    started = time.perf_counter()
    trained = train_adapter(base, examples, settings, folder / "work")
    seconds = time.perf_counter() - started
    write_adapter(trained, folder / "adapter", {})
    adapted = _scores(load_adapted(base, folder / "adapter"), held_out, question)
    auroc = paired_deltas(y, base_scores, adapted, base_threshold=None, adapted_threshold=None, seed=0)["auroc"]
    return {"steps": trained.steps, "seconds": round(seconds, 1), "loss_first": trained.losses[0],
            "loss_last": trained.losses[-1], "auroc_base": auroc.base, "auroc_adapted": auroc.adapted,
            "delta": auroc.delta, "ci_low": auroc.low, "ci_high": auroc.high, "p_value": auroc.p_value}


if __name__ == "__main__":
    raise SystemExit(main())
