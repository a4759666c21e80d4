"""The job runner of `focus demo`: each job on the instance in a worker thread, watched by the main thread.

Dagster's in-process execution holds Ctrl-C and SIGTERM back until a step ends, and a step waiting for a pool never
ends, so the demo used to ignore both while it waited. Here each job executes in a worker thread while the main
thread watches it (`Runner`): a signal stops the demo at once (the run it interrupts is marked CANCELED and its
pool slots freed), and a step that waits for a pool says at INFO who holds it, and stops the demo, naming the
holder and what to do, once it has waited a minute for a holder whose process is gone or FOCUS_POOL_WAIT_SECONDS
for one still at work.

While a job runs, the main thread also reads the run's event log for the progress lines its steps log
(focus_dagster/progress.py) and prints them as they come: one line rewritten in place on a terminal, a line each
otherwise. Reading the instance rather than a logging handler of this process finds the lines of steps that run in
processes of their own (`executor: multiprocess`) too.

`DemoOptions` narrows focus.yaml's configuration for one demo; the step processes of the multiprocess executor
rebuild the job from the same narrowed one (`job_for_step_processes`). Wiring, not science: only the demo
(focus_dagster/platform/demo.py) and the CLI import this module.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, replace

from focus_dagster.config import FocusConfig, load_config
from focus_dagster.errors import ConfigError
from focus_dagster.models.selection import resolve_models
from focus_dagster.progress import is_progress, without_mark

# The run logs stay complete in the instance (and the UI); the terminal gets the steps' progress lines (read back
# from the instance) and a summary line per dataset and model.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
STARTED = [time.perf_counter()]
# How long a step waits for a pool before the demo stops and says who holds it (FOCUS_POOL_WAIT_SECONDS). A
# holder that is still at work (a refresh the sensor launched, a run from the UI) gets the long bound. A holder
# whose process is gone, or whose run ended, is released by run monitoring within a minute while the daemon
# runs (dagster.yaml); waiting longer for it means no daemon runs, and nothing else will release it.
POOL_WAIT_SECONDS = 600
GONE_HOLDER_WAIT_SECONDS = 60
WATCH_SECONDS = 1.0  # how often the main thread looks at the running job's pool waits
# How long the main thread sleeps at a time. A signal that the kernel hands to the worker thread only wakes the
# main thread, which alone runs Python's signal handlers, when its sleep ends: this is the demo's reaction time.
WAKE_SECONDS = 0.1
DEMO_RUN_TAG = "focus/demo_run"  # finds a run that execute_job created (executor: multiprocess)
STEP_CONSOLE_LOG = "demo-step-processes.log"  # in the instance folder: what step processes print (multiprocess)
TERMINAL: list[int | None] = [None]  # stdout as it was before Dagster captured it for a run's compute logs
_STOPPING: list[int] = []  # set once the demo is stopping: a further signal exits at once


def _import_before_threads() -> None:
    """Load what both threads import lazily before the worker starts.

    The main thread's pool watch builds SQLAlchemy selects while the worker's run may be importing
    `sqlalchemy.orm` for the first time; the watch then meets the half-initialised `sqlalchemy.orm.exc` and
    fails with AttributeError ("partially initialized module"). Imported once here, neither thread imports it.
    The rest of what the watch loads, `Runner._ready_to_watch` loads before the first run's thread starts.
    """
    import sqlalchemy.orm  # noqa: F401


def _stamp() -> str:
    return f"{time.perf_counter() - STARTED[0]:5.0f}s"


def say(line: str) -> None:
    """One summary line, stamped with the seconds since the demo started."""
    _LIVE.clear()
    print(f"{_stamp()}  {line}", flush=True)


def tell(line: str) -> None:
    """A line for the terminal while a run may be capturing stdout (it goes to the terminal, not the run's log)."""
    _LIVE.clear()
    _write(line + "\n")


def _write(text: str) -> None:
    if TERMINAL[0] is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    sys.stdout.flush()
    os.write(TERMINAL[0], text.encode())


def _interactive() -> bool:
    """Whether the demo prints to a terminal (then progress rewrites one line in place)."""
    try:
        return os.isatty(TERMINAL[0]) if TERMINAL[0] is not None else sys.stdout.isatty()
    except (OSError, ValueError, AttributeError):
        return False


class _LiveLine:
    """The steps' progress lines: on a terminal one line, rewritten in place (cut to the terminal's width, so that a
    carriage return goes back to its start) and cleared before the next summary line; elsewhere a line each."""

    def __init__(self):
        self.shown = False

    def show(self, line: str) -> None:
        if not _interactive():
            _write(line + "\n")
            return
        import shutil

        _write("\r\x1b[K" + line[: max(20, shutil.get_terminal_size().columns - 1)])
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.shown = False
            _write("\r\x1b[K")


_LIVE = _LiveLine()


class Stop(BaseException):
    """The demo stops now: a signal arrived, or a step waited too long for a pool. A BaseException, like
    KeyboardInterrupt, so that no `except Exception` in the code it interrupts swallows it."""

    def __init__(self, code: int, reason: str, advice: str = "", canceled: bool = True):
        super().__init__(reason)
        self.code, self.reason, self.advice, self.canceled = code, reason, advice, canceled


@contextmanager
def stopping_on_signals():
    """Ctrl-C (SIGINT) and SIGTERM raise `Stop` in the main thread, wherever it is; a second one exits at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STOPPING.clear()

    def handler(signum, _frame):
        if _STOPPING:
            os._exit(128 + signum)
        _STOPPING.append(signum)
        raise Stop(128 + signum, f"interrupted by {signal.Signals(signum).name}")

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _pool_wait_seconds() -> float:
    return float(os.environ.get("FOCUS_POOL_WAIT_SECONDS") or POOL_WAIT_SECONDS)


class Runner:
    """Executes the demo's jobs one at a time, each in a worker thread; meanwhile the main thread answers
    signals and watches the run's pool waits (`Stop` when one lasts too long).

    With `executor: in_process` (the default) a run's steps execute in this process; with `executor: multiprocess`
    each step executes in a process of its own, as the runs the UI or the sensor launch would (Dagster's
    execute_job over the job rebuilt from focus.yaml in every step process: `job_for_step_processes`). Under
    `executor: k8s` the demo still executes here, in process: a step pod needs a cluster, which the demo does not
    assume."""

    def __init__(self, instance, dagster_home, executor: str = "in_process", options: DemoOptions | None = None):
        from focus_dagster.platform.recovery import HOST_TAG, this_host

        self.instance, self.dagster_home = instance, dagster_home
        self.options = options or DemoOptions()
        self.stages: dict[str, list[float]] = {}  # job name -> [seconds, runs], in the order the jobs first ran
        self._cursor: str | None = None  # how far the running job's event log has been read for progress lines
        self.out_of_process = executor == "multiprocess"
        self.tags = {HOST_TAG: this_host()}  # run monitoring judges a run's pid on its own host only
        self.run_id: str | None = None
        self.job_name: str | None = None
        self.worker: threading.Thread | None = None
        self.done = threading.Event()  # set when the worker has finished its job
        self._reported: set[tuple[str, str]] = set()
        self._invocation: str | None = None  # the tag value that finds an out-of-process run before it is known
        self.started_at: float | None = None  # when the running job started (epoch seconds)
        self._watch_loaded = False  # whether the watch's looks have run once, before any run's thread

    def execute(self, job, **kwargs):
        """The job on the instance (in process, or a process per step), with the demo's quiet console."""
        run_id, outcome, done = str(uuid.uuid4()), {}, threading.Event()

        def work():
            try:
                outcome["result"] = self._execute(job, run_id, **kwargs)
            except BaseException as exc:  # handed to the main thread
                outcome["error"] = exc
            finally:
                done.set()

        _import_before_threads()
        self._ready_to_watch()
        # The watch looks only once the run has stored its first event: by then its thread has the instance in hand
        # (out of process, the watch finds nothing to look at before the run exists).
        begun_run = threading.Event()
        if not self.out_of_process:
            self.instance.add_event_listener(run_id, lambda _event: begun_run.set())
        self.job_name, self.done, self.started_at = job.name, done, time.time() - 1.0  # create_time's resolution
        self.run_id, self._invocation = (None, run_id) if self.out_of_process else (run_id, None)
        self._cursor, begun = None, time.perf_counter()
        self.worker = threading.Thread(target=work, name=f"focus demo: {job.name}", daemon=True)
        self.worker.start()
        watched = time.monotonic()
        # An Event, not Thread.join: a signal handler raising inside join(timeout) leaves the thread marked
        # finished while it still runs (CPython 3.11), and the demo would wait for it at exit.
        while not done.wait(WAKE_SECONDS):
            if time.monotonic() - watched >= WATCH_SECONDS and (begun_run.is_set() or self.out_of_process):
                self._watch_pools()
                self._watch_progress()
                watched = time.monotonic()
        self.worker.join()
        self._watch_progress()  # what the run logged since the last look
        stage = self.stages.setdefault(job.name, [0.0, 0])
        stage[0], stage[1] = stage[0] + time.perf_counter() - begun, stage[1] + 1
        self.run_id = self.job_name = self.worker = self._invocation = self.started_at = None
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]

    def _ready_to_watch(self) -> None:
        """Every look of the watch, once, at no run, before the first run's thread starts: what the looks load
        (the storage's queries, its record classes) is loaded by this thread alone, so that a look never meets a
        module that the run's thread is still importing."""
        if self._watch_loaded:
            return
        import dagster as dg
        from sqlalchemy.exc import OperationalError

        from focus_dagster.platform.pools import holders, waits_of
        from focus_dagster.platform.recovery import run_processes

        nobody, storage = str(uuid.uuid4()), self.instance.event_log_storage  # no such run: every look finds nothing
        try:
            waits_of(self.instance, nobody)
            for pool in sorted(storage.get_concurrency_keys()) if storage.supports_global_concurrency_limits else []:
                holders(self.instance, pool)
            run_processes(self.instance, nobody)
            self.instance.get_records_for_run(nobody)
            self.instance.get_run_by_id(nobody)
            self.instance.get_run_records(dg.RunsFilter(tags={DEMO_RUN_TAG: nobody}), limit=1)
        except OperationalError:  # the storage is busy (another process writing): loaded at the next run
            return
        self._watch_loaded = True

    def _execute(self, job, run_id: str, partition_key=None):
        partition = {"partition_key": partition_key} if partition_key is not None else {}
        if not self.out_of_process:
            return job.execute_in_process(run_id=run_id, instance=self.instance, tags=self.tags,
                                          raise_on_error=False, run_config=QUIET, **partition)
        import dagster as dg

        from focus_dagster.platform.instance import REPO_ROOT

        # execute_job makes the run itself: the tag finds it while it runs (its pool waits, a signal).
        tags = {**self.tags, DEMO_RUN_TAG: run_id}
        if partition_key is not None:
            tags.update(job.get_tags_for_partition_key(partition_key, selected_asset_keys=None))
        rebuilt = dg.build_reconstructable_job("focus_dagster.platform.runner", "job_for_step_processes",
                                               (job.name, self.options.to_json()),
                                               reconstructor_working_directory=str(REPO_ROOT))
        with _stderr_to(self.dagster_home / STEP_CONSOLE_LOG):
            return dg.execute_job(rebuilt, instance=self.instance, run_config=QUIET, tags=tags, raise_on_error=False)

    def current_run_id(self) -> str | None:
        """The run the worker is executing: known from the start in process, looked up by its tag otherwise (None
        before execute_job has created it)."""
        if self.run_id is None and self._invocation is not None:
            import dagster as dg

            records = self.instance.get_run_records(dg.RunsFilter(tags={DEMO_RUN_TAG: self._invocation}), limit=1)
            self.run_id = records[0].dagster_run.run_id if records else None
        return self.run_id

    def _watch_progress(self) -> None:
        """Print the progress lines the running job's steps logged since the last look, read from the run's event
        log (so a step in a process of its own is heard as well as one in this process)."""
        from sqlalchemy.exc import OperationalError

        run_id = self.current_run_id()
        if run_id is None:
            return
        try:
            connection = self.instance.get_records_for_run(run_id, cursor=self._cursor)
        except OperationalError:  # the storage is busy (SQLite locked by the run's writes): next look
            return
        self._cursor = connection.cursor or self._cursor
        for record in connection.records:
            entry = record.event_log_entry
            if entry.dagster_event is None and entry.level == logging.INFO and is_progress(entry.user_message):
                _LIVE.show(f"{_stamp()}    {without_mark(entry.user_message)}")

    def _watch_pools(self) -> None:
        from focus_dagster.platform.pools import held_line, holders, report_wait, waits_of

        run_id = self.current_run_id()
        if run_id is None:
            return
        for wait in waits_of(self.instance, run_id):
            if (wait.pool, wait.step_key) not in self._reported:
                self._reported.add((wait.pool, wait.step_key))
                line = report_wait(self.instance, self.instance.get_run_by_id(run_id), wait.step_key, wait.pool)
                tell(f"  step {wait.step_key} of run {run_id}: {line}")
            held_by = holders(self.instance, wait.pool)
            gone = bool(held_by) and all(h.gone for h in held_by)
            bound = min(_pool_wait_seconds(), GONE_HOLDER_WAIT_SECONDS) if gone else _pool_wait_seconds()
            waited = time.time() - wait.since
            if waited > bound:
                raise Stop(1, f"step {wait.step_key} waited {waited:.0f}s for pool {wait.pool}, "
                           + held_line(held_by), self._advice(gone), canceled=False)

    def _advice(self, gone: bool) -> str:
        home = f"DAGSTER_HOME={self.dagster_home}"
        if gone:
            return ("Nothing runs for that slot any more. Run monitoring releases it within a minute while the Dagster "
                    f"daemon runs (make ui, or {home} .venv/bin/dagster-daemon run); or release it now: "
                    ".venv/bin/focus recover. Then run the demo again.")
        return ("That run is still at work: wait for it to finish (make ui shows it), or terminate it there, then run "
                f"the demo again. FOCUS_POOL_WAIT_SECONDS sets how long the demo waits (now {_pool_wait_seconds():.0f}s).")

    def stop(self, stop: Stop) -> int:
        """End the demo: the interrupted run is marked CANCELED (a signal) or FAILURE (a pool wait) and its pool
        slots are freed; one line says why and which run to look at. A worker still running is abandoned by
        exiting the process at once: it cannot be interrupted, and it must not outlive its run's slots."""
        _STOPPING.append(0)
        run_id = self.current_run_id()
        run = self.instance.get_run_by_id(run_id) if run_id else None
        if run is not None and not run.is_finished:
            message = f"focus demo: {stop.reason}"
            if stop.canceled:
                self.instance.report_run_canceled(run, message)
            else:
                self.instance.report_run_failed(run, message)
        if run_id:
            self.instance.event_log_storage.free_concurrency_slots_for_run(run_id)
            run = self.instance.get_run_by_id(run_id)
        if run is not None:
            where = (f"; run {run_id} ({self.job_name}) stopped, now {run.status.value}: see it in the UI (make ui) "
                     f"or the instance {self.dagster_home}")
        else:
            where = f"; run {run_id} ({self.job_name}) had not started" if run_id else " between runs"
        tell(f"focus demo: {stop.reason}{where}")
        if stop.advice:
            tell(f"  {stop.advice}")
        if self.out_of_process and self.started_at is not None:
            # After the run is marked: a step process's end seen first would fail the run instead.
            _kill_step_processes(self.started_at)
        if self.worker is not None and not self.done.is_set():
            sys.stderr.flush()
            os._exit(stop.code)
        return stop.code


