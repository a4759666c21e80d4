"""Any timm architecture (family `timm`) and any Hugging Face vision tower (family `hf_vision`).

Each loaded encoder is compared with the library's own model built or loaded directly (timm.create_model with
the checkpoint's state dict, transformers' from_pretrained on the folder), never with the platform's code.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json

import pytest
import timm
import torch
from safetensors.torch import save_file

from focus_dagster.models.registry import load_encoder
from focus_dagster.models.spec import CheckpointError, ModelSpec, ModelSpecError, Preprocess

TINY_VIT = {"img_size": 32, "patch_size": 8, "depth": 2, "embed_dim": 32, "num_heads": 2}
TINY_CONVNEXT = {"depths": (1, 1, 1, 1), "dims": (8, 16, 24, 32)}
TINY_TOWER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
TINY_IMAGE = {"image_size": 32, "patch_size": 8}
TINY_TEXT = {**TINY_TOWER, "vocab_size": 64, "max_position_embeddings": 16}


def spec_for(path, family="timm", pooling="default", size=32, **options) -> ModelSpec:
    return ModelSpec(
        id=f"any_{family}",
        interface="vm",
        domain="general",
        family=family,
        source="local",
        path=str(path),
        pooling=pooling,
        preprocess=Preprocess(size=size, resize="squash", resize_to=None),
        options=options,
    )


def pixels(size: int = 32, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(7))


def seeded_timm(arch: str, seed: int = 0, **kwargs):
    """A timm model with seeded random weights, BatchNorm statistics included (so that they must be loaded)."""
    torch.manual_seed(seed)
    model = timm.create_model(arch, pretrained=False, **kwargs).eval()
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.normal_(0, 0.1)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
    return model


def state_of(model) -> dict:
    return {name: tensor.detach().contiguous().clone() for name, tensor in model.state_dict().items()}


def timm_features(model, x) -> torch.Tensor:
    with torch.no_grad():
        return model.forward_head(model.forward_features(x), pre_logits=True)


def assert_same_features(got: torch.Tensor, expected: torch.Tensor) -> None:
    """float32 agreement: cosine >= 0.99999 per row and max |difference| <= 1e-4 of the largest value."""
    assert got.shape == expected.shape and got.dtype == torch.float32
    cosine = torch.nn.functional.cosine_similarity(got.flatten(1), expected.flatten(1), dim=1)
    assert cosine.min().item() >= 0.99999
    assert ((got - expected).abs().max() / expected.abs().max()).item() <= 1e-4


# --------------------------------------------------------------------------------------- any timm architecture


def test_timm_resnet18_from_safetensors_equals_timm(tmp_path):
    reference = seeded_timm("resnet18")
    save_file(state_of(reference), str(tmp_path / "resnet18.safetensors"))
    encoder = load_encoder(spec_for(tmp_path / "resnet18.safetensors", size=64, model_name="resnet18"))
    x = pixels(64)
    assert_same_features(encoder.embed(x), timm_features(reference, x))
    assert encoder.dim == 512 and encoder.report.clean and encoder.report.matched == encoder.report.model_tensors


def test_timm_tiny_vit_from_pth_without_head_equals_timm(tmp_path):
    reference = seeded_timm("vit_tiny_patch16_224", num_classes=0, **TINY_VIT)
    torch.save({"model": state_of(reference)}, tmp_path / "vit.pth")
    for pooling in ("cls", "default", "token"):
        spec = spec_for(tmp_path / "vit.pth", pooling=pooling, model_name="vit_tiny_patch16_224", **TINY_VIT)
        encoder = load_encoder(spec)
        assert_same_features(encoder.embed(pixels()), timm_features(reference, pixels()))
    assert encoder.dim == 32 and encoder.report.ignored_missing == ["head.weight", "head.bias"]
    averaged = seeded_timm("vit_tiny_patch16_224", num_classes=0, global_pool="avg", fc_norm=False, **TINY_VIT)
    encoder = load_encoder(spec_for(tmp_path / "vit.pth", pooling="mean_patch", model_name="vit_tiny_patch16_224",
                                    fc_norm=False, **TINY_VIT))
    averaged.load_state_dict(state_of(reference), strict=False)
    assert_same_features(encoder.embed(pixels()), timm_features(averaged, pixels()))


def test_timm_convnext_with_a_fine_tuned_head_equals_timm(tmp_path):
    reference = seeded_timm("convnext_atto", num_classes=3, **TINY_CONVNEXT)
    save_file(state_of(reference), str(tmp_path / "model.safetensors"))
    encoder = load_encoder(spec_for(tmp_path, model_name="convnext_atto", **TINY_CONVNEXT))
    assert_same_features(encoder.embed(pixels()), timm_features(reference, pixels()))
    assert encoder.dim == 32 and encoder.report.clean and not encoder.report.ignored_missing
    assert encoder.modules[0].get_classifier().out_features == 3  # the head follows the checkpoint's


def test_timm_config_json_names_the_architecture(tmp_path):
    from timm.models import save_for_hf

    reference = seeded_timm("vit_tiny_patch16_224", num_classes=4, **TINY_VIT)
    save_for_hf(reference, str(tmp_path), safe_serialization=True)
    assert json.loads((tmp_path / "config.json").read_text())["architecture"] == "vit_tiny_patch16_224"
    encoder = load_encoder(spec_for(tmp_path))
    assert_same_features(encoder.embed(pixels()), timm_features(reference, pixels()))
    assert encoder.report.clean and encoder.report.checkpoint.endswith(".safetensors")


def test_options_reach_timm_and_unknown_ones_are_refused_by_name(tmp_path):
    torch.save(state_of(seeded_timm("vit_tiny_patch16_224", **TINY_VIT)), tmp_path / "vit.pth")
    vit = {"model_name": "vit_tiny_patch16_224", **TINY_VIT}
    encoder = load_encoder(spec_for(tmp_path / "vit.pth", drop_path_rate=0.1, **vit))
    rates = [m.drop_prob for m in encoder.modules[0].modules() if type(m).__name__ == "DropPath"]
    assert rates and max(rates) == pytest.approx(0.1)
    refused = r"timm 'vit_tiny_patch16_224' does not take option\(s\) \['no_such_option', 'other'\]"
    with pytest.raises(ModelSpecError, match=refused):
        load_encoder(spec_for(tmp_path / "vit.pth", no_such_option=1, other=2, **vit))
    with pytest.raises(ModelSpecError, match=r"does not read option\(s\) \['drop_path_rate'\].*family: timm"):
        load_encoder(spec_for(tmp_path / "vit.pth", family="timm_vit", pooling="cls", drop_path_rate=0.1, **TINY_VIT))


def test_efficientnet_takes_bn_eps_and_resnet_refuses_it(tmp_path):
    reference = seeded_timm("efficientnet_b0", bn_eps=1e-3)
    save_file(state_of(reference), str(tmp_path / "model.safetensors"))
    encoder = load_encoder(spec_for(tmp_path, model_name="efficientnet_b0", bn_eps=1e-3))
    assert encoder.modules[0].bn1.eps == 1e-3
    assert_same_features(encoder.embed(pixels()), timm_features(reference, pixels()))
    with pytest.raises(ModelSpecError, match=r"'any_timm'.*timm 'resnet18' does not take option\(s\) \['bn_eps'\]"):
        load_encoder(spec_for(tmp_path, model_name="resnet18", bn_eps=1e-3))


def test_cls_pooling_on_a_cnn_is_a_clear_error(tmp_path):
    save_file(state_of(seeded_timm("resnet18")), str(tmp_path / "model.safetensors"))
    with pytest.raises(ModelSpecError) as info:
        load_encoder(spec_for(tmp_path, pooling="cls", model_name="resnet18"))
    message = str(info.value)
    assert "'resnet18'" in message and "'cls'" in message and "pooling: default" in message
    assert "Invalid pool type" not in message


def test_missing_or_unknown_architecture_names_the_option(tmp_path):
    save_file(state_of(seeded_timm("resnet18")), str(tmp_path / "resnet18.safetensors"))
    with pytest.raises(ModelSpecError, match=r"'any_timm'.*options\.model_name.*timm\.list_models"):
        load_encoder(spec_for(tmp_path / "resnet18.safetensors"))
    with pytest.raises(ModelSpecError, match=r"'resnet_18' is not a timm architecture.*'resnet18'"):
        load_encoder(spec_for(tmp_path / "resnet18.safetensors", model_name="resnet_18"))


def test_a_vit_checkpoint_built_as_resnet18_names_what_to_fix(tmp_path):
    save_file(state_of(seeded_timm("vit_tiny_patch16_224", **TINY_VIT)), str(tmp_path / "vit.safetensors"))
    with pytest.raises(CheckpointError) as info:
        load_encoder(spec_for(tmp_path / "vit.safetensors", model_name="resnet18"))
    message = str(info.value)
    assert "does not fit timm 'resnet18'" in message and "filled only 0 of" in message
    assert "conv1.weight" in message and "blocks.0.attn" in message
    assert "options.model_name" in message and "a timm ViT with embed_dim 32, depth 2, patch_size 8" in message


# ------------------------------------------------------------------------------------------ Hugging Face towers


def save_hf(model, folder) -> str:
    model.save_pretrained(str(folder), safe_serialization=True)
    return str(folder)


def test_hf_dinov2_tower_equals_automodel(tmp_path):
    from transformers import AutoModel, Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    folder = save_hf(Dinov2Model(Dinov2Config(**TINY_TOWER, **TINY_IMAGE)), tmp_path)
    reference = AutoModel.from_pretrained(folder, local_files_only=True).eval()
    with torch.no_grad():
        out = reference(pixel_values=pixels())
    assert_same_features(load_encoder(spec_for(folder, family="hf_vision")).embed(pixels()), out.pooler_output)
    assert_same_features(load_encoder(spec_for(folder, family="hf_vision", pooling="cls")).embed(pixels()),
                         out.last_hidden_state[:, 0])
    mean = load_encoder(spec_for(folder, family="hf_vision", pooling="mean_patch"))
    assert_same_features(mean.embed(pixels()), out.last_hidden_state[:, 1:].mean(dim=1))
    assert mean.dim == 32 and mean.report.clean


@pytest.mark.parametrize("kind", ["dinov2_with_registers", "dinov3_vit"])
def test_hf_register_towers_average_only_patch_tokens(tmp_path, kind):
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(0)
    config = AutoConfig.for_model(kind, **TINY_TOWER, **TINY_IMAGE, num_register_tokens=4)
    folder = save_hf(AutoModel.from_config(config), tmp_path)
    with torch.no_grad():
        out = AutoModel.from_pretrained(folder, local_files_only=True).eval()(pixel_values=pixels())
    assert out.last_hidden_state.shape[1] == 1 + 4 + 16
    mean = load_encoder(spec_for(folder, family="hf_vision", pooling="mean_patch"))
    assert_same_features(mean.embed(pixels()), out.last_hidden_state[:, 5:].mean(dim=1))
    assert_same_features(load_encoder(spec_for(folder, family="hf_vision")).embed(pixels()), out.pooler_output)


def test_hf_vit_without_pooler_weights_uses_its_cls_token(tmp_path):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    folder = save_hf(ViTModel(ViTConfig(**TINY_TOWER, **TINY_IMAGE), add_pooling_layer=False), tmp_path)
    with torch.no_grad():
        tokens = ViTModel.from_pretrained(folder, add_pooling_layer=False, local_files_only=True).eval()(
            pixel_values=pixels()
        ).last_hidden_state
    encoder = load_encoder(spec_for(folder, family="hf_vision"))
    assert_same_features(encoder.embed(pixels()), tokens[:, 0])
    assert encoder.report.ignored_missing and all(n.startswith("pooler.") for n in encoder.report.ignored_missing)
    with pytest.raises(CheckpointError, match="pooler"):
        load_encoder(spec_for(folder, family="hf_vision", pooling="pooler"))


def test_hf_clip_tower_from_a_full_clip_folder(tmp_path):
    from transformers import CLIPConfig, CLIPModel, CLIPVisionModel

    torch.manual_seed(0)
    config = CLIPConfig(text_config=TINY_TEXT, vision_config={**TINY_TOWER, **TINY_IMAGE}, projection_dim=24)
    folder = save_hf(CLIPModel(config), tmp_path)
    with torch.no_grad():
        vision = CLIPVisionModel.from_pretrained(folder, local_files_only=True).eval()
        pooled = vision(pixel_values=pixels()).pooler_output
        full = CLIPModel.from_pretrained(folder, local_files_only=True).eval()
        projected = full.get_image_features(pixel_values=pixels())
    projected = getattr(projected, "pooler_output", projected)
    tower = load_encoder(spec_for(folder, family="hf_vision"))
    assert_same_features(tower.embed(pixels()), pooled)
    assert tower.dim == 32 and any(name.startswith("text_model.") for name in tower.report.unexpected)
    projection = load_encoder(spec_for(folder, family="hf_vision", pooling="projection"))
    assert_same_features(projection.embed(pixels()), projected)
    assert projection.dim == 24


def test_hf_siglip_tower_from_a_full_siglip_folder(tmp_path):
    from transformers import SiglipConfig, SiglipModel

    torch.manual_seed(0)
    model = SiglipModel(SiglipConfig(text_config=TINY_TEXT, vision_config={**TINY_TOWER, **TINY_IMAGE}))
    folder = save_hf(model, tmp_path)
    reference = SiglipModel.from_pretrained(folder, local_files_only=True).eval()
    with torch.no_grad():
        features = reference.get_image_features(pixel_values=pixels())
        tokens = reference.vision_model(pixel_values=pixels()).last_hidden_state
    assert_same_features(load_encoder(spec_for(folder, family="hf_vision")).embed(pixels()),
                         getattr(features, "pooler_output", features))
    assert_same_features(load_encoder(spec_for(folder, family="hf_vision", pooling="mean_patch")).embed(pixels()),
                         tokens.mean(dim=1))
    with pytest.raises(ModelSpecError, match="no class token"):
        load_encoder(spec_for(folder, family="hf_vision", pooling="cls"))


def test_hf_vision_refuses_an_unsupported_model_type(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(CheckpointError, match=r"'bert' model, but family 'hf_vision' loads \['vit', 'dinov2'"):
        load_encoder(spec_for(tmp_path, family="hf_vision"))
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "resnet18", "num_classes": 10}))
    with pytest.raises(CheckpointError, match="family: timm"):
        load_encoder(spec_for(tmp_path, family="hf_vision"))
