"""A model's preprocessing from its own configuration, and the platform's pixels against the libraries'.

References: timm's `resolve_data_config` / `create_transform` and Hugging Face image processors, run directly
on a Pillow image the test opens itself; the hub's published `preprocessor_config.json` of the reference grid
and ../shared/protocol.md, written here as literal fixtures.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from focus_dagster.inference.images import pixels_from_bytes, to_array
from focus_dagster.models.catalog import CATALOG
from focus_dagster.models.preprocessing import preprocess_record, with_own_preprocessing
from focus_dagster.models.selection import resolve_models
from focus_dagster.models.spec import ModelSpecError
from focus_dagster.synthetic.render import CAMERAS, FundusSpec, render_fundus

ONE_LEVEL = 1 / 255  # the stated tolerance, in the model's input units

# The hub's preprocessor_config.json of the reference grid's hub models, as published (the keys that matter).
PUBLISHED_PROCESSORS = {
    "vit_large": {"image_processor_type": "ViTImageProcessor", "do_normalize": True, "do_resize": True,
                  "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 2, "size": 224},
    "dinov2_large": {"image_processor_type": "BitImageProcessor", "crop_size": {"height": 224, "width": 224},
                     "do_center_crop": True, "do_convert_rgb": True, "do_normalize": True, "do_rescale": True,
                     "do_resize": True, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
                     "resample": 3, "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 256}},
    "clip_vit_b32": {"image_processor_type": "CLIPImageProcessor", "crop_size": 224, "do_center_crop": True,
                     "do_normalize": True, "do_resize": True, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                     "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": 224},
    "siglip2_base": {"image_processor_type": "SiglipImageProcessor", "do_normalize": True, "do_rescale": True,
                     "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 2,
                     "rescale_factor": 0.00392156862745098, "size": {"height": 224, "width": 224}},
    "medsiglip_448": {"image_processor_type": "SiglipImageProcessor", "do_normalize": True, "do_rescale": True,
                      "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 2,
                      "rescale_factor": 0.00392156862745098, "size": {"height": 448, "width": 448}},
}
# ../shared/protocol.md, "Loading facts".
RETFOUND_PUBLISHED = {"size": 224, "resize": "resize_crop", "resize_to": 256, "interpolation": "bicubic",
                      "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "scale_only": False}
FLAIR_PUBLISHED = {"size": 512, "resize": "pad_longest", "scale_only": True}
GEOMETRY_AND_SCALE = ("size", "resize", "resize_to", "interpolation", "mean", "std", "scale_only")


def own_model(family: str = "timm", **entry) -> dict:
    return {"id": "mine", "family": family, "interface": "vm", "domain": "general", "source": "local", **entry}


def resolved(entry, cache: Path = Path("/nonexistent")):
    spec = next(iter(resolve_models([entry], cache).values()))
    return with_own_preprocessing(spec).preprocess


def fundus_jpeg(width: int, height: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    render_fundus(FundusSpec(width, height, CAMERAS["canon_cr"], dr_grade=2), seed=seed).save(
        buffer, format="JPEG", quality=92)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def fundus_jpegs() -> list[bytes]:
    """Full-size look-alikes: 4:3, 3:2, portrait and odd sizes (crop offsets that round either way)."""
    return [fundus_jpeg(2048, 1536, 1), fundus_jpeg(2400, 1600, 2), fundus_jpeg(1203, 1601, 3),
            fundus_jpeg(1597, 1203, 4)]


def opened(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


def platform_input(data: bytes, preprocess) -> np.ndarray:
    """What the engine feeds the model: the cached uint8 pixels, scaled and normalised."""
    return to_array(pixels_from_bytes(data, preprocess), preprocess)


# ------------------------------------------------------------------------------------------------ resolution


@pytest.mark.parametrize("name", ["resnet18", "vit_base_patch16_224", "convnext_atto", "efficientnet_b0"])
def test_a_timm_model_of_ones_own_gets_timms_data_config(name):
    import timm
    from timm.data import resolve_model_data_config

    reference = resolve_model_data_config(timm.create_model(name, pretrained=False))
    preprocess = resolved(own_model(path="/w.safetensors", options={"model_name": name}))
    values = preprocess.values()
    assert values["size"] == reference["input_size"][1] and values["crop_pct"] == reference["crop_pct"]
    assert (values["interpolation"], tuple(values["mean"]), tuple(values["std"])) == (
        reference["interpolation"], tuple(reference["mean"]), tuple(reference["std"]))
    assert values["resize"] == {"center": "resize_crop", "squash": "squash"}[reference["crop_mode"]]
    assert set(preprocess.described()["sources"].values()) == {f"timm pretrained_cfg of {name!r}"}


def test_the_input_size_a_model_is_built_with_wins_over_its_pretrained_one():
    preprocess = resolved(own_model("timm_vit", path="/w.safetensors", options={"img_size": 32}))
    assert (preprocess.size, preprocess.crop_pct, preprocess.scale_size) == (32, 0.9, 35)  # floor(32 / 0.9)


def test_a_preprocess_block_overrides_field_by_field():
    """The catalog's RETFound settings stay for every key the block leaves out (protocol.md's values)."""
    preprocess = resolved({"id": "retfound_mae_naturecfp", "preprocess": {"interpolation": "bilinear"}})
    values, sources = preprocess.values(), preprocess.described()["sources"]
    assert values["interpolation"] == "bilinear" and sources["interpolation"] == "focus.yaml"
    assert {k: values[k] for k in RETFOUND_PUBLISHED if k != "interpolation"} == {
        k: v for k, v in RETFOUND_PUBLISHED.items() if k != "interpolation"}
    assert sources["mean"] == sources["size"] == "catalog"
    own = resolved(own_model(path="/w.safetensors", options={"model_name": "resnet18"},
                             preprocess={"mean": [0.1, 0.2, 0.3], "crop_pct": 1.0}))
    assert own.values()["std"] == [0.229, 0.224, 0.225] and own.values()["mean"] == [0.1, 0.2, 0.3]
    assert (own.scale_size, own.interpolation) == (224, "bicubic")
    assert dict(own.sources)["std"] == "timm pretrained_cfg of 'resnet18'" and dict(own.sources)["crop_pct"] == "focus.yaml"


def test_the_catalog_keeps_protocol_md_settings_of_retfound_and_flair():
    for model_id in ("retfound_mae_naturecfp", "retfound_dinov2_meh", "visionfm"):
        values = resolved(model_id).values()
        assert {k: values[k] for k in RETFOUND_PUBLISHED} == RETFOUND_PUBLISHED, model_id
    flair = resolved("flair").values()
    assert {k: flair[k] for k in FLAIR_PUBLISHED} == FLAIR_PUBLISHED


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_PROCESSORS))
def test_the_catalog_equals_the_published_image_processor(model_id, tmp_path):
    """The catalog's settings of a hub model are what its published processor does, and a folder holding that
    processor hands the pixels to it."""
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(PUBLISHED_PROCESSORS[model_id]))
    from_folder = resolved({"id": model_id, "path": str(tmp_path)})
    catalog = CATALOG[model_id].preprocess
    assert {k: from_folder.values()[k] for k in GEOMETRY_AND_SCALE} == {k: catalog.values()[k] for k in GEOMETRY_AND_SCALE}
    assert from_folder.processor == str(tmp_path) and from_folder.transform == "image_processor"
    assert set(from_folder.described()["sources"].values()) == {f"model config {tmp_path / 'preprocessor_config.json'}"}


def test_a_geometry_override_takes_the_pixels_from_the_processor_to_timm(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(PUBLISHED_PROCESSORS["dinov2_large"]))
    preprocess = resolved({"id": "dinov2_large", "path": str(tmp_path), "preprocess": {"size": 448, "resize_to": 512}})
    assert preprocess.processor is None and preprocess.transform == "timm"
    assert (preprocess.size, preprocess.scale_size, preprocess.interpolation) == (448, 512, "bicubic")
    only_mean = resolved({"id": "dinov2_large", "path": str(tmp_path), "preprocess": {"mean": [0, 0, 0]}})
    assert only_mean.processor == str(tmp_path)  # normalisation happens after the processor's pixels


def test_a_timm_config_json_beside_the_weights_outranks_the_catalog(tmp_path):
    config = {"architecture": "vit_large_patch16_224", "pretrained_cfg": {
        "input_size": [3, 224, 224], "interpolation": "bilinear", "crop_pct": 1.0, "crop_mode": "squash",
        "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"")
    preprocess = resolved({"id": "retfound_mae_naturecfp", "path": str(tmp_path / "model.safetensors")})
    assert (preprocess.resize, preprocess.interpolation, preprocess.mean) == ("squash", "bilinear", (0.5, 0.5, 0.5))
    assert dict(preprocess.sources)["mean"] == f"model config {tmp_path / 'config.json'}"


def test_what_the_platform_cannot_describe_is_refused_by_name(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "ViTImageProcessor", "size": {"height": 224, "width": 320}}))
    with pytest.raises(ModelSpecError, match=r"preprocessor_config.json.*not a square.*preprocess:"):
        resolved(own_model("hf_vision", path=str(tmp_path)))
    with pytest.raises(ModelSpecError, match="resize_to 200 is smaller than the crop size 224"):
        resolved({"id": "retfound_mae_naturecfp", "preprocess": {"resize_to": 200}})


def test_the_record_names_every_value_and_its_source():
    record = preprocess_record(resolved({"id": "efficientnet_lite0", "preprocess": {"size": 256}}))
    assert record["values"] == {"size": 256, "resize": "resize_crop", "resize_to": 256, "crop_pct": 1.0,
                                "interpolation": "bicubic", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
                                "scale_only": False, "processor": None, "transform": "timm"}
    assert record["sources"]["size"] == "focus.yaml" and record["sources"]["mean"] == "catalog"


# ---------------------------------------------------------------------------------- pixels against libraries


@pytest.mark.parametrize("crop_mode", ["center", "squash"])
def test_pixels_equal_timms_transform(fundus_jpegs, crop_mode):
    """resize_crop and squash against timm's create_transform with the model's data config, normalised."""
    from timm.data import create_transform

    config = {"input_size": (3, 224, 224), "interpolation": "bicubic", "crop_pct": 0.9, "crop_mode": crop_mode,
              "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
    preprocess = resolved(own_model(path="/w.safetensors", options={"model_name": "resnet18"}, preprocess={
        "resize": {"center": "resize_crop", "squash": "squash"}[crop_mode], "crop_pct": 0.9,
        "interpolation": "bicubic", "mean": [0.5] * 3, "std": [0.5] * 3}))
    reference = create_transform(**config)
    for data in fundus_jpegs:
        difference = np.abs(platform_input(data, preprocess) - reference(opened(data)).numpy())
        assert difference.max() <= ONE_LEVEL


def test_pad_longest_equals_timms_border_mode_with_a_black_fill(fundus_jpegs):
    """FLAIR's policy: longest side to 512, black padding, /255 only; timm's border mode with mean 0, std 1."""
    from timm.data import create_transform

    preprocess = resolved("flair")
    reference = create_transform(input_size=(3, 512, 512), interpolation="bilinear", crop_pct=1.0,
                                 crop_mode="border", mean=(0, 0, 0), std=(1, 1, 1))
    for data in fundus_jpegs:
        assert np.abs(platform_input(data, preprocess) - reference(opened(data)).numpy()).max() <= ONE_LEVEL


@pytest.mark.parametrize("model_id", ["dinov2_large", "clip_vit_b32", "siglip2_base"])
def test_pixels_equal_the_image_processors(fundus_jpegs, model_id, tmp_path):
    """A folder's processor, called by the test on the image as its users call it, normalisation included."""
    from transformers import AutoImageProcessor

    (tmp_path / "preprocessor_config.json").write_text(json.dumps(PUBLISHED_PROCESSORS[model_id]))
    preprocess = resolved({"id": model_id, "path": str(tmp_path)})
    processor = AutoImageProcessor.from_pretrained(str(tmp_path), local_files_only=True)
    for data in fundus_jpegs[:2]:
        reference = processor(images=opened(data), return_tensors="np")["pixel_values"][0]
        assert np.abs(platform_input(data, preprocess) - reference).max() <= ONE_LEVEL


