"""timm-family loaders: tiny checkpoints in each published format, loaded through the real code path."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

from focus_dagster.models.loaders import timm_family
from focus_dagster.models.registry import load_encoder
from focus_dagster.models.spec import (
    CheckpointError,
    ModelSpec,
    Preprocess,
    WeightsNotFoundError,
)

TINY = {"embed_dim": 32, "depth": 2, "num_heads": 2, "patch_size": 8, "img_size": 32}
PIXELS = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


class NotAStateDict:
    """An arbitrary object: a pickle holding it must never be unpickled."""

    def __init__(self):
        self.payload = [1, 2, 3]


def spec_for(family, path, pooling="cls", **options) -> ModelSpec:
    return ModelSpec(
        id=f"test_{family}",
        interface="vm",
        domain="ophthalmic",
        family=family,
        source="local",
        path=str(path) if path is not None else None,
        pooling=pooling,
        preprocess=Preprocess(size=32, resize="squash", resize_to=None),
        options={**TINY, **options},
    )


def timm_tensors(arch: str, seed: int = 0, **kwargs) -> dict:
    """The state dict of a tiny timm ViT with the given architecture name (features only)."""
    import timm

    torch.manual_seed(seed)
    model = timm.create_model(arch, pretrained=False, num_classes=0, **{**TINY, **kwargs})
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def mae_checkpoint(tmp_path, with_fc_norm=False):
    """RETFound-MAE layout: encoder + MAE decoder + mask token under `model`."""
    tensors = timm_tensors("vit_large_patch16_224")
    if with_fc_norm:  # a fine-tuned (global_pool) checkpoint: fc_norm instead of the final norm
        tensors["fc_norm.weight"] = tensors.pop("norm.weight") * 1.5
        tensors["fc_norm.bias"] = tensors.pop("norm.bias") + 0.1
    tensors.update(
        {
            "mask_token": torch.zeros(1, 1, 16),
            "decoder_embed.weight": torch.randn(16, 32),
            "decoder_pred.weight": torch.randn(192, 16),
            "head.weight": torch.randn(5, 32),
        }
    )
    path = tmp_path / "retfound_mae.pth"
    torch.save({"model": tensors, "epoch": 799}, path)
    return path


def dinov2_teacher(grid: int = 6) -> dict:
    """RETFound-DINOv2 teacher tensors: `backbone.` prefix, DINOv2 MLP names, position grid at `grid` x `grid`."""
    tensors = timm_tensors("vit_large_patch14_dinov2", img_size=8 * grid)
    out = {}
    for name, tensor in tensors.items():
        name = name.replace("mlp.fc1.", "mlp.w12.").replace("mlp.fc2.", "mlp.w3.")
        out[f"backbone.{name}"] = tensor
    out["backbone.mask_token"] = torch.zeros(1, 32)
    out["dino_head.mlp.0.weight"] = torch.randn(8, 32)
    return out


# ---------------------------------------------------------------------------------------------- RETFound MAE


def test_retfound_mae_cls_loads_every_tensor_and_reports_the_decoder(tmp_path):
    encoder = load_encoder(spec_for("retfound_mae", mae_checkpoint(tmp_path), pooling="cls"))
    report = encoder.report
    assert report.clean and report.matched == report.model_tensors
    assert {"mask_token", "decoder_embed.weight", "decoder_pred.weight", "head.weight"} <= set(report.unexpected)
    assert encoder.dim == 32 and encoder.embed(PIXELS).shape == (2, 32)
    assert len(report.weights_sha256) == 64


def test_retfound_mae_mean_patch_uses_fc_norm(tmp_path):
    finetuned = load_encoder(spec_for("retfound_mae", mae_checkpoint(tmp_path, with_fc_norm=True), pooling="mean_patch"))
    assert finetuned.report.matched == finetuned.report.model_tensors and not finetuned.report.ignored_missing

    # a pretraining checkpoint has no fc_norm: RETFound's own global_pool leaves it at its initial values
    pretrain_dir = tmp_path / "pretrain"
    pretrain_dir.mkdir()
    pretrain = load_encoder(spec_for("retfound_mae", mae_checkpoint(pretrain_dir), pooling="mean_patch"))
    assert pretrain.report.clean
    assert sorted(pretrain.report.ignored_missing) == ["fc_norm.bias", "fc_norm.weight"]
    assert pretrain.report.matched == pretrain.report.model_tensors - 2
    assert "norm.weight" in pretrain.report.unexpected

    cls = load_encoder(spec_for("retfound_mae", mae_checkpoint(pretrain_dir), pooling="cls"))
    assert pretrain.embed(PIXELS).shape == cls.embed(PIXELS).shape == (2, 32)
    assert not torch.allclose(pretrain.embed(PIXELS), cls.embed(PIXELS), atol=1e-3)


def test_unknown_pooling_is_refused(tmp_path):
    from focus_dagster.models.spec import ModelSpecError

    with pytest.raises(ModelSpecError, match="pooling"):
        load_encoder(spec_for("retfound_mae", mae_checkpoint(tmp_path), pooling="gem"))


# -------------------------------------------------------------------------------------------- RETFound DINOv2


def test_retfound_dinov2_teacher_loads_cleanly_with_interpolated_positions(tmp_path):
    teacher = dinov2_teacher(grid=6)
    path = tmp_path / "retfound_dinov2.pth"
    torch.save({"teacher": teacher}, path)
    encoder = load_encoder(spec_for("retfound_dinov2", path, patch_size=8, img_size=32))
    report = encoder.report
    assert report.clean and report.matched == report.model_tensors
    assert "mask_token" in report.unexpected and "dino_head.mlp.0.weight" in report.unexpected
    assert encoder.embed(PIXELS).shape == (2, 32)

    # position embeddings: class token kept, the 6x6 grid resampled bicubically to the model's 4x4 grid
    model = encoder.modules[0]
    original = teacher["backbone.pos_embed"]
    loaded = model.pos_embed.detach()
    assert loaded.shape == (1, 1 + 16, 32)
    assert torch.equal(loaded[:, :1], original[:, :1])
    grid = original[:, 1:].reshape(1, 6, 6, 32).permute(0, 3, 1, 2)
    expected = torch.nn.functional.interpolate(grid, size=(4, 4), mode="bicubic", antialias=True, align_corners=False)
    assert torch.allclose(loaded[:, 1:], expected.permute(0, 2, 3, 1).reshape(1, 16, 32), atol=1e-5)
    # a real resampling, not a crop or a truncation
    assert not torch.allclose(loaded[:, 1:], original[:, 1:17], atol=1e-3)


def test_fit_pos_embed_keeps_a_constant_field_constant():
    import timm

    model = timm.create_model("vit_large_patch14_dinov2", pretrained=False, num_classes=0, **{**TINY, "patch_size": 8})
    field = torch.ones(1, 1 + 36, 32) * torch.arange(32.0)
    out = timm_family.fit_pos_embed({"pos_embed": field}, model)["pos_embed"]
    assert out.shape == (1, 17, 32)
    assert torch.allclose(out, torch.ones(1, 17, 32) * torch.arange(32.0), atol=1e-4)


def test_retfound_dinov2_model_key_fails_loudly(tmp_path):
    """Defect 5: the reference read `model` with strict=False and silently got a random encoder."""
    teacher = dinov2_teacher(grid=4)
    training_state = {name.replace("backbone.", "student.backbone."): t for name, t in teacher.items()}
    path = tmp_path / "retfound_dinov2.pth"
    torch.save({"teacher": teacher, "model": training_state}, path)
    with pytest.raises(CheckpointError, match=r"filled only 0 of"):
        load_encoder(spec_for("retfound_dinov2", path, patch_size=8, checkpoint_key="model"))


def test_missing_backbone_tensor_fails(tmp_path):
    teacher = dinov2_teacher(grid=4)
    del teacher["backbone.blocks.1.attn.qkv.weight"]
    path = tmp_path / "partial.pth"
    torch.save({"teacher": teacher}, path)
    with pytest.raises(CheckpointError, match=r"blocks\.1\.attn\.qkv\.weight"):
        load_encoder(spec_for("retfound_dinov2", path, patch_size=8))


def test_chunked_dinov2_blocks_are_unchunked():
    tensors = {"blocks.0.0.norm1.weight": 1, "blocks.1.1.attn.qkv.weight": 2, "blocks.3.norm1.weight": 3}
    assert set(timm_family.unchunk_blocks(tensors)) == {"blocks.0.norm1.weight", "blocks.1.attn.qkv.weight", "blocks.3.norm1.weight"}


# ------------------------------------------------------------------------------------------ VisionFM, timm ViT


def test_visionfm_teacher_with_module_and_backbone_prefixes(tmp_path):
    tensors = {f"module.backbone.{n}": t for n, t in timm_tensors("vit_base_patch16_224").items()}
    tensors["module.head.last_layer.weight"] = torch.randn(4, 32)
    path = tmp_path / "visionfm.pth"
    torch.save({"teacher": tensors, "student": {}}, path)
    encoder = load_encoder(spec_for("visionfm", path))
    assert encoder.report.matched == encoder.report.model_tensors
    assert encoder.report.unexpected == ["head.last_layer.weight"]
    assert encoder.embed(PIXELS).shape == (2, 32)


def test_timm_vit_from_safetensors_in_a_folder(tmp_path):
    from safetensors.torch import save_file

    save_file(timm_tensors("vit_small_patch16_224"), str(tmp_path / "model.safetensors"))
    cls = load_encoder(spec_for("timm_vit", tmp_path, model_name="vit_small_patch16_224"))
    mean = load_encoder(spec_for("timm_vit", tmp_path, pooling="mean_patch", model_name="vit_small_patch16_224"))
    assert cls.report.matched == cls.report.model_tensors and mean.report.matched == mean.report.model_tensors
    assert cls.report.checkpoint.endswith("model.safetensors")
    assert not torch.allclose(cls.embed(PIXELS), mean.embed(PIXELS), atol=1e-3)


def test_timm_vit_state_dict_key_and_shape_mismatch(tmp_path):
    path = tmp_path / "vit.pth"
    torch.save({"state_dict": timm_tensors("vit_base_patch16_224")}, path)
    assert load_encoder(spec_for("timm_vit", path)).report.clean
    with pytest.raises(CheckpointError, match="shape mismatches"):
        load_encoder(spec_for("timm_vit", path, embed_dim=64))


# ---------------------------------------------------------------------------------------------------- bad input


def test_wrong_format_names_its_keys(tmp_path):
    path = tmp_path / "not_a_checkpoint.pth"
    torch.save({"epoch": 3, "args": {"lr": 0.1}}, path)
    with pytest.raises(CheckpointError, match=r"2 top-level key\(s\): 'epoch', 'args'"):
        load_encoder(spec_for("retfound_dinov2", path))


def test_pickled_object_is_refused(tmp_path):
    path = tmp_path / "pickle.pth"
    torch.save(NotAStateDict(), path)
    with pytest.raises(CheckpointError, match="weights_only"):
        load_encoder(spec_for("retfound_mae", path))


def test_missing_weights_name_the_spec_path_and_fix(tmp_path, monkeypatch):
    absent = tmp_path / "nowhere" / "RETFound_cfp_weights.pth"
    with pytest.raises(WeightsNotFoundError) as info:
        load_encoder(spec_for("retfound_mae", absent))
    message = str(info.value)
    assert "test_retfound_mae" in message and str(absent) in message and "focus.yaml" in message

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    hub_spec = ModelSpec(id="retfound_hub", interface="vm", domain="ophthalmic", family="retfound_mae", source="YukunZhou/RETFound_mae_meh")
    with pytest.raises(WeightsNotFoundError, match="retfound_hub.*hub cache.*empty_cache"):
        load_encoder(hub_spec)


def test_weights_are_found_in_the_hub_cache(tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--YukunZhou--RETFound_mae_meh" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (tmp_path / "hub" / "models--YukunZhou--RETFound_mae_meh" / "refs").mkdir()
    (tmp_path / "hub" / "models--YukunZhou--RETFound_mae_meh" / "refs" / "main").write_text("abc123")
    mae_checkpoint(snapshot)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    spec = ModelSpec(
        id="retfound_hub", interface="vm", domain="ophthalmic", family="retfound_mae",
        source="YukunZhou/RETFound_mae_meh", options=dict(TINY),
    )
    assert load_encoder(spec).report.checkpoint == str(snapshot / "retfound_mae.pth")


# ----------------------------------------------------------------------------------------- built-in defaults


def efficientnet_spec(path=None) -> ModelSpec:
    from focus_dagster.models.catalog import CATALOG

    spec = CATALOG["efficientnet_lite0"]
    return spec if path is None else spec.with_path(path)


def china_photo() -> torch.Tensor:
    """scikit-learn's bundled photograph of a Chinese palace, preprocessed as the catalog says (224, [-1, 1])."""
    import importlib.util
    from pathlib import Path

    import numpy as np
    from PIL import Image

    # read the file directly: importing scikit-learn's datasets module costs seconds
    package = Path(importlib.util.find_spec("sklearn").origin).parent
    image = Image.open(package / "datasets" / "images" / "china.jpg").convert("RGB")
    width, height = image.size
    scale = 256 / min(width, height)
    image = image.resize((round(width * scale), round(height * scale)), Image.BICUBIC)
    left, top = (image.size[0] - 224) // 2, (image.size[1] - 224) // 2
    image = image.crop((left, top, left + 224, top + 224))
    pixels = torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1).float() / 255
    return ((pixels - 0.5) / 0.5)[None]


