"""The model catalog: the reference grid as published, the built-in defaults, and local availability."""

from __future__ import annotations

import pytest

from focus_dagster.models.catalog import (
    CATALOG,
    DEFAULT_MODELS,
    FLAIR_PRETRAINING,
    catalog_rows,
    hub_snapshot_dir,
    weights_available,
)
from focus_dagster.models.registry import LOADERS

REFERENCE_HUB_IDS = {
    "google/vit-large-patch16-224": ("vm", "general"),
    "facebook/dinov2-large": ("vm", "general"),
    "facebook/dinov3-vitl16-pretrain-lvd1689m": ("vm", "general"),
    "YukunZhou/RETFound_mae_natureCFP": ("vm", "ophthalmic"),
    "YukunZhou/RETFound_mae_natureOCT": ("vm", "ophthalmic"),
    "YukunZhou/RETFound_mae_meh": ("vm", "ophthalmic"),
    "YukunZhou/RETFound_mae_shanghai": ("vm", "ophthalmic"),
    "YukunZhou/RETFound_dinov2_meh": ("vm", "ophthalmic"),
    "YukunZhou/RETFound_dinov2_shanghai": ("vm", "ophthalmic"),
    "openai/clip-vit-base-patch32": ("vlm", "general"),
    "google/siglip2-base-patch16-224": ("vlm", "general"),
    "google/medsiglip-448": ("vlm", "medical"),
    "jusiro2/FLAIR": ("vlm", "ophthalmic"),
    "google/gemma-3-27b-it": ("mllm", "general"),
    "Qwen/Qwen3-VL-8B-Instruct": ("mllm", "general"),
    "llava-hf/llama3-llava-next-8b-hf": ("mllm", "general"),
    "google/medgemma-4b-it": ("mllm", "medical"),
    "google/medgemma-27b-it": ("mllm", "medical"),
    "google/medgemma-1.5-4b-it": ("mllm", "medical"),
}


def by_source() -> dict:
    return {spec.source: spec for spec in CATALOG.values()}


@pytest.mark.parametrize("hub_id", sorted(REFERENCE_HUB_IDS))
def test_every_reference_hub_id_is_listed_with_its_interface(hub_id):
    spec = by_source()[hub_id]
    assert (spec.interface, spec.domain) == REFERENCE_HUB_IDS[hub_id]
    assert spec.path is None  # nothing machine-specific in the catalog
    if spec.interface == "mllm":
        assert spec.family == "hf_mllm"
    else:
        assert spec.family in LOADERS


def test_ophthalmic_models_without_hub_id_and_their_formats():
    families = {spec.family for spec in CATALOG.values() if spec.domain == "ophthalmic"}
    assert {"retfound_mae", "retfound_dinov2", "visionfm", "flair", "eyeclip", "retclip"} <= families
    assert CATALOG["visionfm"].interface == "vm"
    assert CATALOG["eyeclip"].interface == CATALOG["retclip"].interface == "vlm"
    assert CATALOG["retfound_mae_naturecfp"].pooling == "mean_patch"
    assert CATALOG["retfound_dinov2_meh"].pooling == "cls"


def test_preprocessing_follows_the_protocol():
    retfound = CATALOG["retfound_mae_meh"].preprocess
    assert (retfound.size, retfound.resize_to, retfound.interpolation) == (224, 256, "bicubic")
    flair = CATALOG["flair"].preprocess
    assert flair.scale_only and flair.resize == "pad_longest" and flair.size == 512
    assert CATALOG["medsiglip_448"].preprocess.size == 448


def test_flair_contamination():
    flair = CATALOG["flair"]
    assert flair.pretrained_on == FLAIR_PRETRAINING == ("idrid", "rfmid", "jsiec1000", "papila", "g1020", "brset")
    assert flair.contamination("papila") and not flair.contamination("messidor_2")
    assert not CATALOG["clip_vit_b32"].contamination("papila")


def test_defaults():
    assert DEFAULT_MODELS == ("efficientnet_lite0", "tiny_clip", "tiny_llava")
    assert (CATALOG["efficientnet_lite0"].interface, CATALOG["efficientnet_lite0"].domain) == ("vm", "general")
    assert CATALOG["tiny_vit"].is_pipeline_check and CATALOG["tiny_vit"].interface == "vm"
    assert CATALOG["tiny_clip"].is_pipeline_check and CATALOG["tiny_clip"].interface == "vlm"
    assert CATALOG["tiny_clip"].family == "tiny_clip"
    assert CATALOG["tiny_llava"].is_pipeline_check and CATALOG["tiny_llava"].interface == "mllm"
    assert CATALOG["tiny_llava"].preprocess.scale_only  # its processor normalises the [0, 1] pixels itself
    for model_id in DEFAULT_MODELS:
        assert weights_available(CATALOG[model_id])[0]


def make_snapshot(cache, hub_id, commit="0123abcd", ref="main"):
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / ref).write_text(commit)
    return snapshot


def test_weights_available_in_a_hub_cache(tmp_path):
    cache = tmp_path / "hub"
    snapshot = make_snapshot(cache, "facebook/dinov2-large")
    available, where = weights_available(CATALOG["dinov2_large"], hub_cache=cache)
    assert available and where == str(snapshot)

    available, where = weights_available(CATALOG["clip_vit_b32"], hub_cache=cache)
    assert not available and "models--openai--clip-vit-base-patch32" in where

    assert hub_snapshot_dir("facebook/dinov2-large", "0123abcd", cache)[0] == snapshot
    assert hub_snapshot_dir("facebook/dinov2-large", "v2", cache)[0] is None


def test_weights_available_from_a_local_path(tmp_path):
    spec = CATALOG["retfound_mae_meh"]
    assert weights_available(spec.with_path(tmp_path / "absent.pth")) == (False, str(tmp_path / "absent.pth"))
    (tmp_path / "w.pth").write_bytes(b"")
    assert weights_available(spec.with_path(tmp_path / "w.pth"))[0]
    available, where = weights_available(CATALOG["visionfm"], hub_cache=tmp_path)
    assert not available and "path" in where


def test_catalog_rows(tmp_path):
    rows = catalog_rows(hub_cache=tmp_path)
    assert [row["id"] for row in rows] == list(CATALOG)
    assert set(rows[0]) == {"id", "interface", "domain", "family", "source", "available", "where"}
    available = {row["id"] for row in rows if row["available"]}
    assert available == set(DEFAULT_MODELS) | {"tiny_vit"}  # built in: generated on first use
