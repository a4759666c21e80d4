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
# The format each image extension promises, and the formats' names as messages spell them.
SUFFIX_FORMATS = {".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png", ".tif": "tiff", ".tiff": "tiff", ".bmp": "bmp"}
FORMAT_NAMES = {"jpeg": "JPEG", "png": "PNG", "tiff": "TIFF", "bmp": "BMP"}


def image_defect(path: Path, image_check: str = DEFAULT_IMAGE_CHECK) -> str | None:
    """Why an image file cannot be used, or None when it looks sound.

    "header" checks the format signature and that the file ends with the format's end marker (a
    truncated download loses it); odd files (data after the end marker) fall back to a full decode.
    """
    return inspect_image(path, image_check)[0]


def inspect_image(path: Path, image_check: str = DEFAULT_IMAGE_CHECK) -> tuple[str | None, str | None]:
    """(why the image cannot be used or None, the format its content has or None when not sniffed).

    The format comes from the content, never from the extension: "none" sniffs nothing.
    """
    if image_check == "none":
        return None, None
    try:
        size = path.stat().st_size
        if size == 0:
            return "empty file", None
        with open(path, "rb") as handle:
            head = handle.read(16)
            handle.seek(max(0, size - _TAIL_BYTES))
            tail = handle.read()
    except OSError as exc:
        return f"cannot be read ({exc.strerror})", None
    kind = sniff_image_format(head)
    if kind is None:
        return f"not an image (starts with bytes {head[:8].hex()})", None
    if image_check == "full" or not _has_end_marker(kind, tail):
        return _decode_defect(path), kind
    return None, kind


def extension_mismatch(rel: str, kind: str | None) -> str | None:
    """A note when an image's content is not the format its extension names (a PNG saved as `.jpg`), else None.

    Such a file decodes by its content, so it is kept; the note says the name is not to be trusted.
    """
    suffix = "." + rel.rsplit(".", 1)[-1] if "." in rel.rsplit("/", 1)[-1] else ""
    expected = SUFFIX_FORMATS.get(suffix.lower())
    if kind is None or expected is None or kind == expected:
        return None
    return (
        f"image file {rel}: its content is {FORMAT_NAMES[kind]} but its extension {suffix!r} says "
        f"{FORMAT_NAMES[expected]}; kept, since it decodes by its content"
    )


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
