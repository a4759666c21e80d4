"""Concurrent runs on the PostgreSQL instance, writing different table partitions: wall time against the same runs
one after another, and rows lost; then a run SIGKILLed in the middle of its writes, the tables it leaves, and its
rerun.

A throwaway PostgreSQL cluster (tests/support/postgres_server.py) holds the instance (FOCUS_INSTANCE=postgres); eight small
look-alikes are registered. Each run is what a user launches from a terminal: `dagster asset materialize` of the
data layer (records, labels, rejects; their checks) for one dataset partition, a process of its own. For N = 2, 4
and 8, the first N datasets are materialised one run after another, then all N at once; the tables of the two
rounds are compared row for row (rows lost = rows the sequential round wrote that the concurrent one did not).

    .venv/bin/python bench/concurrency.py [--json bench/results/concurrency_cpu_2core.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.figures import save  # noqa: E402
from tests.support.environment import require_postgres  # noqa: E402
from tests.support.postgres_server import running_postgres  # noqa: E402

DATASETS = ("brset", "mbrset", "papila", "rfmid", "rfmid_2", "idrid", "messidor_2", "refuge")
SELECT = "dataset_records,harmonised_labels,label_rejects"
TABLES = ("records.quarantine", "labels.harmonised", "labels.rejects")
BIN = Path(sys.executable).parent


def materialise(env: dict, dataset: str) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "dagster"), "asset", "materialize", "-m", "focus_dagster.definitions",
                             "--select", SELECT, "--partition", dataset], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(process: subprocess.Popen, dataset: str) -> None:
    out, _ = process.communicate(timeout=900)
    if process.returncode != 0:
        raise SystemExit(f"the run of {dataset} failed:\n{out[-3000:]}")


def rows_of(store, datasets) -> dict:
    """Every row each dataset's partitions hold now, as sorted tuples per table."""
    found = {}
    for table in TABLES:
        for dataset in datasets:
            frame = store.read(table, dataset)
            found[table, dataset] = sorted(map(str, frame.drop(columns=["run_id"], errors="ignore")
                                                .astype(str).itertuples(index=False))) if frame is not None else []
    for dataset in datasets:
        frame = store.read(f"records.{dataset}", None)
        found[f"records.{dataset}", dataset] = sorted(map(str, frame.astype(str).itertuples(index=False))) \
            if frame is not None else []
    return found


def lost(before: dict, after: dict) -> int:
    return sum(len(set(rows) - set(after.get(key, []))) for key, rows in before.items())


def round_trip(env: dict, store, n: int) -> dict:
    datasets = DATASETS[:n]
    started = time.perf_counter()
    for dataset in datasets:
        finish(materialise(env, dataset), dataset)
    sequential = time.perf_counter() - started
    expected = rows_of(store, datasets)
    started = time.perf_counter()
    running = [(materialise(env, dataset), dataset) for dataset in datasets]
    for process, dataset in running:
        finish(process, dataset)
    concurrent = time.perf_counter() - started
    found = rows_of(store, datasets)
    figures = {"runs": n, "sequential_s": round(sequential, 1), "concurrent_s": round(concurrent, 1),
               "speedup": round(sequential / concurrent, 2), "rows": sum(map(len, expected.values())),
               "rows_lost": lost(expected, found), "rows_extra": lost(found, expected)}
    print(f"N={n}: sequential {sequential:.1f}s, concurrent {concurrent:.1f}s ({figures['speedup']}x), "
          f"{figures['rows']} rows, lost {figures['rows_lost']}, extra {figures['rows_extra']}")
    return figures


def killed_mid_write(env: dict, store, tables_dir: Path) -> dict:
    """SIGKILL a run as soon as it has written its first table file, before its pointers; check every pointer
    names a readable file and the stamped read of the partition is whole; rerun it."""
    from resources import layout

    dataset = DATASETS[0]
    before = rows_of(store, [dataset])
    commit_before = (store.current("dataset_records", dataset) or {}).get("commit")
    seen = {p for p in tables_dir.rglob("*.parquet")}
    process = materialise(env, dataset)
    deadline, killed_after = time.monotonic() + 300, None
    while time.monotonic() < deadline and process.poll() is None:
        new = {p for p in tables_dir.rglob("*.parquet")} - seen
        if new:  # a data file of this run exists: its commit is under way
            os.killpg(process.pid, signal.SIGKILL)
            killed_after = len(new)
            break
        time.sleep(0.005)
    process.wait()
    # Mid-commit: the lineage pointer still names the last commit, and the files the run wrote are orphans.
    interrupted = (store.current("dataset_records", dataset) or {}).get("commit") == commit_before
    named = {f"{store.root}/{entry}" for table in store.tables() for entry in _named(store, table)}
    orphans = len([p for p in set(tables_dir.rglob("*.parquet")) - seen if str(p) not in named])
    pointers_ok = all((store.read_files(store.files(table)) is not None) for table in store.tables())
    (records, quarantine), stamp = _stamped(store, dataset, layout)
    consistent = rows_of(store, [dataset]) == before
    finish(materialise(env, dataset), dataset)
    rerun_ok = rows_of(store, [dataset]) == before
    figures = {"killed_after_files": killed_after, "commit_interrupted": interrupted, "orphan_files": orphans,
               "pointers_readable": pointers_ok, "tables_as_before": consistent,
               "stamped_read_whole": stamp is not None and len(records) > 0, "rerun_completes": rerun_ok}
    print(f"killed mid-write after {killed_after} new file(s): commit interrupted {interrupted} ({orphans} orphan "
          f"file(s), no pointer names them), every pointer readable {pointers_ok}, tables as before "
          f"{consistent}, stamped read whole {figures['stamped_read_whole']}, rerun completes {rerun_ok}")
    return figures


