"""Mutation testing of the modules whose numbers the platform promises, with mutmut, under a time budget.

Usage: .venv/bin/python bench/mutate.py [--budget SECONDS] [--only KEY[,KEY...]] [--json FILE] [--list]
       (``make mutate``, ``MUTATE_BUDGET=seconds``, ``MUTATE_ONLY=key,key``; not part of ``make test``)

Each target below is one module and the test files that exercise it. A target runs in its own folder,
``bench/out/mutate/<key>/`` (links to the packages and tests, a ``pyproject.toml`` holding that target's
``[tool.mutmut]``), so mutmut's record of which test calls which function covers only those files and each mutant
runs only the tests that reach the function it changed. The folder is kept: a later run reuses every result whose
function is unchanged and tests only what is new or changed, so a run cut short by the budget resumes where it
stopped. ``--fresh`` deletes the folders first.

While it runs it logs each target's progress (done / total, mutants per second, time left for the target and for
the budget); at the end it prints the score per module (killed / survived / timeout / no tests / total) and
merges the modules it ran into ``--json`` (default ``bench/results/mutation_cpu_2core.json``): per module the
counts, and each mutant that was not killed with its file:line, description and diff. A survivor whose
description is listed in ``bench/results/mutation_equivalents.md`` under its module is marked equivalent with the
reason written there; every other survivor is an open gap.

mutmut mutates function bodies only, selects a mutant at call time in a process forked after the modules were
imported, and runs only the tests it saw calling the mutated function. Two things escape that: a function run
while its module is imported (the DR rules' task functions are built when ``labels.rules`` builds RULES, the refresh
conditions when ``assets.automation`` loads), and a test that reads a module-scoped fixture another test built
(the harmonised look-alikes). So every mutant mutmut did not kill is confirmed: all of the target's test files run
in a new interpreter started with the mutant selected, and that verdict stands. A target marked ``fresh`` (the
refresh conditions) runs every mutant that way. Module-level expressions are not mutated at all, which is why the
rules' parts and the refresh conditions are built by named functions (called at import).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from focus_dagster.progress import duration

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench" / "out" / "mutate"
RESULTS = REPO / "bench" / "results" / "mutation_cpu_2core.json"
EQUIVALENTS = REPO / "bench" / "results" / "mutation_equivalents.md"
PACKAGES = ("focus_dagster", "assets", "resources", "checks")
EVAL = "tests/core/evaluation/"


@dataclass(frozen=True)
class Target:
    key: str
    path: str
    tests: tuple[str, ...]
    fresh: bool = False  # every mutant in a new interpreter (functions called at import time)
    mutmut: dict = field(default_factory=dict)  # extra [tool.mutmut] settings of this target


# The order of `make mutate`: the numbers first (the evaluation), then the label rules, the commit protocol, the
# compiled forward's gate and the refresh conditions. Each target's tests: the files that import the module, and
# those that compare the numbers it feeds to an independent reference; the slow graph and daemon tests only where
# nothing faster reaches the module.
TARGETS = (
    Target("evaluation.intervals", "focus_dagster/evaluation/intervals.py",
           (EVAL + "test_intervals.py", EVAL + "test_metric_table_contract.py", EVAL + "test_gap_interval_coverage.py",
            EVAL + "test_coverage_bench.py"),
           # test_coverage_bench runs bench/coverage.py on the mutated package and compares with the committed table
           mutmut={"also_copy": ["bench/results", "bench/coverage.py"]}),
    Target("evaluation.paired", "focus_dagster/evaluation/paired.py",
           (EVAL + "test_paired.py", EVAL + "test_adapter_effects.py")),
    Target("evaluation.adapter_effects", "focus_dagster/evaluation/adapter_effects.py",
           (EVAL + "test_adapter_effects.py", EVAL + "test_paired.py")),
    Target("evaluation.metrics", "focus_dagster/evaluation/metrics.py",
           (EVAL + "test_metrics.py", EVAL + "test_metric_registry.py", EVAL + "test_group_metrics_reference.py",
            EVAL + "test_intervals.py")),
    Target("evaluation.bootstrap", "focus_dagster/evaluation/bootstrap.py",
           (EVAL + "test_metrics.py", EVAL + "test_bootstrap_options.py", EVAL + "test_metric_table_contract.py",
            EVAL + "test_intervals.py", EVAL + "test_paired.py", EVAL + "test_group_metrics_reference.py")),
    Target("evaluation.tables", "focus_dagster/evaluation/tables.py",
           (EVAL + "test_evaluation.py", EVAL + "test_group_metrics_reference.py",
            EVAL + "test_metric_table_contract.py", EVAL + "test_configurations.py", EVAL + "test_comparisons.py",
            EVAL + "test_gap_interval_coverage.py", EVAL + "test_metric_rows_literal.py")),
    Target("labels.rules", "focus_dagster/labels/rules.py",
           ("tests/core/labels/test_rules_literal.py", "tests/core/labels/test_labels.py",
            "tests/core/labels/test_rule_sql.py", "tests/core/test_questions.py")),
    # The export's tests read the store through a graph built once per module (77 s): the literal store tests
    # reach every function they reach, in a second. The S3 server's tests fail mutmut's clean run (its server
    # refuses connections there); the literal tests read an fsspec store in memory instead.
    Target("resources.tables", "resources/tables.py",
           ("tests/ops/test_table_store_literal.py", "tests/ops/test_storage.py", "tests/ops/test_table_races.py")),
    # The forward's checks run torch, which is not safe to fork after use: a fork server that has collected the
    # tests (torch imported, nothing run) forks each mutant's process; 6.5 s a mutant here, against 16 s for a
    # server that imports nothing.
    Target("inference.compiled", "focus_dagster/inference/compiled.py",
           ("tests/core/inference/test_compiled_literal.py", "tests/core/inference/test_compiled_reports.py",
            "tests/core/inference/test_compiled.py"),
           mutmut={"process_isolation": "forkserver", "forkserver_warmup": "collect"}),
    # The conditions on a small graph of the platform's shape, a second or two per tick (the real graph's refresh
    # tests take 40-90 s each and run in `make test`).
    Target("assets.automation", "assets/automation.py", ("tests/graph/test_refresh_conditions.py",), fresh=True),
)

STATUSES = ("killed", "survived", "timeout", "no tests", "suspicious", "segfault", "skipped", "not checked")
PROGRESS = re.compile(r"(\d+)/(\d+)\s+\S+\s*(\d+)\s+\S+\s*(\d+)\s+\S+\s*(\d+)\s+\S+\s*(\d+)\s+\S+\s*(\d+)")


def log(message: str) -> None:
    print(f"[mutate {datetime.now():%H:%M:%S}] {message}", flush=True)


def _toml(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string of printable text is a TOML basic string
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "[" + ", ".join(_toml(item) for item in value) + "]"


def prepare(target: Target) -> Path:
    """The target's folder: links to the code, the tests and the folders of the target's `also_copy` (mutmut
    copies the code, the tests and `also_copy` into its ``mutants/``), the repository's pytest settings and this
    target's mutmut settings."""
    work = WORK / target.key
    work.mkdir(parents=True, exist_ok=True)
    # tests/support/environment.py finds the shared reference files three folders above itself: beside the
    # target's folder once mutmut has copied the tests into mutants/.
    copied = {Path(path).parts[0] for path in target.mutmut.get("also_copy", ())}  # bench/ for the intervals
    links = {name: REPO / name for name in (*PACKAGES, "tests", *sorted(copied))}
    if (REPO.parent / "shared").is_dir():
        links["shared"] = REPO.parent / "shared"
    for name, source in links.items():
        link = work / name
        if not link.is_symlink():
            link.symlink_to(source)
    import tomllib
    pytest_settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    mutmut = {"source_paths": list(PACKAGES), "only_mutate": [target.path],
              "pytest_add_cli_args_test_selection": list(target.tests),
              # the tree is linked, not a git checkout of its own: compare file hashes instead of asking git
              "use_git_change_detection": False, **target.mutmut}
    text = "\n".join(["[tool.pytest.ini_options]", *(f"{k} = {_toml(v)}" for k, v in pytest_settings.items()), "",
                      "[tool.mutmut]", *(f"{k} = {_toml(v)}" for k, v in mutmut.items()), ""])
    config = work / "pyproject.toml"
    if not config.exists() or config.read_text() != text:
        config.write_text(text)
    return work


