"""`focus demo`: materialise the pipeline end to end on the configured datasets, in this process.

Like `definitions.py`, this is wiring, not science: it runs the Dagster jobs against the persistent
instance under FOCUS_HOME, so that every run shows up in the UI afterwards with its lineage.
"""

from __future__ import annotations

import os
import time

from focus_dagster.config import load_config
from focus_dagster.instance import UI_HOST, UI_PORT, prepare_dagster_home
from focus_dagster.models.selection import resolve_models
from resources import layout

# The run logs stay complete in the instance (and the UI); the terminal gets one line per dataset.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
_STARTED = [time.perf_counter()]


def _say(line: str) -> None:
    """One progress line, stamped with the seconds since the demo started."""
    print(f"{time.perf_counter() - _STARTED[0]:5.0f}s  {line}", flush=True)


def run_demo() -> int:
    import dagster as dg

    from assets.datasets import OBSERVE_JOB
    from assets.evaluation import ENCODER_JOB, SUMMARY_JOB
    from assets.labels import DATA_LAYER_JOB
    from assets.mllm import TOKEN_PROBABILITIES_JOB
    from assets.models import ZERO_SHOT_JOB
    from focus_dagster.definitions import build_definitions

    config = load_config()
    dagster_home = prepare_dagster_home(config)
    started, wall_started = time.perf_counter(), time.time()
    _STARTED[0] = started
    print(f"focus demo: {len(config.dataset_keys)} dataset(s), FOCUS_HOME {config.home}")
    if any(config.is_synthetic(k) for k in config.dataset_keys):
        print(f"  synthetic look-alikes (written on first use): {config.synthetic_dir}")
    defs = build_definitions(config)
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    with dg.DagsterInstance.get() as instance:
        observed = defs.resolve_job_def(OBSERVE_JOB).execute_in_process(
            instance=instance, raise_on_error=False, run_config=QUIET
        )
        if not observed.success:
            print(f"  observing the dataset releases failed: {_failure_message(observed)}")
            return 1
        _say("dataset releases observed (look-alikes written on first use)")
        failures = []
        for key in config.dataset_keys:
            result = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(
                partition_key=key, instance=instance, raise_on_error=False, run_config=QUIET
            )
            failures += [] if result.success else [key]
            _say(_records_line(result, key))
        job_names = {job.name for job in defs.resolve_all_job_defs()}
        specs = resolve_models(config.models, config.model_cache)
        # Embeddings and probes share a run per (encoder, dataset): half the runs, the same lineage.
        model_jobs = ((ENCODER_JOB, "embeddings+probes"), (ZERO_SHOT_JOB, "zero-shot scores"),
                      (TOKEN_PROBABILITIES_JOB, "yes/no scores"))
        for job_name, what in model_jobs:
            if job_name in job_names:
                failures += _run_model_job(defs.resolve_job_def(job_name), what, config.dataset_keys, instance, specs)
        failures += _run_evaluation(defs, config.dataset_keys, instance)
        summary = defs.resolve_job_def(SUMMARY_JOB).execute_in_process(instance=instance, raise_on_error=False,
                                                                       run_config=QUIET)
        failures += [] if summary.success else [f"{SUMMARY_JOB}: {_failure_message(summary)}"]
        _say("cross-dataset matrix and leaderboard")
        overhead = dagster_overhead(instance, since=wall_started)
    _print_leaderboard(defs)
    wall = time.perf_counter() - started
    print(f"  Dagster overhead: runs took {overhead['run_seconds']:.1f}s, their steps computed for "
          f"{overhead['step_seconds']:.1f}s: {overhead['overhead']:.0%} orchestration inside runs (target <= 30%); "
          f"{1 - overhead['step_seconds'] / wall:.0%} of the demo's {wall:.0f}s is not step compute (imports, run "
          "creation, this summary)")
    print(f"done in {wall:.1f}s" + (f"; FAILED: {', '.join(failures)}" if failures else ""))
    print(f"  tables:    {config.database}")
    print(f"             {layout.records_table('<dataset>')}, " + ", ".join(map(str, layout.TABLES)))
    print(f"  artifacts: {config.artifacts}")
    print("             " + ", ".join(layout.ARTIFACTS))
    print(f"  instance:  {dagster_home}")
    print(f"  open the UI: make ui   (http://{UI_HOST}:{UI_PORT}, lineage graph and every run above)")
    return 1 if failures else 0


def _run_evaluation(defs, datasets: list[str], instance) -> list[str]:
    """Predictions and metric tables per dataset; one line with the totals."""
    from assets.evaluation import EVALUATION_JOB

    job, failures, rows = defs.resolve_job_def(EVALUATION_JOB), [], 0
    for dataset in datasets:
        result = job.execute_in_process(partition_key=dataset, instance=instance, raise_on_error=False, run_config=QUIET)
        if not result.success:
            failures.append(f"evaluation/{dataset}: {_failure_message(result)}")
            continue
        rows += sum(meta.get("dagster/row_count", 0) for key, meta in _materialized(result).items() if key == "metrics")
    _say(f"{'metrics':<16} {'all models and methods':<29} {rows:>6} rows over {len(datasets) - len(failures)} datasets")
    return failures


