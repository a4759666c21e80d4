"""The image decoders: simplejpeg against Pillow (full decodes), the device path (batched decode_jpeg, then
Pillow's filters as tensor operations with timm's sizes and offsets) against timm's own transform, its
selection and its fallbacks on the CPU; the nvJPEG decode itself against the CPU path where a GPU is present."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from focus_dagster.inference import device_decode
from focus_dagster.inference.device_decode import Decoder, choose_decoder, decode_batch, resize_on_device
from focus_dagster.inference.engine import run_on_images
from focus_dagster.inference.images import default_cpu_decoder, pixels_from_bytes
from focus_dagster.models.spec import Preprocess
from focus_dagster.synthetic.render import CAMERAS, FundusSpec, render_fundus

POLICIES = {
    "resize_crop": Preprocess(size=224, resize_to=256),
    "squash": Preprocess(size=224, resize="squash", resize_to=None, interpolation="bilinear"),
    "pad_longest": Preprocess(size=224, resize="pad_longest", resize_to=None, scale_only=True),
}


def jpeg_bytes(width: int, height: int, seed: int, **save) -> bytes:
    buffer = io.BytesIO()
    render_fundus(FundusSpec(width, height, CAMERAS["canon_cr"], dr_grade=2), seed=seed).save(
        buffer, format="JPEG", quality=92, **save)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def fundus_jpegs() -> list[bytes]:
    """Full-size-like fundus JPEGs of several aspect ratios (4:2:0 and a 4:4:4 one)."""
    return [jpeg_bytes(1600, 1200, 1), jpeg_bytes(2400, 1600, 2), jpeg_bytes(1300, 1300, 3, subsampling=0)]


def levels(a, b) -> tuple[int, float]:
    """(largest, mean) absolute difference in uint8 levels."""
    diff = np.abs(np.asarray(a, dtype=np.int16) - np.asarray(b, dtype=np.int16))
    return int(diff.max()), float(diff.mean())


@pytest.mark.parametrize("policy", POLICIES)
def test_simplejpeg_gives_the_pixels_of_pillow(fundus_jpegs, policy):
    """Both are libjpeg-turbo decoding in full with the same IDCT and upsampling: the same pixels, also for small
    images at a small input size."""
    small = [jpeg_bytes(98, 97, 4), jpeg_bytes(530, 400, 5), jpeg_bytes(250, 170, 6)]
    for preprocess, images in ((POLICIES[policy], fundus_jpegs), (replace(POLICIES[policy], size=32), small)):
        for data in images:
            turbo = pixels_from_bytes(data, preprocess, "simplejpeg")
            assert turbo.shape == (3, preprocess.size, preprocess.size) and turbo.dtype == np.uint8
            assert np.array_equal(turbo, pixels_from_bytes(data, preprocess, "pil"))


def test_images_simplejpeg_does_not_take_decode_as_pillow_decodes_them(fundus_jpegs):
    """A PNG (even named .jpg) and a CMYK JPEG go to Pillow; a greyscale JPEG, which simplejpeg takes, gives the
    same pixels too."""
    rgb = Image.open(io.BytesIO(fundus_jpegs[0])).convert("RGB")
    png, cmyk, grey = io.BytesIO(), io.BytesIO(), io.BytesIO()
    rgb.save(png, format="PNG")
    rgb.convert("CMYK").save(cmyk, format="JPEG", quality=95)
    rgb.convert("L").save(grey, format="JPEG", quality=95)
    pre = POLICIES["resize_crop"]
    for data in (png.getvalue(), cmyk.getvalue(), grey.getvalue()):
        assert np.array_equal(pixels_from_bytes(data, pre, "simplejpeg"), pixels_from_bytes(data, pre, "pil"))


def test_a_truncated_jpeg_is_an_error_with_either_decoder(fundus_jpegs):
    for decoder in ("simplejpeg", "pil"):
        with pytest.raises(OSError):
            pixels_from_bytes(fundus_jpegs[0][: len(fundus_jpegs[0]) // 2], POLICIES["resize_crop"], decoder)


def test_the_decoder_follows_the_device(monkeypatch):
    assert choose_decoder("cpu") == Decoder(cpu="simplejpeg")
    assert choose_decoder("cuda", cuda_available=False).device is None
    on_gpu = choose_decoder("cuda:0", cuda_available=True)
    assert (on_gpu.device, on_gpu.id, on_gpu.cpu) == ("cuda:0", "nvjpeg", "simplejpeg")
    assert choose_decoder("cpu", cuda_available=True).device is None
    monkeypatch.setitem(__import__("sys").modules, "simplejpeg", None)  # not installed
    assert default_cpu_decoder() == "pil" and choose_decoder("cpu").id == "pil"


@pytest.mark.parametrize("policy", POLICIES)
def test_the_device_resize_gives_timms_pixels_on_the_same_image(fundus_jpegs, policy):
    """The tensor path against timm's transform on the Pillow image, both from one full decode: bit for bit,
    for images whose crop offsets round either way."""
    from timm.data import create_transform

    pre = POLICIES[policy]
    mode = {"resize_crop": "center", "squash": "squash", "pad_longest": "border"}[policy]
    for data in fundus_jpegs + [jpeg_bytes(1597, 1203, 7), jpeg_bytes(1203, 1601, 8)]:
        image = Image.open(io.BytesIO(data)).convert("RGB")
        tensor = torch.from_numpy(np.asarray(image).transpose(2, 0, 1).copy())
        reference = create_transform(input_size=(3, 224, 224), interpolation=pre.interpolation,
                                     crop_pct=224 / pre.scale_size, crop_mode=mode, normalize=False,
                                     mean=(0, 0, 0))(image)  # border mode fills with the mean: black
        assert torch.equal(resize_on_device(tensor, pre), reference)


def test_the_device_path_on_the_cpu_decodes_a_batch_and_records_the_bad_one(fundus_jpegs):
    pre = POLICIES["resize_crop"]
    encoded = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in fundus_jpegs]
    broken = encoded[0][:300].clone()
    results = decode_batch([encoded[0], broken, encoded[2]], pre, Decoder(cpu="pil", device="cpu"))
    assert isinstance(results[1], str) and "OSError" in results[1]
    for result, data in ((results[0], fundus_jpegs[0]), (results[2], fundus_jpegs[2])):
        assert result.shape == (3, 224, 224) and result.dtype == torch.uint8
        assert levels(result.numpy(), pixels_from_bytes(data, pre, "pil"))[0] <= 1  # torchvision's libjpeg


def test_jpegs_the_device_refuses_are_decoded_on_the_cpu(fundus_jpegs, monkeypatch):
    def refuse(encoded, device):
        raise RuntimeError("nvjpeg: unsupported JPEG (simulated)")

    monkeypatch.setattr(device_decode, "_decode_jpegs", refuse)
    pre = POLICIES["pad_longest"]
    encoded = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in fundus_jpegs]
    results = decode_batch(encoded, pre, Decoder(cpu="pil", device="cpu"))
    for result, data in zip(results, fundus_jpegs):
        assert np.array_equal(result.numpy(), pixels_from_bytes(data, pre, "pil"))


def test_a_run_with_the_device_decoder_reads_what_the_cpu_run_reads(fundus_jpegs, tmp_path):
    """The engine's device branch, run with the CPU as the device: bytes from the workers, decoded in batches in
    the main process, a PNG and a CMYK JPEG decoded by the workers, a broken file recorded; the cache filled for
    the next run."""
    paths = []
    for i, data in enumerate(fundus_jpegs):
        paths.append(tmp_path / f"img{i}.jpg")
        paths[-1].write_bytes(data)
    Image.open(io.BytesIO(fundus_jpegs[0])).save(tmp_path / "png.jpg", format="PNG")
    Image.open(io.BytesIO(fundus_jpegs[2])).convert("CMYK").save(tmp_path / "cmyk.jpg", quality=95)
    (tmp_path / "broken.jpg").write_bytes(fundus_jpegs[1][:500])
    items = [(p.stem, str(p)) for p in paths] + [(name, str(tmp_path / f"{name}.jpg")) for name in ("png", "cmyk", "broken")]
    pre = Preprocess(size=64, resize_to=72)
    mean_pixel = lambda pixels: pixels.float().mean(dim=(2, 3))  # noqa: E731
    options = dict(fingerprint="m", num_workers=0, batch_size=4, pixel_cache=tmp_path / "pixels")
    on_device = run_on_images(mean_pixel, items, pre, work_dir=tmp_path / "a", device="cpu",
                              decoder=Decoder(cpu="pil", device="cpu"), **options)
    on_cpu = run_on_images(mean_pixel, items, pre, work_dir=tmp_path / "b", device="cpu",
                           decoder=Decoder(cpu="pil"), **options)
    assert on_device.image_ids == on_cpu.image_ids == ["img0", "img1", "img2", "png", "cmyk"]
    assert list(on_device.failed) == ["broken"] and on_device.decoder == "nvjpeg"
    assert np.abs(on_device.outputs - on_cpu.outputs).max() < 2.0  # mean pixel value, in levels
    assert np.array_equal(on_device.outputs[3:], on_cpu.outputs[3:])  # PNG and CMYK: the CPU decoder's pixels
    again = run_on_images(mean_pixel, items, pre, work_dir=tmp_path / "c", device="cpu",
                          decoder=Decoder(cpu="pil", device="cpu"), **options)
    assert (again.pixels_from_cache, again.pixels_decoded) == (5, 0)
    assert np.array_equal(again.outputs, on_device.outputs)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device: nvJPEG's decode is compared with the CPU decoder only on a GPU machine")
@pytest.mark.parametrize("policy", POLICIES)
def test_nvjpeg_on_the_gpu_gives_the_cpu_decoders_pixels_within_tolerance(fundus_jpegs, policy):
    """GPU: nvJPEG's decode, then Pillow's filters on the device; CPU: libjpeg-turbo's decode and timm's transform.
    Stated tolerance: one level (1/255 of the pixel range) anywhere."""
    pre = POLICIES[policy]
    encoded = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in fundus_jpegs]
    on_gpu = decode_batch(encoded, pre, choose_decoder("cuda"))
    for result, data in zip(on_gpu, fundus_jpegs):
        assert result.device.type == "cuda"
        gpu, cpu = result.cpu().numpy(), pixels_from_bytes(data, pre)
        assert levels(gpu, cpu)[0] <= 1
