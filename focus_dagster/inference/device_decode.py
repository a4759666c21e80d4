"""Decode on the device: JPEGs decoded in batches by nvJPEG on the GPU and resized there.

On a GPU the model runs two orders of magnitude faster than CPU cores decode full-size fundus JPEGs
(bench/results/encoders_h200.json), so with CUDA the worker processes only read the bytes and the GPU
decodes a model batch at a time (torchvision's `decode_jpeg(list, device="cuda")`), then resizes each image
with the sizes and offsets of timm's transform and Pillow's filters, bit for bit. Images that are not JPEGs,
and JPEGs nvJPEG refuses, are decoded on the CPU as everywhere else, so a run reads exactly the images the
CPU path reads. Without CUDA nothing here is selected.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from focus_dagster.inference.images import default_cpu_decoder, pixels_from_bytes
from focus_dagster.inference.pil_resample import pil_resize
from focus_dagster.inference.transforms import resize_plan
from focus_dagster.models.spec import Preprocess

DEVICE_DECODER = "nvjpeg"


@dataclass(frozen=True)
class Decoder:
    """How a run decodes: `cpu` names the CPU decoder (images.CPU_DECODERS), used for every image unless
    `device` is set, in which case JPEGs are decoded there and the CPU decoder takes the rest."""

    cpu: str
    device: str | None = None

    @property
    def id(self) -> str:
        """The name in cache keys and run fingerprints: pixels from two decoders may differ in the last bit."""
        return DEVICE_DECODER if self.device else self.cpu


def choose_decoder(device: str, cuda_available: bool | None = None, cpu: str | None = None,
                   preprocess: Preprocess | None = None) -> Decoder:
    """nvJPEG when the model runs on CUDA and CUDA is there; otherwise the fastest installed CPU decoder. Pixels
    a Hugging Face image processor computes stay on the CPU: they are the processor's, not a replica's."""
    import torch

    cpu = cpu or default_cpu_decoder()
    available = torch.cuda.is_available() if cuda_available is None else cuda_available
    by_processor = preprocess is not None and preprocess.processor
    if device.startswith("cuda") and available and not by_processor:
        return Decoder(cpu=cpu, device=device)
    return Decoder(cpu=cpu)


def decode_batch(encoded: list, preprocess: Preprocess, decoder: Decoder) -> list:
    """JPEG byte tensors (uint8, CPU) -> for each, its pixels [3, size, size] uint8 on `decoder.device`, or the
    reason it could not be read (a string)."""
    try:
        images = _decode_jpegs(encoded, decoder.device)
    except RuntimeError:  # one unreadable JPEG fails the whole batched call: decode them one by one
        return [_decode_one(data, preprocess, decoder) for data in encoded]
    return [resize_on_device(image, preprocess) for image in images]


def _decode_one(data, preprocess: Preprocess, decoder: Decoder):
    """One JPEG on the device, else on the CPU (the reason of the CPU decoder is the one recorded)."""
    import torch

    try:
        return resize_on_device(_decode_jpegs([data], decoder.device)[0], preprocess)
    except RuntimeError:
        pass
    try:
        pixels = pixels_from_bytes(data.numpy().tobytes(), preprocess, decoder.cpu)
    except Exception as exc:  # the image's own failure: recorded, the batch continues
        return f"{type(exc).__name__}: {exc}"
    return torch.from_numpy(pixels).to(decoder.device)


def _decode_jpegs(encoded: list, device: str):
    from torchvision.io import ImageReadMode, decode_jpeg

    with warnings.catch_warnings():  # torchvision's image I/O is marked deprecated in favour of TorchCodec
        warnings.simplefilter("ignore")
        return decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)


def resize_on_device(image, preprocess: Preprocess):
    """A decoded image [3, H, W] uint8 -> the model's square [3, size, size] uint8, on the image's device: the
    sizes and offsets of timm's transform (transforms.resize_plan) and Pillow's filter, bit for bit
    (pil_resample.py), so that the pixels differ from the CPU path's only where nvJPEG's decode does."""
    import torch

    side = preprocess.size
    plan = resize_plan(image.shape[2], image.shape[1], preprocess)
    resized = pil_resize(image, plan.resized, preprocess.interpolation)
    left, top = plan.offset
    if not plan.pad:
        return resized[:, top : top + side, left : left + side].contiguous()
    canvas = torch.zeros(3, side, side, dtype=torch.uint8, device=image.device)
    canvas[:, top : top + resized.shape[1], left : left + resized.shape[2]] = resized
    return canvas
