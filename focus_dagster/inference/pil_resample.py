"""Pillow's `Image.resize` for 8-bit images, bit for bit, as torch operations on any device.

The CPU path resizes with Pillow; on a GPU the decoded image is a uint8 tensor and `F.interpolate` differs
from Pillow by a grey level here and there. This module repeats Pillow's arithmetic (libImaging/Resample.c
and, for NEAREST, the affine scaling of libImaging/Geometry.c) so that both paths give the same pixels:

- The filter weights of each output pixel are computed in float64 in the order Pillow computes them (plain
  Python floats are IEEE doubles, each operation rounded once as in C), normalised by their sum, and turned
  into fixed point with PRECISION_BITS fraction bits, rounding half away from zero as Pillow does.
- A pass is `(1 << (PRECISION_BITS - 1)) + sum(pixel * weight)`, shifted right by PRECISION_BITS and
  clipped to 0..255; Pillow keeps the intermediate image in uint8, so the clip comes after each pass.
- Passes are done either as a float64 matrix multiply (on CUDA: one GEMM per pass) or as a gather-sum over
  the filter taps in int32 (on the CPU, where a dense GEMM wastes most of its work on zeros). Both are exact:
  the weights of one output pixel add up to at most about 1.6 in absolute value (Lanczos' negative lobes;
  1.0 for the positive filters), i.e. 1.6 * 2**22 in fixed point, so every product and every partial sum is
  an integer of magnitude below 255 * 1.6 * 2**22 < 2**31. That fits Pillow's own accumulator (a C int) and
  int32, and is far below 2**53, where float64 stops holding integers exactly: the order in which a BLAS or
  a GPU adds the products cannot change the result.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

PRECISION_BITS = 32 - 8 - 2  # Pillow's: 8 bits of result, 2 bits of head room for negative lobes
_HALF = 1 << (PRECISION_BITS - 1)
_ONE = float(1 << PRECISION_BITS)

# Pillow's Hamming window uses float literals (0.54f, 0.46f) promoted to double.
_HAMMING_A = float(np.float32(0.54))
_HAMMING_B = float(np.float32(0.46))


def _box(x: float) -> float:
    return 1.0 if -0.5 < x <= 0.5 else 0.0


def _bilinear(x: float) -> float:
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def _hamming(x: float) -> float:
    x = abs(x)
    if x == 0.0:
        return 1.0
    if x >= 1.0:
        return 0.0
    x = x * math.pi
    return math.sin(x) / x * (_HAMMING_A + _HAMMING_B * math.cos(x))


def _bicubic(x: float) -> float:
    """Keys' cubic with a = -0.5; the constants (a + 2, a + 3) are folded exactly as the C compiler does."""
    a = -0.5
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def _sinc(x: float) -> float:
    if x == 0.0:
        return 1.0
    x = x * math.pi
    return math.sin(x) / x


def _lanczos(x: float) -> float:
    # The window is half open on the right, as in Pillow.
    return _sinc(x) * _sinc(x / 3) if -3.0 <= x < 3.0 else 0.0


# name -> (kernel, support at scale 1), Pillow's table
KERNELS = {
    "box": (_box, 0.5),
    "bilinear": (_bilinear, 1.0),
    "hamming": (_hamming, 1.0),
    "bicubic": (_bicubic, 2.0),
    "lanczos": (_lanczos, 3.0),
}
FILTERS = ("nearest", *KERNELS)


