"""image_embeddings and zero_shot_scores materialised in-process with the built-in pipeline-check models."""

from __future__ import annotations

from dataclasses import replace

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from assets.labels import DATA_LAYER_JOB
from assets.models import EMBEDDINGS_JOB, ZERO_SHOT_JOB
from focus_dagster.definitions import build_definitions
from tests.support.environment import needs_compiler
from tests.support.events import check_evaluations, materialisation_metadata
from tests.support.tables import table_views
from tests.support.world import build_world


@pytest.fixture(scope="module")
def world(synth_all, tmp_path_factory):
    config, defs, instance = build_world(synth_all, tmp_path_factory.mktemp("models"), models=("tiny_vit", "tiny_clip"))
    assert defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance).success
    return config, defs, instance


def materialize(defs, instance, job, model):
    key = dg.MultiPartitionKey({"model": model, "dataset": "brset"})
    return materialisation_metadata(defs.resolve_job_def(job).execute_in_process(partition_key=key, instance=instance))


def labelled(config) -> pd.DataFrame:
    return pd.read_parquet(config.artifacts / "labels" / "brset.parquet")


@pytest.mark.parametrize("model", ["tiny_vit", "tiny_clip"])
def test_embeddings_cover_every_labelled_image_with_a_clean_audit(world, model):
    config, defs, instance = world
    meta = materialize(defs, instance, EMBEDDINGS_JOB, model)
    frame = pd.read_parquet(config.artifacts / "embeddings" / model / "brset.parquet")
    assert frame["image_id"].tolist() == labelled(config)["image_id"].tolist()
    assert meta["dimension"] == 32 and len(frame["embedding"].iloc[0]) == 32
    assert meta["checkpoint_audit"]["clean"] and meta["checkpoint_audit"]["missing_count"] == 0
    assert meta["pipeline_check_model"] is True and meta["device"] == "cpu"
    assert meta["forward"] == "eager" and meta["compile"]["requested"] == "auto"  # a CPU keeps the eager path
    again = materialize(defs, instance, EMBEDDINGS_JOB, model)
    resumed = pd.read_parquet(config.artifacts / "embeddings" / model / "brset.parquet")
    assert again["shards_reused"] >= 1  # resumed from shards, same vectors bit for bit
    assert resumed["image_id"].tolist() == frame["image_id"].tolist()
    assert all((a == b).all() for a, b in zip(resumed["embedding"], frame["embedding"]))


def test_zero_shot_scores_are_probabilities_per_task(world):
    config, defs, instance = world
    materialize(defs, instance, EMBEDDINGS_JOB, "tiny_clip")
    meta = materialize(defs, instance, ZERO_SHOT_JOB, "tiny_clip")
    with table_views(config) as con:
        scores = con.execute("SELECT task, score FROM predictions.zero_shot").df()
    n = len(labelled(config))
    assert meta["dagster/row_count"] == 3 * n and sorted(scores["task"].unique()) == ["any_dr", "gon", "referable_dr"]
    assert scores["score"].between(0, 1).all() and scores["score"].std() > 0
    assert meta["prompts_version"] == "reference-1"


def test_the_preprocessing_is_recorded_and_a_change_of_it_recomputes_the_embeddings(world):
    """Metadata and lineage stamp hold every value with its source; an override of one field gives new pixels,
    new shards and other vectors (nothing of the earlier run is reused), and says so in its sources."""
    from resources.storage import read_stamped_parquet

    config, defs, instance = world
    first = materialize(defs, instance, EMBEDDINGS_JOB, "tiny_vit")
    path = config.artifacts / "embeddings" / "tiny_vit" / "brset.parquet"
    before, stamp = read_stamped_parquet(path)
    assert first["preprocess"]["values"] | {"mean": None, "std": None} == {
        "size": 32, "resize": "squash", "resize_to": 32, "crop_pct": 1.0, "interpolation": "bilinear",
        "mean": None, "std": None, "scale_only": False, "processor": None, "transform": "timm"}
    assert set(first["preprocess"]["sources"].values()) == {"catalog"}
    assert stamp["facts"]["preprocess"] == first["preprocess"]
    changed = replace(config, models=({"id": "tiny_vit", "preprocess": {"interpolation": "bicubic"}}, "tiny_clip"))
    second = materialize(build_definitions(changed), instance, EMBEDDINGS_JOB, "tiny_vit")
    after, restamped = read_stamped_parquet(path)
    assert second["shards_reused"] == 0 and second["pixels_from_cache"] == 0
    assert restamped["facts"]["preprocess"]["sources"]["interpolation"] == "focus.yaml"
    assert restamped["facts"]["preprocess"]["sources"]["size"] == "catalog"
    assert not all((a == b).all() for a, b in zip(before["embedding"], after["embedding"]))


