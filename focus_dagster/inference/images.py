"""Decoding fundus images and handing them to the library that preprocesses them for the model.

Pixels are the library's: an image is decoded in full, as a user of timm or transformers opens it, and resized
and cropped by the transform the model's preprocessing names (inference/transforms.py: timm's eval transform,
or the model's Hugging Face image processor), so an embedding here is the one the model's own code computes.
Two CPU decoders give the same RGB: libjpeg-turbo through `simplejpeg` (the default where it is installed: a
few percent less core time per full-size JPEG) and Pillow, which also reads every format that is not a JPEG
and decides about JPEGs `simplejpeg` refuses. The pixel cache (pixel_cache.py) spares decoding twice.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from focus_dagster.models.spec import Preprocess

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


def load_rgb(source: str | Path | io.BytesIO) -> Image.Image:
    """Open an image (a path or a file object) as RGB, decoded in full as the libraries' users open it."""
    with Image.open(source) as image:
        return image.convert("RGB")


def decode_rgb(data: bytes, decoder: str) -> Image.Image:
    """Encoded image bytes -> RGB, in full, with `decoder` for JPEGs.

    A JPEG simplejpeg is not used for (CMYK or YCCK, whose conversion to RGB differs from Pillow's) or cannot
    read (a corrupt stream it refuses in strict mode) goes to Pillow, which either reads it or raises the error
    that gets recorded for the image."""
    if decoder == TURBO_DECODER and is_jpeg(data):
        try:
            return Image.fromarray(_turbo_decode(data))
        except ValueError:
            pass
    return load_rgb(io.BytesIO(data))


def _turbo_decode(data: bytes) -> np.ndarray:
    import simplejpeg

    colorspace = simplejpeg.decode_jpeg_header(data)[2]
    if colorspace not in _TURBO_COLORSPACES:
        raise ValueError(f"{colorspace} JPEG: converted by Pillow")
    return simplejpeg.decode_jpeg(data, colorspace="RGB")


def to_array(pixels: np.ndarray, preprocess: Preprocess) -> np.ndarray:
    """uint8 pixels [3, H, W] -> float32, scaled to [0, 1] and normalised unless the model wants /255 only."""
    array = np.asarray(pixels, dtype=np.float32) / 255.0
    if not preprocess.scale_only:
        mean = np.asarray(preprocess.mean, dtype=np.float32)[:, None, None]
        std = np.asarray(preprocess.std, dtype=np.float32)[:, None, None]
        array = (array - mean) / std
    return np.ascontiguousarray(array)


def pixels_from_bytes(data: bytes, preprocess: Preprocess, decoder: str | None = None) -> np.ndarray:
    """Encoded image bytes -> the model's uint8 pixels [3, size, size], resized by the library the model's
    preprocessing names (`decoder`: one of CPU_DECODERS, default the fastest installed)."""
    from focus_dagster.inference.transforms import library_pixels

    return library_pixels(decode_rgb(data, decoder or default_cpu_decoder()), preprocess)


def pixels_file(path: str | Path, preprocess: Preprocess, decoder: str | None = None) -> np.ndarray:
    """One image file -> resized uint8 pixels [3, size, size]; `normalise` finishes the job batch-wise.

    Worker processes hand over uint8 (a quarter of the bytes of float32) and the scaling happens once per
    batch on the model's device instead of once per image on a busy CPU.
    """
    return pixels_from_bytes(Path(path).read_bytes(), preprocess, decoder)


def preprocess_file(path: str | Path, preprocess: Preprocess, decoder: str | None = None) -> np.ndarray:
    """One image file -> the model's input array [3, size, size], as the engine computes it."""
    return to_array(pixels_file(path, preprocess, decoder), preprocess)


def normalise(pixels, preprocess: Preprocess):
    """uint8 pixels [B, 3, H, W] (torch) -> the model's float input, as `to_array` computes it."""
    import torch

    scaled = pixels.float().div_(255.0)
    if preprocess.scale_only:
        return scaled
    mean = torch.tensor(preprocess.mean, device=scaled.device).view(1, 3, 1, 1)
    std = torch.tensor(preprocess.std, device=scaled.device).view(1, 3, 1, 1)
    return scaled.sub_(mean).div_(std)