def test_focus_models_selected_shows_each_models_preprocessing_and_its_sources(tmp_path):
    from tests.support.focus_cli import run_focus

    (tmp_path / "focus.yaml").write_text(
        "models:\n"
        "  - {id: retfound_mae_naturecfp, path: /nowhere.pth, preprocess: {size: 240, resize_to: 272}}\n"
        "  - {id: mine, family: timm, interface: vm, domain: general, source: local, path: /w.safetensors,\n"
        "     options: {model_name: resnet18}}\n")
    code, out = run_focus({"FOCUS_HOME": str(tmp_path / "home"), "FOCUS_CONFIG": str(tmp_path / "focus.yaml")},
                          "models", "--selected")
    assert code == 0
    retfound, mine = out.split("\nretfound_mae_naturecfp")[1].split("\nmine")
    assert "240 px, resize_crop via 272" in retfound and "bicubic, mean 0.485/0.456/0.406" in retfound
    assert "focus.yaml: crop_pct, resize_to, size" in retfound and "catalog: interpolation, mean" in retfound
    assert "224 px, resize_crop via 235 (crop_pct 0.95)" in mine  # floor(224 / 0.95), timm's resnet18 config
    assert "from timm pretrained_cfg of 'resnet18'" in mine


# ------------------------------------------------------------------------ own models, end to end, vs libraries


