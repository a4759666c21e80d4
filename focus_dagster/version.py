"""The code version every number is stamped with: the package version and the commit it runs from."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from focus_dagster import __version__


@functools.cache
def code_version() -> str:
    """The package version, plus the git commit of the checkout it runs from (and '-dirty' for local edits)."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+{commit}" + ("-dirty" if dirty else "")
