"""Where each step runs on Kubernetes: the GPU steps on GPU nodes with a GPU, every other step without one.

With `executor: k8s` in focus.yaml, each step of a run is a Kubernetes Job of its own (dagster-k8s's
`k8s_job_executor`), launched from the run's pod (the K8sRunLauncher's; deploy/). What a step's pod asks for comes
from the `kubernetes:` section of focus.yaml (`KubernetesSettings`, focus_dagster/config.py):

- the assets that run a model on the GPU, each declared with `gpu_asset` (assets/gpu.py), which puts it in the
  `gpu` pool, carry the op tag `dagster-k8s/config` (`gpu_op_tags`): `gpu_resources` (with `nvidia.com/gpu`),
  `gpu_node_selector` and `gpu_tolerations`; the same decorator does both, so no list of GPU steps can drift;
- every other step gets `cpu_resources` from the executor's `step_k8s_config`, and no GPU, node selector nor
  toleration: the GPU nodes' taint keeps it off them.

dagster-k8s merges the tag over the executor's default, so a GPU step's resources replace the CPU ones key by key.
The in-process and multiprocess executors ignore the tag. dagster-k8s itself is imported only by `k8s_executor`, so
loading the code location does not pay for the Kubernetes client unless runs go to Kubernetes.
"""

from __future__ import annotations

import json
from typing import Any

import dagster as dg

from focus_dagster.config import KubernetesSettings

# dagster-k8s's tag for raw Kubernetes config of a step (dagster_k8s.job.USER_DEFINED_K8S_CONFIG_KEY).
K8S_CONFIG_TAG = "dagster-k8s/config"
EXECUTOR_NAME = "k8s"  # the name of dagster-k8s's executor, and `executor: k8s` in focus.yaml


def settings_of(registered: Any) -> KubernetesSettings:
    """The `kubernetes:` section the code location is built with (`Registered.kubernetes`)."""
    return registered.kubernetes


def gpu_step_config(settings: KubernetesSettings) -> dict:
    """A GPU step's pod: the GPU and its cpu/memory, on a GPU node (selector and tolerations)."""
    return {
        "container_config": {"resources": _resources(settings.gpu_resources)},
        "pod_spec_config": {
            "node_selector": dict(sorted(settings.gpu_node_selector.items())),
            "tolerations": [_toleration(toleration) for toleration in settings.gpu_tolerations],
        },
    }


def cpu_step_config(settings: KubernetesSettings) -> dict:
    """Any other step's pod: cpu and memory only, wherever the scheduler puts it."""
    return {"container_config": {"resources": _resources(settings.cpu_resources)}}


def gpu_op_tags(registered: Any) -> dict[str, str]:
    """The op tags of a GPU asset: its pod's Kubernetes config as dagster-k8s reads it (JSON, keys sorted, so the
    same configuration gives the same tags)."""
    return {K8S_CONFIG_TAG: json.dumps(gpu_step_config(settings_of(registered)), sort_keys=True)}


def executor_config(settings: KubernetesSettings) -> dict:
    """The k8s_job_executor's config: every step defaults to the CPU pod. The rest (namespace, image, service
    account, environment, volumes) comes from the run launcher and the code location's deployment (deploy/)."""
    return {"step_k8s_config": cpu_step_config(settings)}


def k8s_executor(settings: KubernetesSettings) -> dg.ExecutorDefinition:
    """dagster-k8s's `k8s_job_executor` (named `k8s`), each step a Kubernetes Job shaped by `settings`."""
    from dagster_k8s import k8s_job_executor

    return k8s_job_executor.configured(executor_config(settings), name=EXECUTOR_NAME)


def _resources(resources) -> dict:
    return {part: dict(sorted(amounts.items())) for part, amounts in sorted(resources.items())}


def _toleration(toleration) -> dict:
    """A toleration as written in a pod spec (tolerationSeconds) in the snake case dagster-k8s uses."""
    names = {"tolerationSeconds": "toleration_seconds"}
    return {names.get(key, key): value for key, value in sorted(toleration.items())}
