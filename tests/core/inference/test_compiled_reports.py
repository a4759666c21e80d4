"""What a compile hands the run and reports in its metadata, on every path (eager by configuration, compiled,
refused, failed): the device, the requested mode, the attention kernels, the seconds on a clock the test sets, the
check batch (size, seed, device, pixel range, dtype of every forward), which modules are compiled, and the padding's
dtype and device. torch.compile is replaced by a recorder that hands back what it was given, so that every path
runs in milliseconds and what was compiled is known exactly."""

from __future__ import annotations

import types

import pytest
import torch

from focus_dagster.inference import compiled as compiled_module
from focus_dagster.inference import engine
from focus_dagster.inference.compiled import (
    attention_kernels,
    compare_rows,
    compile_encoder,
    padded_to_power_of_two,
    repeated_blocks,
)
from focus_dagster.models.spec import Preprocess

PREPROCESS = Preprocess(size=8, resize_to=8)


class SelfAttention(torch.nn.Module):
    """A hub-style attention module: the kernel is its configuration's attention implementation."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.proj = torch.nn.Linear(4, 4)


class Encoder(torch.nn.Module):
    """Pixels [B, 3, 8, 8] -> [B, 16] through a stack of three equal linear blocks and one attention module."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stack = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(3)))
        self.attention = SelfAttention(types.SimpleNamespace(_attn_implementation="sdpa"))
        self.batches: list[tuple[int, bool]] = []

    def forward(self, pixels):
        self.batches.append((pixels.shape[0], torch.is_autocast_enabled("cpu")))
        return self.stack(pixels.flatten(1)[:, :16].float())


@pytest.fixture
def compiles(monkeypatch) -> list:
    """torch.compile replaced by a recorder: each call's target, handed back unchanged."""
    calls: list = []

    def record(target, **options):
        calls.append(target)
        return target

    monkeypatch.setattr(torch, "compile", record)
    return calls


@pytest.fixture
def clock(monkeypatch):
    """The module's clock: 100.0 when a compile starts, 101.23456 when it ends (1.23 s to two places)."""
    ticks = iter([100.0, 101.23456])
    monkeypatch.setattr(compiled_module, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))


def test_a_checked_compile_reports_its_device_mode_blocks_kernels_and_seconds(compiles, clock):
    model = Encoder()
    blocks = list(model.stack)
    result = compile_encoder(model, [model], PREPROCESS, "cpu", mode="blocks", batch_size=4)
    summary = result.summary()
    assert (summary["mode"], summary["requested"], summary["device"], summary["blocks"]) == ("blocks", "blocks",
                                                                                             "cpu", 3)
    assert summary["seconds"] == 1.23 and summary["attention"] == {"sdpa": 1} and summary["reason"] == ""
    assert compiles == blocks  # each block compiled on its own, the encoder not compiled whole


def test_a_compiled_forward_failing_later_names_its_mode(compiles):
    model = Encoder()
    result = compile_encoder(model, [model], PREPROCESS, "cpu", mode="blocks", batch_size=4)
    with pytest.raises(RuntimeError, match=r"^the compiled forward \(blocks\) failed on a batch of shape \(2, 5\)"):
        result.forward(torch.zeros(2, 5))


def test_blocks_asked_of_a_model_without_a_stack_compile_its_forward_whole(compiles, clock):
    def forward(pixels):
        return pixels.flatten(1)[:, :16]

    result = compile_encoder(forward, [torch.nn.Conv2d(3, 4, 3)], PREPROCESS, "cpu", mode="blocks", batch_size=4)
    assert (result.mode, result.blocks, result.seconds) == ("whole", 0, 1.23) and compiles == [forward]


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_an_eager_run_by_configuration_reports_what_was_asked(compiles, mode):
    model = Encoder()
    result = (compile_encoder(model, [model], PREPROCESS, "cpu") if mode == "auto"
              else compile_encoder(model, [model], PREPROCESS, "cpu", mode=mode))
    assert (result.mode, result.requested, result.device, result.attention) == ("eager", mode, "cpu", {"sdpa": 1})
    assert result.forward is model and compiles == [] and model.batches == []


def test_a_refused_compile_reports_device_kernels_and_seconds(monkeypatch, clock):
    monkeypatch.setattr(torch, "compile", lambda target, **options: (lambda pixels: 2 * target(pixels)))
    model = Encoder()
    result = compile_encoder(model, [torch.nn.Conv2d(3, 4, 3), model.attention], PREPROCESS, "cpu", mode="whole",
                             batch_size=4)
    assert (result.mode, result.requested, result.device, result.seconds) == ("eager", "whole", "cpu", 1.23)
    assert result.attention == {"sdpa": 1} and result.reason.startswith("compiled rows differ from eager")
    assert result.min_cosine == pytest.approx(1.0) and result.max_relative == pytest.approx(1.0)


