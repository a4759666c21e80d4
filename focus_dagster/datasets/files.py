"""Finding a dataset's files under its root: the publisher's names, tolerated variants, image listings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from focus_dagster.datasets.images import IMAGE_SUFFIXES
from focus_dagster.errors import DatasetLayoutError


def find_existing(root: Path, dataset: str, candidates: Iterable[str], what: str) -> str:
    """The first candidate path (relative to root) that exists; a layout error naming all of them if none."""
    candidates = list(candidates)
    for rel in candidates:
        if (root / rel).exists():
            return rel
    raise DatasetLayoutError(
        f"[{dataset}] no {what} under {root}: looked for {candidates}. "
        "Point the dataset root at the folder that holds the publisher's files."
    )


def find_nested_root(root: Path, marker: str) -> Path:
    """`root`, or a copy of it nested once under a folder named like `marker` (a common unzip artefact)."""
    if (root / marker).exists():
        return root
    nested = root / root.name
    if root.name and (nested / marker).exists():
        return nested
    return root


def list_images(root: Path, rel_dir: str, *, recursive: bool = False) -> list[str]:
    """Image files (by suffix, any case) under root/rel_dir as root-relative POSIX paths, sorted."""
    base = root / rel_dir
    found: list[str] = []
    if not base.is_dir():
        return found
    stack = [base]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if recursive:
                        stack.append(Path(entry.path))
                elif os.path.splitext(entry.name)[1].lower() in IMAGE_SUFFIXES:
                    found.append(Path(entry.path).relative_to(root).as_posix())
    return sorted(found)


def links_leaving_root(root: Path, rel_paths: Iterable[str]) -> dict[str, str]:
    """The paths (relative to root) that lead outside the root once symbolic links are resolved, each with
    where it really leads. A path that only looks inside (`images/x.jpg` where `images` links to another
    disk, or `x.jpg` linking to `/etc/passwd`) is caught here; `..` and absolute paths are caught before."""
    real_root = os.path.realpath(root)
    inside = real_root.rstrip(os.sep) + os.sep
    real_folders: dict[str, str] = {}  # a dataset's images share a few folders: resolve each once
    leaving: dict[str, str] = {}
    for rel in rel_paths:
        path = os.path.join(root, rel)
        folder, name = os.path.split(path)
        if folder not in real_folders:
            real_folders[folder] = os.path.realpath(folder)
        real = os.path.realpath(path) if os.path.islink(path) else os.path.join(real_folders[folder], name)
        if real != real_root and not real.startswith(inside):
            leaving[rel] = real
    return leaving


def index_by_stem(paths: Iterable[str]) -> dict[str, str]:
    """Map `folder/stem` (extension and its case removed) to the real path, for datasets that name images by id."""
    index: dict[str, str] = {}
    for p in paths:
        stem = p.rsplit(".", 1)[0] if "." in p.rsplit("/", 1)[-1] else p
        index.setdefault(stem, p)
    return index
