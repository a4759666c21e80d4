"""Decode once: the resized uint8 pixels of every image, kept in the artifact store for the next model.

Every encoder of the grid reads the same images at one of a few input sizes; decoding a full-size fundus
JPEG costs far more than reading its pixels back. The cache of one dataset is a folder per preprocessing
key (the input size, the resize policy and filter, the decoder, and the version of this code's pixels), and
in it one `.npy` file per image, named by the image's content hash: a changed image has another hash, so its
old pixels are never served, and the same picture under two names is decoded once. Files are written to a
temporary name and renamed into place, so workers and concurrent runs never read half of one.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from focus_dagster.files import atomic_path
from focus_dagster.models.preprocessing import processor_digest
from focus_dagster.models.spec import Preprocess

# Bump when the pixels this code produces for the same inputs change (resize arithmetic, colour conversion).
# 2: full decodes resized by the library's transform (1: reduced-scale JPEG decodes, the platform's own resize).
PIXELS_VERSION = 2


def preprocessing_key(preprocess: Preprocess, decoder: str) -> str:
    """The folder name of one preprocessing: everything that decides the pixels, and nothing that does not
    (mean, std and scale_only act later, on the model's device). Pixels an image processor computes are that
    processor's: its configuration's digest is part of the key."""
    transform = f"-processor-{processor_digest(preprocess.processor)}" if preprocess.processor else ""
    return (f"{preprocess.size}px-{preprocess.resize}-{preprocess.scale_size}-{preprocess.interpolation}"
            f"{transform}-{decoder}-v{PIXELS_VERSION}")



def content_hash_of(data: bytes) -> str:
    """The harmonised labels' `content_hash` of image bytes (focus_dagster/labels/harmonise.py)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True)
class KnownHashes:
    """Content hashes already taken (the harmonised labels' `content_hash`, by path) and when (`as_of_ns`, the
    time the labels were written). A file modified since then is hashed again from its bytes."""

    by_path: dict[str, str]
    as_of_ns: int

    def current(self, path: str) -> str | None:
        """The recorded hash while the file is no newer than the record, else None."""
        recorded = self.by_path.get(path)
        if not recorded:
            return None
        try:
            return recorded if os.stat(path).st_mtime_ns <= self.as_of_ns else None
        except OSError:
            return None


@dataclass(frozen=True)
class PixelCache:
    """The cached pixels of one dataset at one preprocessing (a folder of `<hash>.npy`, uint8 [3, size, size])."""

    root: Path
    size: int

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.npy"

    def read(self, key: str) -> np.ndarray | None:
        """The pixels of one image, or None when they are not here (or unreadable: they are then decoded and
        written again)."""
        try:
            pixels = np.load(self.path(key), allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None
        if pixels.dtype != np.uint8 or pixels.shape != (3, self.size, self.size):
            return None
        return pixels

    def write(self, key: str, pixels: np.ndarray) -> None:
        """Keep the pixels of one image; a writer racing another writes the same bytes, and the rename makes
        either copy whole."""
        with atomic_path(self.path(key), suffix=".npy") as partial:
            np.save(partial, np.ascontiguousarray(pixels, dtype=np.uint8), allow_pickle=False)
