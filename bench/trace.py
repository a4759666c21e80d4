"""Benchmark: wall time of the whole `focus trace` command on a demo instance, one metric of every kind.

Usage: .venv/bin/python bench/trace.py [--home .focus] [--repeat 3]
Run `make demo` first (it fills FOCUS_HOME, default ./.focus). For each kind of number (in-domain performance,
calibration, fairness, quality, cross-dataset, and a configuration without predictions) the script picks one
metric id from metrics.values and times `focus trace ID --json` as a fresh process, as a user runs it (Python
start-up and imports included), `--repeat` times; it prints the median and the worst, and checks that each
trace is complete (a chain down to a dataset release) and current.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KINDS = {
    "performance": "axis = 'performance' AND partition <> 'cross' AND value IS NOT NULL",
    "calibration": "axis = 'calibration' AND partition <> 'cross' AND value IS NOT NULL",
    "fairness": "axis = 'fairness' AND value IS NOT NULL",
    "quality": "axis = 'quality' AND value IS NOT NULL",
    "cross-dataset": "partition = 'cross' AND value IS NOT NULL",
    "unavailable": "value IS NULL AND metric = 'auroc'",
}


def metric_ids(tables: Path) -> dict[str, str]:
    from resources.tables import TableStore

    with TableStore(str(tables)).views() as con:
        found = {}
        for kind, where in KINDS.items():
            row = con.execute(f"SELECT metric_id FROM metrics.values WHERE {where} ORDER BY metric_id LIMIT 1").fetchone()
            if row:
                found[kind] = row[0]
        return found


def time_trace(metric_id: str, env: dict) -> tuple[float, dict]:
    command = [str(Path(sys.executable).parent / "focus"), "trace", metric_id, "--json"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"focus trace {metric_id} failed: {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=REPO / ".focus")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "trace_cpu_2core.json")
    args = parser.parse_args()
    tables = args.home / "artifacts" / "tables"
    if not (tables / "tables" / "metrics.values").exists():
        raise SystemExit(f"no demo instance at {args.home}: run `make demo` first (or pass --home).")
    env = dict(os.environ, FOCUS_HOME=str(args.home.resolve()), DAGSTER_DISABLE_TELEMETRY="1")
    env.pop("DAGSTER_HOME", None)
    figures = {}
    for kind, metric_id in metric_ids(tables).items():
        runs = [time_trace(metric_id, env) for _ in range(args.repeat)]
        seconds = [s for s, _ in runs]
        result = runs[-1][1]
        releases = [link for link in result["links"] if link["asset"] == "dataset_release"]
        figures[kind] = {"metric_id": metric_id, "median_s": round(statistics.median(seconds), 3),
                         "worst_s": round(max(seconds), 3), "links": len(result["links"]),
                         "releases": len(releases), "stale": result["stale"]}
        print(f"{kind:<14} {metric_id}  median {statistics.median(seconds):.2f}s  worst {max(seconds):.2f}s  "
              f"{len(result['links'])} links, {len(releases)} release(s), stale={result['stale']}")
    worst = max(f["worst_s"] for f in figures.values())
    print(f"slowest trace: {worst:.2f}s (target: under 1.5 s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"home": str(args.home), "repeat": args.repeat, "kinds": figures,
                                    "worst_s": worst, "cpu_count": os.cpu_count()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
