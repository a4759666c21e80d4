"""Decoding and preprocessing fundus images for a model, fast enough that the model is the bottleneck.

Fundus JPEGs are 1,600-4,300 px; models want 224-518 px. Decoding the full image and then shrinking it
wastes most of the work, so JPEGs are decoded at a reduced DCT scale that still leaves at least the
resolution the resize needs; the result matches a full decode followed by the same resize to within
resampling noise. Two CPU decoders do this: libjpeg-turbo through `simplejpeg` (the default where it is
installed: a few percent less core time per full-size JPEG, the same pixels, bench/results/README.md) and
Pillow's `draft`, which also reads every format that is not a JPEG and decides about JPEGs `simplejpeg` refuses.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from focus_dagster.models.spec import Preprocess

# Resize large reductions in two steps (a box reduction, then the filter): much faster, visually the same.
REDUCING_GAP = 3.0
_RESAMPLE = {"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR, "nearest": Image.NEAREST}
JPEG_MAGIC = b"\xff\xd8\xff"
PIL_DECODER, TURBO_DECODER = "pil", "simplejpeg"
CPU_DECODERS = (TURBO_DECODER, PIL_DECODER)
# The JPEG colour spaces whose RGB simplejpeg computes exactly as Pillow does (tests/test_decoders.py).
_TURBO_COLORSPACES = ("YCbCr", "Gray")


def is_jpeg(data: bytes) -> bool:
    """JPEG by content (SOI marker), not by file name: some datasets file PNGs under .jpg."""
    return bytes(data[:3]) == JPEG_MAGIC


def is_colour_jpeg(data: bytes) -> bool:
    """A JPEG in YCbCr or grey (what cameras write), not CMYK: only these leave the CPU path, whose CMYK
    conversion is Pillow's. Reads the header only."""
    return is_jpeg(data) and Image.open(io.BytesIO(data)).mode in ("RGB", "L")


def default_cpu_decoder() -> str:
    """simplejpeg where it is installed (it is a dependency; a bare environment still decodes with Pillow)."""
    try:
        import simplejpeg  # noqa: F401
    except ImportError:
        return PIL_DECODER
    return TURBO_DECODER


def load_rgb(source: str | Path | io.BytesIO, preprocess: Preprocess) -> Image.Image:
    """Open an image (a path or a file object) as RGB, decoding JPEGs only as finely as the preprocessing needs."""
    image = Image.open(source)
    if image.format == "JPEG":
        image.draft("RGB", _draft_size(image.size, preprocess))
    image = image.convert("RGB")
    return image


def decode_rgb(data: bytes, preprocess: Preprocess, decoder: str) -> Image.Image:
    """Encoded image bytes -> RGB at the smallest DCT scale the preprocessing allows, with `decoder` for JPEGs.

    A JPEG simplejpeg is not used for (CMYK or YCCK, whose conversion to RGB differs from Pillow's) or cannot
    read (a corrupt stream it refuses in strict mode) goes to Pillow, which either reads it or raises the error
    that gets recorded for the image."""
    if decoder == TURBO_DECODER and is_jpeg(data):
        try:
            return Image.fromarray(_turbo_decode(data, preprocess))
        except ValueError:
            pass
    return load_rgb(io.BytesIO(data), preprocess)