def _named(store, table: str) -> list[str]:
    """The files the partition pointers of a table name (relative to the store)."""
    return [path[len(store.root) + 1:] for path in store.files(table)]


def _stamped(store, dataset: str, layout):
    current = store.current("dataset_records", dataset) or {}
    files = current.get("files", {})
    records = store.read_files([f"{store.root}/{files[f'records.{dataset}@']}"]) if files else None
    quarantine = store.read(layout.QUARANTINE.qualified, dataset)
    return (records if records is not None else [], quarantine), current.get("stamp")


# ------------------------------------------------------------------ a writer killed at every step of a commit

KILL_POINTS = ("data-partial", "data", "stamps", "owners", "between-table-pointers", "pointer", "collect")
COMMITS_BEFORE_KILL = 40


def _writer_script(url: str, point: str) -> str:
    """A writer process: COMMITS_BEFORE_KILL whole commits of two tables of one asset partition, then one
    SIGKILLed at `point` (a step of the commit protocol; `data-partial`: while its first data file is still a
    partial file; `between-table-pointers`: the partition changes owner and the kill falls between its two
    tables' pointers)."""
    return f"""
import os, signal, sys
sys.path.insert(0, {str(REPO)!r})
from bench.concurrency import commit_versions
from resources.tables import TableStore
store = TableStore({url!r})
def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)
stamped = {point!r} != "between-table-pointers"
for k in range({COMMITS_BEFORE_KILL}):
    commit_versions(store, f"v{{k}}", stamped)
if {point!r} == "data-partial":
    os.replace = die
elif {point!r} == "between-table-pointers":
    real_put, pointers = TableStore._put, []
    def put(self, path, data):
        if path.endswith("/CURRENT.json"):
            pointers.append(path)
            if len(pointers) == 2:
                die()
        real_put(self, path, data)
    TableStore._put = put
    stamped = True  # an asset partition takes over the partitions written without lineage
else:
    TableStore._reached = lambda self, step: die() if step == {point!r} else None
commit_versions(store, "killed", stamped)
"""


def commit_versions(store, version: str, stamped: bool = True) -> None:
    """One commit of `predictions.samples` and `predictions.unavailable` for idrid, every row tagged `version`."""
    import pandas as pd

    from resources import layout

    samples = pd.DataFrame({"image_id": [f"i{k}" for k in range(50)], "version": version, "partition": "idrid"})
    unavailable = pd.DataFrame({"reason": ["none"], "version": version, "partition": "idrid"})
    stamp = {"asset": "predictions", "partition": "idrid", "run_id": version, "version": version} if stamped else None
    store.commit([(layout.SAMPLES, "idrid", samples), (layout.UNAVAILABLE, "idrid", unavailable)], stamp)


def _reader_script(url: str, stop: Path, out: Path) -> str:
    """A reader process: snapshots of both tables through the views, counted, until `stop` exists; a mix is a
    snapshot whose two tables hold different versions."""
    return f"""
import json, os, sys
sys.path.insert(0, {str(REPO)!r})
from resources.tables import TableStore
store = TableStore({url!r})
reads = mixes = 0
examples = []
ready = {str(out)!r} + ".ready"
while not os.path.exists({str(stop)!r}):
    with store.views() as con:
        found = [sorted(v for (v,) in con.execute(f"SELECT DISTINCT version FROM predictions.{{t}}").fetchall())
                 for t in ("samples", "unavailable")]
    reads += 1
    if found[0] != found[1] or len(found[0]) != 1:
        mixes += 1
        examples = (examples + [found])[:3]
    if reads == 1:
        open(ready, "w").close()
open({str(out)!r}, "w").write(json.dumps({{"reads": reads, "mixes": mixes, "examples": examples}}))
"""


