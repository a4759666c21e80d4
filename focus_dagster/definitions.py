"""The code location: the domains of `assets/` merged, with the resources every step uses.

Partitions come from the configuration (FOCUS_CONFIG / the embedded default), so registering a dataset
or a model adds partitions, not code.
"""

from __future__ import annotations

import dagster as dg

from assets import (automation, comparisons, datasets, evaluation, groups, labels, lora, mllm, models, report,
                    robustness, trace)
from assets.kubernetes import k8s_executor
from assets.partitions import Registered
from focus_dagster.config import FocusConfig, load_config
from focus_dagster.platform.pools import reporting_pool_waits
from resources.bundle import focus_resources

# By default a run's steps share its process: one process per step re-imported Great Expectations and pandas
# for every step (bench/data_layer.py; the eight label checks also share one step); the pools still order steps
# across runs. Either executor, wrapped,
# says at INFO in the run which run holds a pool a step waits for (focus_dagster/platform/pools.py).
EXECUTORS = {"in_process": reporting_pool_waits(dg.in_process_executor),
             "multiprocess": reporting_pool_waits(dg.multiprocess_executor)}


def build_definitions(config: FocusConfig | None = None) -> dg.Definitions:
    config = config or load_config()
    registered = Registered.from_config(config)
    return dg.Definitions.merge(
        datasets.definitions(registered, config.observe_cron),
        labels.definitions(registered),
        models.definitions(registered),
        mllm.definitions(registered),
        lora.definitions(registered),
        evaluation.definitions(registered),
        robustness.definitions(registered),
        groups.definitions(registered.datasets),
        comparisons.definitions(registered),
        report.definitions(registered),
        trace.definitions(),
        automation.definitions(config.refresh_seconds),
        dg.Definitions(resources=focus_resources(config), executor=_executor(config)),
    )


def _executor(config: FocusConfig):
    """The executor focus.yaml names; `k8s`: a Kubernetes job per step, its pod from the `kubernetes:` section
    (dagster_k8s loads only then)."""
    if config.executor == "k8s":
        return reporting_pool_waits(k8s_executor(config.kubernetes))
    return EXECUTORS[config.executor]


defs = build_definitions()
