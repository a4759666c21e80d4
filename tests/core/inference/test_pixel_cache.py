"""Decode once: the pixel cache fills on the first model, serves the next ones, never serves a changed image's
old pixels, survives damaged files and concurrent writers, and image_embeddings reports where pixels came from."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
import torch

from focus_dagster.inference.engine import run_on_images
from focus_dagster.inference.images import pixels_from_bytes
from focus_dagster.inference.pixel_cache import KnownHashes, PixelCache, preprocessing_key
from focus_dagster.labels.harmonise import content_hash
from focus_dagster.models.spec import CLIP_MEAN, CLIP_STD, Preprocess

PRE = Preprocess(size=32, resize_to=36)


def model_view(pixels: np.ndarray, preprocess: Preprocess = PRE) -> torch.Tensor:
    """uint8 pixels [3, H, W] as the model receives them: scaled and normalised, a batch of one."""
    mean, std = (np.asarray(v, dtype=np.float32)[:, None, None] for v in (preprocess.mean, preprocess.std))
    return torch.from_numpy((pixels.astype(np.float32) / 255.0 - mean) / std)[None]


def toy_embed(pixels: torch.Tensor) -> torch.Tensor:
    """A fixed projection of pooled pixels: deterministic, cheap, sensitive to the image."""
    weight = torch.randn(3 * 4 * 4, 8, generator=torch.Generator().manual_seed(0))
    return torch.nn.functional.adaptive_avg_pool2d(pixels.float(), 4).flatten(1) @ weight


@pytest.fixture()
def items(synth_all, tmp_path):
    """Private copies of twelve look-alike fundus JPEGs (tests modify them)."""
    out, _ = synth_all
    copies = []
    for path in sorted((out / "brset" / "fundus_photos").glob("*.jpg"))[:12]:
        target = tmp_path / "images" / path.name
        target.parent.mkdir(exist_ok=True)
        shutil.copy(path, target)
        copies.append((path.stem, str(target)))
    return copies


def run(items, tmp_path, name: str, preprocess: Preprocess = PRE, **kwargs):
    options = dict(work_dir=tmp_path / name, fingerprint=name, num_workers=0, shard_size=5, device="cpu",
                   pixel_cache=tmp_path / "pixels")
    return run_on_images(toy_embed, items, preprocess, **(options | kwargs))


def cache_of(tmp_path, preprocess: Preprocess = PRE) -> PixelCache:
    return PixelCache(tmp_path / "pixels" / preprocessing_key(preprocess, "simplejpeg"), preprocess.size)


def test_the_second_model_reads_pixels_not_jpegs(items, tmp_path):
    first = run(items, tmp_path, "model-a")
    second = run(items, tmp_path, "model-b")
    assert (first.pixels_decoded, first.pixels_from_cache) == (12, 0)
    assert (second.pixels_decoded, second.pixels_from_cache) == (0, 12)
    assert np.array_equal(first.outputs, second.outputs)
    cache = cache_of(tmp_path)
    for _, path in items:  # one file per image, named by the labels' content hash, holding Pillow's pixels
        cached = cache.read(content_hash(path))
        reference = pixels_from_bytes(open(path, "rb").read(), PRE, "pil")
        assert cached is not None and np.abs(cached.astype(int) - reference).max() <= 1


def test_pixels_are_shared_across_normalisations_not_across_sizes(items, tmp_path):
    run(items, tmp_path, "model-a")
    clip_like = run(items, tmp_path, "model-b", Preprocess(size=32, resize_to=36, mean=CLIP_MEAN, std=CLIP_STD))
    larger = run(items, tmp_path, "model-c", Preprocess(size=48, resize_to=54))
    squashed = run(items, tmp_path, "model-d", Preprocess(size=32, resize="squash", resize_to=None))
    assert clip_like.pixels_from_cache == 12
    assert larger.pixels_decoded == 12 and squashed.pixels_decoded == 12


def test_the_same_picture_under_two_names_is_decoded_once(items, tmp_path):
    twin = tmp_path / "images" / "twin.jpg"
    shutil.copy(items[0][1], twin)
    result = run([items[0], ("twin", str(twin))], tmp_path, "model-a")
    assert (result.pixels_decoded, result.pixels_from_cache) == (1, 1)
    assert np.array_equal(result.outputs[0], result.outputs[1])


def labels_hashes(items, as_of_ns: int) -> KnownHashes:
    return KnownHashes({path: content_hash(path) for _, path in items}, as_of_ns)


def test_a_recorded_hash_is_trusted_while_the_file_is_no_newer(items, tmp_path):
    """Pixels planted under an image's recorded hash are what the model gets: the file is not read again."""
    known = labels_hashes(items, time.time_ns())
    planted = np.full((3, 32, 32), 7, dtype=np.uint8)
    cache_of(tmp_path).write(content_hash(items[3][1]), planted)
    result = run(items, tmp_path, "model-a", known_hashes=known)
    expected = toy_embed(model_view(planted)).numpy()[0]
    assert np.allclose(result.outputs[3], expected, atol=1e-4) and result.pixels_from_cache == 1