def test_a_failed_compile_reports_device_kernels_and_seconds(monkeypatch, clock):
    def fail(target, **options):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(torch, "compile", fail)
    model = Encoder()
    blocks = list(model.stack)
    result = compile_encoder(model, [model], PREPROCESS, "cpu", mode="blocks", batch_size=4)
    assert (result.mode, result.device, result.seconds, result.attention) == ("eager", "cpu", 1.23, {"sdpa": 1})
    assert result.reason == "compile failed: RuntimeError: no compiler" and list(model.stack) == blocks


def test_the_check_batch_is_eight_images_by_default_and_every_forward_runs_in_the_check_dtype(compiles):
    model = Encoder()
    compile_encoder(model, [model], PREPROCESS, "cpu", mode="blocks", dtype="bfloat16")
    # eager rows, the model's own rounding (the other bf16 neighbours), compiled rows: all in CPU bf16 autocast
    assert model.batches == [(8, True)] * 3
    model.batches.clear()
    compile_encoder(model, [model], PREPROCESS, "cpu", mode="blocks", batch_size=4)
    assert model.batches == [(4, False)] * 2


def test_the_check_batch_is_made_on_the_run_device(compiles, monkeypatch):
    devices: list = []
    made = compiled_module.check_inputs

    def recording(preprocess, batch_size, device, *args):
        devices.append(device)
        return made(preprocess, batch_size, device, *args)

    monkeypatch.setattr(compiled_module, "check_inputs", recording)
    model = Encoder()
    compile_encoder(model, [model], PREPROCESS, "cpu", mode="blocks", batch_size=2)
    assert devices == ["cpu"]


def test_the_check_batch_is_seeded_uint8_over_the_whole_range_normalised_on_the_device(monkeypatch):
    handed: list = []

    def model_input(pixels, device, preprocess):
        handed.append((pixels, device, preprocess))
        return pixels

    monkeypatch.setattr(engine, "model_input", model_input)
    first = compiled_module.check_inputs(PREPROCESS, 8, "cpu")
    again = compiled_module.check_inputs(PREPROCESS, 8, "cpu")
    other = compiled_module.check_inputs(PREPROCESS, 8, "cpu", seed=1)
    assert first.shape == (8, 3, 8, 8) and first.dtype == torch.uint8
    assert torch.equal(first, again) and not torch.equal(first, other)
    # 1536 draws: the probability that 0 or 255 is missing is about 0.5%, and the seed fixes that it is not
    assert (int(first.min()), int(first.max())) == (0, 255)
    assert [(device, preprocess) for _, device, preprocess in handed] == [("cpu", PREPROCESS)] * 3


def test_padding_keeps_the_batch_dtype_and_device():
    seen: list = []

    def forward(pixels):
        seen.append((pixels.shape, pixels.dtype, pixels.device.type))
        return pixels.flatten(1)

    padded_to_power_of_two(forward)(torch.ones(3, 3, 2, 2, dtype=torch.bfloat16))
    padded_to_power_of_two(forward)(torch.empty(5, 3, 2, 2, device="meta"))
    assert seen == [(torch.Size([4, 3, 2, 2]), torch.bfloat16, "cpu"), (torch.Size([8, 3, 2, 2]), torch.float32, "meta")]


def test_a_distance_equal_to_the_tolerance_is_within_it(monkeypatch):
    monkeypatch.setattr(compiled_module, "row_distance", lambda a, b: {"min_cosine": 1 - 1e-6, "max_relative": 1e-3})
    assert compare_rows(torch.ones(2, 2), torch.ones(2, 2))["agrees"] is True


def test_attention_modules_without_a_configured_implementation_count_as_eager():
    modules = [SelfAttention(types.SimpleNamespace(_attn_implementation=None)),
               SelfAttention(types.SimpleNamespace()),
               SelfAttention(types.SimpleNamespace(_attn_implementation="flash_attention_2"))]
    assert attention_kernels(modules) == {"eager": 2, "flash_attention_2": 1}


class Block(torch.nn.Module):
    """A block holding a stack of its own (two equal linear layers)."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])


def _found(modules) -> list:
    return [container[index] for container, index in repeated_blocks(modules)]


def test_a_stack_inside_a_chosen_block_is_not_chosen_again():
    blocks = torch.nn.ModuleList([Block(), Block()])
    assert _found([blocks]) == list(blocks)


def test_stacks_of_parameterless_modules_or_of_stacks_are_no_blocks_but_the_stacks_inside_are():
    relus = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.ReLU())
    assert _found([relus]) == []
    inner = [torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]) for _ in range(2)]
    assert _found([torch.nn.ModuleList(inner)]) == [*inner[0], *inner[1]]


class OtherLinear(torch.nn.Linear):
    """Another class whose parameters have a linear layer's shapes."""


def test_blocks_need_one_class_and_one_shape():
    assert _found([torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 8)])]) == []
    assert _found([torch.nn.ModuleList([torch.nn.Linear(4, 4), OtherLinear(4, 4)])]) == []


def test_a_model_whose_outermost_container_is_no_stack_has_its_stacks_found():
    stack = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])
    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(4, 4)), stack)
    assert _found([model]) == list(stack)
