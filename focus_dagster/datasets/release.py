"""Dataset release fingerprints: the data version of a dataset as it sits on disk.

The fingerprint hashes the content of every label and annotation file and the listing (relative path
and size) of every image; with `content_hash=True` image bytes are hashed too, which catches an image
replaced by another of the same size at the cost of reading the whole dataset. Any change a publisher
ships (new labels, added or removed images) changes the version, and nothing else does: timestamps and
the machine's absolute paths are left out, so two copies of one release get the same version.

Symbolic links to folders are never followed: the walk cannot loop on a link cycle or wander off to
another disk, and the readers accept no image that lies outside the root anyway. Each such link is
hashed as an entry of its own (its target relative to the root, or "outside the root"), so adding,
removing or redirecting one changes the version.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from focus_dagster.datasets.images import IMAGE_SUFFIXES
from focus_dagster.errors import DatasetLayoutError
from focus_dagster.files import file_sha256

VERSION_LENGTH = 24


@dataclass(frozen=True)
class ReleaseFingerprint:
    dataset: str
    version: str
    label_files: int
    images: int
    total_bytes: int
    content_hash: bool
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)


def fingerprint_dataset(dataset: str, root: str | Path, *, content_hash: bool = False) -> ReleaseFingerprint:
    """Fingerprint every file under `root` (hidden files and folders, such as temporary copies, excluded)."""
    started = time.perf_counter()
    root = Path(root)
    if not root.is_dir():
        raise DatasetLayoutError(f"[{dataset}] dataset root {root} does not exist or is not a folder.")
    digest = hashlib.sha256()
    label_files = images = total = 0
    for rel, size, link in _walk(root):
        if link is not None:  # a link to a folder, never followed: where it leads is part of the release
            digest.update(f"D {rel} -> {link}".encode("utf-8", "surrogateescape") + b"\n")
            continue
        is_image = os.path.splitext(rel)[1].lower() in IMAGE_SUFFIXES
        if is_image and not content_hash:
            entry = f"I {rel} {size}"
        else:
            entry = f"{'I' if is_image else 'L'} {rel} {size} {file_sha256(root / rel)}"
        digest.update(entry.encode("utf-8", "surrogateescape") + b"\n")
        images += is_image
        label_files += not is_image
        total += size
    return ReleaseFingerprint(
        dataset=dataset,
        version=digest.hexdigest()[:VERSION_LENGTH],
        label_files=label_files,
        images=images,
        total_bytes=total,
        content_hash=content_hash,
        seconds=round(time.perf_counter() - started, 3),
    )


def _walk(root: Path) -> list[tuple[str, int, str | None]]:
    """(relative POSIX path, size, None) of every visible file, sorted so the order never depends on the disk.

    A symbolic link to a folder is not descended into (a cycle would never end): it appears as (path, 0,
    target), the target relative to the root or `outside the root`. A link to a file counts as the file
    it leads to; a broken link or a link loop counts as nothing.
    """
    found: list[tuple[str, int, str | None]] = []
    real_root = os.path.realpath(root)
    stack = [root]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                rel = Path(entry.path).relative_to(root).as_posix()
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_symlink() and entry.is_dir(follow_symlinks=True):
                    found.append((rel, 0, _link_target(real_root, entry.path)))
                elif entry.is_file(follow_symlinks=True):
                    found.append((rel, entry.stat().st_size, None))
    found.sort(key=lambda item: item[0])
    return found


def _link_target(real_root: str, path: str) -> str:
    """Where a folder link leads, relative to the root (so copies of a release agree), or that it leaves it."""
    real = os.path.realpath(path)
    if real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep):
        return Path(os.path.relpath(real, real_root)).as_posix()
    return "outside the root"
