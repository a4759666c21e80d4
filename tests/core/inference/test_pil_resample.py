"""pil_resample.pil_resize against Pillow itself: the same uint8 pixels, exactly, for every filter, both ways of
computing a pass, downscaling by large and small factors, upscaling, one axis kept, non-square outputs, the
pass order Pillow picks, and on CUDA where a GPU is present."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
import torch
from PIL import Image

from focus_dagster.inference import pil_resample
from focus_dagster.inference.pil_resample import filter_matrix, filter_taps, pil_resize

PILLOW_FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "box": Image.Resampling.BOX,
    "bilinear": Image.Resampling.BILINEAR,
    "hamming": Image.Resampling.HAMMING,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
MAIN_FILTERS = ("nearest", "bilinear", "bicubic")
METHODS = ("gather", "matmul")

# (input width, height) -> (output width, height)
SIZES = [
    ((333, 257), (75, 58)),  # odd sizes, a factor of about 4.4
    ((320, 240), (160, 120)),  # exactly half
    ((301, 199), (270, 180)),  # a small factor
    ((64, 47), (211, 150)),  # upscaling
    ((95, 120), (40, 300)),  # one axis down, the other up
    ((250, 180), (250, 61)),  # width kept: the horizontal pass is skipped
    ((250, 180), (97, 180)),  # height kept: the vertical pass is skipped
    ((200, 600), (190, 150)),  # height shrinks by more than twice the width: Pillow 13 goes vertical first
    ((480, 360), (300, 90)),  # non-square output from a 4:3 input
]


def random_image(width: int, height: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@lru_cache(maxsize=8)
def fundus_like(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A smooth photograph-like image: gradients inside a bright disc on black, a brighter optic disc, mild
    noise. Smooth regions put many sums near a rounding boundary, where an inexact pass would show.
    Cached (read-only): the realistic size takes a moment to draw."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    cx, cy, radius = width / 2, height / 2, 0.47 * min(width, height)
    inside = (x - cx) ** 2 + (y - cy) ** 2 < radius**2
    disc = np.exp(-((x - cx - 0.3 * radius) ** 2 + (y - cy) ** 2) / (2 * (0.08 * radius) ** 2))
    red = 150 + 60 * x / width + 40 * disc
    green = 60 + 30 * y / height + 120 * disc
    blue = 20 + 15 * (x + y) / (width + height) + 90 * disc
    image = np.stack([red, green, blue], axis=-1) * inside[..., None] + rng.integers(-2, 3, (height, width, 3))
    image = np.clip(np.rint(image), 0, 255).astype(np.uint8)
    image.setflags(write=False)
    return image


def pillow_resize(array: np.ndarray, size: tuple[int, int], filter: str) -> np.ndarray:
    return np.asarray(Image.fromarray(array).resize(size, PILLOW_FILTERS[filter]))


def tensor_resize(array: np.ndarray, size: tuple[int, int], filter: str, **kwargs) -> np.ndarray:
    image = torch.tensor(array).permute(2, 0, 1).contiguous()
    resized = pil_resize(image, size, filter, **kwargs)
    assert resized.dtype == torch.uint8 and resized.shape == (3, size[1], size[0])
    return resized.permute(1, 2, 0).numpy()


def assert_same_pixels(ours: np.ndarray, reference: np.ndarray) -> None:
    assert ours.shape == reference.shape
    differ = ours != reference
    assert not differ.any(), (f"{differ.sum()} values differ, by up to "
                              f"{np.abs(ours.astype(int) - reference.astype(int)).max()}")


@pytest.mark.parametrize("filter", MAIN_FILTERS)
@pytest.mark.parametrize(("source", "size"), SIZES, ids=[f"{a[0]}x{a[1]}-{b[0]}x{b[1]}" for a, b in SIZES])
def test_random_images_match_pillow(source, size, filter):
    array = random_image(*source)
    reference = pillow_resize(array, size, filter)
    for method in METHODS:
        assert_same_pixels(tensor_resize(array, size, filter, method=method), reference)


@pytest.mark.parametrize("filter", MAIN_FILTERS)
@pytest.mark.parametrize(("source", "size"), SIZES[:5], ids=[f"{a[0]}x{a[1]}-{b[0]}x{b[1]}" for a, b in SIZES[:5]])
def test_smooth_images_match_pillow(source, size, filter):
    array = fundus_like(*source)
    assert_same_pixels(tensor_resize(array, size, filter), pillow_resize(array, size, filter))


@pytest.mark.parametrize("filter", MAIN_FILTERS)
def test_photograph_to_torchvision_resize_size(filter):
    """A 1600x1200 photograph resized as torchvision's Resize(256) does on a PIL image: shorter side 256."""
    from torchvision.transforms import InterpolationMode, Resize

    array = fundus_like(1600, 1200)
    expected = np.asarray(Resize(256, interpolation=InterpolationMode(filter))(Image.fromarray(array)))
    assert expected.shape == (256, 341, 3)
    assert_same_pixels(tensor_resize(array, (341, 256), filter), expected)