def test_an_image_changed_since_the_labels_is_decoded_again_not_served_stale(items, tmp_path):
    known = labels_hashes(items, time.time_ns())
    run(items, tmp_path, "model-a", known_hashes=known)
    victim = items[4][1]
    shutil.copy(items[9][1], victim)  # same name, another picture, after the labels were written
    os.utime(victim, ns=(known.as_of_ns + 10**9, known.as_of_ns + 10**9))
    second = run(items, tmp_path, "model-b", known_hashes=known)
    assert (second.pixels_decoded, second.pixels_from_cache) == (0, 12)  # the new picture is an old one's twin
    assert np.array_equal(second.outputs[4], second.outputs[9])
    (tmp_path / "images" / "fresh.jpg").write_bytes(_reencoded(items[0][1]))
    shutil.copy(tmp_path / "images" / "fresh.jpg", victim)
    os.utime(victim, ns=(known.as_of_ns + 2 * 10**9, known.as_of_ns + 2 * 10**9))
    third = run(items, tmp_path, "model-c", known_hashes=known)
    assert (third.pixels_decoded, third.pixels_from_cache) == (1, 11)
    direct = toy_embed(model_view(pixels_from_bytes(open(victim, "rb").read(), PRE, "pil"))).numpy()[0]
    assert np.allclose(third.outputs[4], direct, atol=1e-4)


def _reencoded(path: str) -> bytes:
    """The same picture saved again at another quality: other bytes, nearly the same pixels."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.open(path).save(buffer, format="JPEG", quality=60)
    return buffer.getvalue()


def test_damaged_cache_files_are_decoded_and_written_again(items, tmp_path):
    first = run(items, tmp_path, "model-a")
    cache = cache_of(tmp_path)
    truncated, wrong_shape = cache.path(content_hash(items[1][1])), content_hash(items[2][1])
    truncated.write_bytes(truncated.read_bytes()[:100])
    np.save(cache.path(wrong_shape), np.zeros((3, 16, 16), dtype=np.uint8))
    second = run(items, tmp_path, "model-b")
    assert (second.pixels_decoded, second.pixels_from_cache) == (2, 10)
    assert np.array_equal(first.outputs, second.outputs)
    assert cache.read(content_hash(items[1][1])) is not None and cache.read(wrong_shape) is not None


def _write_repeatedly(root: str, value: int, rounds: int) -> None:
    cache = PixelCache(Path(root), 64)
    for _ in range(rounds):
        cache.write("ab" * 16, np.full((3, 64, 64), value, dtype=np.uint8))


def test_concurrent_writers_never_leave_a_reader_half_a_file(tmp_path):
    cache = PixelCache(tmp_path / "pixels", 64)
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_repeatedly, args=(str(cache.root), value, 300)) for value in (1, 2)]
    for writer in writers:
        writer.start()
    seen, target = set(), cache.path("ab" * 16)
    while any(writer.is_alive() for writer in writers):
        if target.exists():  # once there, the file is always whole: np.load itself must never fail
            pixels = np.load(target)
            assert pixels.shape == (3, 64, 64) and len(np.unique(pixels)) == 1
            seen.add(int(pixels[0, 0, 0]))
    for writer in writers:
        writer.join()
        assert writer.exitcode == 0
    assert seen <= {1, 2} and seen
    assert [p.name for p in cache.path("ab" * 16).parent.iterdir()] == [f"{'ab' * 16}.npy"]


def test_image_embeddings_reports_pixels_from_the_cache(synth_all, tmp_path):
    """Two encoders with the same preprocessing on one dataset: the first decodes every image, the second reads
    every image's pixels; an image replaced after the labels is decoded again."""
    from assets.labels import DATA_LAYER_JOB
    from assets.models import EMBEDDINGS_JOB
    from focus_dagster.models.catalog import CATALOG
    from tests.support.events import materialisation_metadata
    from tests.support.world import build_world

    assert CATALOG["tiny_vit"].preprocess == CATALOG["tiny_clip"].preprocess
    config, defs, instance = build_world(synth_all, tmp_path, models=("tiny_vit", "tiny_clip"))
    assert defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance).success

    def materialize(model):
        key = dg.MultiPartitionKey({"model": model, "dataset": "brset"})
        return materialisation_metadata(
            defs.resolve_job_def(EMBEDDINGS_JOB).execute_in_process(partition_key=key, instance=instance))

    first, second = materialize("tiny_vit"), materialize("tiny_clip")
    n = first["dagster/row_count"]
    assert (first["pixels_decoded"], first["pixels_from_cache"]) == (n, 0)
    assert (second["pixels_decoded"], second["pixels_from_cache"]) == (0, n)
    assert first["decoder"] == second["decoder"] == "simplejpeg"
    assert len(list((config.artifacts / "pixels" / "brset").rglob("*.npy"))) == n