def _turbo_decode(data: bytes, preprocess: Preprocess) -> np.ndarray:
    import simplejpeg

    height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    if colorspace not in _TURBO_COLORSPACES:
        raise ValueError(f"{colorspace} JPEG: converted by Pillow")
    reduction = draft_reduction((width, height), _draft_size((width, height), preprocess))
    # Asking for exactly 1/reduction of the size keeps libjpeg-turbo off its M/8 scales (3/8, 5/8, ...), which
    # Pillow's draft never uses: both decoders then give the same pixels.
    return simplejpeg.decode_jpeg(data, colorspace="RGB", min_width=-(-width // reduction),
                                  min_height=-(-height // reduction))


def draft_reduction(size: tuple[int, int], wanted: tuple[int, int]) -> int:
    """The DCT reduction Pillow's `draft` picks: the largest of 8, 4, 2, 1 that keeps both sides at or above
    `wanted` once rounded up."""
    fits = min(size[0] // wanted[0], size[1] // wanted[1])
    return next(reduction for reduction in (8, 4, 2, 1) if fits >= reduction or reduction == 1)


def _draft_size(size: tuple[int, int], preprocess: Preprocess) -> tuple[int, int]:
    """The smallest decode size that keeps the side the resize reads at or above its target."""
    target = preprocess.resize_to if preprocess.resize == "resize_crop" and preprocess.resize_to else preprocess.size
    w, h = size
    if preprocess.resize == "pad_longest":
        scale = target / max(w, h)
    elif preprocess.resize == "squash":
        scale = max(target / w, target / h)
    else:
        scale = target / min(w, h)
    return max(1, int(np.ceil(w * scale))), max(1, int(np.ceil(h * scale)))


@dataclass(frozen=True)
class Geometry:
    """Where an image of a given size goes: resized to `resized` (w, h), then cut at `offset` (left, top) to
    size x size (resize_crop), or pasted at `offset` on a zero size x size canvas (pad_longest)."""

    resized: tuple[int, int]
    offset: tuple[int, int]
    pad: bool


def geometry(size: tuple[int, int], preprocess: Preprocess) -> Geometry:
    """The resize of one image, shared by the CPU path and the device path so that both cut the same square."""
    side = preprocess.size
    w, h = size
    if preprocess.resize == "squash":
        return Geometry((side, side), (0, 0), pad=False)
    if preprocess.resize == "pad_longest":
        scale = side / max(w, h)
        resized = (max(1, round(w * scale)), max(1, round(h * scale)))
        return Geometry(resized, ((side - resized[0]) // 2, (side - resized[1]) // 2), pad=True)
    scale = (preprocess.resize_to or side) / min(w, h)
    resized = (max(side, round(w * scale)), max(side, round(h * scale)))
    return Geometry(resized, ((resized[0] - side) // 2, (resized[1] - side) // 2), pad=False)


def resize_for(image: Image.Image, preprocess: Preprocess) -> Image.Image:
    """Geometric preprocessing: resize + centre crop, squash, or longest side + zero padding."""
    resample = _RESAMPLE[preprocess.interpolation]
    side = preprocess.size
    plan = geometry(image.size, preprocess)
    if plan.pad:
        canvas = Image.new("RGB", (side, side))
        canvas.paste(image.resize(plan.resized, resample, reducing_gap=REDUCING_GAP), plan.offset)
        return canvas
    # Only the pixels of the crop are computed: the source box of the crop, resized straight to the square,
    # gives the same filter taps as resizing everything and cropping, for about half the work.
    sx, sy = image.width / plan.resized[0], image.height / plan.resized[1]
    left, top = plan.offset
    box = (left * sx, top * sy, (left + side) * sx, (top + side) * sy)
    return image.resize((side, side), resample, box=box, reducing_gap=REDUCING_GAP)


def to_array(image: Image.Image, preprocess: Preprocess) -> np.ndarray:
    """HWC uint8 -> CHW float32, scaled to [0, 1] and normalised unless the model wants /255 only."""
    array = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
    if not preprocess.scale_only:
        mean = np.asarray(preprocess.mean, dtype=np.float32)[:, None, None]
        std = np.asarray(preprocess.std, dtype=np.float32)[:, None, None]
        array = (array - mean) / std
    return np.ascontiguousarray(array)


def pixels_from_bytes(data: bytes, preprocess: Preprocess, decoder: str | None = None) -> np.ndarray:
    """Encoded image bytes -> resized uint8 pixels [3, size, size] (`decoder`: one of CPU_DECODERS, default
    the fastest installed)."""
    image = resize_for(decode_rgb(data, preprocess, decoder or default_cpu_decoder()), preprocess)
    return np.ascontiguousarray(np.asarray(image, dtype=np.uint8).transpose(2, 0, 1))


def pixels_file(path: str | Path, preprocess: Preprocess, decoder: str | None = None) -> np.ndarray:
    """One image file -> resized uint8 pixels [3, size, size]; `normalise` finishes the job batch-wise.

    Worker processes hand over uint8 (a quarter of the bytes of float32) and the scaling happens once per
    batch on the model's device instead of once per image on a busy CPU.
    """
    return pixels_from_bytes(Path(path).read_bytes(), preprocess, decoder)


def preprocess_file(path: str | Path, preprocess: Preprocess, decoder: str | None = None) -> np.ndarray:
    """One image file -> the model's input array [3, size, size], as the engine computes it."""
    pixels = pixels_file(path, preprocess, decoder)
    return to_array(Image.fromarray(pixels.transpose(1, 2, 0)), preprocess)


def normalise(pixels, preprocess: Preprocess):
    """uint8 pixels [B, 3, H, W] (torch) -> the model's float input, as `to_array` computes it."""
    import torch

    scaled = pixels.float().div_(255.0)
    if preprocess.scale_only:
        return scaled
    mean = torch.tensor(preprocess.mean, device=scaled.device).view(1, 3, 1, 1)
    std = torch.tensor(preprocess.std, device=scaled.device).view(1, 3, 1, 1)
    return scaled.sub_(mean).div_(std)
