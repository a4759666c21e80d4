"""The batched runner over images: outputs in order, bad images, kill-and-resume, invalidation, OOM halving."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from focus_dagster.inference.engine import run_on_images
from focus_dagster.inference.images import preprocess_file
from focus_dagster.models.spec import Preprocess

PRE = Preprocess(size=32, resize_to=36)


def toy_embed(pixels: torch.Tensor) -> torch.Tensor:
    """A fixed projection of pooled pixels: deterministic, cheap, sensitive to the image."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(3 * 4 * 4, 8, generator=generator)
    pooled = torch.nn.functional.adaptive_avg_pool2d(pixels.float(), 4).flatten(1)
    return pooled @ weight


@pytest.fixture(scope="module")
def items(synth_all):
    out, _ = synth_all
    paths = sorted((out / "brset" / "fundus_photos").glob("*.jpg"))
    return [(p.stem, str(p)) for p in paths]


def run(items, tmp_path, **kwargs):
    options = dict(work_dir=tmp_path / "shards", fingerprint="model-a", num_workers=0, shard_size=5)
    options.update(kwargs)
    return run_on_images(toy_embed, items, PRE, **options)


def test_outputs_have_one_row_per_image_in_order(items, tmp_path):
    result = run(items, tmp_path)
    assert result.image_ids == [i for i, _ in items]
    assert result.outputs.shape == (len(items), 8) and result.device == "cpu"
    direct = toy_embed(torch.from_numpy(preprocess_file(items[3][1], PRE))[None]).numpy()[0]
    assert np.allclose(result.outputs[3], direct, atol=1e-5)


def test_worker_processes_give_the_same_numbers(items, tmp_path):
    serial = run(items, tmp_path / "a")
    parallel = run(items, tmp_path / "b", num_workers=2, batch_size=4)
    assert np.allclose(serial.outputs, parallel.outputs, atol=1e-5)


def test_an_unreadable_image_is_recorded_and_the_rest_continue(items, tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(open(items[0][1], "rb").read()[:200])
    result = run([*items[:4], ("broken", str(broken)), *items[4:8]], tmp_path)
    assert "broken" in result.failed and "broken" not in result.image_ids
    assert len(result.image_ids) == 8


def test_a_killed_run_resumes_without_redoing_finished_shards(items, tmp_path):
    killed = run(items, tmp_path, stop_after_shards=2)
    assert killed.shards_computed == 2
    resumed = run(items, tmp_path)
    assert resumed.shards_reused == 2 and resumed.shards_computed == len(range(0, len(items), 5)) - 2
    fresh = run(items, tmp_path / "fresh")
    assert resumed.image_ids == fresh.image_ids and np.allclose(resumed.outputs, fresh.outputs)


def test_a_changed_model_or_image_set_invalidates_shards(items, tmp_path):
    run(items, tmp_path)
    other_model = run(items, tmp_path, fingerprint="model-b")
    assert other_model.shards_reused == 0
    fewer = run(items[:-3], tmp_path, fingerprint="model-b")
    assert fewer.shards_reused == len(items[:-3]) // 5  # untouched full shards survive, the changed one is redone
    assert len(list((tmp_path / "shards").glob("shard-*.npz"))) == len(range(0, len(items) - 3, 5))


def test_out_of_memory_halves_the_batch(items, tmp_path):
    seen = []

    def picky(pixels):
        seen.append(len(pixels))
        if len(pixels) > 4:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return toy_embed(pixels)

    result = run_on_images(picky, items[:10], PRE, work_dir=tmp_path, fingerprint="x", num_workers=0,
                           batch_size=16, shard_size=10)
    assert result.batch_size == 4 and seen[:3] == [10, 8, 4]
    assert result.outputs.shape == (10, 8)


def test_an_image_replaced_in_place_invalidates_its_shard(items, tmp_path):
    import shutil

    copies = []
    for image_id, path in items[:10]:
        target = tmp_path / "imgs" / f"{image_id}.jpg"
        target.parent.mkdir(exist_ok=True)
        shutil.copy(path, target)
        copies.append((image_id, str(target)))
    run(copies, tmp_path)
    shutil.copy(items[20][1], copies[7][1])  # same name, other picture
    again = run(copies, tmp_path)
    assert (again.shards_reused, again.shards_computed) == (1, 1)
