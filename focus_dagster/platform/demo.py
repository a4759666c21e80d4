"""`focus demo`: materialise the pipeline end to end on the configured datasets, from this process.

Like focus_dagster/definitions.py, this is wiring, not science: it runs the Dagster jobs against the persistent
instance under FOCUS_HOME, so that every run shows up in the UI afterwards with its lineage. The jobs run one
at a time through the runner (focus_dagster/platform/runner.py), which answers signals, watches pool waits and
prints the steps' progress; this module says what runs in which order and prints a summary line per dataset and
model, and at the end how long each stage took.

`focus demo --datasets ... --models ... --no-lora --per-dataset N` narrows focus.yaml's configuration for one
demo (`DemoOptions`); the step processes of the multiprocess executor rebuild the job from the same narrowed one.
"""

from __future__ import annotations

import os
import sys
import time

from focus_dagster.config import FocusConfig, load_config
from focus_dagster.models.selection import resolve_models
from focus_dagster.platform.instance import UI_HOST, UI_PORT, prepare_dagster_home
from focus_dagster.platform.runner import (
    STARTED,
    STEP_CONSOLE_LOG,
    TERMINAL,
    DemoOptions,
    Runner,
    Stop,
    demo_config,
    say,
    stopping_on_signals,
    tell,
)
from resources import layout