def child_env() -> dict:
    env = dict(os.environ, DAGSTER_DISABLE_TELEMETRY="1", TQDM_DISABLE="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")  # mutmut's progress line as it is drawn
    env.pop("PYTHONPATH", None)  # the mutated copy must be the only focus_dagster on the path
    env.pop("MUTANT_UNDER_TEST", None)
    return env


def tests_fingerprint(target: Target) -> str:
    """A hash of the target's test files and the shared test code: when it changes, the mutants that survived
    are tested again (mutmut itself retests only the mutants of functions whose code changed)."""
    digest = hashlib.sha256()
    for path in sorted({*target.tests, "tests/conftest.py", *(str(p.relative_to(REPO))
                                                            for p in (REPO / "tests" / "support").glob("*.py"))}):
        digest.update(path.encode() + b"\0" + (REPO / path).read_bytes())
    return digest.hexdigest()


def run_mutmut(target: Target, work: Path, deadline: float, names: list[str] | None = None) -> str:
    """``mutmut run`` in the target's folder (only the mutants ``names``, when given) until it ends or the budget
    does (then interrupted: mutmut keeps what it finished). Returns how it ended."""
    mutmut = Path(sys.executable).with_name("mutmut")
    command = ["nice", "-n", "10", str(mutmut), "run", "--max-children", "1", *(names or [])]
    # SIGINT back to its default in mutmut: a shell without job control starts background commands with it
    # ignored, and mutmut stops cleanly on KeyboardInterrupt only.
    process = subprocess.Popen(command, cwd=work, env=child_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    # mutmut redraws one status line with carriage returns: a thread reads the raw bytes as they come.
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.extend(iter(lambda: os.read(process.stdout.fileno(), 65536),
                                                                   b"")), daemon=True)
    reader.start()
    started = time.monotonic()
    first = None  # (time, done) when mutants started being tested, for the rate
    done = total = 0
    phase = "generating mutants"
    last_log = 0.0
    buffer = ""
    tail: list[str] = []
    outcome = "complete"
    while True:
        exited = process.poll() is not None
        count = len(received)
        chunk = b"".join(received[:count]).decode("utf-8", "replace")
        del received[:count]
        if chunk:
            buffer += chunk
            *pieces, buffer = re.split(r"[\r\n]", buffer)
            for piece in pieces:
                piece = piece.strip()
                match = PROGRESS.search(piece)
                if match:
                    done, total = int(match[1]), int(match[2])
                    if first is None:
                        first = (time.monotonic(), done)
                        phase = "testing mutants"
                elif piece and piece[0] not in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏":
                    tail = (tail + [piece])[-20:]
                    if "stats" in piece.lower() or "clean tests" in piece.lower():
                        phase = piece
        if exited and not reader.is_alive() and not received:
            break
        now = time.monotonic()
        if now >= deadline and outcome == "complete":
            log(f"{target.key}: budget spent, stopping mutmut (finished mutants are kept)")
            process.send_signal(signal.SIGINT)
            outcome = "stopped by the budget"
            deadline = now + 30
        elif now >= deadline:
            process.kill()  # mutmut records each mutant's result as it comes: nothing finished is lost
        if now - last_log >= 20:
            last_log = now
            if first and done > first[1]:
                rate = (done - first[1]) / (now - first[0])
                log(f"{target.key}: {done}/{total} mutants, {rate:.2f}/s, about {duration((total - done) / rate)} "
                    f"left for this module; budget left {duration(deadline - now)}")
            else:
                log(f"{target.key}: {phase} ({duration(now - started)} so far); budget left {duration(deadline - now)}")
        time.sleep(0.2)
    if process.returncode not in (0, None) and outcome == "complete":
        outcome = f"mutmut exited with {process.returncode}"
        log(f"{target.key}: {outcome}; its last lines:\n    " + "\n    ".join(tail))
    return outcome


