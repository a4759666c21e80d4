"""bench/grid.py, the grid on one GPU, checked on the CPU: the projection arithmetic against a hand computation, the
true-size multimodal LLMs built on the meta device (parameter counts as published, image tokens per image as their
processors' rules give them), the smoke run of a few architectures through the platform's own loaders, engine step,
yes/no scorer and LoRA trainer, and the budget guard."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from tests.support.environment import needs_compiler

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def grid():
    """bench/grid.py as a module (it imports its sibling scripts `figures` and `lora` as the bench runs it)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_grid", BENCH / "grid.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def test_projection_equals_a_hand_computation(grid):
    rates = {"enc": {"images_per_s": 30.0}, "llm": {"prompts_per_s": 4.0, "train_examples_per_s": 2.0}}
    rows = [("e1", "enc", "vm"), ("m1", "llm", "mllm")]
    sizes = {"A": (100, 0, 50), "B": (10, 5, 5)}  # 150 and 20 images
    tasks = {"A": ["any_dr", "gon"], "B": ["any_dr"]}
    adapters = [("m1", "A", "any_dr"), ("m1", "A", "gon")]
    evaluations = [("m1", "A"), ("m1", "B"), ("m1", "A")]

    projection = grid.grid_projection(rates, rows, sizes, tasks, adapters, evaluations)

    encoder, mllm = projection["models"]
    assert encoder["images"] == 170
    assert encoder["total_hours"] == pytest.approx(170 / 30 / 3600)
    # prompts 150 x 2 + 20 x 1 = 320 at 4/s = 80 s; training 100 + 100 examples at 2/s = 100 s;
    # adapted prompts 150 + 20 + 150 = 320 at 4/s = 80 s
    assert (mllm["prompts"], mllm["training_examples"], mllm["adapted_prompts"]) == (320, 200, 320)
    assert mllm["hours"] == pytest.approx({"scoring": 80 / 3600, "training": 100 / 3600, "adapted_scoring": 80 / 3600})
    assert projection["total_hours"] == pytest.approx((170 / 30 + 260) / 3600)
    assert projection["within_target"] is True and projection["unmeasured"] == []


def test_a_model_without_a_rate_leaves_the_total_incomplete(grid):
    projection = grid.grid_projection({"enc": {"images_per_s": 10.0}}, [("e1", "enc", "vlm"), ("m1", "llm", "mllm")],
                                      {"A": (6, 2, 2)}, {"A": ["gon"]}, [("m1", "A", "gon")], [("m1", "A")])
    assert projection["unmeasured"] == ["m1"] and projection["within_target"] is None
    assert projection["total_hours"] == pytest.approx(1 / 3600)  # 10 images at 10/s


def test_compiling_counts_once_per_dataset_in_the_projection(grid):
    rates = {"enc": {"images_per_s": 30.0, "compile_s": 12.0}}
    projection = grid.grid_projection(rates, [("e1", "enc", "vm")], {"A": (100, 0, 50), "B": (10, 5, 5)},
                                      {"A": ["gon"], "B": ["gon"]}, [], [])
    # 170 images at 30/s, and two datasets' steps compiling 12 s each
    assert projection["models"][0]["hours"] == pytest.approx({"embedding": 170 / 30 / 3600, "compiling": 24 / 3600})
    assert projection["phase_hours"]["compiling"] == pytest.approx(24 / 3600)