def killed_at(point: str, root: Path, readers: int = 2) -> dict:
    """One kill point: readers run through the writer's commits and its death, then the state it left is read
    and a rerun commits over it."""
    from resources.tables import TableStore

    url = str(root / point)
    store = TableStore(url)
    commit_versions(store, "start", point != "between-table-pointers")
    stop = root / f"{point}.stop"
    outs = [root / f"{point}.reader{k}.json" for k in range(readers)]
    reading = [subprocess.Popen([sys.executable, "-c", _reader_script(url, stop, out)]) for out in outs]
    while not all(Path(f"{out}.ready").exists() for out in outs):  # every reader has read once: all are reading
        if any(reader.poll() is not None for reader in reading):
            raise SystemExit(f"a reader of {point} stopped before reading")
        time.sleep(0.05)
    writer = subprocess.run([sys.executable, "-c", _writer_script(url, point)])
    stop.touch()
    for reader in reading:
        reader.wait(timeout=600)
    seen = [json.loads(out.read_text()) for out in outs]
    after_kill = _versions(store)
    partials_after_kill = _partials(Path(url))
    commit_versions(store, "rerun")
    figures = {"point": point, "writer_killed": writer.returncode == -signal.SIGKILL,
               "reads": sum(s["reads"] for s in seen), "mixes_seen": sum(s["mixes"] for s in seen),
               "mix_examples": [e for s in seen for e in s["examples"]][:3],
               "after_kill": after_kill, "mix_after_kill": after_kill["samples"] != after_kill["unavailable"], "partial_files_after_kill": partials_after_kill,
               "after_rerun": _versions(store), "partial_files_after_rerun": _partials(Path(url))}
    print(f"killed at {point:<24} reads {figures['reads']:>5}, mixes seen {figures['mixes_seen']}, tables after "
          f"the kill {after_kill}, after the rerun {figures['after_rerun']}, partial files "
          f"{partials_after_kill} -> {figures['partial_files_after_rerun']}")
    return figures


def _versions(store) -> dict:
    with store.views() as con:
        return {t: sorted(v for (v,) in con.execute(f"SELECT DISTINCT version FROM predictions.{t}").fetchall())
                for t in ("samples", "unavailable")}


def _partials(root: Path) -> int:
    return sum(1 for p in root.rglob(".*") if ".tmp-" in p.name)


def commit_kills(root: Path) -> dict:
    """Every kill point once; the target is no mix seen by any reader at any point."""
    results = [killed_at(point, root) for point in KILL_POINTS]
    mixes = sum(r["mixes_seen"] for r in results)
    print(f"mid-commit kills: {len(results)} points, {sum(r['reads'] for r in results)} reads, {mixes} mixes seen "
          f"(target 0)")
    return {"points": results, "mixes_seen": mixes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--per-dataset", type=int, default=40)
    parser.add_argument("--commit-kills-only", action="store_true",
                        help="only the writer killed at every step of a commit (no PostgreSQL needed)")
    args = parser.parse_args()
    from focus_dagster.synthetic import synthesize
    from resources.tables import TableStore

    tmp = Path(tempfile.mkdtemp(prefix="focus-concurrency-"))
    kills = commit_kills(tmp / "kills")
    if args.commit_kills_only:
        save(args.json, {"machine": f"{os.cpu_count()} cores", "commit_kills": kills})
        return
    synthesize(tmp / "data", list(DATASETS), per_dataset=args.per_dataset, seed=0, scale=0.05, workers=2)
    (tmp / "focus.yaml").write_text("datasets: {%s}\nmodels: [tiny_vit]\n"
                                    % ", ".join(f"{d}: {tmp / 'data' / d}" for d in DATASETS))
    with running_postgres(require_postgres()) as server:
        env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
        env.update(FOCUS_HOME=str(tmp / "home"), FOCUS_CONFIG=str(tmp / "focus.yaml"), FOCUS_INSTANCE="postgres",
                   FOCUS_PG_HOST=server.host, FOCUS_PG_PORT=str(server.port), FOCUS_PG_DB=server.db,
                   FOCUS_PG_USER=server.user, FOCUS_PG_PASSWORD=server.password, DAGSTER_DISABLE_TELEMETRY="1",
                   DAGSTER_HOME=str(tmp / "home" / "dagster"), PYTHONPATH=str(REPO))
        from focus_dagster.platform.instance import instance_profile

        (tmp / "home" / "dagster").mkdir(parents=True)
        (tmp / "home" / "dagster" / "dagster.yaml").write_text(instance_profile_text(instance_profile, env))
        observe = subprocess.run([str(BIN / "dagster"), "job", "execute", "-m", "focus_dagster.definitions", "-j",
                                  "observe_dataset_releases"], cwd=REPO, env=env, capture_output=True, text=True)
        if observe.returncode != 0:
            raise SystemExit(f"observing the releases failed:\n{observe.stdout[-2000:]}{observe.stderr[-2000:]}")
        tables_dir = tmp / "home" / "artifacts" / "tables"
        store = TableStore(str(tables_dir))
        figures = {"machine": f"{os.cpu_count()} cores", "per_dataset": args.per_dataset,
                   "rounds": [round_trip(env, store, n) for n in (2, 4, 8)],
                   "killed": killed_mid_write(env, store, tables_dir), "commit_kills": kills}
    save(args.json, figures)


def instance_profile_text(instance_profile, env: dict) -> str:
    """The PostgreSQL profile, as `focus` would copy it into DAGSTER_HOME."""
    saved = os.environ.get("FOCUS_INSTANCE")
    os.environ["FOCUS_INSTANCE"] = env["FOCUS_INSTANCE"]
    try:
        return instance_profile().read_text()
    finally:
        if saved is None:
            os.environ.pop("FOCUS_INSTANCE", None)
        else:
            os.environ["FOCUS_INSTANCE"] = saved


if __name__ == "__main__":
    main()