@needs_compiler
def test_compiled_embeddings_match_eager_ones_and_keep_shards_of_their_own(world):
    config, defs, instance = world
    materialize(defs, instance, EMBEDDINGS_JOB, "tiny_vit")
    eager = pd.read_parquet(config.artifacts / "embeddings" / "tiny_vit" / "brset.parquet")
    compiled_defs = build_definitions(replace(config, compile="blocks"))
    meta = materialize(compiled_defs, instance, EMBEDDINGS_JOB, "tiny_vit")
    compiled = pd.read_parquet(config.artifacts / "embeddings" / "tiny_vit" / "brset.parquet")
    assert meta["forward"] == "blocks" and meta["compile"]["blocks"] == 2  # tiny_vit: two transformer blocks
    assert meta["shards_reused"] == 0  # eager shards are not compiled ones
    assert compiled["image_id"].tolist() == eager["image_id"].tolist()
    difference = np.abs(np.stack(compiled["embedding"]) - np.stack(eager["embedding"])).max()
    assert difference < 1e-4 * np.abs(np.stack(eager["embedding"])).max()
    materialize(defs, instance, EMBEDDINGS_JOB, "tiny_vit")  # eager again, for the tests after this one


def test_an_unreadable_image_is_counted_and_the_rest_embedded(world):
    config, defs, instance = world
    victim = config.root_of("brset") / labelled(config)["image_path"].iloc[0]
    victim.write_bytes(victim.read_bytes()[:100])
    meta = materialize(defs, instance, EMBEDDINGS_JOB, "tiny_vit")
    assert meta["images_unreadable"] == 1 and meta["dagster/row_count"] == len(labelled(config)) - 1


def test_a_partial_checkpoint_fails_the_audit_check_and_the_step(synth_all, tmp_path):
    """A checkpoint missing one backbone tensor: the blocking check fails with the audit, nothing is written."""
    import timm
    from safetensors.torch import save_file

    options = {"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 1, "num_heads": 2}
    model = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=0, **options)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "blocks.0.attn.qkv.weight"}
    save_file(state, tmp_path / "partial.safetensors")
    entry = {"id": "partial_vit", "family": "timm_vit", "interface": "vm", "domain": "general", "source": "local",
             "path": str(tmp_path / "partial.safetensors"), "options": options,
             "preprocess": {"size": 32, "resize_to": 36}}
    config, defs, instance = build_world(synth_all, tmp_path, models=(entry,))
    assert defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance).success
    key = dg.MultiPartitionKey({"model": "partial_vit", "dataset": "brset"})
    result = defs.resolve_job_def(EMBEDDINGS_JOB).execute_in_process(partition_key=key, instance=instance,
                                                                     raise_on_error=False)
    assert not result.success
    [check] = check_evaluations(result)
    assert check.check_name == "checkpoint_audit" and not check.passed
    assert "blocks.0.attn.qkv.weight" in check.metadata["error"].value
    assert not list((config.artifacts / "embeddings").rglob("*.parquet"))


def test_an_embedding_run_killed_half_way_resumes_from_its_finished_shards(monkeypatch, synth_all, tmp_path):
    """The model dies after the first shard; the rerun reuses that shard and computes only the rest."""
    from focus_dagster.inference import engine
    from resources.models import ModelHub

    monkeypatch.setattr(engine, "SHARD_SIZE", 4)
    config, defs, instance = build_world(synth_all, tmp_path, models=("tiny_vit",))
    assert defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance).success
    original_load = ModelHub.load
    calls = {"images": 0}

    def dying_load(self, model_id, device, *interfaces):
        encoder = original_load(self, model_id, device, *interfaces)
        embed = encoder.embed

        def embed_then_die(pixels):
            if calls["images"] >= 4:
                raise RuntimeError("killed")
            calls["images"] += len(pixels)
            return embed(pixels)

        encoder.embed = embed_then_die
        return encoder

    key = dg.MultiPartitionKey({"model": "tiny_vit", "dataset": "brset"})
    monkeypatch.setattr(ModelHub, "load", dying_load)
    killed = defs.resolve_job_def(EMBEDDINGS_JOB).execute_in_process(partition_key=key, instance=instance,
                                                                     raise_on_error=False)
    assert not killed.success
    monkeypatch.setattr(ModelHub, "load", original_load)
    meta = materialize(defs, instance, EMBEDDINGS_JOB, "tiny_vit")
    n = len(labelled(config))
    assert meta["shards_reused"] == 1 and meta["dagster/row_count"] == n
