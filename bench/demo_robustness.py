"""Benchmark: what the image-quality axis adds to `make demo`, measured side by side in one run.

Usage: .venv/bin/python bench/demo_robustness.py [--rounds 2] [--json FILE]

Runs `focus demo` (what `make demo` runs) alternately without degradations (`degradations: false` in focus.yaml)
and with the embedded default plan (focus_dagster/degradations/plan.py), each in a fresh FOCUS_HOME, so both pay
the same first-use costs (look-alikes written, models built). Alternating spreads a machine's drift over both.
Prints each demo's wall time and stage times, the means and their ratio. Target (issue: image-quality robustness):
the default demo within +30% of the demo without degradations.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import save

FOCUS = Path(sys.executable).parent / "focus"
PLANS = {"without degradations": "degradations: false\n", "default degradations": ""}
TARGET = 1.30


def demo(config_text: str, code: Path | None = None) -> dict:
    """One `focus demo` in a fresh FOCUS_HOME (with the package of the checkout `code` instead of this one's, when
    given): its wall time and the stage times it prints."""
    with tempfile.TemporaryDirectory(prefix="focus-demo-bench-") as folder:
        config = Path(folder) / "focus.yaml"
        config.write_text(config_text)
        env = {key: value for key, value in os.environ.items() if key not in ("DAGSTER_HOME", "FOCUS_CONFIG")}
        env.update(FOCUS_HOME=str(Path(folder) / "home"), FOCUS_CONFIG=str(config), DAGSTER_DISABLE_TELEMETRY="1")
        if code is not None:
            env["PYTHONPATH"] = str(code)
        started = time.perf_counter()
        done = subprocess.run([str(FOCUS), "demo"], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
    if done.returncode != 0 or "FAILED" in done.stdout:
        raise SystemExit(f"focus demo failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return {"wall_s": round(wall, 1), "stages": _stages(done.stdout)}


def _stages(output: str) -> str:
    """The demo's own line of stage times (`time per stage: ...`), as printed."""
    lines = [line.strip() for line in output.splitlines() if line.strip().startswith("time per stage:")]
    return lines[-1] if lines else ""


def side_by_side(plans: dict[str, str | tuple[str, Path]], rounds: int) -> tuple[dict[str, list[dict]],
                                                                                dict[str, float]]:
    """`rounds` demos of each plan (name -> focus.yaml text, or that text and a checkout whose code runs it),
    alternated; each demo's figures and each plan's mean wall time."""
    runs: dict[str, list[dict]] = {name: [] for name in plans}
    for round_ in range(1, rounds + 1):
        for name, plan in plans.items():
            run = demo(*plan) if isinstance(plan, tuple) else demo(plan)
            runs[name].append(run)
            print(f"round {round_}, {name}: {run['wall_s']:.1f} s\n  {run['stages']}", flush=True)
    return runs, {name: statistics.mean(run["wall_s"] for run in done) for name, done in runs.items()}


def compare(description: str, plans: dict[str, str], target: float) -> None:
    """The command line of a side-by-side demo benchmark: `--rounds` demos of each plan (the first the baseline, the
    second the candidate), their means and ratio against `target`, and `--json FILE`. `--earlier-code DIR` adds the
    baseline's demo run by the code of another checkout (e.g. `git worktree add DIR COMMIT`), and the candidate's
    ratio to it: what the change costs as a whole."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=2, help="demos of each plan, alternated")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--earlier-code", type=Path, default=None, help="a checkout of earlier code to compare with")
    args = parser.parse_args()
    baseline, candidate = list(plans)
    if args.earlier_code is not None:
        plans = {f"{baseline}, earlier code": (plans[baseline], args.earlier_code.resolve()), **plans}
    runs, means = side_by_side(plans, args.rounds)
    ratios = {f"{candidate} / {name}": round(means[candidate] / means[name], 3) for name in plans if name != candidate}
    for name in plans:
        print(f"mean {name}: {means[name]:.1f} s")
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.2f}x (target <= {target:.2f}x): {'met' if ratio <= target else 'NOT met'}")
    save(args.json, {"cpu_cores": os.cpu_count(), "rounds": args.rounds, "runs": runs, "earlier_code": str(
        args.earlier_code) if args.earlier_code else None, "mean_s": {name: round(value, 1) for name, value in
                                                                    means.items()}, "ratios": ratios, "target": target})


if __name__ == "__main__":
    compare(__doc__.splitlines()[0], PLANS, TARGET)
