"""The compile gate's arithmetic and reports on literal tensors: the row distances, the bf16 tolerance's clamps,
the other bf16 neighbour of values written out from the bf16 format (8 significant bits: a step of 2^-7 at 1.0),
the report of a refused check, the static shapes every compile asks for, and the message that names the way back
to eager."""

from __future__ import annotations

import math

import pytest
import torch

from focus_dagster.inference import compiled as compiled_module
from focus_dagster.inference.compiled import (
    bf16_tolerance,
    compare_rows,
    compile_encoder,
    other_bf16_neighbour,
    row_distance,
)
from focus_dagster.models.spec import Preprocess

FLOAT32 = {"min_cosine": 1 - 1e-6, "max_relative": 1e-3}


def test_row_distance_is_the_smallest_row_cosine_and_the_largest_difference_over_the_largest_value():
    reference = torch.tensor([[0.5, 0.0], [0.0, 0.25]])
    rows = torch.tensor([[0.5, 0.0], [0.25, 0.25]])
    distance = row_distance(reference, rows)
    assert distance["min_cosine"] == pytest.approx(1 / math.sqrt(2), abs=1e-15)
    assert distance["max_relative"] == pytest.approx(0.25 / 0.5, abs=1e-15)


def test_rows_of_tiny_features_are_compared_by_their_angle():
    """A model whose features are about 1e-10: identical rows have cosine 1, not a cosine shrunk by a floor on the
    row norms."""
    tiny = torch.tensor([[3e-10, 4e-10], [1e-10, 0.0]])
    distance = row_distance(tiny, tiny.clone())
    assert distance["min_cosine"] == pytest.approx(1.0, abs=1e-9) and distance["max_relative"] == 0.0


def test_a_row_count_or_width_that_differs_is_refused_with_both_shapes():
    reference = torch.ones(2, 3)
    assert compare_rows(reference, torch.ones(3, 3)) == {
        "agrees": False, "dtype": "float32", "min_cosine": pytest.approx(float("nan"), nan_ok=True),
        "max_relative": float("inf"), "tolerance": FLOAT32, "shapes": [[2, 3], [3, 3]]}
    rounding = {"min_cosine": 1.0, "max_relative": 0.0}
    outcome = compare_rows(reference, torch.ones(2, 4), rounding)
    assert outcome["dtype"] == "bfloat16" and outcome["rounding"] == rounding and outcome["shapes"] == [[2, 3], [2, 4]]
    assert math.isnan(outcome["min_cosine"]) and outcome["max_relative"] == float("inf")


def test_a_float32_comparison_reports_no_rounding():
    outcome = compare_rows(torch.ones(2, 3), torch.ones(2, 3))
    assert outcome == {"agrees": True, "dtype": "float32", "min_cosine": pytest.approx(1.0, abs=1e-12),
                       "max_relative": 0.0, "tolerance": FLOAT32}


@pytest.mark.parametrize("cosine, expected", [
    (1.0000000000000002, {"min_cosine": 1 - 1e-6, "max_relative": 2 ** -7}),  # float noise above 1: the floor
    (-1.0000000000000002, {"min_cosine": 1 - 2e-3, "max_relative": 2 ** -7}),  # below -1: the ceiling
])
def test_a_measured_cosine_a_rounding_outside_minus_one_to_one_is_clamped(cosine, expected):
    assert bf16_tolerance({"min_cosine": cosine, "max_relative": 0.0}) == pytest.approx(expected, abs=1e-15)


def test_the_other_bf16_neighbour_of_literal_values():
    # bf16 near 1: steps of 2^-7 above 1, 2^-8 below it; 1.001 rounds to 1, 1.007 to 1 + 2^-7.
    values = torch.tensor([1.0, 1.001, 1.007, -1.0, 0.75], dtype=torch.float32)
    expected = torch.tensor([1 + 2 ** -7, 1 + 2 ** -7, 1.0, -1 + 2 ** -8, 0.75 + 2 ** -8], dtype=torch.float32)
    other = other_bf16_neighbour(values)
    assert other.dtype == torch.float32 and torch.equal(other, expected)
    assert other_bf16_neighbour(values.double()).dtype == torch.float64


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_the_other_bf16_neighbour_keeps_the_layout_of_its_values(layout):
    values = torch.randn(2, 3, 4, 4).contiguous(memory_format=layout)
    other = other_bf16_neighbour(values)
    assert other.is_contiguous(memory_format=layout) and other.shape == values.shape


def _recording(calls: list):
    def compile(target, **options):
        calls.append(options)
        return target
    return compile


def test_every_compile_fixes_its_shapes(monkeypatch):
    """Batches are padded to powers of two so that each shape compiles once, statically: no compile may switch to
    dynamic shapes."""
    calls: list = []
    monkeypatch.setattr(torch, "compile", _recording(calls))
    stack = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    swapped = compiled_module.compile_blocks([stack])
    compiled_module._compile_whole(lambda pixels: pixels)
    assert len(swapped) == 3 and calls == [{"dynamic": False}] * 4


def test_a_refused_check_reports_the_float32_tolerance_and_no_rounding(monkeypatch):
    def leaky(forward, **options):
        return lambda pixels: (lambda rows: rows + 0.05 * rows.roll(1, dims=-1))(forward(pixels))

    monkeypatch.setattr(torch, "compile", leaky)
    result = compile_encoder(lambda pixels: pixels.flatten(1)[:, :16], [], Preprocess(size=8, resize_to=8), "cpu",
                             mode="whole", batch_size=4)
    summary = result.summary()
    assert summary["mode"] == "eager" and summary["requested"] == "whole" and summary["blocks"] == 0
    assert summary["check_dtype"] == "float32" and summary["tolerance"] == FLOAT32 and summary["rounding"] == {}
    assert summary["reason"].startswith("compiled rows differ from eager on the check batch: min cosine ")
    assert summary["reason"].endswith("(float32 tolerance: min cosine 0.999999, max relative difference 1.00e-03)")


def test_a_later_failure_names_the_configuration_key_that_turns_compiling_off():
    def fails(pixels):
        raise ValueError("bad shape")

    with pytest.raises(RuntimeError) as raised:
        compiled_module.explained(fails, "whole")(torch.zeros(3, 3, 2, 2))
    assert str(raised.value) == ("the compiled forward (whole) failed on a batch of shape (3, 3, 2, 2): ValueError: "
                                 "bad shape. Set `compile: off` in focus.yaml to run this model eager.")
