"""The model's pixels, computed by the library its preprocessing comes from.

timm's evaluation transform (`timm.data.create_transform`: torchvision's Resize and CenterCrop on a Pillow
image) for every policy of the platform: resize_crop is its `center` crop mode, squash its `squash` mode, and
pad_longest its `border` mode with a black fill (timm's own building blocks, ResizeKeepRatio and
CenterCropOrPad). A model whose folder holds a Hugging Face image processor gets the processor's own pixels.
Both stop before scaling: the uint8 pixels are what the pixel cache keeps and the workers hand over, and the
mean/std normalisation happens batch-wise on the model's device (images.normalise).

`resize_plan` states the same arithmetic as sizes and offsets, for the device path (device_decode.py), which
resizes on the GPU with Pillow's filters (pil_resample.py) and cuts the same square.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from focus_dagster.models.preprocessing import TIMM_CROP_MODES
from focus_dagster.models.spec import Preprocess

# The platform's policy -> timm's crop mode: the inverse of what the model layer reads from timm configs.
TIMM_CROP_MODE = {policy: mode for mode, policy in TIMM_CROP_MODES.items()} | {"pad_longest": "border"}


def library_pixels(image, preprocess: Preprocess) -> np.ndarray:
    """An RGB Pillow image -> the model's uint8 pixels [3, size, size], as the library computes them."""
    pixels = library_transform(preprocess)(image)
    array = pixels.numpy() if hasattr(pixels, "numpy") else np.asarray(pixels)
    if array.dtype != np.uint8:  # a processor on Pillow arithmetic hands back whole numbers as floats
        array = np.rint(array).clip(0, 255).astype(np.uint8)
    return np.ascontiguousarray(array)


@lru_cache(maxsize=16)
def library_transform(preprocess: Preprocess):
    """The callable that computes the pixels: the model's image processor, or timm's eval transform."""
    if preprocess.processor:
        return ProcessorPixels(preprocess.processor)
    return timm_transform(preprocess)


def timm_transform(preprocess: Preprocess):
    """timm's evaluation transform for the preprocessing, up to uint8 pixels (no scaling, no normalisation)."""
    from timm.data import create_transform

    if preprocess.resize == "pad_longest":
        from timm.data.transforms import CenterCropOrPad, MaybePILToTensor, ResizeKeepRatio
        from torchvision import transforms

        # timm's border mode pads with the mean colour; the platform's pad_longest (FLAIR) pads with black.
        return transforms.Compose([ResizeKeepRatio(preprocess.size, interpolation=preprocess.interpolation,
                                                   longest=1.0),
                                   CenterCropOrPad(preprocess.size, fill=0), MaybePILToTensor()])
    return create_transform(input_size=(3, preprocess.size, preprocess.size), interpolation=preprocess.interpolation,
                            crop_pct=preprocess.crop_pct or crop_pct_for(preprocess.size, preprocess.scale_size),
                            crop_mode=TIMM_CROP_MODE[preprocess.resize], normalize=False)


def crop_pct_for(size: int, scale_size: int) -> float:
    """The crop_pct for which timm's floor(size / crop_pct) is exactly `scale_size` (size / scale_size can
    land a hair below it in floating point)."""
    crop_pct = size / scale_size
    while math.floor(size / crop_pct) < scale_size:
        crop_pct = math.nextafter(crop_pct, 0.0)
    return crop_pct


class ProcessorPixels:
    """A Hugging Face image processor from a model's folder, stopped before rescaling and normalising."""

    def __init__(self, folder: str):
        from transformers import AutoImageProcessor

        self.processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True)

    def __call__(self, image):
        batch = self.processor(images=image, do_rescale=False, do_normalize=False, return_tensors="pt")
        return batch["pixel_values"][0]


@dataclass(frozen=True)
class ResizePlan:
    """Where an image goes: resized to `resized` (w, h), then either cut at `offset` (left, top) to size x size
    or, when `pad`, pasted at `offset` on a black size x size canvas."""

    resized: tuple[int, int]
    offset: tuple[int, int]
    pad: bool


def resize_plan(width: int, height: int, preprocess: Preprocess) -> ResizePlan:
    """The sizes and offsets timm's transform uses for a width x height image (torchvision's Resize keeps the
    shorter side's ratio with a truncated longer side; CenterCrop rounds its offsets; ResizeKeepRatio rounds
    both sides; CenterCropOrPad puts the odd pixel of padding on the right and bottom)."""
    side, scale = preprocess.size, preprocess.scale_size
    if preprocess.resize == "pad_longest":
        ratio = max(width / side, height / side)
        resized = (round(width / ratio), round(height / ratio))
        return ResizePlan(resized, ((side - resized[0]) // 2, (side - resized[1]) // 2), pad=True)
    if preprocess.resize == "squash":
        resized = (scale, scale)
    elif width <= height:
        resized = (scale, int(scale * height / width))
    else:
        resized = (int(scale * width / height), scale)
    offset = (int(round((resized[0] - side) / 2.0)), int(round((resized[1] - side) / 2.0)))
    return ResizePlan(resized, offset, pad=False)
