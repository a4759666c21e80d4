"""Compiled encoders (focus_dagster/inference/compiled.py): which blocks are compiled, the check against eager, the
fallbacks, and the configuration key. The references are the libraries' own models run eagerly in the test."""

from __future__ import annotations

import pytest
import torch

from focus_dagster.config import parse_config
from focus_dagster.errors import ConfigError
from focus_dagster.inference import compiled as compiled_module
from focus_dagster.inference.compiled import (
    attention_kernels,
    compare_rows,
    compile_encoder,
    padded_to_power_of_two,
    repeated_blocks,
    resolve_mode,
)
from focus_dagster.inference.engine import model_input
from focus_dagster.models.spec import Preprocess
from tests.support.environment import needs_compiler

PREPROCESS = Preprocess(size=32, resize_to=36)


def tiny_vit(depth: int = 3):
    import timm

    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=32, patch_size=8,
                             embed_dim=32, depth=depth, num_heads=2).eval()


def pixels(n: int, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=generator)


def eager_rows(model, batch):
    with torch.inference_mode():
        return model(model_input(batch, "cpu", PREPROCESS))


def test_the_repeated_blocks_of_a_vit_are_its_transformer_blocks():
    model = tiny_vit(depth=3)
    found = repeated_blocks([model])
    assert [container[index] for container, index in found] == list(model.blocks)


def test_both_towers_of_a_dual_encoder_have_their_layers_found():
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig(text_config={"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
                                     "intermediate_size": 32, "vocab_size": 64},
                        vision_config={"hidden_size": 16, "num_hidden_layers": 3, "num_attention_heads": 2,
                                       "intermediate_size": 32, "image_size": 32, "patch_size": 8},
                        projection_dim=8)
    model = CLIPModel(config).eval()
    found = {id(container[index]) for container, index in repeated_blocks([model])}
    expected = list(model.vision_model.encoder.layers) + list(model.text_model.encoder.layers)
    assert found == {id(layer) for layer in expected}
    assert attention_kernels([model]) == {model.config._attn_implementation: 5}


def test_stages_of_different_shapes_are_no_repeated_stack():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 16, 3), torch.nn.Flatten())
    assert repeated_blocks([model]) == []


def test_attention_kernels_count_timm_blocks_by_their_fused_flag():
    model = tiny_vit(depth=3)
    assert attention_kernels([model]) == {"sdpa": 3}
    model.blocks[1].attn.fused_attn = False
    assert attention_kernels([model]) == {"sdpa": 2, "eager": 1}


def test_auto_compiles_on_cuda_only():
    assert resolve_mode("auto", "cuda:0") == "blocks"
    assert resolve_mode("auto", "cpu") == "eager"
    assert resolve_mode("off", "cuda") == "eager"
    assert resolve_mode("whole", "cpu") == "whole"
    with pytest.raises(ValueError, match="compile mode must be one of"):
        resolve_mode("fast", "cpu")


def test_auto_on_a_cpu_runs_the_eager_forward_and_compiles_nothing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torch.compile called on the CPU path")

    monkeypatch.setattr(torch, "compile", refuse)
    model = tiny_vit()
    result = compile_encoder(model, [model], PREPROCESS, "cpu", mode="auto")
    assert result.forward is model and result.mode == "eager" and not result.is_compiled and result.reason == ""
    assert result.attention == {"sdpa": 3}


@needs_compiler
def test_blocks_compiled_on_a_cpu_give_the_eager_rows_for_any_batch_size():
    model = tiny_vit(depth=3)
    originals = list(model.blocks)
    reference = eager_rows(model, pixels(5))
    result = compile_encoder(model, [model], PREPROCESS, "cpu", mode="blocks", batch_size=4)
    assert (result.mode, result.blocks, result.check_dtype) == ("blocks", 3, "float32")
    assert result.min_cosine > 0.99999 and result.max_relative < 1e-4
    assert all(block is not original for block, original in zip(model.blocks, originals))
    with torch.inference_mode():
        rows = result.forward(model_input(pixels(5), "cpu", PREPROCESS))  # padded to 8, three rows dropped
    torch.testing.assert_close(rows, reference, rtol=1e-4, atol=1e-5)
    assert list(model.state_dict()) != []  # still a working module


@needs_compiler
def test_a_model_without_a_repeated_stack_is_compiled_whole():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    reference = eager_rows(model, pixels(3))
    result = compile_encoder(model, [model], PREPROCESS, "cpu", mode="blocks", batch_size=4)
    assert (result.mode, result.blocks) == ("whole", 0)
    with torch.inference_mode():
        rows = result.forward(model_input(pixels(3), "cpu", PREPROCESS))
    torch.testing.assert_close(rows, reference, rtol=1e-4, atol=1e-5)


@needs_compiler
def test_the_bf16_tolerance_holds_compiled_bf16_rows_and_refuses_a_real_difference():
    """A 12-block ViT in bf16 autocast (on the CPU, as CUDA runs it): compiled blocks vs eager differ by what bf16
    rounding gives (eager bf16 vs float32 is the yardstick), well inside the tolerance; a model with other weights
    is far outside it."""
    import timm

    from focus_dagster.inference.compiled import compile_blocks

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=64, embed_dim=128,
                              depth=12, num_heads=4).eval()
    batch = torch.randn(8, 3, 64, 64)
    with torch.inference_mode():
        exact = model(batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            eager = model(batch)
        compile_blocks([model])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            compiled = model(batch)
    assert eager.dtype == torch.float32  # the final layer norm runs in float32 under autocast
    yardstick = compare_rows(exact, eager, "bfloat16")
    agreement = compare_rows(eager, compiled, "bfloat16")
    assert yardstick["agrees"] and agreement["agrees"]
    tolerance = compiled_module.TOLERANCES["bfloat16"]
    for measured in (yardstick, agreement):  # margins: ten on the cosine, five on the difference
        assert 1 - measured["min_cosine"] < (1 - tolerance["min_cosine"]) / 10
        assert measured["max_relative"] < tolerance["max_relative"] / 5
    torch.manual_seed(1)
    other = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=64, embed_dim=128,
                              depth=12, num_heads=4).eval()
    with torch.inference_mode():
        assert not compare_rows(eager, other(batch), "bfloat16")["agrees"]


