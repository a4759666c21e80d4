"""Shared fixtures (small synthetic look-alikes written once per test session) and the run's summary of what
could not run here; the helpers tests import live in tests/support/."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from tests.support.environment import (CHROMIUM, CHROMIUM_ABSENT, INSTALL_CHROMIUM, INSTALL_POSTGRES,
                                       POSTGRES_ABSENT, POSTGRES_BINARIES, require_reference)

os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "shared_reference(path): needs this ../shared/reference file; skipped when absent, failed under CI")
    config.addinivalue_line(
        "markers", "heavy(seconds): a module that takes about this long on a quiet 2-core machine; started first")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _one_thread_per_worker()


def _one_thread_per_worker() -> None:
    """Each xdist worker is a process with its own torch/OpenMP thread pool. Two workers at two threads each on a
    2-core machine spin-wait on each other: 50 LoRA steps took about 240 s side by side, 15 s with one thread
    each. Set before torch is imported (it reads these once); the processes a test starts inherit them."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    if "torch" in sys.modules:  # imported already by a plugin: its pool is sized, so size it again
        sys.modules["torch"].set_num_threads(1)


def pytest_runtest_setup(item):
    _default_sigterm()


def _default_sigterm() -> None:
    """SIGTERM back to its default before each test (and the fixtures it sets up first).

    An xdist worker ignores SIGINT, and Dagster's in-process execution, on leaving each run, gives SIGTERM
    whatever SIGINT has (dagster._utils.interrupts.setup_interrupt_handlers): after the worker's first run,
    SIGTERM is ignored too, and every process a run started from a thread inherits that. Dagster's compute-log
    `tail` then outlived its terminate() and each step's cleanup waited out two 30 s timeouts (a 5 s test took
    65 s in the suite)."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pytest_collection_modifyitems(config, items):
    """The heavy modules first, longest first: `make test` hands whole files to two workers in this order
    (--no-loadscope-reorder), so a long module starts while the short ones fill the other worker, instead of
    starting last and running alone at the end."""
    def expected_seconds(item) -> float:
        mark = item.get_closest_marker("heavy")
        return float(mark.args[0]) if mark else 0.0

    items.sort(key=lambda item: -expected_seconds(item))  # stable: files and tests keep their order otherwise


def pytest_terminal_summary(terminalreporter):
    """Says at the end of the run, where it is read, that the browser tests or the PostgreSQL tests did not run
    and how to run them: their skips are otherwise letters among hundreds. Under xdist the workers' reports reach
    the controller, whose summary this is, so the count covers every worker."""
    skipped = _skipped_for(terminalreporter, CHROMIUM_ABSENT)
    if skipped:
        terminalreporter.write_sep("=", "browser tests not run", yellow=True, bold=True)
        terminalreporter.write_line(f"{len(skipped)} browser test(s) skipped: {CHROMIUM} is absent. "
                                    f"To run them: {INSTALL_CHROMIUM}", yellow=True, bold=True)
    skipped = _skipped_for(terminalreporter, POSTGRES_ABSENT)
    if skipped:
        terminalreporter.write_sep("=", "PostgreSQL tests not run", yellow=True, bold=True)
        terminalreporter.write_line(f"{len(skipped)} PostgreSQL instance test(s) skipped: the PostgreSQL server "
                                    f"({POSTGRES_BINARIES}/initdb) is absent. To run them: {INSTALL_POSTGRES}",
                                    yellow=True, bold=True)


def _skipped_for(terminalreporter, words: str) -> set[str]:
    return {report.nodeid for report in terminalreporter.stats.get("skipped", []) if words in _skip_reason(report)}


def _skip_reason(report) -> str:
    # A skip's longrepr is (path, line, "Skipped: reason"), on the xdist controller too; anything else (a
    # failure's traceback) is not a skip of ours.
    longrepr = getattr(report, "longrepr", None)
    return str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""


@pytest.fixture(autouse=True)
def _shared_reference_present(request):
    for mark in request.node.iter_markers("shared_reference"):
        require_reference(mark.args[0])


@pytest.fixture(scope="session")
def synth_all(tmp_path_factory):
    """All ten look-alikes, small: (root folder, manifests by dataset key)."""
    from focus_dagster.synthetic import synthesize

    out = tmp_path_factory.mktemp("synth")
    manifests = synthesize(out, per_dataset=24, seed=7, scale=0.05, workers=1)
    return out, manifests
