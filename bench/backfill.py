"""Benchmark: a backfill of the data layer over ten datasets as one run against one run per dataset.

Usage: .venv/bin/python bench/backfill.py [--per-dataset 24] [--out bench/out/backfill] [--json FILE]

The data layer (records, labels + rejects, and their checks) of all ten look-alikes, materialised twice each way,
side by side in this one run:
  launched   as the daemon or a terminal launches runs: a fresh process per run (`dagster asset materialize`,
             wall clock from the interpreter's start to its exit), ten runs with `--partition` against one run
             with `--partition-range` (which needs the assets' single-run backfill policy);
  in-process the same runs inside one Python process (`execute_in_process` on a SQLite instance), which leaves
             out the process start and the code location's load and shows the run's own bookkeeping.
The per-run overhead is (ten runs - one run) / 9. The tables of both ways are compared row for row.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DATASETS = ("brset", "mbrset", "papila", "rfmid", "rfmid_2", "idrid", "messidor_2", "refuge", "g1020", "jsiec1000")
SELECTION = "dataset_records,harmonised_labels,label_rejects"
TABLES = ("records.quarantine", "labels.harmonised", "labels.rejects")


def environment(home: Path, config: Path) -> dict:
    (home / "dagster").mkdir(parents=True, exist_ok=True)
    (home / "dagster" / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    return dict(os.environ, FOCUS_HOME=str(home), FOCUS_CONFIG=str(config), DAGSTER_HOME=str(home / "dagster"),
                DAGSTER_DISABLE_TELEMETRY="1")


def launch(env: dict, partitions: list[str]) -> float:
    """Wall-clock seconds of one `dagster asset materialize` of the data layer, over one partition or a range."""
    chosen = ["--partition", partitions[0]] if len(partitions) == 1 else \
        ["--partition-range", f"{partitions[0]}...{partitions[-1]}"]
    command = [str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m", "focus_dagster.definitions",
               "--select", SELECTION, *chosen]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    return time.perf_counter() - started


def launched(env: dict, per_run: bool) -> float:
    if per_run:
        return sum(launch(env, [dataset]) for dataset in DATASETS)
    return launch(env, list(DATASETS))


def in_process(env: dict, per_run: bool) -> float:
    """Seconds of the same runs executed in this process, on the instance under the environment's DAGSTER_HOME."""
    import dagster as dg

    from assets.labels import DATA_LAYER_JOB
    from focus_dagster.config import load_config
    from focus_dagster.definitions import build_definitions

    os.environ.update(env)
    job = build_definitions(load_config()).resolve_job_def(DATA_LAYER_JOB)
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    with dg.DagsterInstance.get() as instance:
        started = time.perf_counter()
        if per_run:
            results = [job.execute_in_process(instance=instance, partition_key=dataset, run_config=quiet) for dataset in DATASETS]
        else:
            results = [job.execute_in_process(instance=instance, run_config=quiet, tags={
                "dagster/asset_partition_range_start": DATASETS[0],
                "dagster/asset_partition_range_end": DATASETS[-1]})]
        seconds = time.perf_counter() - started
    if not all(result.success for result in results):
        raise SystemExit("a run failed")
    return seconds


def rows_of(home: Path) -> dict:
    """Every row each table partition holds now (the run ids aside), as sorted tuples."""
    from resources.tables import TableStore

    store = TableStore(str(home / "artifacts" / "tables"))
    found = {}
    for dataset in DATASETS:
        for table in (*TABLES, f"records.{dataset}"):
            frame = store.read(table, None if table == f"records.{dataset}" else dataset)
            frame = frame.drop(columns=["run_id"], errors="ignore") if frame is not None else None
            found[table, dataset] = [] if frame is None else sorted(map(str, frame.astype(str).itertuples(index=False)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-dataset", type=int, default=24)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "backfill")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    args.out = args.out.resolve()  # DAGSTER_HOME must be absolute
    from focus_dagster.synthetic import synthesize

    synthesize(args.out / "data", DATASETS, per_dataset=args.per_dataset, seed=0, scale=0.05)
    config = args.out / "focus.yaml"
    config.write_text("datasets: {%s}\nmodels: [tiny_vit]\n" % ", ".join(f"{k}: {args.out / 'data' / k}" for k in DATASETS))
    figures, tables = {}, {}
    for way, measure in (("launched", launched), ("in_process", in_process)):
        for per_run in (True, False, True, False):  # interleaved, twice each; the faster of the two is the figure
            label = "one run per dataset" if per_run else "one run for all"
            home = args.out / f"home-{way}-{'per-run' if per_run else 'single'}"
            seconds = measure(environment(home, config), per_run)
            figures.setdefault(way, {}).setdefault(label, []).append(round(seconds, 2))
            tables[label] = rows_of(home)
            print(f"{way:<10} {label:<20} {seconds:6.1f}s", flush=True)
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "datasets": len(DATASETS),
              "records_per_dataset": args.per_dataset, "seconds": figures}
    for way, seconds in figures.items():
        per_run, single = min(seconds["one run per dataset"]), min(seconds["one run for all"])
        overhead = (per_run - single) / (len(DATASETS) - 1)
        result[way] = {"ten_runs_s": per_run, "one_run_s": single, "speedup": round(per_run / single, 2),
                       "overhead_per_run_s": round(overhead, 2)}
        print(f"{way}: ten runs {per_run:.1f}s, one run {single:.1f}s: {per_run / single:.2f}x; "
              f"per-run overhead {overhead:.2f}s")
    differing = [key for key, rows in tables["one run per dataset"].items() if rows != tables["one run for all"][key]]
    result["table_partitions_differing"] = len(differing)
    print(f"table partitions whose rows differ between the two ways: {len(differing)} of {len(tables['one run for all'])}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
