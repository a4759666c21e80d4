"""Benchmark: one dataset's data layer as a run launched from the UI or the sensor, with each executor.

Usage: .venv/bin/python bench/data_layer.py [--dataset idrid] [--per-dataset 80] [--repeat 3]
                                            [--executors in_process,multiprocess] [--out bench/out/data_layer]
                                            [--json FILE]
A launched run is a fresh process that loads the code location and executes the steps of the selected assets
and their checks: records, labels + rejects, the records' check and the eight label checks (one step). This
times exactly that (`dagster asset materialize`, wall clock of the whole command, from the interpreter's start
to its exit) for `executor: in_process` (the default) and `executor: multiprocess` (one process per step), side
by side in this one run, and prints the ratio. Each executor gets one launch that creates the database and
the instance, then `--repeat` timed launches; the median is the figure. Next to the wall clock it prints what
the UI shows for the same run: its duration from RUN_START to RUN_SUCCESS, and the slowest step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SELECTION = "dataset_records,harmonised_labels,label_rejects"


def launch(home: Path, config: Path, dataset: str) -> float:
    """Wall-clock seconds of one `dagster asset materialize` of the data layer, in a fresh process."""
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


def last_run(home: Path) -> dict:
    """The newest run of the instance under `home` as the UI shows it: duration and step times."""
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    try:
        [record] = instance.get_run_records(limit=1)
        steps = {s.step_key: round(s.end_time - s.start_time, 2) for s in instance.get_run_step_stats(record.dagster_run.run_id)
                 if s.start_time and s.end_time}
        return {"run_seconds": round(record.end_time - record.start_time, 2), "steps": steps}
    finally:
        instance.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="idrid")
    parser.add_argument("--per-dataset", type=int, default=80)
    parser.add_argument("--repeat", type=int, default=3, help="timed launches per executor (median reported)")
    parser.add_argument("--executors", default="in_process,multiprocess")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "data_layer")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    args.out = args.out.resolve()  # DAGSTER_HOME must be absolute
    from focus_dagster.synthetic import synthesize

    args.out.mkdir(parents=True, exist_ok=True)
    synthesize(args.out / "data", [args.dataset], per_dataset=args.per_dataset, seed=0, scale=0.125)
    executors = args.executors.split(",")
    figures, launches = {}, {}
    for executor in executors:
        config = args.out / f"{args.dataset}-{executor}.yaml"
        config.write_text(f"datasets: {{{args.dataset}: {args.out / 'data' / args.dataset}}}\nexecutor: {executor}\n")
        home = args.out / f"home-{executor}"
        launch(home, config, args.dataset)  # the first launch also creates the database and the instance
        runs = []
        for _ in range(args.repeat):
            load = os.getloadavg()[0]
            seconds = launch(home, config, args.dataset)
            runs.append({"seconds": round(seconds, 2), "load_before": round(load, 2), **last_run(home)})
        launches[executor] = runs
        figures[executor] = statistics.median(r["seconds"] for r in runs)
        run_seconds = statistics.median(r["run_seconds"] for r in runs)
        slowest = max(runs[-1]["steps"].items(), key=lambda item: item[1])
        print(f"{args.dataset} data layer ({args.per_dataset} records), executor {executor:<12} "
              f"{figures[executor]:6.1f}s launched (median of {args.repeat}: "
              f"{', '.join(str(r['seconds']) for r in runs)}); in the UI: run {run_seconds:.1f}s, "
              f"{len(runs[-1]['steps'])} steps, slowest {slowest[0]} {slowest[1]:.1f}s")
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "dataset": args.dataset,
              "records": args.per_dataset, "repeat": args.repeat, "seconds": figures, "launches": launches,
              "cpu_count": os.cpu_count()}
    if {"in_process", "multiprocess"} <= set(figures):
        ratio = figures["multiprocess"] / figures["in_process"]
        print(f"in_process is {ratio:.1f}x faster than one process per step")
        result["ratio"] = round(ratio, 2)
    (args.out / "data_layer.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
