"""The shape of the code location, as a reviewer sees it: any change to the graph shows up in this diff.

The snapshots in tests/graph/snapshots/ list every asset (partitions, dependencies and their mappings, group, kinds,
pools, automation condition), every check with its blocking flag, every job with what it selects, the
schedule and the sensor. A deliberate change to the graph updates them: FOCUS_UPDATE_SNAPSHOTS=1 make test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from focus_dagster.config import parse_config
from focus_dagster.definitions import build_definitions
from tests.support.location_snapshot import describe_location

SNAPSHOTS = Path(__file__).parent / "snapshots"
CONFIGS = {
    "default": None,  # the embedded default: ten look-alikes, one model per interface
    "vision_only": {"datasets": {"brset": "synthetic", "idrid": "synthetic"}, "models": ["efficientnet_lite0"]},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_code_location_matches_its_snapshot(name, tmp_path):
    config = parse_config(CONFIGS[name], tmp_path / "home")
    described = describe_location(build_definitions(config))
    snapshot = SNAPSHOTS / f"code_location_{name}.txt"
    if os.environ.get("FOCUS_UPDATE_SNAPSHOTS") == "1":
        snapshot.write_text(described)
    assert described == snapshot.read_text(), f"the code location changed: review it, then update {snapshot.name}"


@pytest.mark.parametrize("executor", ["in_process", "multiprocess"])
def test_runs_execute_their_steps_as_configured(executor, tmp_path):
    defs = build_definitions(parse_config({"executor": executor}, tmp_path / "home"))
    assert defs.resolve_implicit_global_asset_job_def().executor_def.name == executor
    assert defs.resolve_job_def("focus_data_layer").executor_def.name == executor


def test_loading_the_code_location_imports_no_model_library():
    """Every process that loads the code location pays its imports: the webserver and the daemon, each run the
    daemon launches, each step process of the multiprocess executor. torch and torchvision alone took 4.4 of its
    6.3 s on this machine; they (and transformers, timm, peft, GX, scikit-learn) load in the step that computes."""
    script = ("import sys; import focus_dagster.definitions as d; d.defs.get_repository_def().get_all_jobs(); "
              "print(sorted(m for m in ('torch', 'torchvision', 'transformers', 'timm', 'peft', "
              "'great_expectations', 'sklearn') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
