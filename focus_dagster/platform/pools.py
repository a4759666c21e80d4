"""Who holds a pool, and the INFO line a step that waits for one writes into its run.

Dagster says that a step waits for a pool only in a DEBUG engine event ("Step blocked by limit for pool
gpu"), without who holds it; a run waiting behind a dead run looked hung. Here the wait is said at INFO,
with the run(s) and step(s) holding the pool and whether their process is alive, in the waiting run's own
event log (the UI shows it), as an engine event carrying the pool:

    waiting for pool gpu: held by run 1a2b3c4d-... (step image_embeddings, job focus_encoder_outputs, STARTED,
    process 4242 gone)

`reporting_pool_waits` wraps the code location's executor: it passes every event of the executor through and
adds that line when the executor reports a blocked step (when it first blocks, then every 5 minutes). Runs of
`focus demo` execute in process, without the location's executor: the demo's watcher writes the same line
(`report_wait`). Wiring, not science: only the code location and the demo's runner import this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from focus_dagster.platform.dagster_private import EngineEventData
from focus_dagster.platform.recovery import Worker, worker_of

WAITING = "waiting for pool"


@dataclass(frozen=True)
class Holder:
    """One step holding a slot of a pool, with what the instance knows of its run."""

    run_id: str
    step_key: str
    job_name: str | None
    status: str | None  # None: no such run (deleted)
    worker: Worker | None

    @property
    def alive(self) -> bool | None:
        return self.worker.alive if self.worker else None

    def describe(self) -> str:
        details = [f"step {self.step_key}"]
        details += [f"job {self.job_name}"] if self.job_name else []
        details.append(self.status or "no such run")
        if self.worker is not None and self.worker.process is not None and self.status == "STARTED":
            details.append(self.worker.describe())
        return f"run {self.run_id} ({', '.join(details)})"

    @property
    def gone(self) -> bool:
        """Nothing runs for this holder: its run finished, was deleted, or its process died."""
        return self.status != "STARTED" or self.alive is False


def holders(instance: dg.DagsterInstance, pool: str) -> list[Holder]:
    """The steps holding the slots of `pool`, from the instance's concurrency tables."""
    found = []
    for slot in instance.event_log_storage.get_concurrency_info(pool).claimed_slots:
        run = instance.get_run_by_id(slot.run_id)
        found.append(Holder(
            run_id=slot.run_id, step_key=slot.step_key, job_name=run.job_name if run else None,
            status=run.status.value if run else None, worker=worker_of(instance, run) if run is not None else None,
        ))
    return found


def held_line(held_by: list[Holder]) -> str:
    if not held_by:
        return "no slot held any more (the step claims one at its next try)"
    return "held by " + "; ".join(h.describe() for h in held_by)


def waiting_line(pool: str, held_by: list[Holder]) -> str:
    return f"{WAITING} {pool}: {held_line(held_by)}"


def report_wait(instance: dg.DagsterInstance, run: dg.DagsterRun, step_key: str, pool: str) -> str:
    """Write the INFO line of a step of `run` that waits for `pool` into the run's event log; return it."""
    held_by = holders(instance, pool)
    line = waiting_line(pool, held_by)
    metadata = {"pool": dg.MetadataValue.pool(pool),
                "held_by_runs": dg.MetadataValue.text(", ".join(h.run_id for h in held_by) or "-")}
    instance.report_engine_event(line, run, EngineEventData(metadata=metadata), step_key=step_key)
    return line


@dataclass(frozen=True)
class Wait:
    """A step of a run that has asked for a slot of `pool` and not got one yet."""

    pool: str
    step_key: str
    since: float  # epoch seconds


def waits_of(instance: dg.DagsterInstance, run_id: str) -> list[Wait]:
    """The steps of `run_id` waiting for a pool slot now."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    waits = []
    for pool in sorted(storage.get_concurrency_keys()):
        for step in storage.get_concurrency_info(pool).pending_steps:
            if step.run_id == run_id and step.assigned_timestamp is None:
                waits.append(Wait(pool, step.step_key, step.enqueued_timestamp.timestamp()))
    return waits


def reporting_pool_waits(executor_def: dg.ExecutorDefinition) -> dg.ExecutorDefinition:
    """`executor_def` (same name, config and requirements) whose runs say at INFO who holds a pool they wait for."""

    def create(init_context):
        return PoolReportingExecutor(executor_def.executor_creation_fn(init_context))

    return dg.ExecutorDefinition(
        name=executor_def.name,
        config_schema=executor_def.config_schema,
        requirements=executor_def.get_requirements,
        executor_creation_fn=create,
        description=executor_def.description,
    )


def _blocked_pool(event) -> str | None:
    """The pool of Dagster's "Step blocked by limit for pool" engine event (the only one carrying a pool)."""
    if not event.is_engine_event or event.step_key is None or (event.message or "").startswith(WAITING):
        return None
    value = (event.engine_event_data.metadata or {}).get("pool")
    return getattr(value, "pool", None)


class PoolReportingExecutor(dg.Executor):
    """Runs the wrapped executor unchanged; after each "Step blocked by limit for pool" event, the INFO line."""

    def __init__(self, inner: dg.Executor):
        self._inner = inner

    @property
    def retries(self):
        return self._inner.retries

    @property
    def step_dependency_config(self):
        return self._inner.step_dependency_config

    def execute(self, plan_context, execution_plan):
        for event in self._inner.execute(plan_context, execution_plan):
            yield event
            pool = _blocked_pool(event)
            if pool is not None:
                try:
                    report_wait(plan_context.instance, plan_context.dagster_run, event.step_key, pool)
                except Exception as exc:  # the line is a courtesy: never fail a run for it
                    plan_context.log.warning(f"could not report who holds pool {pool}: {exc}")
