"""The code version every number is stamped with: the package version and the commit it runs from.

From a git checkout, the commit (with '-dirty' for local edits). In an image built without `.git`, the commit the
build was given (`FOCUS_CODE_COMMIT`, a build argument of deploy/Dockerfile). Failing both, a digest of the
package's own source files, so that two different codes never share a version even then.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from pathlib import Path

from focus_dagster import __version__

PACKAGES = ("focus_dagster", "assets", "resources", "checks")


@functools.cache
def code_version() -> str:
    return describe(Path(__file__).resolve().parents[1], os.environ.get("FOCUS_CODE_COMMIT", ""))


def describe(root: Path, built_from: str = "") -> str:
    """The version of the code under `root` (see the module docstring)."""
    commit = _git_commit(root)
    if commit:
        return f"{__version__}+{commit}"
    if built_from.strip():
        return f"{__version__}+{built_from.strip()}"
    return f"{__version__}+src.{source_digest(root)}"


def _git_commit(root: Path) -> str | None:
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-dirty" if dirty else "")


def source_digest(root: Path) -> str:
    """12 hex digits of SHA-256 over the path and content of every Python file of the packages under `root`."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]