def test_a_compile_that_fails_leaves_the_model_eager_and_says_why(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no backend for this operator")

    monkeypatch.setattr(torch, "compile", broken)
    model = tiny_vit()
    originals = list(model.blocks)
    lines: list[str] = []
    result = compile_encoder(model, [model], PREPROCESS, "cpu", mode="blocks", log=lines.append)
    assert result.forward is model and result.mode == "eager" and result.requested == "blocks"
    assert result.reason == "compile failed: RuntimeError: no backend for this operator"
    assert list(model.blocks) == originals
    assert lines == ["running eager: compile failed: RuntimeError: no backend for this operator"]


def test_compiled_rows_that_differ_from_eager_are_refused(monkeypatch):
    class OffByALittle(torch.nn.Module):  # a miscompiled block: features leak into their neighbours
        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, *args, **kwargs):
            out = self.block(*args, **kwargs)
            return out + 0.05 * out.roll(1, dims=-1)

    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: OffByALittle(module))
    model = tiny_vit()
    originals = list(model.blocks)
    result = compile_encoder(model, [model], PREPROCESS, "cpu", mode="blocks")
    assert result.mode == "eager" and result.forward is model
    assert result.reason.startswith("compiled rows differ from eager on the check batch: min cosine")
    assert result.max_relative > 1e-3
    assert list(model.blocks) == originals
    torch.testing.assert_close(eager_rows(model, pixels(2)), eager_rows(tiny_vit(), pixels(2)))


def test_padding_hands_the_model_powers_of_two_and_keeps_the_real_rows():
    seen: list[int] = []
    model = tiny_vit()

    def forward(batch):
        seen.append(batch.shape[0])
        return model(batch)

    padded = padded_to_power_of_two(forward)
    batch = model_input(pixels(5), "cpu", PREPROCESS)
    with torch.inference_mode():
        rows = padded(batch)
        full = padded(model_input(pixels(8), "cpu", PREPROCESS))
        one = padded(batch[:1])
    assert seen == [8, 8, 1] and rows.shape[0] == 5 and full.shape[0] == 8 and one.shape[0] == 1
    torch.testing.assert_close(rows, eager_rows(model, pixels(5)), rtol=1e-5, atol=1e-6)


def test_a_compiled_forward_failing_later_names_the_way_back_to_eager():
    def fails_on_big_batches(batch):
        if batch.shape[0] > 4:
            raise AssertionError("inductor: unsupported shape")
        return batch.flatten(1)

    def out_of_memory(batch):
        raise torch.OutOfMemoryError("CUDA out of memory")

    forward = compiled_module.explained(fails_on_big_batches, "blocks")
    assert forward(torch.zeros(2, 3, 4, 4)).shape == (2, 48)
    with pytest.raises(RuntimeError, match=r"the compiled forward \(blocks\) failed on a batch of shape "
                                           r"\(8, 3, 4, 4\): AssertionError: inductor: unsupported shape\. Set "
                                           r"`compile: off` in focus.yaml"):
        forward(torch.zeros(8, 3, 4, 4))
    with pytest.raises(torch.OutOfMemoryError):  # the engine halves the batch on this one
        compiled_module.explained(out_of_memory, "blocks")(torch.zeros(1, 3, 4, 4))


def test_the_tolerance_follows_the_dtype_eager_computed_in():
    torch.manual_seed(0)
    reference = torch.randn(16, 64)
    # Relative rounding of 2^-8 per element, a bf16 computation's own size of difference.
    rounded = reference * (1 + (torch.rand(16, 64) - 0.5) * 2 ** -7)
    assert compare_rows(reference.bfloat16(), rounded.bfloat16())["agrees"]
    assert not compare_rows(reference, rounded)["agrees"]
    assert compare_rows(reference, reference + 1e-7)["agrees"]
    assert not compare_rows(reference, reference[:, :32])["agrees"]
    # Under CUDA autocast a model ending in a layer norm returns float32 rows computed in bf16: bf16's tolerance.
    assert compiled_module.compute_dtype(reference, "cuda:0") == "bfloat16"
    assert compiled_module.compute_dtype(reference, "cpu") == "float32"
    assert compare_rows(reference, rounded, "bfloat16")["agrees"]
    tolerances = compiled_module.TOLERANCES
    assert tolerances["float32"]["max_relative"] < tolerances["bfloat16"]["max_relative"]


def test_compile_is_a_focus_yaml_key(tmp_path):
    config = parse_config({"compile": "off"}, tmp_path)
    assert config.compile == "off"
    assert parse_config({}, tmp_path).compile == "auto"
    assert parse_config(config.to_document(), tmp_path).compile == "off"
    with pytest.raises(ConfigError, match=r"focus.yaml: compile: must be one of 'auto', 'off', 'blocks' or 'whole' \(got 'fast'\)"):
        parse_config({"compile": "fast"}, tmp_path)