def cosine_and_relative(ours: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """The smallest row cosine, and the largest difference relative to the reference's largest value."""
    cosine = (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))
    return float(cosine.min()), float(np.abs(ours - reference).max() / np.abs(reference).max())


def engine_embeddings(spec_entry: dict, paths: list[Path], work: Path) -> tuple[np.ndarray, object]:
    """The platform's path: the spec resolved and loaded, the images run through the engine twice (the second
    time from the pixel cache)."""
    from focus_dagster.inference.engine import run_on_images
    from focus_dagster.models.registry import load_encoder

    spec = next(iter(resolve_models([spec_entry], work / "models").values()))
    encoder = load_encoder(spec).to("cpu")
    items = [(path.stem, str(path)) for path in paths]
    runs = [run_on_images(encoder.embed, items, encoder.spec.preprocess, work_dir=work / f"run{i}", fingerprint="t",
                          device="cpu", num_workers=0, pixel_cache=work / "pixels") for i in range(2)]
    assert runs[1].pixels_from_cache == len(paths) and np.array_equal(runs[0].outputs, runs[1].outputs)
    return runs[0].outputs, encoder


@pytest.fixture(scope="module")
def fundus_files(fundus_jpegs, tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("fundus")
    paths = [folder / f"img{i}.jpg" for i in range(3)]
    for path, data in zip(paths, fundus_jpegs):
        path.write_bytes(data)
    return paths


@pytest.mark.parametrize("name, kwargs", [("resnet18", {}), ("vit_tiny_patch16_224", {"depth": 2}),
                                          ("convnext_atto", {})])
def test_a_timm_models_embeddings_equal_the_model_on_timms_transform(fundus_files, tmp_path, name, kwargs):
    """Seeded weights saved as safetensors; the reference is timm's own recipe: resolve_model_data_config,
    create_transform, forward_features + forward_head(pre_logits=True), on images opened with Pillow."""
    import timm
    import torch
    from safetensors.torch import save_file
    from timm.data import create_transform, resolve_model_data_config

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "weights.safetensors"))
    ours, encoder = engine_embeddings(own_model(path=str(tmp_path / "weights.safetensors"),
                                                options={"model_name": name, **kwargs}), fundus_files, tmp_path)
    transform = create_transform(**resolve_model_data_config(model))
    with torch.no_grad():
        pixels = torch.stack([transform(Image.open(path).convert("RGB")) for path in fundus_files])
        reference = model.forward_head(model.forward_features(pixels), pre_logits=True).numpy()
    cosine, relative = cosine_and_relative(ours, reference)
    assert cosine >= 0.99999 and relative <= 1e-4, (cosine, relative)
    assert encoder.spec.preprocess.sources and set(dict(encoder.spec.preprocess.sources).values()) == {
        f"timm pretrained_cfg of {name!r}"}


