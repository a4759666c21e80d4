"""The only door to Dagster's private modules (`dagster._core`): every name the platform needs that Dagster does
not export publicly, each with why the public API does not do.

A private module may move in any Dagster release; kept in one place, an upgrade that moves one breaks here, at
import, and nowhere else (tests/test_layers.py fails any other module that imports `dagster._core`).
"""

# A verdict reported on a partition other than the run's (checks/partitions.py): `dagster.AssetCheckEvaluation` is
# public, but the materialisation it is judged against (`target_materialization_data`) has a private type only.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

# The INFO line a step waiting for a pool writes into its run (focus_dagster/platform/pools.py):
# `DagsterInstance.report_engine_event` is public and takes an EngineEventData to carry metadata (the pool, its
# holders), but EngineEventData itself is not exported.
from dagster._core.events import EngineEventData

# The health check of a run launcher (focus_dagster/platform/recovery.py): `dagster.DefaultRunLauncher` is public, but
# what its `launch_run` receives (LaunchRunContext) and what `check_run_worker_health` must return
# (CheckRunHealthResult with a WorkerStatus) are not exported; a launcher that run monitoring can ask needs all three.
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, WorkerStatus

__all__ = [
    "AssetCheckEvaluationTargetMaterializationData",
    "CheckRunHealthResult",
    "EngineEventData",
    "LaunchRunContext",
    "WorkerStatus",
]