def mutmut_results(target: Target, work: Path) -> dict[str, str]:
    """Each mutant's status as mutmut recorded it in the target's folder."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code
    here = os.getcwd()
    os.chdir(work)
    try:
        data = SourceFileMutationData(path=Path(target.path))
        data.load()
        return {name: status_by_exit_code[code] for name, code in data.exit_code_by_key.items()}
    finally:
        os.chdir(here)


def run_fresh(target: Target, work: Path, deadline: float, names: list[str]) -> tuple[dict[str, str], str]:
    """The tests of each mutant of ``names`` in a new interpreter started with the mutant selected (mutmut's own
    run has generated them), so that what the module builds while it is imported is the mutant's. Results are
    kept in the target's folder (until the module or its tests change), so a run cut short resumes."""
    state_file = work / "fresh_results.json"
    source_hash = hashlib.sha256((REPO / target.path).read_bytes()).hexdigest() + tests_fingerprint(target)
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    if state.get("source") != source_hash:
        state = {"source": source_hash, "status": {}}
    names = sorted(names)
    todo = [name for name in names if name not in state["status"]]
    started = time.monotonic()
    outcome = "complete"
    for index, name in enumerate(todo):
        if time.monotonic() >= deadline:
            outcome = "stopped by the budget"
            break
        limit = max(30.0, deadline - time.monotonic())
        command = ["nice", "-n", "10", sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly",
                   *target.tests]
        try:
            rc = subprocess.run(command, cwd=work / "mutants", env=dict(child_env(), MUTANT_UNDER_TEST=name),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=limit).returncode
            # 2: the tests could not be collected: the mutated module fails to import (a condition built from
            # None, say), so nothing that loads the graph runs; the mutant is caught.
            status = {0: "survived", 1: "killed", 2: "killed", 5: "no tests"}.get(rc, "suspicious")
        except subprocess.TimeoutExpired:
            status, outcome = "not checked", "stopped by the budget"
        if status != "not checked":
            state["status"][name] = status
            state_file.write_text(json.dumps(state, indent=1))
        elapsed = time.monotonic() - started
        rate = (index + 1) / elapsed
        left = duration((len(todo) - index - 1) / rate)
        log(f"{target.key}: {len(state['status'])}/{len(names)} mutants (fresh interpreters), {rate * 60:.1f}/min, "
            f"about {left} left; budget left {duration(deadline - time.monotonic())}")
    return {name: state["status"].get(name, "not checked") for name in names}, outcome