def test_efficientnet_lite0_real_imagenet_weights():
    import timm

    encoder = load_encoder(efficientnet_spec())
    report = encoder.report
    assert report.clean and report.matched == report.model_tensors == 296 and not report.unexpected
    assert report.checkpoint.endswith("efficientnet-lite0-57934424.pth")

    photo = china_photo()
    features = encoder.embed(photo)
    assert features.shape == (1, 1280) and encoder.dim == 1280
    model = encoder.modules[0]
    with torch.no_grad():
        top5 = model(photo).softmax(-1).topk(5).indices[0].tolist()
    assert top5[0] == 698  # ImageNet class 698: "palace"

    torch.manual_seed(0)
    random_model = timm.create_model("efficientnet_lite0", pretrained=False, bn_eps=1e-3, pad_type="same").eval()
    with torch.no_grad():
        random_features = random_model.forward_head(random_model.forward_features(photo), pre_logits=True)
    similarity = torch.nn.functional.cosine_similarity(features, random_features).item()
    assert similarity < 0.9


def test_efficientnet_missing_path_is_reported(tmp_path):
    with pytest.raises(WeightsNotFoundError, match="efficientnet_lite0"):
        load_encoder(efficientnet_spec(tmp_path / "absent.pth"))


def test_efficientnet_tensor_names_map_onto_timm():
    import timm

    model = timm.create_model("efficientnet_lite0", pretrained=False)
    packaged = {"_blocks.0._depthwise_conv.weight": 0, "_blocks.1._expand_conv.weight": 0, "_blocks.15._project_conv.weight": 0, "_bn1.bias": 0}
    assert set(timm_family.efficientnet_to_timm(packaged, model)) == {
        "blocks.0.0.conv_dw.weight", "blocks.1.0.conv_pw.weight", "blocks.6.0.conv_pw.weight", "bn2.bias"
    }


def tiny_vit_spec(path) -> ModelSpec:
    from focus_dagster.models.catalog import CATALOG

    return CATALOG["tiny_vit"].with_path(path)


def test_tiny_vit_is_deterministic(tmp_path):
    first = load_encoder(tiny_vit_spec(tmp_path / "a" / "cache"))
    second = load_encoder(tiny_vit_spec(tmp_path / "b"))
    files = list((tmp_path / "a" / "cache").glob("*.safetensors"))
    assert len(files) == 1
    assert first.report.weights_sha256 == second.report.weights_sha256
    assert first.report.matched == first.report.model_tensors
    assert first.spec.is_pipeline_check
    assert torch.equal(first.embed(PIXELS), second.embed(PIXELS))
    assert first.embed(PIXELS).shape == (2, 32)

    mtime = files[0].stat().st_mtime_ns
    load_encoder(tiny_vit_spec(tmp_path / "a" / "cache"))  # reuses the generated file
    assert files[0].stat().st_mtime_ns == mtime

    other_seed = tiny_vit_spec(tmp_path / "c")
    from dataclasses import replace

    other = load_encoder(replace(other_seed, options={**other_seed.options, "seed": 1}))
    assert not torch.allclose(other.embed(PIXELS), first.embed(PIXELS))
