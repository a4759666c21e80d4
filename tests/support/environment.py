"""What the tests need of their machine and data: the shared reference files, chromium, PostgreSQL's server,
a C compiler, and private copies of the look-alikes. A missing piece skips its tests on a workstation and
fails them under CI (CI=true), where a silent skip would prove nothing."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import pytest

SHARED_REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_reference(path: Path) -> Path:
    """`path` under ../shared/reference, for a test that checks the code against a real published file.

    Absent, the test is skipped on a workstation, but fails under CI (CI=true) with what is missing: a CI
    run that silently skipped every check against the real files would pass while proving nothing.
    """
    path = Path(path)
    if path.exists():
        return path
    message = (f"{path} is absent: this test checks the code against the real published file kept in "
               f"../shared/reference (see its README).")
    if under_ci():
        pytest.fail(f"{message} Under CI (CI=true) the shared reference copy must be present: "
                    f"mount or copy it next to the checkout.", pytrace=False)
    pytest.skip(message)


CHROMIUM = Path("/usr/bin/chromium")  # Debian's, driven by playwright: its own browser downloads are unreachable
INSTALL_CHROMIUM = "sudo apt-get install -y chromium"
# Words of every skip `require_chromium` makes: the terminal summary counts the skipped tests by them.
CHROMIUM_ABSENT = "is absent: the browser tests need Debian's chromium"


def require_chromium() -> Path:
    """The browser for a test that drives the UI: skipped on a workstation without it, failed under CI."""
    if CHROMIUM.exists():
        return CHROMIUM
    message = f"{CHROMIUM} {CHROMIUM_ABSENT} (`{INSTALL_CHROMIUM}`, as .ci/run does)"
    if under_ci():
        pytest.fail(f"{message}; under CI the UI must be tested in a real browser.", pytrace=False)
    pytest.skip(message)


POSTGRES_BINARIES = "/usr/lib/postgresql/*/bin"  # Debian's server binaries (initdb, pg_ctl, postgres), any version
INSTALL_POSTGRES = "sudo apt-get install -y postgresql"
# Words of every skip `require_postgres` makes: the terminal summary counts the skipped tests by them.
POSTGRES_ABSENT = "is absent: the PostgreSQL instance tests start a real server from Debian's postgresql"


def require_postgres() -> Path:
    """The folder of PostgreSQL's server binaries (the newest version installed), for a test that starts a real
    server: skipped on a workstation without them, failed under CI."""
    found = [Path(path).parent for path in glob.glob(f"{POSTGRES_BINARIES}/initdb")]
    found = [folder for folder in found if (folder / "pg_ctl").exists() and (folder / "postgres").exists()]
    if found:
        return max(found, key=lambda folder: _version(folder.parent.name))
    message = f"{POSTGRES_BINARIES}/initdb {POSTGRES_ABSENT} (`{INSTALL_POSTGRES}`, as .ci/run does)"
    if under_ci():
        pytest.fail(f"{message}; under CI the PostgreSQL instance must be tested on a real server.", pytrace=False)
    pytest.skip(message)


def _version(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else 0 for part in name.split("."))


# Inductor (torch.compile) builds its CPU kernels with the system's C compiler.
needs_compiler = pytest.mark.skipif(shutil.which("cc") is None, reason="inductor needs a C compiler on a CPU")


def needs_reference(path: Path):
    """Mark a test that needs `path` of the shared reference copy (see `require_reference`)."""
    return pytest.mark.shared_reference(Path(path))


def copy_tree(src: Path, dst: Path) -> Path:
    """A private, writable copy of a look-alike, for tests that damage it."""
    shutil.copytree(src, dst)
    return dst


def link_stand_in_images(root: Path, rel_paths) -> None:
    """One tiny valid image hard-linked at every path: a real label file's layout without its pictures."""
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    stand_ins = {}
    for rel in rel_paths:
        suffix = Path(rel).suffix.lower() or ".jpg"
        if suffix not in stand_ins:
            stand_ins[suffix] = root / f".stand-in{suffix}"
            Image.new("RGB", (4, 4)).save(stand_ins[suffix], format="PNG" if suffix == ".png" else "JPEG")
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(stand_ins[suffix], target)
