"""Running `focus` commands in the test process, as a user would in a shell with FOCUS_HOME and FOCUS_CONFIG set."""

from __future__ import annotations

import contextlib
import io

import pytest


def run_focus(env: dict[str, str], *argv: str) -> tuple[int, str]:
    """`focus <argv>` under `env` (DAGSTER_HOME unset, as in a fresh shell): its exit code and what it printed."""
    from focus_dagster.platform.cli import main

    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        patch.delenv("DAGSTER_HOME", raising=False)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(list(argv))
    return code, out.getvalue()