@pytest.mark.parametrize("name, published_billions, image_tokens", [
    ("gemma3_27b", 27.4, 256),  # model card 27.4B; 256 soft tokens per image
    ("gemma3_4b", 4.30, 256),  # 4.3B
    ("qwen3_vl_8b", 8.77, 441),  # 8.77B; 672 px / 16 px patches = 42 x 42, merged 2 x 2 -> 21 x 21
    # 8.36B; 576 tokens of the whole image at 336 px + a 2 x 2 grid of 24 x 24 tiles (48 x 48) + 48 row ends
    ("llava_next_llama3_8b", 8.36, 576 + 48 * 48 + 48),
])
def test_true_size_mllms_on_the_meta_device(grid, tmp_path, name, published_billions, image_tokens):
    arch = grid.BY_NAME[name]
    loaded = grid.load_arch(arch, smoke=False, device="meta", folder=tmp_path)
    billions = sum(p.numel() for p in loaded.model.parameters()) / 1e9
    assert billions == pytest.approx(published_billions, rel=0.01)

    import torch

    from focus_dagster.inference.yes_no import chat_prompt

    size = loaded.spec.preprocess.size
    batch = loaded.processor(text=[chat_prompt(loaded.processor, "Is there glaucoma?")],
                             images=[[torch.rand(3, size, size)]], return_tensors="pt", do_rescale=False)
    assert int((batch["input_ids"] == loaded.processor.tokenizer.image_token_id).sum()) == image_tokens


def test_smoke_run_through_the_platform_path(grid, tmp_path):
    out = tmp_path / "grid.json"
    figures = grid.main(["--smoke", "--only", "vit_large", "retfound_mae", "flair", "gemma3_4b", "--json", str(out)])

    rows = figures["architectures"]
    for name in ("vit_large", "retfound_mae", "flair"):  # 4 smoke images, 32-d embeddings, all finite
        assert rows[name]["output_shape"] == [4, 32] and rows[name]["finite"]
        assert rows[name]["images_per_s"] > 0
    mllm = rows["gemma3_4b"]
    assert mllm["output_shape"] == [2, 18]  # 2 images x 3 questions x 6 values
    assert mllm["prompts_per_s"] == pytest.approx(3 * mllm["images_per_s"], rel=0.01)
    assert mllm["train_examples_per_s"] > 0 and len(mllm["train_losses"]) == 2
    assert all(math.isfinite(loss) for loss in mllm["train_losses"])
    measured = {row["model"] for row in figures["projection"]["models"] if row["total_hours"] is not None}
    assert measured == {"vit_large", "flair", "retfound_mae_naturecfp", "retfound_mae_natureoct", "retfound_mae_meh",
                        "retfound_mae_shanghai", "medgemma_4b", "medgemma_1_5_4b"}
    written = json.loads(out.read_text())
    assert written["mode"] == "smoke" and written["complete"] is True
    assert {rows[name]["forward"] for name in ("vit_large", "retfound_mae", "flair")} == {"eager"}  # --compile off


@needs_compiler
def test_smoke_run_with_compiled_blocks(grid):
    figures = grid.main(["--smoke", "--only", "vit_large", "--compile", "blocks"])
    row = figures["architectures"]["vit_large"]
    assert row["forward"] == "blocks" and row["compile_s"] > 0 and "compile_reason" not in row
    assert row["output_shape"] == [4, 32] and row["finite"]
    [projected] = [r for r in figures["projection"]["models"] if r["model"] == "vit_large"]
    assert projected["hours"]["compiling"] == pytest.approx(row["compile_s"] * 10 / 3600)  # ten datasets


def test_a_run_stopped_after_an_architecture_keeps_its_figures(grid, tmp_path, monkeypatch):
    out = tmp_path / "grid.json"
    measured = grid.run_arch

    def stopped_on_the_second(arch, *args):
        if arch.name == "flair":
            raise KeyboardInterrupt  # as a time limit's signal would stop it
        return measured(arch, *args)

    monkeypatch.setattr(grid, "run_arch", stopped_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        grid.main(["--smoke", "--only", "vit_large", "flair", "--json", str(out)])
    written = json.loads(out.read_text())
    assert written["complete"] is False and list(written["architectures"]) == ["vit_large"]
    [row] = [r for r in written["projection"]["models"] if r["model"] == "vit_large"]
    assert row["total_hours"] > 0


def test_budget_guard_skips_what_does_not_fit(grid, capsys):
    figures = grid.main(["--smoke", "--only", "gemma3_27b", "visionfm", "--budget-s", "30"])
    assert list(figures["skipped"]) == ["gemma3_27b"] and list(figures["architectures"]) == ["visionfm"]
    assert "SKIPPED gemma3_27b (gemma3_27b, medgemma_27b)" in capsys.readouterr().out