def diff_of(work: Path, name: str, path: str) -> str:
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    here = os.getcwd()
    os.chdir(work)
    try:
        return get_diff_for_mutant(name, path=Path(path))
    finally:
        os.chdir(here)


def function_of(name: str) -> tuple[str | None, str]:
    """(class, function) of a mutant's name: ``pkg.mod.x_func__mutmut_3`` or ``pkg.mod.xǁClassǁmethod__mutmut_3``."""
    short = name.rpartition(".")[2].rpartition("__mutmut_")[0]
    if short.startswith("xǁ"):
        _, cls, function = short.split("ǁ")
        return cls, function
    return None, short[2:]


def locate(source: str, diff: str, cls: str | None, function: str) -> tuple[int | None, str]:
    """The file line of a mutant's first changed line, and its description: the function, the changed line(s)
    before and after, whitespace collapsed (what an entry of the equivalents file names)."""
    body = [line for line in diff.splitlines()[2:] if not line.startswith("@@")]
    old_side = [line for line in body if line[:1] in " -"]  # verbatim lines of the file
    before = [line[1:] for line in old_side]
    first_removed = next((i for i, line in enumerate(old_side) if line.startswith("-")), 0)
    removed = [line[1:].strip() for line in body if line.startswith("-")]
    added = [line[1:].strip() for line in body if line.startswith("+")]
    squash = lambda lines: " ".join(" ".join(lines).split())  # noqa: E731
    label = f"{cls}.{function}" if cls else function
    description = f"{label}: {squash(removed)} ==> {squash(added)}"
    lines = source.splitlines()
    def_line = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and cls and node.name == cls:
            def_line = next((item.lineno for item in node.body
                             if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == function), 0)
        elif not cls and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            def_line = def_line or node.lineno
    # compared stripped: mutmut shows a method dedented out of its class
    starts = [i for i in range(len(lines) - len(before) + 1)
              if all(lines[i + k].strip() == before[k].strip() for k in range(len(before)))]
    if not starts:
        return None, description
    start = min(starts, key=lambda i: abs(i + 1 - def_line))
    return start + 1 + first_removed, description