def _kill_step_processes(since: float) -> None:
    """Kill the processes this one started since `since` (epoch seconds: the run's start), the step processes of the
    multiprocess executor and their image decoders: nothing computes on for a run the demo has marked stopped, and
    the demo exits at once after, before its executor could report their end as the run's failure. Older children
    (a caller's servers, when the demo runs inside another program) are not the run's and are left alone."""
    import psutil

    killed = []
    for child in psutil.Process().children(recursive=True):
        with suppress(psutil.NoSuchProcess):
            if child.create_time() >= since:
                child.kill()
                killed.append(child)
    _wait_ended(killed)


def _wait_ended(processes, bound_seconds: float = 10.0) -> None:
    """Until every process has ended (a zombie has: only its parent's wait is left), so that nothing of the run still
    runs when the demo exits. A SIGKILL takes effect when the process next gets the CPU: on a loaded machine a step
    process with torch loaded was still running when the demo had exited. SIGKILL cannot be refused; the bound is
    for a process held in the kernel (uninterruptible I/O), which the demo does not wait for."""
    import psutil

    def running(process) -> bool:
        try:
            return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + bound_seconds
    while any(running(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.02)


@contextmanager
def _stderr_to(path):
    """This process's stderr, and so the step processes' it starts, appended to `path` meanwhile: a step process
    logs to the console at the instance's level whatever the run's loggers say, a dozen DEBUG lines per run; the
    run's events are in the instance all the same."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def job_for_step_processes(job_name: str, options: str = "{}"):
    """The demo's job rebuilt from focus.yaml in a step process of the multiprocess executor (the environment, and
    so FOCUS_HOME and FOCUS_CONFIG, is the demo's), narrowed by the demo's options (`DemoOptions.to_json`)."""
    from focus_dagster.definitions import build_definitions

    return build_definitions(demo_config(load_config(), DemoOptions.from_json(options))).resolve_job_def(job_name)


@dataclass(frozen=True)
class DemoOptions:
    """What one `focus demo` runs, narrower than focus.yaml: some of its datasets and models (None: all), the LoRA
    stage or not, and the size of the synthetic look-alikes (None: `synthetic.per_dataset`)."""

    datasets: tuple[str, ...] | None = None
    models: tuple[str, ...] | None = None
    lora: bool = True
    per_dataset: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DemoOptions:
        values = json.loads(text)
        return cls(**{key: tuple(value) if isinstance(value, list) else value for key, value in values.items()})


def demo_config(config: FocusConfig, options: DemoOptions) -> FocusConfig:
    """focus.yaml's configuration narrowed to the demo's options. A dataset or model it does not configure is an
    error listing those it does."""
    if options.datasets is not None:
        _all_configured("dataset", options.datasets, config.dataset_keys, config)
        config = replace(config, roots={k: root for k, root in config.roots.items() if k in options.datasets},
                         declared={k: d for k, d in config.declared.items() if k in options.datasets})
    if options.models is not None:
        from focus_dagster.models.catalog import DEFAULT_MODELS

        _all_configured("model", options.models, list(resolve_models(config.models, config.model_cache)), config)
        entries = config.models if config.models is not None else DEFAULT_MODELS
        kept = tuple(e for e in entries if (e if isinstance(e, str) else e["id"]) in options.models)
        # A pair of `compare:` is compared only while both its models run.
        compared = tuple(pair for pair in config.compare if set(pair) <= set(options.models))
        config = replace(config, models=kept, compare=compared)
    if options.per_dataset is not None:
        if options.per_dataset < 1:
            raise ConfigError(f"focus demo --per-dataset {options.per_dataset}: give at least 1 image per dataset.")
        config = replace(config, synthetic=replace(config.synthetic, per_dataset=options.per_dataset))
    return config


def _all_configured(what: str, names, configured: list[str], config: FocusConfig) -> None:
    unknown = [name for name in names if name not in configured]
    if unknown:
        where = config.source or "the default configuration (no FOCUS_CONFIG)"
        raise ConfigError(f"focus demo --{what}s: {', '.join(map(repr, unknown))} not configured in {where}; "
                          f"configured {what}s: {', '.join(configured)}.")
