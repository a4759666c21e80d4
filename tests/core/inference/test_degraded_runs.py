"""The engine with a degradation: every image's pixels degraded on the model's grid (after the library's resize,
before normalisation), each image decoded once for all its degradations (its clean pixels from the cache), the
degraded pixels cached under their own key (a second model reads them, the clean pixels stay clean), the shards of
each degradation and severity their own."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from focus_dagster.degradations import Degrading, DegradationError, degrade
from focus_dagster.inference.engine import run_on_images
from focus_dagster.inference.images import normalise
from focus_dagster.inference.pixel_cache import content_hash_of
from focus_dagster.inference.transforms import library_pixels
from focus_dagster.models.spec import Preprocess

PRE = Preprocess(size=32, resize_to=36)


def mean_pixels(pixels: torch.Tensor) -> torch.Tensor:
    """Each image's pixels pooled to 4 x 4 per channel: what the model saw, in a form a test can compare."""
    return torch.nn.functional.adaptive_avg_pool2d(pixels.float(), 4).flatten(1)


@pytest.fixture(scope="module")
def items(synth_all):
    out, _ = synth_all
    paths = sorted((out / "brset" / "fundus_photos").glob("*.jpg"))[:6]
    return [(p.stem, str(p)) for p in paths]


def run(items, tmp_path, name: str, alteration=None, **options):
    return run_on_images(mean_pixels, items, PRE, work_dir=tmp_path / name, fingerprint="toy", num_workers=0,
                         pixel_cache=tmp_path / "pixels", alteration=alteration, **options)


def expected(path: str, name: str, severity: int) -> np.ndarray:
    """The model's input written out by hand: Pillow's decode, the library's resize, the degradation keyed by the
    file's content hash on those pixels, the model's normalisation, pooled as the toy model pools it."""
    data = open(path, "rb").read()
    resized = library_pixels(Image.open(path).convert("RGB"), PRE).transpose(1, 2, 0)
    degraded = degrade(resized, name, severity, content_hash_of(data))
    pixels = torch.from_numpy(np.ascontiguousarray(degraded.transpose(2, 0, 1)))[None]
    return mean_pixels(normalise(pixels, PRE)).numpy()[0]


def test_each_image_is_degraded_on_the_models_grid_after_the_resize(items, tmp_path):
    result = run(items, tmp_path, "blur", Degrading("underexposure", 5), decoder=None)
    clean = run(items, tmp_path, "clean")
    for index, (_, path) in enumerate(items):
        assert np.allclose(result.outputs[index], expected(path, "underexposure", 5), atol=0.02)  # decoders' last bit
    assert (result.outputs.mean(axis=1) < clean.outputs.mean(axis=1) - 0.5).all()  # half the light


def test_degraded_pixels_are_cached_apart_from_the_clean_ones(items, tmp_path):
    first = run(items, tmp_path, "first", Degrading("defocus_blur", 3))
    second = run(items, tmp_path, "second", Degrading("defocus_blur", 3))
    assert (first.pixels_decoded, second.pixels_from_cache) == (len(items), len(items))
    assert np.array_equal(first.outputs, second.outputs)
    clean = run(items, tmp_path, "clean")
    uncached = run_on_images(mean_pixels, items, PRE, work_dir=tmp_path / "uncached", fingerprint="toy",
                             num_workers=0)
    assert clean.pixels_from_cache == len(items)  # the first degraded run decoded each image and kept it clean
    assert np.array_equal(clean.outputs, uncached.outputs)  # the degraded pixels are not served as clean ones
    other = run(items, tmp_path, "other", Degrading("defocus_blur", 5))
    assert other.pixels_decoded == 0 and other.pixels_from_cache == len(items)  # decoded once for every variant
    assert not np.allclose(other.outputs, first.outputs)


def test_each_degradation_and_severity_keeps_its_own_shards(items, tmp_path):
    shards = tmp_path / "shards"
    run_on_images(mean_pixels, items, PRE, work_dir=shards, fingerprint="toy", num_workers=0,
                  alteration=Degrading("jpeg_compression", 1))
    again = run_on_images(mean_pixels, items, PRE, work_dir=shards, fingerprint="toy", num_workers=0,
                          alteration=Degrading("jpeg_compression", 1))
    assert again.shards_reused == 1 and again.shards_computed == 0
    other = run_on_images(mean_pixels, items, PRE, work_dir=shards, fingerprint="toy", num_workers=0,
                          alteration=Degrading("jpeg_compression", 5))
    assert other.shards_computed == 1


def test_worker_processes_degrade_to_the_same_numbers(items, tmp_path):
    inline = run(items, tmp_path, "inline", Degrading("sensor_noise", 4))
    workers = run_on_images(mean_pixels, items, PRE, work_dir=tmp_path / "workers", fingerprint="toy", num_workers=2,
                            alteration=Degrading("sensor_noise", 4))
    assert np.array_equal(inline.outputs, workers.outputs)


def test_an_unknown_degradation_is_refused_before_any_image_is_read():
    with pytest.raises(DegradationError, match="unknown degradation 'fog'"):
        Degrading("fog", 1)
    with pytest.raises(DegradationError, match="severity 0"):
        Degrading("haze", 0)
