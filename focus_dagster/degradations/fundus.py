"""Where the fundus is in a photograph: the disc of the retina inside the camera's black surround.

A degradation paints inside that disc only (a camera's blur, glare or noise is in the retinal image, not in the
black mask a dataset's export added around it), and its spatial parameters are scaled by the disc's diameter:
published severities are defined on 224-pixel images of a retina, so a blur of 4 px at 224 px is a blur of 36 px
on a disc 2,016 px across.

The disc is found from the image itself, as the circle spanned by the columns and rows that hold retina (any
channel brighter than the surround's black). A photograph cropped at its top and bottom (the disc wider than the
frame is tall) keeps the disc's true diameter from its width. A model's centre crop can cut the disc on all four
sides: its rows and columns then span the whole frame, but the black corners still show where the rim runs, so
the radius is also measured from the centre along the four diagonals to the first black pixel (the larger of the
two counts). A frame with retina up to all four corners (no black surround at all) lies inside the disc: its disc
is the circle through the corners, so a degradation reaches every pixel of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

REFERENCE_DIAMETER = 224  # pixels: the image width at which MedMNIST-C and ImageNet-C define their severities
SURROUND_LEVEL = 20  # 0-255: brighter than this in any channel is retina (JPEG noise in the black stays below)
_LOOK_STEP = 4  # pixels between two samples when finding the disc: the extent needs no finer grid
_MIN_SHARE = 0.02  # share of a column's (row's) samples that must be retina for the column to count


@dataclass(frozen=True)
class Disc:
    """The fundus disc of one image: centre (x, y) and radius in pixels, and the image's height and width."""

    cx: float
    cy: float
    radius: float
    height: int
    width: int

    @property
    def scale(self) -> float:
        """How many of this image's pixels one pixel of the 224-pixel reference image spans."""
        return 2 * self.radius / REFERENCE_DIAMETER

    def mask(self) -> np.ndarray:
        """True inside the disc (H x W)."""
        ys, xs = np.ogrid[: self.height, : self.width]
        return (xs + 0.5 - self.cx) ** 2 + (ys + 0.5 - self.cy) ** 2 <= self.radius**2

    def radial(self) -> np.ndarray:
        """Distance from the centre over the radius (0 at the centre, 1 on the rim), H x W."""
        ys, xs = np.ogrid[: self.height, : self.width]
        return np.sqrt((xs + 0.5 - self.cx) ** 2 + (ys + 0.5 - self.cy) ** 2) / self.radius


def find_disc(image: np.ndarray) -> Disc:
    """The fundus disc of an H x W x 3 uint8 image (see the module's docstring). Columns are judged on every 4th
    row and rows on every 4th column: the extent stays exact to the pixel at a sixteenth of the reading."""
    height, width = image.shape[:2]
    columns = _spanned(image[::_LOOK_STEP].max(axis=2) > SURROUND_LEVEL, axis=0)
    rows = _spanned(image[:, ::_LOOK_STEP].max(axis=2) > SURROUND_LEVEL, axis=1)
    if columns is None or rows is None:  # no retina brighter than black: the whole frame
        return Disc(width / 2, height / 2, math.hypot(height, width) / 2, height, width)
    (left, right), (top, bottom) = columns, rows
    cx, cy = (left + right) / 2, (top + bottom) / 2
    radius = max(right - left, bottom - top, 2 * _diagonal_reach(image, cx, cy)) / 2
    return Disc(cx, cy, radius, height, width)


def _diagonal_reach(image: np.ndarray, cx: float, cy: float) -> float:
    """How far the retina reaches from the centre along the four diagonals (the median of the four): to the first
    black pixel, or past the frame's corner when the retina runs up to it."""
    height, width = image.shape[:2]
    steps = np.arange(0.0, math.hypot(height, width), 1.0)
    reaches = []
    for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
        xs = np.floor(cx + dx * steps / math.sqrt(2)).astype(int)
        ys = np.floor(cy + dy * steps / math.sqrt(2)).astype(int)
        inside = (xs >= 0) & (xs < width) & (ys >= 0) & (ys < height)
        xs, ys = xs[inside], ys[inside]  # the ray from the centre to the frame's edge
        retina = image[ys, xs].max(axis=1) > SURROUND_LEVEL
        reaches.append(steps[int(np.argmin(retina))] if not retina.all() else steps[len(retina) - 1] + 1)
    return float(np.median(reaches))


def _spanned(retina: np.ndarray, axis: int) -> tuple[int, int] | None:
    """First and one-past-last index, along the other axis, of the lines with enough retina in them."""
    lines = np.flatnonzero(retina.mean(axis=axis) >= _MIN_SHARE)
    return (int(lines[0]), int(lines[-1]) + 1) if lines.size else None
