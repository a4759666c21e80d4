"""The code version numbers are stamped with, where the code runs: a checkout, an image built with its commit,
or installed files alone."""

from __future__ import annotations

import subprocess

from focus_dagster import __version__
from focus_dagster.version import describe


def _tree(root, body: str = "X = 1\n"):
    for package in ("focus_dagster", "assets"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text(body)
    return root


def test_installed_files_alone_are_versioned_by_their_content(tmp_path):
    first = describe(_tree(tmp_path / "a"))
    assert first.startswith(f"{__version__}+src.") and len(first.rsplit(".", 1)[-1]) == 12
    assert describe(_tree(tmp_path / "b")) == first  # the same files, elsewhere
    (tmp_path / "b" / "assets" / "notes.txt").write_text("not code")
    assert describe(tmp_path / "b") == first
    (tmp_path / "b" / "assets" / "__init__.py").write_text("X = 2\n")
    assert describe(tmp_path / "b") != first


def test_an_image_names_the_commit_it_was_built_from(tmp_path):
    assert describe(_tree(tmp_path), "0123456789ab") == f"{__version__}+0123456789ab"


def test_a_checkout_names_its_commit_and_says_when_it_is_edited(tmp_path):
    root = _tree(tmp_path)
    git = ["git", "-C", str(root), "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert describe(root, "ignored-in-a-checkout") == f"{__version__}+{head}"
    (root / "assets" / "__init__.py").write_text("X = 3\n")
    assert describe(root) == f"{__version__}+{head}-dirty"
