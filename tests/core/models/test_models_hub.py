"""Hub-format loaders: tiny folders written with save_pretrained, loaded offline through the real code path."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from focus_dagster.models.loaders import hub_family
from focus_dagster.models.spec import (
    CheckpointError,
    ModelSpec,
    Preprocess,
    WeightsNotFoundError,
)
from focus_dagster.prompts import prompt_pair, zero_shot_probability
from resources import DatasetRoots, ModelHub  # at the top: Dagster reads a step's resource annotations by name

SIZE = 32
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


def spec_for(family: str, path, interface: str = "vm", **extra) -> ModelSpec:
    return ModelSpec(
        id=f"test-{family}",
        interface=interface,
        domain="general",
        family=family,
        source=f"test/{family}",
        path=str(path) if path is not None else None,
        preprocess=Preprocess(size=SIZE, resize="squash", resize_to=None),
        **extra,
    )


def pixels(n: int = 2, seed: int = 0):
    return torch.rand(n, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- folders


def _save(model, folder, tokenizer=None):
    torch.manual_seed(0)
    model.save_pretrained(str(folder))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def vit_folder(tmp_path_factory):
    """A ViT in the published google/vit-* layout: a classification checkpoint (`vit.` prefix, no pooler)."""
    config = transformers.ViTConfig(**TINY, image_size=SIZE, patch_size=8, num_labels=3)
    torch.manual_seed(0)
    return _save(transformers.ViTForImageClassification(config), tmp_path_factory.mktemp("vit"))


@pytest.fixture(scope="module")
def dinov2_folder(tmp_path_factory):
    config = transformers.Dinov2Config(**TINY, image_size=SIZE, patch_size=8)
    torch.manual_seed(0)
    return _save(transformers.Dinov2Model(config), tmp_path_factory.mktemp("dinov2"))


@pytest.fixture(scope="module")
def dinov3_folder(tmp_path_factory):
    config = transformers.DINOv3ViTConfig(**TINY, image_size=SIZE, patch_size=8, num_register_tokens=2)
    torch.manual_seed(0)
    return _save(transformers.DINOv3ViTModel(config), tmp_path_factory.mktemp("dinov3"))


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    """A hub CLIP folder (the tiny pipeline-check build is exactly that)."""
    folder = tmp_path_factory.mktemp("clip")
    return hub_family.build_tiny_clip(folder, spec_for("tiny_clip", folder, interface="vlm"))


@pytest.fixture(scope="module")
def siglip_folder(tmp_path_factory):
    tokenizer = hub_family.tiny_tokenizer(16)
    vocab = tokenizer.get_vocab()
    config = transformers.SiglipConfig(
        text_config={**TINY, "vocab_size": len(vocab), "max_position_embeddings": 16, "projection_size": 32,
                     "pad_token_id": vocab["[PAD]"], "bos_token_id": vocab["[BOS]"], "eos_token_id": vocab["[EOS]"]},
        vision_config={**TINY, "image_size": SIZE, "patch_size": 8},
    )
    torch.manual_seed(0)
    return _save(transformers.SiglipModel(config), tmp_path_factory.mktemp("siglip"), tokenizer)


# --------------------------------------------------------------------------- vision encoders


@pytest.mark.parametrize("family, fixture", [("hf_vit", "vit_folder"), ("hf_dinov2", "dinov2_folder"), ("hf_dinov3", "dinov3_folder")])
def test_vision_loads_clean_with_embedding_shape(family, fixture, request):
    loaded = hub_family.load_hf_vision(spec_for(family, request.getfixturevalue(fixture)))
    assert loaded.report.clean and loaded.report.matched > 0 and not loaded.report.missing
    with torch.no_grad():
        features = loaded.embed(pixels())
    assert features.shape == (2, loaded.dim) == (2, 32)
    assert torch.isfinite(features).all()


def test_vit_classification_checkpoint_reports_unused_pooler_and_head(vit_folder):
    report = hub_family.load_hf_vision(spec_for("hf_vit", vit_folder)).report
    assert report.ignored_missing and all(name.startswith("pooler.") for name in report.ignored_missing)
    assert any("classifier" in name for name in report.unexpected)


def test_dinov2_cls_is_the_pooler_and_mean_patch_differs(dinov2_folder):
    cls = hub_family.load_hf_vision(spec_for("hf_dinov2", dinov2_folder))
    mean = hub_family.load_hf_vision(spec_for("hf_dinov2", dinov2_folder, pooling="mean_patch"))
    model = cls.modules[0]
    with torch.no_grad():
        batch = pixels()
        out = model(pixel_values=batch)
        assert torch.allclose(cls.embed(batch), out.last_hidden_state[:, 0], atol=1e-6)
        assert torch.allclose(mean.embed(batch), out.last_hidden_state[:, 1:].mean(dim=1), atol=1e-6)


def test_dinov3_mean_patch_skips_register_tokens(dinov3_folder):
    loaded = hub_family.load_hf_vision(spec_for("hf_dinov3", dinov3_folder, pooling="mean_patch"))
    with torch.no_grad():
        batch = pixels()
        hidden = loaded.modules[0](pixel_values=batch).last_hidden_state
        assert hidden.shape[1] == 1 + 2 + (SIZE // 8) ** 2
        assert torch.allclose(loaded.embed(batch), hidden[:, 3:].mean(dim=1), atol=1e-6)


def test_wrong_model_type_for_family_is_a_checkpoint_error(dinov2_folder):
    with pytest.raises(CheckpointError, match="dinov2"):
        hub_family.load_hf_vision(spec_for("hf_vit", dinov2_folder))


# --------------------------------------------------------------------------- dual encoders


@pytest.mark.parametrize("family, fixture", [("hf_clip", "clip_folder"), ("hf_siglip", "siglip_folder")])
def test_dual_encoder_text_and_image_share_a_space(family, fixture, request):
    loaded = hub_family.load_hf_dual_encoder(spec_for(family, request.getfixturevalue(fixture), interface="vlm"))
    assert loaded.report.clean and loaded.is_dual_encoder
    with torch.no_grad():
        images = loaded.embed(pixels(3))
        texts = loaded.text(list(prompt_pair("any_dr")))
    assert images.shape == (3, loaded.dim) and texts.shape == (2, loaded.dim)
    assert loaded.logit_scale > 0
    if family == "hf_siglip":
        assert isinstance(loaded.text.logit_bias, float)
    else:
        assert loaded.text.logit_bias is None
    probability = zero_shot_probability(images, texts[0], texts[1], loaded.logit_scale, loaded.text.logit_bias)
    assert probability.shape == (3,) and ((probability >= 0) & (probability <= 1)).all()


def test_zero_shot_prefers_the_prompt_the_image_is_closest_to(clip_folder):
    loaded = hub_family.load_hf_dual_encoder(spec_for("hf_clip", clip_folder, interface="vlm"))
    with torch.no_grad():
        negative, positive = loaded.text(list(prompt_pair("gon")))
    images = torch.stack([positive + 0.01 * negative, negative + 0.01 * positive])
    p_pos = zero_shot_probability(images, negative, positive, loaded.logit_scale)
    p_neg = zero_shot_probability(images, positive, negative, loaded.logit_scale)
    assert torch.allclose(p_pos + p_neg, torch.ones(2), atol=1e-6)
    assert p_pos[0] > 0.5 > p_pos[1]


def test_tiny_clip_is_deterministic_across_builds(tmp_path):
    first = hub_family.load_tiny_clip(spec_for("tiny_clip", tmp_path / "a", interface="vlm"))
    second = hub_family.load_tiny_clip(spec_for("tiny_clip", tmp_path / "b", interface="vlm"))
    assert first.report.weights_sha256 == second.report.weights_sha256
    assert first.spec.family == "tiny_clip" and first.report.model_id == "test-tiny_clip"
    with torch.no_grad():
        assert torch.equal(first.embed(pixels()), second.embed(pixels()))
        assert torch.equal(first.text(["signs of glaucoma"]), second.text(["signs of glaucoma"]))


# --------------------------------------------------------------------------- bad input


def test_missing_folder_names_spec_and_path(tmp_path):
    absent = tmp_path / "nowhere"
    with pytest.raises(WeightsNotFoundError) as caught:
        hub_family.load_hf_vision(spec_for("hf_dinov2", absent))
    message = str(caught.value)
    assert "test-hf_dinov2" in message and str(absent) in message and "path:" in message


def test_missing_hub_cache_entry_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(WeightsNotFoundError, match="test/hf_clip"):
        hub_family.load_hf_dual_encoder(spec_for("hf_clip", None, interface="vlm"))


def test_tensor_removed_from_safetensors_is_a_checkpoint_error(dinov2_folder, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    damaged = shutil.copytree(dinov2_folder, tmp_path / "damaged")
    weights = damaged / "model.safetensors"
    tensors = load_file(str(weights))
    removed = next(name for name in tensors if "encoder.layer.1.attention" in name)
    del tensors[removed]
    save_file(tensors, str(weights), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="missing"):
        hub_family.load_hf_vision(spec_for("hf_dinov2", damaged))


def test_trust_remote_code_only_when_the_spec_opts_in(dinov2_folder, monkeypatch):
    assert hub_family.pretrained_kwargs(spec_for("hf_dinov2", dinov2_folder), dinov2_folder)["trust_remote_code"] is False
    opted = spec_for("hf_dinov2", dinov2_folder, trust_remote_code=True)
    assert hub_family.pretrained_kwargs(opted, dinov2_folder)["trust_remote_code"] is True

    seen = []
    original = transformers.AutoModel.from_pretrained

    def recording(path, **kwargs):
        seen.append(kwargs)
        return original(path, **kwargs)

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", recording)
    hub_family.load_hf_vision(spec_for("hf_dinov2", dinov2_folder))
    assert seen and seen[0]["trust_remote_code"] is False and seen[0]["local_files_only"] is True
    assert seen[0]["use_safetensors"] is True


# --------------------------------------------------------------------------- FLAIR (published .pth layout)

FLAIR_TINY = {
    "proj_dim": 16, "resnet_layers": [1, 1, 1, 1], "resnet_width_per_group": 8, "text_hidden": 32, "text_layers": 3,
    "text_heads": 2, "text_intermediate": 64, "text_max_positions": 64, "text_max_length": 32,
}


@pytest.fixture(scope="module")
def flair_files(tmp_path_factory):
    """A tiny FLAIR `.pth` (plain state dict, as published) and a BERT word-piece tokenizer folder."""
    from focus_dagster.models.loaders.ophthalmic_vlm import build_flair

    root = tmp_path_factory.mktemp("flair")
    words = sorted({w for w in hub_family.tiny_vocabulary() if w.isalnum()})
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *words]) + "\n")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(root / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(root / "tokenizer"))
    torch.manual_seed(0)
    model = build_flair({**FLAIR_TINY, "text_vocab": len(tokenizer)})
    torch.save(model.state_dict(), root / "flair_resnet.pth")
    return root, {**FLAIR_TINY, "text_vocab": len(tokenizer), "tokenizer": str(root / "tokenizer")}


def flair_spec(path, options):
    return ModelSpec(
        id="test-flair", interface="vlm", domain="ophthalmic", family="flair", source="jusiro2/FLAIR", path=str(path),
        preprocess=Preprocess(size=SIZE, resize="pad_longest", resize_to=None, scale_only=True), options=options,
    )


def test_flair_loads_clean_and_wraps_its_own_prompts(flair_files):
    from focus_dagster.models.loaders.ophthalmic_vlm import load_flair
    from focus_dagster.prompts import tower_wraps_prompts

    root, options = flair_files
    loaded = load_flair(flair_spec(root / "flair_resnet.pth", options))
    assert loaded.report.clean and loaded.report.matched == loaded.report.model_tensors
    assert tower_wraps_prompts(loaded.text) and loaded.text.logit_bias is None
    assert 0 < loaded.logit_scale <= 100.0 + 1e-3
    with torch.no_grad():
        images = loaded.embed(pixels(2))
        texts = loaded.text(list(prompt_pair("gon", model_wraps=tower_wraps_prompts(loaded.text))))
    assert images.shape == (2, 16) and texts.shape == (2, 16)
    assert torch.allclose(images.norm(dim=-1), torch.ones(2), atol=1e-5)
    probability = zero_shot_probability(images, texts[0], texts[1], loaded.logit_scale)
    assert ((probability >= 0) & (probability <= 1)).all()


def test_flair_checkpoint_missing_a_backbone_tensor_or_in_wrong_format(flair_files, tmp_path):
    from focus_dagster.models.loaders.ophthalmic_vlm import load_flair

    root, options = flair_files
    state = torch.load(root / "flair_resnet.pth", weights_only=True)
    partial = {k: v for k, v in state.items() if not k.startswith("vision_model.model.layer4.")}
    torch.save(partial, tmp_path / "partial.pth")
    with pytest.raises(CheckpointError, match="missing"):
        load_flair(flair_spec(tmp_path / "partial.pth", options))
    torch.save({"teacher": {"x": 1}, "epoch": 3}, tmp_path / "wrong.pth")
    with pytest.raises(CheckpointError, match="teacher"):
        load_flair(flair_spec(tmp_path / "wrong.pth", options))
    with pytest.raises(WeightsNotFoundError, match="path:"):
        load_flair(flair_spec(tmp_path / "absent.pth", options))


# --------------------------------------------------------------------------- one registry for every interface

# Written out here, not read from the code: a family added to the catalog or a loader module added to the package
# must be added to the registry, and to these lists, on purpose.
ENCODER_FAMILIES = {"timm", "timm_vit", "retfound_mae", "retfound_dinov2", "visionfm", "efficientnet_lite0", "tiny_vit",
                    "hf_vit", "hf_dinov2", "hf_dinov3", "hf_vision", "hf_clip", "hf_siglip", "tiny_clip", "flair",
                    "eyeclip", "retclip"}
MLLM_FAMILIES = {"hf_mllm", "tiny_llava"}
LOADER_MODULES = {"timm_any", "timm_family", "hub_family", "ophthalmic_vlm", "mllm"}
HELPER_MODULES = {"timm_advice"}  # read by the loaders, loads nothing itself


def test_every_family_resolves_to_a_loader_in_one_registry():
    from pathlib import Path

    from focus_dagster.models import loaders
    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.models.registry import LOADERS, MLLM_LOADERS, loader_function

    assert set(LOADERS) == ENCODER_FAMILIES | MLLM_FAMILIES and set(MLLM_LOADERS) == MLLM_FAMILIES
    assert {spec.family for spec in CATALOG.values()} <= set(LOADERS)
    assert {spec.family for spec in CATALOG.values() if spec.interface == "mllm"} == MLLM_FAMILIES
    for family in LOADERS:
        assert callable(loader_function(family)), family
    registered = {target.split(":")[0].rsplit(".", 1)[1] for target in LOADERS.values()}
    on_disk = {path.stem for path in Path(loaders.__file__).parent.glob("*.py")} - {"__init__"}
    assert registered == LOADER_MODULES == on_disk - HELPER_MODULES


def test_unknown_families_and_interface_mismatches_are_refused_before_any_read(tmp_path):
    from dataclasses import replace

    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.models.registry import load_model
    from focus_dagster.models.spec import ModelSpecError

    absent = str(tmp_path / "absent")
    with pytest.raises(ModelSpecError, match=r"unknown loader family 'no_such'; known: timm, .*tiny_llava"):
        load_model(replace(CATALOG["tiny_vit"], family="no_such", path=absent))
    with pytest.raises(ModelSpecError, match=r"interface 'mllm' does not fit .* 'timm_vit'; families for it: "
                                             r"hf_mllm, tiny_llava"):
        load_model(replace(CATALOG["tiny_llava"], family="timm_vit", path=absent))
    with pytest.raises(ModelSpecError, match=r"interface 'vm' does not fit loader family 'hf_mllm'"):
        load_model(replace(CATALOG["tiny_vit"], family="hf_mllm", path=absent))
    with pytest.raises(ModelSpecError, match=r"'tiny_clip' is a dual .*; this step takes 'mllm' models only"):
        load_model(replace(CATALOG["tiny_clip"], path=absent), ("mllm",))
    assert not (tmp_path / "absent").exists()


def test_the_model_hub_loads_any_interface_with_one_call(tmp_path):
    from focus_dagster.models.base import LoadedEncoder
    from focus_dagster.models.loaders.mllm import LoadedMLLM
    from focus_dagster.models.spec import ModelSpecError

    hub = ModelHub(entries=[{"id": "tiny_clip"}, {"id": "tiny_llava"}], cache_dir=str(tmp_path))
    assert isinstance(hub.load("tiny_clip", "cpu"), LoadedEncoder)
    mllm = hub.load("tiny_llava", "cpu", ("mllm",))
    assert isinstance(mllm, LoadedMLLM) and mllm.report.clean and mllm.spec.id == "tiny_llava"
    with pytest.raises(ModelSpecError, match="'tiny_clip' is a dual"):
        hub.load("tiny_clip", "cpu", ("mllm",))


# --------------------------------------------------------------------------- the resources' typed configuration


def test_the_resources_hold_focus_yaml_as_typed_config_through_dagster(tmp_path):
    """The model entries and the focus.yaml document reach a step as Dagster config values, not JSON text."""
    import dagster as dg

    from focus_dagster.config import parse_config

    config = parse_config({"models": ["tiny_vit", {"id": "tiny_clip", "pooling": "projection"}],
                           "datasets": {"brset": "synthetic"}}, tmp_path / "home")
    seen = {}

    @dg.asset
    def reads_both(models: ModelHub, datasets: DatasetRoots) -> None:
        seen.update(entries=models.entries, specs=list(models.specs()), config=datasets.config)

    resources = {"models": ModelHub.from_config(config), "datasets": DatasetRoots.from_config(config)}
    assert dg.materialize([reads_both], resources=resources).success
    assert seen["entries"] == [{"id": "tiny_vit"}, {"id": "tiny_clip", "pooling": "projection"}]
    assert seen["specs"] == ["tiny_vit", "tiny_clip"] and seen["config"] == config
    fields = ModelHub.to_config_schema().as_field().config_type.fields
    assert fields["entries"].config_type.inner_type.inner_type.kind.name == "PERMISSIVE_SHAPE"
    assert DatasetRoots.to_config_schema().as_field().config_type.fields["document"].config_type.kind.name == \
        "PERMISSIVE_SHAPE"
