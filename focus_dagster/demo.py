"""`focus demo`: materialise the pipeline end to end on the configured datasets, in this process.

Like `definitions.py`, this is wiring, not science: it runs the Dagster jobs against the persistent
instance under FOCUS_HOME, so that every run shows up in the UI afterwards with its lineage.
"""

from __future__ import annotations

import os
import time

from focus_dagster.config import load_config
from focus_dagster.models.selection import resolve_models

# The run logs stay complete in the instance (and the UI); the terminal gets one line per dataset.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def run_demo() -> int:
    import dagster as dg

    from focus_dagster.cli import UI_HOST, UI_PORT, prepare_dagster_home
    from focus_dagster.definitions import (
        DATA_LAYER_JOB,
        EMBEDDINGS_JOB,
        OBSERVE_JOB,
        TOKEN_PROBABILITIES_JOB,
        ZERO_SHOT_JOB,
        build_definitions,
    )

    config = load_config()
    dagster_home = prepare_dagster_home(config)
    started = time.perf_counter()
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
        failures = []
        for key in config.dataset_keys:
            result = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(
                partition_key=key, instance=instance, raise_on_error=False, run_config=QUIET
            )
            failures += [] if result.success else [key]
            print("  " + _records_line(result, key))
        job_names = {job.name for job in defs.resolve_all_job_defs()}
        specs = resolve_models(config.models, config.model_cache)
        model_jobs = ((EMBEDDINGS_JOB, "embeddings"), (ZERO_SHOT_JOB, "zero-shot scores"),
                      (TOKEN_PROBABILITIES_JOB, "yes/no scores"))
        for job_name, what in model_jobs:
            if job_name in job_names:
                failures += _run_model_job(defs.resolve_job_def(job_name), what, config.dataset_keys, instance, specs)
    print(f"done in {time.perf_counter() - started:.1f}s" + (f"; FAILED: {', '.join(failures)}" if failures else ""))
    print(f"  tables:    {config.database}")
    print("             records.<dataset>, records.quarantine, records.unlisted_images, labels.harmonised, labels.rejects,"
          "\n             predictions.zero_shot")
    print(f"  artifacts: {config.artifacts}  (labels/<dataset>.parquet, embeddings/<model>/<dataset>.parquet,"
          "\n             questions/<dataset>.parquet, token_probabilities/<model>/<dataset>.parquet)")
    print(f"  instance:  {dagster_home}")
    print(f"  open the UI: make ui   (http://{UI_HOST}:{UI_PORT}, lineage graph and every run above)")
    return 1 if failures else 0


def _records_line(result, key: str) -> str:
    """One line per dataset: records and labels accounting, then the verdict of every check."""
    meta = {
        e.asset_key.to_user_string(): {k: v.value for k, v in e.event_specific_data.materialization.metadata.items()}
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
    }
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


def _run_model_job(job, what: str, datasets: list[str], instance, specs: dict) -> list[str]:
    """Run a model x dataset job for every partition whose dataset is registered; one line per model."""
    import dagster as dg

    failures = []
    models = job.partitions_def.get_partitions_def_for_dimension("model").get_partition_keys()
    for model in models:
        rows, rates, failed = 0, [], []
        for dataset in datasets:
            key = dg.MultiPartitionKey({"model": model, "dataset": dataset})
            result = job.execute_in_process(partition_key=key, instance=instance, raise_on_error=False, run_config=QUIET)
            if not result.success:
                failed.append(dataset)
                continue
            meta = [
                {k: v.value for k, v in e.event_specific_data.materialization.metadata.items()}
                for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"
            ][0]
            rows += meta.get("dagster/row_count", 0)
            rates += [meta["images_per_second"]] if meta.get("images_per_second") else []
        label = model + (" (pipeline-check)" if specs[model].is_pipeline_check else "")
        speed = f", {sum(rates) / len(rates):.1f} images/s" if rates else ""
        print(f"  {what:<16} {label:<29} {rows:>6} rows over {len(datasets) - len(failed)} datasets{speed}"
              + (f" | FAILED: {', '.join(failed)}" if failed else ""))
        failures += [f"{model}/{d}" for d in failed]
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