@pytest.mark.parametrize("filter", ["box", "hamming", "lanczos"])
@pytest.mark.parametrize(("source", "size"), [SIZES[0], SIZES[3], SIZES[7]], ids=["down", "up", "vertical-first"])
def test_other_pillow_filters_match(source, size, filter):
    array = random_image(*source, seed=1)
    reference = pillow_resize(array, size, filter)
    for method in METHODS:
        assert_same_pixels(tensor_resize(array, size, filter, method=method), reference)


def test_many_small_sizes_match_pillow():
    """Tiny and odd sizes, down to a single pixel, where the window clipping at the borders dominates."""
    rng = np.random.default_rng(7)
    for case in range(12):
        in_w, in_h, out_w, out_h = (int(v) for v in rng.integers(1, 40, 4))
        array = random_image(in_w, in_h, seed=case)
        for filter in PILLOW_FILTERS:
            reference = pillow_resize(array, (out_w, out_h), filter)
            for method in METHODS:
                ours = tensor_resize(array, (out_w, out_h), filter, method=method)
                assert np.array_equal(ours, reference), ((in_w, in_h), (out_w, out_h), filter, method)


def test_pass_order_follows_pillow(monkeypatch):
    """The order of the passes changes pixels (the intermediate is rounded to uint8), so matching Pillow where
    it goes vertical first is not an accident of the test image."""
    source, size = SIZES[7]
    array = random_image(*source, seed=2)
    reference = pillow_resize(array, size, "bicubic")
    assert not pil_resample._horizontal_first(*source, *size) or pil_resample._pillow_major() < 13
    assert_same_pixels(tensor_resize(array, size, "bicubic"), reference)
    opposite = not pil_resample._horizontal_first(*source, *size)
    monkeypatch.setattr(pil_resample, "_horizontal_first", lambda *_: opposite)
    assert not np.array_equal(tensor_resize(array, size, "bicubic"), reference)


def test_same_size_is_a_copy():
    image = torch.from_numpy(random_image(31, 17)).permute(2, 0, 1).contiguous()
    resized = pil_resize(image, (31, 17), "bicubic")
    assert torch.equal(resized, image) and resized.data_ptr() != image.data_ptr()


def test_single_channel_images():
    array = fundus_like(210, 150)[..., 1]
    image = torch.tensor(array)[None]
    reference = np.asarray(Image.fromarray(array).resize((64, 47), Image.Resampling.BICUBIC))
    assert np.array_equal(pil_resize(image, (64, 47), "bicubic")[0].numpy(), reference)


def test_weights_of_each_output_pixel_sum_to_one_in_fixed_point():
    """A sanity check of the tables: each row's weights add up to 2**PRECISION_BITS give or take rounding,
    and the dense matrix holds exactly the taps."""
    indices, weights = filter_taps(2000, 341, "bicubic")
    assert np.abs(weights.sum(axis=1) - (1 << pil_resample.PRECISION_BITS)).max() <= weights.shape[1]
    matrix = filter_matrix(2000, 341, "bicubic")
    assert matrix.shape == (341, 2000)
    assert np.array_equal(matrix.sum(axis=1), weights.sum(axis=1).astype(np.float64))
    assert indices.min() >= 0 and indices.max() < 2000


def test_rejects_what_pillow_resize_is_not_asked_for():
    image = torch.zeros(3, 8, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="uint8"):
        pil_resize(image.float(), (4, 4), "bicubic")
    with pytest.raises(ValueError, match="filter"):
        pil_resize(image, (4, 4), "area")
    with pytest.raises(ValueError, match="positive"):
        pil_resize(image, (0, 4), "bicubic")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("filter", MAIN_FILTERS)
def test_cuda_gives_the_cpu_pixels(filter):
    array = fundus_like(1600, 1200)
    image = torch.tensor(array).permute(2, 0, 1).contiguous()
    reference = pillow_resize(array, (341, 256), filter)
    cpu = pil_resize(image, (341, 256), filter)
    for method in METHODS:
        on_device = pil_resize(image.cuda(), (341, 256), filter, method=method)
        assert on_device.is_cuda
        assert torch.equal(on_device.cpu(), cpu)
    assert_same_pixels(cpu.permute(1, 2, 0).numpy(), reference)