def test_a_hub_dinov2s_embeddings_equal_the_model_on_its_processor(fundus_files, tmp_path):
    """A tiny DINOv2 and its BitImageProcessor saved with save_pretrained; the reference is the hub library's own
    recipe: AutoImageProcessor on the Pillow image, AutoModel, pooler_output."""
    import torch
    from transformers import AutoImageProcessor, AutoModel, BitImageProcessor, Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    config = Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                          image_size=56, patch_size=8)
    Dinov2Model(config).eval().save_pretrained(str(tmp_path / "dinov2"))
    BitImageProcessor(size={"shortest_edge": 64}, crop_size={"height": 56, "width": 56}, resample=3,
                      do_center_crop=True, image_mean=[0.485, 0.456, 0.406],
                      image_std=[0.229, 0.224, 0.225]).save_pretrained(str(tmp_path / "dinov2"))
    ours, encoder = engine_embeddings(own_model("hf_vision", path=str(tmp_path / "dinov2")), fundus_files, tmp_path)
    processor = AutoImageProcessor.from_pretrained(str(tmp_path / "dinov2"), local_files_only=True)
    model = AutoModel.from_pretrained(str(tmp_path / "dinov2"), local_files_only=True).eval()
    with torch.no_grad():
        inputs = processor(images=[Image.open(path).convert("RGB") for path in fundus_files], return_tensors="pt")
        reference = model(**inputs).pooler_output.numpy()
    cosine, relative = cosine_and_relative(ours, reference)
    assert cosine >= 0.99999 and relative <= 1e-4, (cosine, relative)
    assert encoder.spec.preprocess.processor == str(tmp_path / "dinov2")