def run_demo(options: DemoOptions | None = None) -> int:
    """`focus demo`: the whole graph on focus.yaml's configuration, narrowed by `options`; the exit code."""
    try:
        TERMINAL[0] = os.dup(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a file (captured in-process)
        TERMINAL[0] = None
    # The demo points DAGSTER_HOME at its instance while it runs; a caller in the same process (a test, a
    # notebook) gets its own value back, so that a later `focus ui` it starts does not open this instance.
    dagster_home = os.environ.get("DAGSTER_HOME")
    try:
        with stopping_on_signals():
            try:
                return _demo(options or DemoOptions())
            except Stop as stop:  # before the first run or after the last
                tell(f"focus demo: {stop.reason}, outside any run")
                return stop.code
    finally:
        if TERMINAL[0] is not None:
            os.close(TERMINAL[0])
            TERMINAL[0] = None
        if dagster_home is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = dagster_home


def _demo(options: DemoOptions) -> int:
    import dagster as dg

    from assets.datasets import OBSERVE_JOB
    from assets.evaluation import ENCODER_JOB, SUMMARY_JOB
    from assets.labels import DATA_LAYER_JOB
    from assets.mllm import TOKEN_PROBABILITIES_JOB
    from assets.models import ZERO_SHOT_JOB
    from assets.robustness import ROBUSTNESS_JOB, YES_NO_ROBUSTNESS_JOB, ZERO_SHOT_ROBUSTNESS_JOB
    from focus_dagster.definitions import build_definitions

    config = demo_config(load_config(), options)
    dagster_home = prepare_dagster_home(config)
    started, wall_started = time.perf_counter(), time.time()
    STARTED[0] = started
    print(f"focus demo: {len(config.dataset_keys)} dataset(s), FOCUS_HOME {config.home}")
    if any(config.is_synthetic(k) for k in config.dataset_keys):
        print(f"  synthetic look-alikes (written on first use): {config.synthetic_dir}")
    defs = build_definitions(config)
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    with dg.DagsterInstance.get() as instance:
        runner = Runner(instance, dagster_home, config.executor, options)
        try:
            observed = runner.execute(defs.resolve_job_def(OBSERVE_JOB))
            if not observed.success:
                print(f"  observing the dataset releases failed: {_failure_message(observed)}")
                return 1
            say("dataset releases observed (look-alikes written on first use)")
            failures = []
            for key in config.dataset_keys:
                result = runner.execute(defs.resolve_job_def(DATA_LAYER_JOB), partition_key=key)
                failures += [] if result.success else [key]
                say(_records_line(result, key))
            job_names = {job.name for job in defs.resolve_all_job_defs()}
            specs = resolve_models(config.models, config.model_cache)
            # Embeddings and probes share a run per (encoder, dataset): half the runs, the same lineage. With
            # degradations (a small set by default), each interface's robustness job runs its clean output and its
            # robustness in that one run.
            model_jobs = (((ROBUSTNESS_JOB, "embeddings+probes+robustness"), (ENCODER_JOB, "embeddings+probes")),
                          ((ZERO_SHOT_ROBUSTNESS_JOB, "zero-shot+robustness"), (ZERO_SHOT_JOB, "zero-shot scores")),
                          ((YES_NO_ROBUSTNESS_JOB, "yes/no+robustness"), (TOKEN_PROBABILITIES_JOB, "yes/no scores")))
            for choices in model_jobs:
                for job_name, what in choices:
                    if job_name in job_names:
                        failures += _run_model_job(defs.resolve_job_def(job_name), what, config.dataset_keys, runner,
                                                   specs)
                        break
            failures += _run_lora(defs, job_names, runner, specs) if options.lora else _no_lora()
            failures += _run_evaluation(defs, config.dataset_keys, runner)
            summary = runner.execute(defs.resolve_job_def(SUMMARY_JOB))
            failures += [] if summary.success else [f"{SUMMARY_JOB}: {_failure_message(summary)}"]
            say("cross-dataset matrix and leaderboard")
            failures += _run_robustness_summary(defs, job_names, runner)
            failures += _run_lora_effects(defs, job_names, runner) if options.lora else []
            failures += _run_report(defs, runner)
        except Stop as stop:
            return runner.stop(stop)
        overhead = dagster_overhead(instance, since=wall_started)
    _print_leaderboard(defs)
    print(_stages_line(runner.stages))
    wall = time.perf_counter() - started
    print(f"  Dagster overhead: runs took {overhead['run_seconds']:.1f}s, their steps computed for "
          f"{overhead['step_seconds']:.1f}s: {overhead['overhead']:.0%} orchestration inside runs (target <= 30%); "
          f"{1 - overhead['step_seconds'] / wall:.0%} of the demo's {wall:.0f}s is not step compute (imports, run "
          "creation, this summary)")
    print(f"done in {wall:.1f}s" + (f"; FAILED: {', '.join(failures)}" if failures else ""))
    print(f"  tables:    {config.tables}   (Parquet per partition; DuckDB views: FocusStorage.views())")
    print(f"             {layout.records_table('<dataset>')}, " + ", ".join(map(str, layout.TABLES)))
    print(f"  artifacts: {config.artifacts}")
    print("             " + ", ".join(layout.ARTIFACTS))
    print(f"  report:    {config.artifacts / layout.ARENA_REPORT_PAGE}   (.venv/bin/focus report --open)")
    print(f"  instance:  {dagster_home}")
    if runner.out_of_process:
        print(f"             every step in a process of its own (executor: multiprocess); their console: "
              f"{dagster_home / STEP_CONSOLE_LOG}")
    print(f"  open the UI: {ui_hint(config)}   (http://{UI_HOST}:{UI_PORT}, lineage graph and every run above)")
    return 1 if failures else 0


def ui_hint(config: FocusConfig) -> str:
    """The command that opens the UI on the instance this demo used: `focus ui` reads FOCUS_HOME, FOCUS_CONFIG and
    FOCUS_INSTANCE as the demo did, and started without them it opens (and configures) another instance."""
    import shlex

    from focus_dagster.platform.instance import INSTANCE_ENV

    settings = {"FOCUS_HOME": str(config.home), "FOCUS_CONFIG": str(config.source or ""),
                INSTANCE_ENV: os.environ.get(INSTANCE_ENV, "").strip()}
    return " ".join([*(f"{name}={shlex.quote(value)}" for name, value in settings.items() if value),
                     ".venv/bin/focus ui"])


def _run_evaluation(defs, datasets: list[str], runner: Runner) -> list[str]:
    """Predictions and metric tables per dataset; one line with the rows committed and what failed, and why."""
    from assets.evaluation import EVALUATION_JOB

    job, storage = defs.resolve_job_def(EVALUATION_JOB), defs.resources["storage"]
    rows, with_rows, failed = 0, 0, []
    for dataset in datasets:
        result = runner.execute(job, partition_key=dataset)
        for check, description in _failed_checks(result, blocked=False):  # a warning: the numbers flowed
            say(f"{dataset:<11} warn {check}: {description}")
        # Counted in the table store, failed runs included: a check that stops fairness and quality fails the run
        # after its performance and calibration rows were committed.
        committed = _committed_metric_rows(storage, dataset, result.run_id)
        rows, with_rows = rows + committed, with_rows + bool(committed)
        if not result.success:
            failed.append(f"{dataset}: {_failure_message(result)}")
    say(f"{'metrics':<16} {'all models and methods':<29} {rows:>6} rows over {with_rows} datasets"
         + (f" | FAILED: {'; '.join(failed)}" if failed else ""))
    return [f"evaluation/{failure}" for failure in failed]


def _committed_metric_rows(storage, dataset: str, run_id: str) -> int:
    """The rows of `dataset` in metrics.values (performance and calibration, fairness, quality) that the run
    committed: each metric asset's partition counts when its current lineage names the run (an earlier run's rows
    are not this one's)."""
    partitions = {layout.METRICS_ASSET: dataset, layout.FAIRNESS_METRICS: layout.axis_partition(dataset, "fairness"),
                  layout.QUALITY_METRICS: layout.axis_partition(dataset, "quality")}
    rows = 0
    for asset, partition in partitions.items():
        if (storage.current_stamp(asset, dataset) or {}).get("run_id") != run_id:
            continue
        (frame,), stamp = storage.read_stamped([(layout.METRICS, partition)], asset, dataset)
        rows += len(frame) if (stamp or {}).get("run_id") == run_id else 0  # unless rewritten meanwhile
    return rows


def _run_lora(defs, job_names: set, runner: Runner, specs: dict) -> list[str]:
    """Train the plan's first adapter and score it on every dataset that defines its task, in-domain first.

    One adapter keeps the demo inside its time budget; the others are in the UI, ready to materialise (and
    automation trains them once `focus ui` runs its sensor).
    """
    from assets.lora import ADAPTED_SCORES_JOB, LORA_ADAPTERS_JOB
    from focus_dagster.adapter_plan import AdapterKey, Evaluation

    if LORA_ADAPTERS_JOB not in job_names:
        return []
    training = defs.resolve_job_def(LORA_ADAPTERS_JOB)
    adapter = training.partitions_def.get_partition_keys()[0]
    key = AdapterKey.parse(adapter)
    result = runner.execute(training, partition_key=adapter)
    if not result.success:
        say(f"{'lora adapter':<17} {adapter:<28} FAILED: {_failure_message(result)}")
        return [f"lora_adapters/{adapter}"]
    say(_adapter_line(adapter, _materialized(result)[layout.LORA_ADAPTERS]))
    scoring = defs.resolve_job_def(ADAPTED_SCORES_JOB)
    targets = [Evaluation.parse(key) for key in scoring.partitions_def.get_partition_keys()]
    tally = _Tally("adapted scores", adapter, specs[key.model].is_pipeline_check)
    for evaluation in (e for e in targets if e.adapter.key == adapter):
        tally.add(runner.execute(scoring, partition_key=evaluation.key), evaluation.dataset)
    say(tally.line() + f" (in-domain: {key.dataset}, the rest out-of-domain)")
    return tally.failures()


def _no_lora() -> list[str]:
    say(f"{'lora adapter':<17} skipped (--no-lora): the adapters are in the UI, ready to materialise")
    return []


def _stages_line(stages: dict[str, list[float]]) -> str:
    """How long each stage (the runs of one job) took, in the order they ran."""
    names = _stage_names()
    parts = [f"{names.get(job, job)} {seconds:.0f}s" + (f" ({runs} runs)" if runs > 1 else "")
             for job, (seconds, runs) in stages.items()]
    return "  time per stage: " + ", ".join(parts)


def _stage_names() -> dict[str, str]:
    from assets.datasets import OBSERVE_JOB
    from assets.evaluation import ENCODER_JOB, EVALUATION_JOB, SUMMARY_JOB
    from assets.labels import DATA_LAYER_JOB
    from assets.lora import ADAPTED_SCORES_JOB, LORA_ADAPTERS_JOB, LORA_EFFECTS_JOB
    from assets.mllm import TOKEN_PROBABILITIES_JOB
    from assets.models import ZERO_SHOT_JOB
    from assets.report import REPORT_JOB
    from assets.robustness import (ROBUSTNESS_JOB, ROBUSTNESS_SUMMARY_JOB, YES_NO_ROBUSTNESS_JOB,
                                   ZERO_SHOT_ROBUSTNESS_JOB)

    return {OBSERVE_JOB: "releases", DATA_LAYER_JOB: "data layer", ENCODER_JOB: "embeddings+probes",
            ROBUSTNESS_JOB: "embeddings+probes+robustness", ZERO_SHOT_JOB: "zero-shot",
            ZERO_SHOT_ROBUSTNESS_JOB: "zero-shot+robustness", TOKEN_PROBABILITIES_JOB: "yes/no scores",
            YES_NO_ROBUSTNESS_JOB: "yes/no+robustness",
            LORA_ADAPTERS_JOB: "lora training",
            ADAPTED_SCORES_JOB: "adapted scores", EVALUATION_JOB: "metrics", SUMMARY_JOB: "leaderboard",
            ROBUSTNESS_SUMMARY_JOB: "robustness summary",
            LORA_EFFECTS_JOB: "lora effects", REPORT_JOB: "arena report"}


def _adapter_line(adapter: str, meta: dict) -> str:
    """What training did: examples, steps, the loss from first to last step and the speed; or why no adapter."""
    if "steps" not in meta:
        return f"{'lora adapter':<17} {adapter:<28} none: {meta.get('reason', 'see the run in the UI')}"
    return (f"{'lora adapter':<17} {adapter:<28} {meta['examples']:>6} examples, {meta['steps']} steps, loss "
            f"{meta['loss_first']:.3f} -> {meta['loss_last']:.3f}, {meta['examples_per_second']:.1f} examples/s")


def _run_lora_effects(defs, job_names: set, runner: Runner) -> list[str]:
    """Adapted vs base on the same test images (paired bootstrap); one line with the counts."""
    from assets.lora import LORA_EFFECTS_JOB

    if LORA_EFFECTS_JOB not in job_names:
        return []
    return _run_summary(defs, runner, LORA_EFFECTS_JOB, layout.LORA_EFFECTS_ASSET, "lora effects", lambda meta: (
        f"{'adapted vs base, paired':<28} {meta['dagster/row_count']:>6} rows, {meta['comparisons']} comparisons "
        f"with deltas ({layout.LORA_EFFECTS}, {layout.LORA_SUMMARY})"))


def _run_report(defs, runner: Runner) -> list[str]:
    """The arena report from every table above; one line with where it is and what it holds."""
    from assets.report import REPORT_JOB

    return _run_summary(defs, runner, REPORT_JOB, layout.ARENA_REPORT_ASSET, "arena report", lambda meta: (
        f"{len(meta['figures'])} figures, {len(meta['tables'])} tables, {meta['metric_ids_cited']} metric ids cited: "
        f"{meta['path']}"))


def _run_summary(defs, runner: Runner, job_name: str, asset: str, what: str, line) -> list[str]:
    """Run an unpartitioned job; say `line(metadata of asset)`, or why it failed (then it is a failure)."""
    result = runner.execute(defs.resolve_job_def(job_name))
    if not result.success:
        message = _failure_message(result)
        say(f"{what:<17} FAILED: {message}")
        return [f"{job_name}: {message}"]
    say(f"{what:<17} {line(_materialized(result)[asset])}")
    return []


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
    """The best configuration per method and task (a real model before any pipeline check, which is marked), and
    one trace command to try."""
    from assets.evaluation import pipeline_checks
    from focus_dagster.evaluation.leaderboard import FOOTNOTE, marked, top_configurations
    from resources.storage import TableMissingError

    checks = pipeline_checks(defs.resources["models"].specs())
    try:
        best = top_configurations(defs.resources["storage"].read_table(layout.METRICS), top=1, pipeline_checks=checks)
    except TableMissingError:  # no metric table: every evaluation failed, and the summary said so
        return
    if best.empty:
        return
    print("  leaderboard (best test AUROC per method and task, real models before pipeline checks):")
    for row in best.itertuples():
        trained_on = row.train_dataset if isinstance(row.train_dataset, str) else ""
        trained = f" trained on {trained_on}" if trained_on and trained_on != row.dataset else ""
        print(f"    {row.method:<13} {row.task:<13} {row.value:.3f} ({row.ci_low:.3f}-{row.ci_high:.3f})  "
              f"{marked(row.model, row.pipeline_check)} on {row.dataset}{trained}  {row.metric_id}")
    if best["pipeline_check"].any():
        print(f"    {FOOTNOTE}")
    print(f"  trace any number: .venv/bin/focus trace {best['metric_id'].iloc[0]}   (--json for machines)")


def _records_line(result, key: str) -> str:
    """One line per dataset: records and labels accounting, then the verdict of every check."""
    meta = _materialized(result)
    if layout.DATASET_RECORDS not in meta:
        return f"{key:<11} FAILED: {_failure_message(result)}"
    records = meta[layout.DATASET_RECORDS]
    line = f"{key:<11} read {records['rows_read']:>5} = kept {records['rows_kept']:>5} + quarantined {records['rows_quarantined']:>3}"
    labels = meta.get(layout.HARMONISED_LABELS)
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


def _run_partition(job, model: str, dataset: str, runner: Runner):
    import dagster as dg

    return runner.execute(job, partition_key=dg.MultiPartitionKey({"model": model, "dataset": dataset}))


def _job_models(job) -> list[str]:
    return job.partitions_def.get_partitions_def_for_dimension("model").get_partition_keys()


def _run_robustness_summary(defs, job_names: set[str], runner: Runner) -> list[str]:
    """The robustness summary over every configuration, when the graph has robustness (`degradations:`)."""
    from assets.robustness import ROBUSTNESS_SUMMARY_JOB

    if ROBUSTNESS_SUMMARY_JOB not in job_names:
        return []
    result = runner.execute(defs.resolve_job_def(ROBUSTNESS_SUMMARY_JOB))
    say("robustness summary (mean relative AUROC drop, mCE)")
    return [] if result.success else [f"{ROBUSTNESS_SUMMARY_JOB}: {_failure_message(result)}"]


def _run_model_job(job, what: str, datasets: list[str], runner: Runner, specs: dict) -> list[str]:
    """Run a model x dataset job for every partition whose dataset is registered; one line per model."""
    failures = []
    for model in _job_models(job):
        tally = _Tally(what, model, specs[model].is_pipeline_check)
        for dataset in datasets:
            tally.add(_run_partition(job, model, dataset, runner), dataset)
        say(tally.line())
        failures += tally.failures()
    return failures


def _failed_checks(result, blocked: bool) -> list[tuple[str, str]]:
    """(check, what its result says) of each failed check of the run: those that blocked what follows (a blocking
    check failing at ERROR severity), or the others."""
    verdicts = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return [(v.check_name, v.description or "failed") for v in verdicts
            if not v.passed and bool(v.blocking and v.severity.value == "ERROR") == blocked]


def _failure_message(result) -> str:
    """What stopped the run: the blocking checks that failed, with their reasons (which name the attribute, file or
    row), else the innermost error of the first failed step: the message the user can act on."""
    blocking = _failed_checks(result, blocked=True)
    if blocking:
        return "; ".join(f"blocked by {check}: {description}" for check, description in blocking)
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            error = event.event_specific_data.error
            while error.cause is not None:
                error = error.cause
            return error.message.strip()
    return "see the run in the UI"
