"""The GPU steps: every asset that runs a model on the accelerator is declared through `gpu_asset`, so what makes a
step a GPU step is said once.

A GPU step takes the `gpu` pool (one step at a time holds the accelerator: dagster.yaml), carries the Kubernetes
config that puts its pod on a GPU node with a GPU (assets/kubernetes.py), has the `pytorch` kind, and, when it loads
a checkpoint of its own, the blocking checkpoint audit (checks/models.py): a load refused with a `CheckpointError`
fails the audit before the step fails, so that nothing downstream runs on a model that did not load.
"""

from functools import wraps

import dagster as dg

from assets.kubernetes import gpu_op_tags
from checks.models import checkpoint_audit_spec, checkpoint_load_failed
from focus_dagster.models.spec import CheckpointError

GPU_POOL = "gpu"  # the pool of dagster.yaml that holds the accelerator


def gpu_asset(registered, *, partitions_def: dg.PartitionsDefinition, kinds: set[str], audited: bool = True,
              **settings):
    """`dg.asset` for a step that runs a model on the GPU: the `gpu` pool, the GPU pod on Kubernetes (from
    `registered.kubernetes`), the `pytorch` kind beside `kinds`, and with `audited` the checkpoint audit of the
    asset (the function's name is its key). `settings` are the asset's own (deps, group, automation, description)."""

    def decorate(step):
        checks = [checkpoint_audit_spec(step.__name__, partitions_def)] if audited else []
        return dg.asset(
            partitions_def=partitions_def,
            pool=GPU_POOL,
            op_tags=gpu_op_tags(registered),
            kinds={"pytorch", *kinds},
            check_specs=checks,
            **settings,
        )(_failing_the_audit(step) if audited else step)

    return decorate


def _failing_the_audit(step):
    """The step, yielding a failed checkpoint audit with the refusal's message before it fails on a refused load,
    so that the audit, not only the run's log, says why the model gave no numbers."""

    @wraps(step)  # Dagster reads the resources and config the step asks for from its signature
    def audited_step(*args, **kwargs):
        try:
            yield from step(*args, **kwargs)
        except CheckpointError as exc:
            yield checkpoint_load_failed(exc)
            raise

    return audited_step
