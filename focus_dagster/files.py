"""Writing files so that a reader never sees half of one, and never outside its store: every output of the
platform goes through here."""

from __future__ import annotations

import hashlib
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from focus_dagster.errors import PathOutsideRootError


def confined(root: str | Path, rel: str | Path, what: str = "path") -> Path:
    """`root / rel`, refused when it resolves outside `root` (PathOutsideRootError).

    Paths under a store are built from names (model ids, dataset keys, adapter keys); the configuration
    refuses names that are not plain, and this is the second line: a `..` part, an absolute `rel` or a link
    inside the store that leads out all resolve outside and are refused before anything is written or read.
    `root` itself may be a link (a whole store on another disk); the path returned is `root / rel` as given.
    """
    root = Path(root)
    path = root / rel
    inside, resolved = root.resolve(), path.resolve()
    if resolved != inside and not resolved.is_relative_to(inside):
        raise PathOutsideRootError(
            f"{what} {str(rel)!r} resolves to {resolved}, outside {inside}: names in focus.yaml must be plain names "
            "(no '/', '..' or leading '.'), and a folder inside the store must not be a link to elsewhere (to keep "
            "the store on another disk, link the whole store folder instead).")
    return path


@contextmanager
def atomic_path(target: Path, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside `target` to write to; it replaces `target` in one rename when the block ends.

    The temporary name carries the process id, so two processes writing the same target never share it, and
    `suffix` for writers that insist on an extension (numpy appends `.npz` otherwise). A failed write leaves
    `target` as it was and removes the partial file or folder.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.tmp-{os.getpid()}{suffix}")
    _remove(partial)  # left by a killed run whose process id this one reuses
    try:
        yield partial
        if partial.is_dir() and target.is_dir():
            shutil.rmtree(target)
        os.replace(partial, target)
    finally:
        _remove(partial)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def write_bytes_atomically(target: Path, data: bytes) -> Path:
    with atomic_path(target) as partial:
        partial.write_bytes(data)
    return Path(target)


def file_sha256(path: str | Path) -> str:
    """Content hash of a file, or of every file of a folder (sorted by name, each name hashed with its bytes)."""
    path = Path(path)
    if not path.is_dir():
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(item.relative_to(path).as_posix().encode() + b"\0")
        with open(item, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