def read_equivalents() -> dict[str, dict[str, str]]:
    """{module path: {description: reason}} from the equivalents file: under a ``## path`` heading, each entry is a
    bullet holding the description in a double-backtick code span, its reason on the lines below it. A description
    may hold ``*`` (any text), so that one entry covers, say, every rewording of one error message."""
    if not EQUIVALENTS.exists():
        return {}
    out: dict[str, dict[str, str]] = {}
    module = description = None
    for line in EQUIVALENTS.read_text().splitlines():
        heading = re.match(r"^## (\S+)", line)
        entry = re.match(r"^- ``(.+)``\s*$", line)
        if heading:
            module, description = heading[1], None
            out.setdefault(module, {})
        elif entry and module:
            description = " ".join(entry[1].split())
            out[module][description] = ""
        elif description and line.strip():
            out[module][description] = (out[module][description] + " " + line.strip()).strip()
        elif not line.strip():
            description = None
    return out


def _matches(description: str, pattern: str) -> bool:
    """``pattern`` with ``*`` for any text (every other character literal: code holds brackets and question marks)."""
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), description, re.DOTALL) is not None


def _equivalent(target: Target, work: Path, name: str, known: dict[str, str]) -> bool:
    """Whether the equivalents file explains mutant ``name`` (its description matches an entry)."""
    cls, function = function_of(name)
    _, description = locate((REPO / target.path).read_text(), diff_of(work, name, target.path), cls, function)
    return any(_matches(description, pattern) for pattern in known)