def _materialized(result) -> dict:
    return {
        e.asset_key.to_user_string(): {k: v.value for k, v in e.event_specific_data.materialization.metadata.items()}
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
    }


def dagster_overhead(instance, since: float = 0.0) -> dict:
    """Wall time of the runs started since `since` (epoch seconds) vs the summed time of their steps."""
    run_seconds = step_seconds = 0.0
    for run in instance.get_runs():
        stats = instance.get_run_stats(run.run_id)
        if stats.start_time is None or stats.end_time is None or stats.start_time < since:
            continue
        run_seconds += stats.end_time - stats.start_time
        step_seconds += sum((s.end_time or 0) - (s.start_time or 0) for s in instance.get_run_step_stats(run.run_id)
                            if s.start_time and s.end_time)
    overhead = 1 - step_seconds / run_seconds if run_seconds else 0.0
    return {"run_seconds": run_seconds, "step_seconds": step_seconds, "overhead": overhead}


def _print_leaderboard(defs) -> None:
    """The best configuration per method and task, and one trace command to try."""
    import duckdb

    from focus_dagster.evaluation.leaderboard import top_configurations

    try:
        best = top_configurations(defs.resources["storage"].read_table(layout.METRICS), top=1)
    except duckdb.CatalogException:  # no metric table: every evaluation failed, and the summary said so
        return
    if best.empty:
        return
    print("  leaderboard (best test AUROC per method and task; pipeline-check models test plumbing only):")
    for row in best.itertuples():
        trained_on = row.train_dataset if isinstance(row.train_dataset, str) else ""
        trained = f" trained on {trained_on}" if trained_on and trained_on != row.dataset else ""
        print(f"    {row.method:<13} {row.task:<13} {row.value:.3f} ({row.ci_low:.3f}-{row.ci_high:.3f})  "
              f"{row.model} on {row.dataset}{trained}  {row.metric_id}")
    print(f"  trace any number: .venv/bin/focus trace {best['metric_id'].iloc[0]}   (--json for machines)")


def _records_line(result, key: str) -> str:
    """One line per dataset: records and labels accounting, then the verdict of every check."""
    meta = _materialized(result)
    if "dataset_records" not in meta:
        return f"{key:<11} FAILED: {_failure_message(result)}"
    records = meta["dataset_records"]
    line = f"{key:<11} read {records['rows_read']:>5} = kept {records['rows_kept']:>5} + quarantined {records['rows_quarantined']:>3}"
    labels = meta.get("harmonised_labels")
    line += f" | labelled {labels['rows_labelled']:>5} ({labels['split_method']} split)" if labels else " | labels not built"
    verdicts = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    errors = [v.check_name for v in verdicts if not v.passed and v.severity.value == "ERROR"]
    warnings = [v.check_name for v in verdicts if not v.passed and v.severity.value != "ERROR"]
    line += f" | {len(verdicts) - len(errors) - len(warnings)}/{len(verdicts)} checks pass"
    line += f" | FAILED: {', '.join(errors)}" if errors else ""
    return line + (f" | warn: {', '.join(warnings)}" if warnings else "")


class _Tally:
    """Rows, speeds and failures of one model's job over the datasets, for its summary line."""

    def __init__(self, what: str, model: str, pipeline_check: bool):
        self.what, self.model, self.pipeline_check = what, model, pipeline_check
        self.rows, self.rates, self.done, self.failed = 0, [], 0, []

    def add(self, result, dataset: str) -> None:
        if not result.success:
            self.failed.append(dataset)
            return
        meta = next(iter(_materialized(result).values()))  # the run's first asset: the model output
        self.done += 1
        self.rows += meta.get("dagster/row_count", 0)
        self.rates += [meta["images_per_second"]] if meta.get("images_per_second") else []

    def line(self) -> str:
        label = self.model + (" (pipeline-check)" if self.pipeline_check else "")
        speed = f", {sum(self.rates) / len(self.rates):.1f} images/s" if self.rates else ""
        failed = f" | FAILED: {', '.join(self.failed)}" if self.failed else ""
        return f"{self.what:<17} {label:<28} {self.rows:>6} rows over {self.done} datasets{speed}{failed}"

    def failures(self) -> list[str]:
        return [f"{self.model}/{d}" for d in self.failed]


def _run_partition(job, model: str, dataset: str, instance):
    import dagster as dg

    key = dg.MultiPartitionKey({"model": model, "dataset": dataset})
    return job.execute_in_process(partition_key=key, instance=instance, raise_on_error=False, run_config=QUIET)


def _job_models(job) -> list[str]:
    return job.partitions_def.get_partitions_def_for_dimension("model").get_partition_keys()


def _run_model_job(job, what: str, datasets: list[str], instance, specs: dict) -> list[str]:
    """Run a model x dataset job for every partition whose dataset is registered; one line per model."""
    failures = []
    for model in _job_models(job):
        tally = _Tally(what, model, specs[model].is_pipeline_check)
        for dataset in datasets:
            tally.add(_run_partition(job, model, dataset, instance), dataset)
        _say(tally.line())
        failures += tally.failures()
    return failures


def _failure_message(result) -> str:
    """The innermost error of the first failed step: the message the user can act on."""
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            error = event.event_specific_data.error
            while error.cause is not None:
                error = error.cause
            return error.message.strip()
    return "see the run in the UI"
