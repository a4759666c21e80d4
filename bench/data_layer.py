"""Benchmark: one dataset's data layer as a run launched from the UI or the sensor, with each executor.

Usage: .venv/bin/python bench/data_layer.py [--dataset idrid] [--per-dataset 80] [--out bench/out/data_layer]
A launched run is a fresh process that loads the code location and executes the steps of the selected assets
and their checks: records, labels + rejects, and the ten checks. This times exactly that
(`dagster asset materialize`, wall clock of the whole command) for `executor: in_process` (the default) and
`executor: multiprocess` (one process per step), side by side in this one run, and prints the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SELECTION = "dataset_records,harmonised_labels,label_rejects"


def launch(home: Path, config: Path, dataset: str) -> float:
    env = dict(os.environ, FOCUS_HOME=str(home), FOCUS_CONFIG=str(config), DAGSTER_HOME=str(home / "dagster"),
               DAGSTER_DISABLE_TELEMETRY="1")
    (home / "dagster").mkdir(parents=True, exist_ok=True)
    (home / "dagster" / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    command = [str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m", "focus_dagster.definitions",
               "--select", SELECTION, "--partition", dataset]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="idrid")
    parser.add_argument("--per-dataset", type=int, default=80)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "data_layer")
    args = parser.parse_args()
    from focus_dagster.synthetic import synthesize

    args.out.mkdir(parents=True, exist_ok=True)
    synthesize(args.out / "data", [args.dataset], per_dataset=args.per_dataset, seed=0, scale=0.125)
    figures = {}
    for executor in ("in_process", "multiprocess"):
        config = args.out / f"{args.dataset}-{executor}.yaml"
        config.write_text(f"datasets: {{{args.dataset}: {args.out / 'data' / args.dataset}}}\nexecutor: {executor}\n")
        home = args.out / f"home-{executor}"
        launch(home, config, args.dataset)  # the first launch also creates the database and the instance
        figures[executor] = launch(home, config, args.dataset)
        print(f"{args.dataset} data layer ({args.per_dataset} records), executor {executor:<12} {figures[executor]:6.1f}s")
    ratio = figures["multiprocess"] / figures["in_process"]
    print(f"in_process is {ratio:.1f}x faster than one process per step")
    result = {"dataset": args.dataset, "records": args.per_dataset, "seconds": figures, "ratio": round(ratio, 2),
              "cpu_count": os.cpu_count()}
    (args.out / "data_layer.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
