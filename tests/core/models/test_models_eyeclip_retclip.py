"""EyeCLIP and RET-CLIP loaders: tiny checkpoints in each published layout, loaded through the real code path.

The image and text paths are checked against independent implementations: the OpenAI-layout tensors are
renamed into transformers' CLIPModel (split attention projections, transposed projections), and RET-CLIP's
`bert.` tensors are loaded into a separate BertModel.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from focus_dagster.models.loaders import hub_family
from focus_dagster.models.loaders.ophthalmic_vlm import (
    build_openai_clip,
    build_retclip,
    load_eyeclip,
    load_retclip,
)
from focus_dagster.models.spec import (
    CheckpointError,
    ModelSpec,
    Preprocess,
    WeightsNotFoundError,
)
from focus_dagster.prompts import prompt_pair, zero_shot_probability

SIZE = 32
VISION_TINY = {"embed_dim": 16, "image_size": SIZE, "patch_size": 8, "vision_width": 32, "vision_layers": 2, "vision_heads": 2}
EYECLIP_TINY = {**VISION_TINY, "context_length": 16, "text_width": 32, "text_layers": 2, "text_heads": 2}
RETCLIP_TINY = {
    **VISION_TINY, "text_hidden": 32, "text_layers": 2, "text_heads": 2, "text_intermediate": 64,
    "text_max_positions": 64, "context_length": 16,
}
PROMPTS = ["a fundus photograph of glaucoma", "a fundus photograph of a healthy eye"]


def spec_for(family: str, path, options: dict) -> ModelSpec:
    return ModelSpec(
        id=f"test-{family}", interface="vlm", domain="ophthalmic", family=family, source=f"test/{family}",
        path=str(path), preprocess=Preprocess(size=SIZE, resize="squash", resize_to=None), pooling="projection",
        options=options,
    )


def pixels(n: int = 2, seed: int = 0):
    return torch.rand(n, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))


def randomised(model, seed: int = 0) -> dict:
    """Every tensor of `model` set to seeded noise, so a misplaced tensor changes the outputs."""
    generator = torch.Generator().manual_seed(seed)
    return {name: 0.2 * torch.randn(t.shape, generator=generator) for name, t in model.state_dict().items()}


# --------------------------------------------------------------------------- checkpoints


@pytest.fixture(scope="module")
def eyeclip_files(tmp_path_factory):
    """A tiny EyeCLIP `.pt` (OpenAI-CLIP names under `model_state_dict`) and a tokenizer folder."""
    root = tmp_path_factory.mktemp("eyeclip")
    tokenizer = hub_family.tiny_tokenizer(EYECLIP_TINY["context_length"])
    tokenizer.save_pretrained(str(root / "tokenizer"))
    options = {**EYECLIP_TINY, "vocab_size": len(tokenizer), "tokenizer": str(root / "tokenizer")}
    state = randomised(build_openai_clip(options))
    torch.save({"model_state_dict": state, "epoch": 9}, root / "eyeclip.pt")
    return root, options, state, tokenizer


@pytest.fixture(scope="module")
def retclip_files(tmp_path_factory):
    """A tiny RET-CLIP `.pt` (`state_dict`, `module.` prefix) and a BERT word-piece tokenizer folder."""
    root = tmp_path_factory.mktemp("retclip")
    words = sorted({w for w in hub_family.tiny_vocabulary() if w.isalnum()})
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *words]) + "\n")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(root / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(root / "tokenizer"))
    options = {**RETCLIP_TINY, "text_vocab": len(tokenizer), "tokenizer": str(root / "tokenizer")}
    state = randomised(build_retclip(options), seed=1)
    torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}, "epoch": 3}, root / "retclip.pt")
    return root, options, state, tokenizer


# --------------------------------------------------------------------------- independent reference: transformers CLIP


def _openai_blocks_to_hf(state: dict, source: str, target: str, layers: int) -> dict:
    out = {}
    for i in range(layers):
        src, dst = f"{source}{i}.", f"{target}{i}."
        for kind in ("weight", "bias"):
            q, k, v = state[f"{src}attn.in_proj_{kind}"].chunk(3)
            out.update({f"{dst}self_attn.q_proj.{kind}": q, f"{dst}self_attn.k_proj.{kind}": k, f"{dst}self_attn.v_proj.{kind}": v})
            out[f"{dst}self_attn.out_proj.{kind}"] = state[f"{src}attn.out_proj.{kind}"]
            out[f"{dst}layer_norm1.{kind}"] = state[f"{src}ln_1.{kind}"]
            out[f"{dst}layer_norm2.{kind}"] = state[f"{src}ln_2.{kind}"]
            out[f"{dst}mlp.fc1.{kind}"] = state[f"{src}mlp.c_fc.{kind}"]
            out[f"{dst}mlp.fc2.{kind}"] = state[f"{src}mlp.c_proj.{kind}"]
    return out


def openai_vision_to_hf(state: dict, layers: int) -> dict:
    out = _openai_blocks_to_hf(state, "visual.transformer.resblocks.", "vision_model.encoder.layers.", layers)
    out["vision_model.embeddings.patch_embedding.weight"] = state["visual.conv1.weight"]
    out["vision_model.embeddings.class_embedding"] = state["visual.class_embedding"]
    out["vision_model.embeddings.position_embedding.weight"] = state["visual.positional_embedding"]
    for kind in ("weight", "bias"):
        out[f"vision_model.pre_layrnorm.{kind}"] = state[f"visual.ln_pre.{kind}"]
        out[f"vision_model.post_layernorm.{kind}"] = state[f"visual.ln_post.{kind}"]
    out["visual_projection.weight"] = state["visual.proj"].t()
    return out


def openai_clip_to_hf(state: dict, options: dict) -> dict:
    out = openai_vision_to_hf(state, options["vision_layers"])
    out.update(_openai_blocks_to_hf(state, "transformer.resblocks.", "text_model.encoder.layers.", options["text_layers"]))
    out["text_model.embeddings.token_embedding.weight"] = state["token_embedding.weight"]
    out["text_model.embeddings.position_embedding.weight"] = state["positional_embedding"]
    for kind in ("weight", "bias"):
        out[f"text_model.final_layer_norm.{kind}"] = state[f"ln_final.{kind}"]
    out["text_projection.weight"] = state["text_projection"].t()
    out["logit_scale"] = state["logit_scale"]
    return out


def hf_clip(options: dict, tokenizer) -> transformers.CLIPModel:
    vocab = tokenizer.get_vocab()
    config = transformers.CLIPConfig(
        text_config={
            "vocab_size": options["vocab_size"], "hidden_size": options["text_width"],
            "intermediate_size": 4 * options["text_width"], "num_hidden_layers": options["text_layers"],
            "num_attention_heads": options["text_heads"], "max_position_embeddings": options["context_length"],
            "pad_token_id": vocab["[PAD]"], "bos_token_id": vocab["[BOS]"], "eos_token_id": vocab["[EOS]"],
        },
        vision_config={
            "hidden_size": options["vision_width"], "intermediate_size": 4 * options["vision_width"],
            "num_hidden_layers": options["vision_layers"], "num_attention_heads": options["vision_heads"],
            "image_size": options["image_size"], "patch_size": options["patch_size"],
        },
        projection_dim=options["embed_dim"],
    )
    return transformers.CLIPModel(config).eval()


def load_reference(model, tensors: dict, allowed_missing=("position_ids",)):
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert not unexpected, unexpected
    left = [name for name in missing if not name.endswith(allowed_missing)]
    return left


# --------------------------------------------------------------------------- EyeCLIP


def test_eyeclip_loads_clean_into_one_space(eyeclip_files):
    root, options, state, _ = eyeclip_files
    loaded = load_eyeclip(spec_for("eyeclip", root / "eyeclip.pt", options))
    assert loaded.report.clean and loaded.report.matched == loaded.report.model_tensors == len(state)
    assert loaded.report.unexpected == []
    assert loaded.text.logit_bias is None and not loaded.text.wraps_prompts
    assert loaded.logit_scale == pytest.approx(float(state["logit_scale"].exp()))
    with torch.no_grad():
        images = loaded.embed(pixels(2))
        texts = loaded.text(list(prompt_pair("gon", model_wraps=False)))
    assert images.shape == (2, loaded.dim) and texts.shape == (2, loaded.dim) and loaded.dim == 16
    probability = zero_shot_probability(images, texts[0], texts[1], loaded.logit_scale)
    assert ((probability >= 0) & (probability <= 1)).all()


def test_eyeclip_matches_transformers_clip_with_the_same_tensors(eyeclip_files):
    root, options, state, tokenizer = eyeclip_files
    loaded = load_eyeclip(spec_for("eyeclip", root / "eyeclip.pt", options))
    reference = hf_clip(options, tokenizer)
    assert load_reference(reference, openai_clip_to_hf(state, options)) == []
    tokens = tokenizer(PROMPTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        image_ref = hub_family._features(reference.get_image_features(pixel_values=pixels(2)))
        text_ref = hub_family._features(
            reference.get_text_features(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
        )
        images, texts = loaded.embed(pixels(2)), loaded.text(PROMPTS)
    assert torch.allclose(images, image_ref, atol=1e-4)
    assert torch.allclose(texts, text_ref, atol=1e-4)
    # The projection is applied as published (`x @ proj`), not transposed.
    doubled = {**state, "visual.proj": 2 * state["visual.proj"]}
    torch.save({"model_state_dict": doubled}, root / "doubled.pt")
    with torch.no_grad():
        assert torch.allclose(load_eyeclip(spec_for("eyeclip", root / "doubled.pt", options)).embed(pixels(2)), 2 * images, atol=1e-4)


def test_eyeclip_padding_does_not_change_a_prompt(eyeclip_files):
    root, options, _, _ = eyeclip_files
    loaded = load_eyeclip(spec_for("eyeclip", root / "eyeclip.pt", options))
    with torch.no_grad():
        alone = loaded.text(PROMPTS[:1])
        batched = loaded.text([PROMPTS[0], "a fundus photograph of the optic disc with signs of glaucoma"])
    assert torch.allclose(alone[0], batched[0], atol=1e-5)


def test_eyeclip_missing_projection_wrong_key_or_absent_files(eyeclip_files, tmp_path):
    root, options, state, _ = eyeclip_files
    torch.save({"model_state_dict": {k: v for k, v in state.items() if k != "visual.proj"}}, tmp_path / "partial.pt")
    with pytest.raises(CheckpointError, match="visual.proj"):
        load_eyeclip(spec_for("eyeclip", tmp_path / "partial.pt", options))
    torch.save({"state_dict": state, "optimizer": {"lr": 1e-5}, "epoch": 9}, tmp_path / "wrong.pt")
    with pytest.raises(CheckpointError, match="model_state_dict") as caught:
        load_eyeclip(spec_for("eyeclip", tmp_path / "wrong.pt", options))
    assert "'optimizer'" in str(caught.value) and "'epoch'" in str(caught.value)
    with pytest.raises(WeightsNotFoundError, match="path:"):
        load_eyeclip(spec_for("eyeclip", tmp_path / "absent.pt", options))
    with pytest.raises(WeightsNotFoundError, match="tokenizer"):
        load_eyeclip(spec_for("eyeclip", root / "eyeclip.pt", {**options, "tokenizer": str(tmp_path / "none")}))


# --------------------------------------------------------------------------- RET-CLIP


def test_retclip_loads_clean_with_module_prefix_removed(retclip_files):
    root, options, state, _ = retclip_files
    loaded = load_retclip(spec_for("retclip", root / "retclip.pt", options))
    assert loaded.report.clean and loaded.report.matched == loaded.report.model_tensors == len(state)
    assert loaded.report.unexpected == [] and loaded.report.ignored_missing == []
    assert loaded.logit_scale == pytest.approx(float(state["logit_scale"].exp()))
    with torch.no_grad():
        images, texts = loaded.embed(pixels(2)), loaded.text(PROMPTS)
    assert images.shape == (2, 16) and texts.shape == (2, 16) and loaded.dim == 16
    probability = zero_shot_probability(images, texts[0], texts[1], loaded.logit_scale)
    assert ((probability >= 0) & (probability <= 1)).all()


def test_retclip_towers_match_independent_references(retclip_files):
    root, options, state, tokenizer = retclip_files
    loaded = load_retclip(spec_for("retclip", root / "retclip.pt", options))
    vision = transformers.CLIPVisionModelWithProjection(
        transformers.CLIPVisionConfig(
            hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=SIZE,
            patch_size=8, projection_dim=16,
        )
    ).eval()
    assert load_reference(vision, openai_vision_to_hf(state, options["vision_layers"])) == []
    bert = transformers.BertModel(loaded.modules[0].bert.config).eval()
    assert load_reference(bert, {k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")}) == []
    tokens = tokenizer(PROMPTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        image_ref = vision(pixel_values=pixels(2)).image_embeds
        cls = bert(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"]).last_hidden_state[:, 0]
        hidden = torch.relu(cls @ state["text_projection.0.weight"].t() + state["text_projection.0.bias"])
        text_ref = hidden @ state["text_projection.2.weight"].t() + state["text_projection.2.bias"]
        assert torch.allclose(loaded.embed(pixels(2)), image_ref, atol=1e-4)
        assert torch.allclose(loaded.text(PROMPTS), text_ref, atol=1e-4)


def test_retclip_missing_tensor_resnet_embedding_or_wrong_key(retclip_files, tmp_path):
    _, options, state, _ = retclip_files
    partial = {f"module.{k}": v for k, v in state.items() if k != "text_projection.2.weight"}
    torch.save({"state_dict": partial}, tmp_path / "partial.pt")
    with pytest.raises(CheckpointError, match="text_projection.2.weight"):
        load_retclip(spec_for("retclip", tmp_path / "partial.pt", options))
    with_resnet = {**state, "visual.resnet34.conv1.weight": torch.zeros(4, 3, 3, 3)}
    torch.save({"state_dict": with_resnet}, tmp_path / "resnet.pt")
    with pytest.raises(CheckpointError, match="ResNet-34"):
        load_retclip(spec_for("retclip", tmp_path / "resnet.pt", options))
    torch.save({"model_state_dict": state, "epoch": 1}, tmp_path / "wrong.pt")
    with pytest.raises(CheckpointError, match="'model_state_dict'"):
        load_retclip(spec_for("retclip", tmp_path / "wrong.pt", options))
