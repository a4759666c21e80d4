"""Image files: which names count as images, and the checks that tell a sound image from a broken one.

Light on purpose (Pillow loads only when an image must be decoded): the command line offers the image
checks named here without loading any data library.
"""

from __future__ import annotations

from pathlib import Path

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp"})
# "none": existence only; "header": format signature and end marker (fast, catches truncation);
# "full": decode every image.
IMAGE_CHECKS = ("none", "header", "full")
DEFAULT_IMAGE_CHECK = "header"

_TAIL_BYTES = 4096


def image_defect(path: Path, image_check: str = DEFAULT_IMAGE_CHECK) -> str | None:
    """Why an image file cannot be used, or None when it looks sound.

    "header" checks the format signature and that the file ends with the format's end marker (a
    truncated download loses it); odd files (data after the end marker) fall back to a full decode.
    """
    if image_check == "none":
        return None
    try:
        size = path.stat().st_size
        if size == 0:
            return "empty file"
        with open(path, "rb") as handle:
            head = handle.read(16)
            handle.seek(max(0, size - _TAIL_BYTES))
            tail = handle.read()
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    kind = sniff_image_format(head)
    if kind is None:
        return f"not an image (starts with bytes {head[:8].hex()})"
    if image_check == "full" or not _has_end_marker(kind, tail):
        return _decode_defect(path)
    return None


def sniff_image_format(head: bytes) -> str | None:
    """The image format named by a file's first bytes (jpeg, png, tiff, bmp), or None for anything else."""
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head.startswith(b"BM"):
        return "bmp"
    return None


def _has_end_marker(kind: str, tail: bytes) -> bool:
    if kind == "jpeg":
        return b"\xff\xd9" in tail
    if kind == "png":
        return b"IEND" in tail[-16:]
    return False  # no cheap end marker: decode


def _decode_defect(path: Path) -> str | None:
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()
    except Exception as exc:  # PIL raises many types for broken files; all mean "unusable"
        return f"cannot be decoded ({type(exc).__name__}: {exc})"
    return None