@lru_cache(maxsize=256)
def filter_taps(in_size: int, out_size: int, filter: str) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's fixed-point filter of one axis: (indices, weights), both [out_size, taps]; output pixel i is
    `sum_j weights[i, j] * input[indices[i, j]]`. Rows shorter than `taps` are padded with weight 0 on a
    valid index, so that a gather needs no mask."""
    kernel, support = KERNELS[filter]
    scale = in_size / out_size  # float(in1 - in0) / outSize with the whole image as the box
    filterscale = max(scale, 1.0)  # downscaling widens the kernel: that is the antialiasing
    support = support * filterscale
    inv_filterscale = 1.0 / filterscale
    rows = []
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        # (int) truncates toward zero, which is what Python's int() does
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size)
        weights = [kernel((x - center + 0.5) * inv_filterscale) for x in range(xmin, xmax)]
        total = 0.0
        for w in weights:  # summed left to right, as Pillow does; a pairwise sum could round differently
            total += w
        if total != 0.0:
            weights = [w / total for w in weights]
        rows.append((xmin, [_fixed_point(w) for w in weights]))
    taps = max(len(w) for _, w in rows)
    indices = np.zeros((out_size, taps), dtype=np.int64)
    fixed = np.zeros((out_size, taps), dtype=np.int32)
    for i, (xmin, weights) in enumerate(rows):
        indices[i, :] = min(xmin, in_size - 1)  # padding: any valid row, its weight is 0
        indices[i, : len(weights)] = np.arange(xmin, xmin + len(weights))
        fixed[i, : len(weights)] = weights
    return indices, fixed


def _fixed_point(weight: float) -> int:
    """normalize_coeffs_8bpc: scale by 2**PRECISION_BITS and round half away from zero (then truncate)."""
    return int(weight * _ONE - 0.5) if weight < 0 else int(weight * _ONE + 0.5)


@lru_cache(maxsize=64)
def filter_matrix(in_size: int, out_size: int, filter: str) -> np.ndarray:
    """The same filter as a dense float64 [out_size, in_size] matrix of the integer weights."""
    indices, weights = filter_taps(in_size, out_size, filter)
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    rows = np.repeat(np.arange(out_size), indices.shape[1])
    np.add.at(matrix, (rows, indices.ravel()), weights.ravel().astype(np.float64))  # padding adds 0
    return matrix


@lru_cache(maxsize=256)
def nearest_indices(in_size: int, out_size: int) -> np.ndarray:
    """ImagingScaleAffine's source index of each output pixel along one axis, -1 where it falls outside
    (Pillow fills those with 0). The position is accumulated by repeated addition, as Pillow does, not
    computed as a product: the two can round to different sides of an integer."""
    step = in_size / out_size
    position = step * 0.5
    indices = np.empty(out_size, dtype=np.int64)
    for x in range(out_size):
        index = -1 if position < 0.0 else int(position)
        indices[x] = index if index < in_size else -1
        position += step
    return indices


def pil_resize(image, size: tuple[int, int], filter: str, method: str | None = None):
    """uint8 [C, H, W] (any device) -> uint8 [C, size_h, size_w]: Image.resize((w, h), filter) bit for bit.

    `size` is (width, height) as in Pillow; `filter` one of FILTERS. `method` picks how a pass is computed,
    "matmul" (float64 GEMM) or "gather" (int32 sum over the taps); by default the GEMM on CUDA and the
    gather elsewhere. Both give the same pixels."""
    import torch

    if image.dtype != torch.uint8 or image.dim() != 3:
        raise ValueError(f"expected a uint8 [C, H, W] tensor, got {image.dtype} {tuple(image.shape)}")
    if filter not in FILTERS:
        raise ValueError(f"unknown filter {filter!r}; expected one of {FILTERS}")
    out_w, out_h = (int(s) for s in size)
    if out_w < 1 or out_h < 1:
        raise ValueError(f"size must be positive, got {size}")
    in_h, in_w = image.shape[1], image.shape[2]
    if (in_w, in_h) == (out_w, out_h):
        return image.clone()  # Pillow copies
    if filter == "nearest":
        return _resize_nearest(image, out_w, out_h)
    method = method or ("matmul" if image.is_cuda else "gather")
    if method not in ("matmul", "gather"):
        raise ValueError(f"unknown method {method!r}")
    return _resize_filtered(image, out_w, out_h, filter, method)


def _resize_nearest(image, out_w: int, out_h: int):
    """Pillow's NEAREST resize is an affine transform that samples each output pixel's centre."""
    import torch

    rows = torch.from_numpy(nearest_indices(image.shape[1], out_h)).to(image.device)
    cols = torch.from_numpy(nearest_indices(image.shape[2], out_w)).to(image.device)
    picked = image.index_select(1, rows.clamp(min=0)).index_select(2, cols.clamp(min=0))
    inside = (rows >= 0)[:, None] & (cols >= 0)[None, :]
    return picked * inside.to(torch.uint8)


def _resize_filtered(image, out_w: int, out_h: int, filter: str, method: str):
    """Two separable passes in the order Pillow runs them, each skipped when its axis keeps its size; between
    them the image is uint8, as Pillow's intermediate image is."""
    in_h, in_w = image.shape[1], image.shape[2]
    passes = [(_resample_columns, in_w, out_w), (_resample_rows, in_h, out_h)]
    if not _horizontal_first(in_w, in_h, out_w, out_h):
        passes.reverse()
    for resample, n_in, n_out in passes:
        if n_in != n_out:
            image = resample(image, n_in, n_out, filter, method)
    return image