def summarise(target: Target, work: Path, statuses: dict[str, str], equivalents: dict[str, str]) -> dict:
    source = (REPO / target.path).read_text()
    counts = {status: 0 for status in STATUSES}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    open_mutants = []
    for name, status in sorted(statuses.items()):
        if status in ("killed", "not checked", "timeout"):
            continue
        cls, function = function_of(name)
        diff = diff_of(work, name, target.path)
        line, description = locate(source, diff, cls, function)
        reason = next((why for pattern, why in equivalents.items() if _matches(description, pattern)), None)
        open_mutants.append({"name": name, "status": status, "location": f"{target.path}:{line}",
                             "description": description, "equivalent": reason, "diff": diff})
    checked = len(statuses) - counts["not checked"]
    equivalent = sum(1 for m in open_mutants if m["equivalent"] is not None)
    detected = counts["killed"] + counts["timeout"]
    return {"path": target.path, "tests": list(target.tests), "fresh_interpreters": target.fresh,
            "total": len(statuses), **{k.replace(" ", "_"): v for k, v in counts.items()},
            "equivalent": equivalent, "open_gaps": len(open_mutants) - equivalent,
            "score": round(detected / (checked - equivalent), 4) if checked > equivalent else None,
            "not_killed": open_mutants}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=float(os.environ.get("MUTATE_BUDGET") or 2400),
                        help="seconds for the whole run (MUTATE_BUDGET; default 2400)")
    parser.add_argument("--only", default=os.environ.get("MUTATE_ONLY", ""),
                        help="comma-separated target keys (MUTATE_ONLY); default all, in order")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--fresh", action="store_true", help="delete the targets' folders first (no reuse)")
    parser.add_argument("--list", action="store_true", help="print the targets and their tests, and exit")
    args = parser.parse_args()
    keys = [key for key in args.only.split(",") if key]
    unknown = set(keys) - {t.key for t in TARGETS}
    if unknown:
        parser.error(f"unknown target(s) {sorted(unknown)}; known: {', '.join(t.key for t in TARGETS)}")
    targets = [t for t in TARGETS if not keys or t.key in keys]
    if args.list:
        for t in targets:
            print(f"{t.key:28s} {t.path}\n{'':28s} " + " ".join(t.tests))
        return 0
    begun = time.monotonic()
    deadline = begun + args.budget
    equivalents = read_equivalents()
    previous = json.loads(args.json.read_text()) if args.json.exists() else {}
    modules = previous.get("modules", {})
    ran = []
    for target in targets:
        if time.monotonic() >= deadline:
            log(f"{target.key}: not started, the budget is spent (run again to resume)")
            continue
        if args.fresh:
            shutil.rmtree(WORK / target.key, ignore_errors=True)
        work = prepare(target)
        t0 = time.monotonic()
        log(f"{target.key}: mutmut on {target.path} with {len(target.tests)} test file(s); "
            f"budget left {duration(deadline - t0)}")
        fingerprint, recorded = tests_fingerprint(target), work / "tests.sha256"
        outcome = run_mutmut(target, work, deadline)
        statuses = mutmut_results(target, work)
        if not target.fresh and outcome == "complete" and recorded.exists() and recorded.read_text() != fingerprint:
            known = equivalents.get(target.path, {})
            again = [name for name, status in statuses.items() if status not in ("killed", "not checked")
                     and not _equivalent(target, work, name, known)]
        else:
            again = []
        if again:
            log(f"{target.key}: the tests changed since the last run: testing the {len(again)} mutants neither "
                f"killed nor listed as equivalent again")
            outcome = run_mutmut(target, work, deadline, again)
            statuses = mutmut_results(target, work)
        if outcome == "complete":
            recorded.write_text(fingerprint)
        if target.fresh and not outcome.startswith("mutmut exited"):
            statuses, outcome = run_fresh(target, work, deadline, list(statuses))
        elif outcome == "complete":
            known = equivalents.get(target.path, {})
            again = [name for name, status in statuses.items() if status in ("survived", "no tests")
                     and not _equivalent(target, work, name, known)]
            if again:
                log(f"{target.key}: confirming the {len(again)} mutants not killed nor listed as equivalent, each "
                    f"with all of the target's tests in a new interpreter")
                fresh, outcome = run_fresh(target, work, deadline, again)
                statuses.update({name: status for name, status in fresh.items() if status != "not checked"})
        summary = summarise(target, work, statuses, equivalents.get(target.path, {}))
        summary.update(seconds=round(time.monotonic() - t0, 1), run=outcome,
                       date=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        modules[target.key] = summary
        ran.append(target.key)
        write_results(args, begun, ran, modules)  # after each module: a run stopped later keeps it
    print()
    print(f"{'module':28s} {'killed':>6s} {'surv.':>6s} {'equiv.':>6s} {'timeout':>7s} {'no test':>7s} "
          f"{'unchkd':>6s} {'total':>6s} {'score':>6s}  last run")
    for key, m in modules.items():
        score = "-" if m["score"] is None else f"{m['score']:.3f}"
        mark = "" if key in ran else "  (earlier run)"
        print(f"{key:28s} {m['killed']:6d} {m['survived']:6d} {m['equivalent']:6d} {m['timeout']:7d} "
              f"{m['no_tests']:7d} {m['not_checked']:6d} {m['total']:6d} {score:>6s}  {m['run']}{mark}")
    print(f"\n{args.json.relative_to(REPO) if args.json.is_relative_to(REPO) else args.json}: the surviving "
          f"mutants with file:line and diff; open gaps: {sum(modules[k]['open_gaps'] for k in ran)} in this run")
    return 0


def write_results(args, begun: float, ran: list, modules: dict) -> None:
    result = {"command": "python bench/mutate.py " + " ".join(sys.argv[1:]),
              "tool": "mutmut " + metadata.version("mutmut"),
              "machine": f"CPU, {os.cpu_count()} cores, Python {platform.python_version()}, one worker at nice 10",
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "budget_s": args.budget, "elapsed_s": round(time.monotonic() - begun, 1), "ran": ran,
              "score": "(killed + timeout) / (checked - equivalent); a survivor without an entry in "
                       "bench/results/mutation_equivalents.md is an open gap",
              "modules": modules}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    sys.exit(main())