def _horizontal_first(in_w: int, in_h: int, out_w: int, out_h: int) -> bool:
    """Pillow 13 runs the vertical pass first when the height shrinks by more than twice as many pixels as the
    width does (to make the horizontal pass cheaper); earlier Pillows always start horizontally. The order
    matters because the intermediate image is rounded and clipped to uint8."""
    if _pillow_major() < 13:
        return True
    shrink_h = in_h - out_h
    return not (shrink_h > 0 and shrink_h > 2 * (in_w - out_w))


@lru_cache(maxsize=1)
def _pillow_major() -> int:
    import PIL

    return int(PIL.__version__.split(".")[0])


def _resample_rows(image, n_in: int, n_out: int, filter: str, method: str):
    """The vertical pass: uint8 [C, n_in, W] -> uint8 [C, n_out, W]."""
    if method == "matmul":
        import torch

        matrix = torch.from_numpy(filter_matrix(n_in, n_out, filter)).to(image.device)
        return _round_and_clip(matrix @ image.double())
    return _gather_rows(image, *filter_taps(n_in, n_out, filter))


def _resample_columns(image, n_in: int, n_out: int, filter: str, method: str):
    """The horizontal pass: uint8 [C, H, n_in] -> uint8 [C, H, n_out]."""
    if method == "matmul":
        import torch

        matrix = torch.from_numpy(filter_matrix(n_in, n_out, filter)).to(image.device)
        return _round_and_clip(image.double() @ matrix.T)
    # Gathering whole rows is an order of magnitude faster than gathering columns: work on the transpose.
    rows = image.transpose(1, 2).contiguous()
    return _gather_rows(rows, *filter_taps(n_in, n_out, filter)).transpose(1, 2).contiguous()


def _round_and_clip(total):
    """float64 sums of integer products -> uint8, as clip8: add one half, shift right, clip.

    Exact: every product and partial sum is an integer below 2**31 (see the module's docstring), far below
    2**53, so float64 holds them all whatever order the GEMM adds them in, fused or not; dividing by a power
    of two and flooring is the arithmetic shift."""
    import torch

    return torch.floor((total + _HALF) / _ONE).clamp_(0, 255).to(torch.uint8)


def _gather_rows(image, indices: np.ndarray, weights: np.ndarray):
    """uint8 [C, N, M] -> uint8 [C, n_out, M]: row i of the result is sum_j weights[i, j] * row indices[i, j],
    accumulated in int32 from one half, shifted right and clipped.

    int32 is Pillow's own accumulator type (a C int) and the partial sums stay below 2**31 (see the module's
    docstring); `>>` on a signed tensor is an arithmetic shift, i.e. the floor clip8 takes."""
    import torch

    indices = torch.from_numpy(indices).to(image.device)
    weights = torch.from_numpy(weights).to(image.device)
    shape = (image.shape[0], indices.shape[0], image.shape[2])
    # Buffers reused across the taps: a fresh allocation per tap costs more than the arithmetic.
    picked = torch.empty(shape, dtype=torch.uint8, device=image.device)
    term = torch.empty(shape, dtype=torch.int32, device=image.device)
    total = torch.full(shape, _HALF, dtype=torch.int32, device=image.device)
    for tap in range(indices.shape[1]):
        torch.index_select(image, 1, indices[:, tap], out=picked)
        total.add_(term.copy_(picked).mul_(weights[:, tap].view(-1, 1)))
    return (total >> PRECISION_BITS).clamp_(0, 255).to(torch.uint8)
