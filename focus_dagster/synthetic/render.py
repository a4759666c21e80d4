"""Deterministic synthetic colour fundus photographs whose visible content follows their labels.

The renderer stands in for the public fundus datasets the benchmark is built on. Every label it is given
(diabetic-retinopathy grade, macular edema, cup-to-disc ratio, eye side, other findings) changes what is
drawn, so a model trained on the pictures can learn the labels; the capture conditions (camera, defocus,
uneven illumination, artifacts) change how well that content can be seen, which is how the benchmark plants
camera shifts and quality-dependent accuracy losses.

Design, chosen for speed (thousands of images per dataset):

* All geometry is expressed in units of the field-of-view (FOV) radius, so a 256 px and a 4288 px rendering
  of the same spec and seed show the same picture.
* Everything smooth (pigmentation, macula, peripapillary glow, choroidal pattern, cotton-wool spots, camera
  tint, vignetting, uneven illumination, glare) is computed once on a small numpy grid and upscaled with a
  single resize. Sharp things (optic disc, vessels, lesions) are then drawn at full resolution with
  ``PIL.ImageDraw`` in alpha-blending mode, their colours passed through the same smooth shading sampled
  at the shape's position, so no further full-resolution multiply is needed.
* Randomness comes from independent ``numpy.random.default_rng`` streams (anatomy, vessels, lesions, edema,
  each extra finding, capture quality, sensor noise). Changing one label therefore leaves everything else in
  the picture byte-identical, which is what lets a label's effect be measured against its absence.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageFilter

__all__ = [
    "CAMERAS",
    "KNOWN_EXTRAS",
    "CameraSignature",
    "FundusSpec",
    "render_fundus",
]


# ---------------------------------------------------------------------------------------------------------
# Public specification
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CameraSignature:
    """How one fundus camera model renders the same retina.

    ``tint`` multiplies the retina colour per RGB channel; ``fov`` is the diameter of the circular field of
    view divided by ``min(width, height)`` (above 1 the circle is cropped by the frame); ``vignetting``
    (0..1) darkens towards the FOV edge; ``noise`` is the standard deviation of additive sensor noise in
    0..255 units; ``background`` is the colour outside the FOV.
    """

    name: str
    tint: tuple[float, float, float]
    fov: float
    vignetting: float
    noise: float
    background: tuple[int, int, int]

    def __post_init__(self) -> None:
        if len(self.tint) != 3 or any(g <= 0 for g in self.tint):
            raise ValueError(f"camera {self.name!r}: tint must be three positive gains, got {self.tint}")
        if not 0.2 <= self.fov <= 1.6:
            raise ValueError(f"camera {self.name!r}: fov must lie in [0.2, 1.6], got {self.fov}")
        if not 0.0 <= self.vignetting <= 1.0:
            raise ValueError(f"camera {self.name!r}: vignetting must lie in [0, 1], got {self.vignetting}")
        if self.noise < 0:
            raise ValueError(f"camera {self.name!r}: noise must be >= 0, got {self.noise}")
        if len(self.background) != 3 or any(not 0 <= int(c) <= 255 for c in self.background):
            raise ValueError(f"camera {self.name!r}: background must be an RGB triple, got {self.background}")


CAMERAS: dict[str, CameraSignature] = {
    camera.name: camera
    for camera in (
        # BRSET, Canon CR: neutral-warm colour, wide clean field.
        CameraSignature("canon_cr", (1.00, 0.93, 0.86), 0.98, 0.35, 2.0, (0, 0, 0)),
        # BRSET, Nikon NF5050: redder and a little darker at the rim.
        CameraSignature("nikon_nf5050", (1.06, 0.84, 0.76), 0.92, 0.45, 2.5, (3, 2, 2)),
        # Phelcom Eyer handheld smartphone camera: small field, cool/green cast, heavy vignetting and noise.
        CameraSignature("phelcom_eyer", (0.82, 1.06, 1.00), 0.78, 0.75, 7.0, (10, 10, 12)),
        # REFUGE training set, Zeiss Visucam 500: bright, yellowish, low noise.
        CameraSignature("zeiss_visucam500", (1.02, 1.00, 0.80), 0.96, 0.25, 1.5, (0, 0, 0)),
        # REFUGE validation/test, Canon CR-2: deep red, field touching the frame.
        CameraSignature("canon_cr2", (1.08, 0.82, 0.70), 1.00, 0.45, 2.0, (0, 0, 0)),
        # IDRiD, Kowa VX-10: circle cropped top and bottom, orange cast.
        CameraSignature("kowa_vx10", (1.04, 0.92, 0.62), 1.06, 0.50, 3.0, (1, 1, 1)),
        # Messidor / RFMiD, Topcon TRC: circle cropped top and bottom, slightly muted.
        CameraSignature("topcon_trc", (0.96, 0.90, 0.84), 1.08, 0.35, 2.5, (0, 0, 0)),
        # Topcon TRC-NW400 non-mydriatic: cleaner, brighter greens.
        CameraSignature("topcon_nw400", (0.98, 0.98, 0.92), 0.95, 0.30, 2.0, (0, 0, 0)),
        # A neutral default.
        CameraSignature("generic", (1.00, 1.00, 1.00), 0.95, 0.30, 2.0, (0, 0, 0)),
    )
}

KNOWN_EXTRAS: tuple[str, ...] = ("drusen", "myopic", "tessellated", "laser_spots", "hypertensive", "occlusion")


@dataclass(frozen=True)
class FundusSpec:
    """Everything that decides what one synthetic fundus photograph shows.

    ``dr_grade`` (ICDR 0..4) sets the number and spread of microaneurysms (grade >= 1), haemorrhages
    (>= 2), hard exudates and cotton-wool spots (>= 2, more at 3) and neovascular tufts / preretinal
    haemorrhage (4). ``macular_edema`` adds a circinate ring of hard exudates around the macula.
    ``cup_disc_ratio`` is the vertical cup-to-disc ratio drawn on the optic disc. ``eye`` puts the disc on
    the nasal side (right eye: disc to the right of the macula). ``lesion_contrast`` scales how strongly
    every lesion differs from the background. ``blur``, ``illumination`` and ``artifacts`` (0..1) degrade
    capture quality. ``extra`` names other findings to draw, from :data:`KNOWN_EXTRAS`.
    """

    width: int
    height: int
    camera: CameraSignature
    dr_grade: int = 0
    macular_edema: bool = False
    cup_disc_ratio: float = 0.3
    eye: str = "R"
    lesion_contrast: float = 1.0
    blur: float = 0.0
    illumination: float = 0.0
    artifacts: float = 0.0
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A camera may be named by its key, and a single finding by its bare name; normalising here keeps
        # the frozen spec hashable and its fields of one type.
        if isinstance(self.camera, str):
            if self.camera not in CAMERAS:
                raise ValueError(f"unknown camera {self.camera!r}; known: {sorted(CAMERAS)}")
            object.__setattr__(self, "camera", CAMERAS[self.camera])
        if not isinstance(self.camera, CameraSignature):
            raise ValueError(f"camera must be a CameraSignature, got {type(self.camera).__name__}")
        extra = (self.extra,) if isinstance(self.extra, str) else tuple(self.extra)
        object.__setattr__(self, "extra", extra)
        unknown = [name for name in extra if name not in KNOWN_EXTRAS]
        if unknown:
            raise ValueError(f"unknown extra finding(s) {unknown}; known: {list(KNOWN_EXTRAS)}")
        if int(self.width) < 16 or int(self.height) < 16:
            raise ValueError(f"image must be at least 16x16 pixels, got {self.width}x{self.height}")
        if int(self.dr_grade) != self.dr_grade or not 0 <= self.dr_grade <= 4:
            raise ValueError(f"dr_grade must be an integer in 0..4, got {self.dr_grade}")
        if not 0.0 <= self.cup_disc_ratio <= 0.95:
            raise ValueError(f"cup_disc_ratio must lie in [0, 0.95], got {self.cup_disc_ratio}")
        if self.eye not in ("R", "L"):
            raise ValueError(f"eye must be 'R' or 'L', got {self.eye!r}")
        if self.lesion_contrast < 0:
            raise ValueError(f"lesion_contrast must be >= 0, got {self.lesion_contrast}")
        for name in ("blur", "illumination", "artifacts"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {value}")


def render_fundus(spec: FundusSpec, seed: int) -> Image.Image:
    """Render one synthetic colour fundus photograph (RGB, exactly ``spec.width`` x ``spec.height``).

    The same spec and seed always give the same bytes; another seed gives another vessel tree, other
    lesion positions and other sensor noise.
    """
    streams = _Streams(seed)
    layout = _make_layout(spec, streams.anatomy)
    findings = _plan_findings(spec, layout, streams)
    tree = _grow_vessel_tree(layout, streams.vessels, findings)
    _plan_vessel_findings(spec, layout, tree, findings, streams)

    field_ = _SmoothField(spec, layout, streams, findings)
    image = field_.to_image()
    draw = ImageDraw.Draw(image, "RGBA")
    _draw_marks(draw, findings.beneath_disc, layout, field_, spec.lesion_contrast)
    _draw_optic_disc(draw, layout, field_, spec.cup_disc_ratio)
    _draw_vessels(draw, tree, layout, field_, findings)
    _draw_marks(draw, findings.marks, layout, field_, spec.lesion_contrast)

    image = _defocus(image, spec.blur)
    image = _add_sensor_noise(image, spec.camera.noise, streams.noise)
    _fill_outside_fov(image, layout, spec.camera.background)
    return image


@dataclass(frozen=True)
class FundusGeometry:
    """Where `render_fundus` puts the anatomy of an image, in pixels (for annotation files).

    Ellipses are (centre x, centre y, x radius, y radius); points are (x, y).
    """

    fov_centre: tuple[float, float]
    fov_radius: float
    disc: tuple[float, float, float, float]
    cup: tuple[float, float, float, float]
    fovea: tuple[float, float]


def fundus_geometry(spec: FundusSpec, seed: int) -> FundusGeometry:
    """The geometry `render_fundus(spec, seed)` draws, computed without rendering (the same random stream)."""
    layout = _make_layout(spec, _Streams(seed).anatomy)
    disc, cup = _disc_and_cup(layout, spec.cup_disc_ratio)
    return FundusGeometry(
        fov_centre=(spec.width / 2, spec.height / 2),
        fov_radius=layout.radius,
        disc=disc,
        cup=cup,
        fovea=layout.px(*layout.fovea),
    )


# ---------------------------------------------------------------------------------------------------------
# Randomness and geometry
# ---------------------------------------------------------------------------------------------------------

_ANATOMY, _VESSELS, _LESIONS, _EDEMA, _QUALITY, _NOISE, _EXTRAS = range(7)


class _Streams:
    """Independent random streams, so that turning one label on or off leaves the rest of the image alone."""

    def __init__(self, seed: int) -> None:
        # SeedSequence needs non-negative entropy; the mask keeps negative seeds distinct and valid.
        self._seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
        self.anatomy = self.stream(_ANATOMY)
        self.vessels = self.stream(_VESSELS)
        self.lesions = self.stream(_LESIONS)
        self.quality = self.stream(_QUALITY)
        self.noise = self.stream(_NOISE)

    @functools.cached_property
    def edema(self) -> np.random.Generator:
        return self.stream(_EDEMA)

    def stream(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self._seed, *key])

    def extra(self, name: str) -> np.random.Generator:
        return self.stream(_EXTRAS, KNOWN_EXTRAS.index(name))


def _lerp(lo: float, hi: float, u):
    return lo + (hi - lo) * u


def _bump(d2: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian of squared distance, floored near 1e-9: float32 underflow to subnormals is very slow."""
    return np.exp(np.maximum(d2 * np.float32(-0.5 / (sigma * sigma)), np.float32(-20.0)))


def _smoothstep(edge0: float, edge1: float, x: np.ndarray) -> np.ndarray:
    t = np.clip((x - edge0) / (edge1 - edge0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


@dataclass(frozen=True)
class _Layout:
    """Where the anatomy sits, in a canonical frame measured in FOV radii.

    The canonical frame has its origin at the image centre, y pointing down and the temporal direction
    (disc -> macula) along +x; ``mirror`` maps it to the image, so one code path draws both eyes.
    """

    width: int
    height: int
    radius: float  # FOV radius in pixels
    mirror: float  # image x = width / 2 + mirror * canonical x * radius
    half_w: float  # half frame width in FOV radii (below 1 when the circle is cropped)
    half_h: float
    disc: tuple[float, float]
    disc_rx: float
    disc_ry: float
    fovea: tuple[float, float]
    cup_aspect: float  # horizontal cup size relative to cup_disc_ratio * disc width
    cup_shift: tuple[float, float]  # cup offset as a fraction of the free rim, (temporal, down)

    def px(self, x: float, y: float) -> tuple[float, float]:
        return self.width / 2 + self.mirror * x * self.radius, self.height / 2 + y * self.radius

    def px_arrays(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.width / 2 + self.mirror * self.radius * x, self.height / 2 + self.radius * y

    def inside(self, x: np.ndarray, y: np.ndarray, margin: float = 0.0) -> np.ndarray:
        """Whether canonical points lie inside both the FOV circle and the frame."""
        return (
            (x * x + y * y < (1.0 - margin) ** 2)
            & (np.abs(x) < self.half_w - margin)
            & (np.abs(y) < self.half_h - margin)
        )

    def off_disc(self, x: np.ndarray, y: np.ndarray, scale: float) -> np.ndarray:
        """Whether points lie outside the disc ellipse grown by ``scale``."""
        dx = (x - self.disc[0]) / (self.disc_rx * scale)
        dy = (y - self.disc[1]) / (self.disc_ry * scale)
        return dx * dx + dy * dy > 1.0


def _make_layout(spec: FundusSpec, rng: np.random.Generator) -> _Layout:
    # Python floats, not numpy scalars: they keep the float32 grids float32 (numpy scalars would promote).
    u = rng.random(8).tolist()
    radius = spec.camera.fov * min(spec.width, spec.height) / 2.0
    fovea = (0.08 + 0.06 * (u[0] - 0.5), 0.03 + 0.06 * (u[1] - 0.5))
    # Disc diameter is 1/6-1/7 of the FOV diameter (2 radii); the fovea sits ~2.5 disc diameters
    # temporal to the disc centre and slightly below it.
    disc_diameter = 2.0 / _lerp(6.0, 7.0, u[2])
    distance = _lerp(2.35, 2.65, u[3]) * disc_diameter
    disc = (fovea[0] - distance, fovea[1] - _lerp(0.03, 0.08, u[4]))
    # Myopic discs look tilted: narrower horizontally.
    squeeze = 0.8 if "myopic" in spec.extra else 1.0
    return _Layout(
        width=int(spec.width),
        height=int(spec.height),
        radius=radius,
        mirror=-1.0 if spec.eye == "R" else 1.0,
        half_w=spec.width / 2.0 / radius,
        half_h=spec.height / 2.0 / radius,
        disc=disc,
        disc_rx=disc_diameter / 2 * 0.95 * squeeze,
        disc_ry=disc_diameter / 2 * 1.04,
        fovea=fovea,
        cup_aspect=_lerp(0.85, 1.02, u[5]),
        cup_shift=(_lerp(0.0, 0.5, u[6]), _lerp(-0.25, 0.25, u[7])),
    )


def _disc_and_cup(layout: _Layout, cup_ratio: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Disc and cup ellipses in pixels; the cup's height is cup_ratio of the disc's, set towards the temporal rim."""
    x, y = layout.px(*layout.disc)
    rx, ry = layout.disc_rx * layout.radius, layout.disc_ry * layout.radius
    cup_ry = cup_ratio * ry
    cup_rx = min(cup_ratio * rx * layout.cup_aspect, rx * 0.92)
    cup_x = x + layout.mirror * (rx - cup_rx) * layout.cup_shift[0]
    cup_y = y + (ry - cup_ry) * layout.cup_shift[1]
    return (x, y, rx, ry), (cup_x, cup_y, cup_rx, cup_ry)


# ---------------------------------------------------------------------------------------------------------
# Findings: what to draw, in canonical coordinates
# ---------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Mark:
    """One shape to draw at full resolution (coordinates and sizes in FOV radii, canonical frame).

    ``shape`` is "ellipse" (axis aligned), "rotated" (ellipse turned by ``angle``), "blob" (irregular
    outline scaled by ``wobble``), "boat" (lower half ellipse, flat top) or "path" (polyline through
    ``points`` with line width ``rx``). ``lesion`` marks pathology, whose alpha follows lesion_contrast.
    """

    shape: str
    x: float
    y: float
    rx: float
    ry: float
    colour: tuple[float, float, float]
    alpha: float
    soft: bool = False
    lesion: bool = True
    angle: float = 0.0
    wobble: tuple[float, ...] = ()
    points: np.ndarray | None = None


@dataclass
class _Findings:
    """Everything the labels ask for, planned before anything is drawn."""

    marks: list[_Mark] = field(default_factory=list)
    beneath_disc: list[_Mark] = field(default_factory=list)
    # Cotton-wool spots are fuzzy, so they go into the smooth low-resolution layer: (x, y, rx, ry, angle, alpha).
    cotton_wool: list[tuple[float, float, float, float, float, float]] = field(default_factory=list)
    tessellation: float = 0.0
    pallor: float = 0.0
    artery_scale: float = 1.0
    copper_wire: bool = False
    av_nicking: bool = False
    occluded_root: int | None = None


# Albedo colours (0..1) before camera shading.
_VEIN = (0.50, 0.09, 0.10)
_ARTERY = (0.76, 0.22, 0.15)
_DISC_RIM = (1.00, 0.74, 0.52)
_DISC_INNER = (1.00, 0.82, 0.60)
_CUP = (1.00, 0.97, 0.86)
_MICROANEURYSM = (0.50, 0.05, 0.05)
_HAEMORRHAGE = (0.52, 0.06, 0.05)
_EXUDATE = (1.00, 0.92, 0.48)
_COTTON_WOOL = (0.97, 0.91, 0.84)
_DRUSEN = (0.98, 0.84, 0.52)
_NEOVESSEL = (0.62, 0.12, 0.10)
_LASER_PIGMENT = (0.28, 0.14, 0.08)
_LASER_SCAR = (0.95, 0.85, 0.62)
_ATROPHY = (0.96, 0.87, 0.72)
_FOVEAL_REFLEX = (1.00, 0.90, 0.75)

# Lesion counts per ICDR grade as inclusive ranges:
# (microaneurysms, haemorrhages, exudate clusters, cotton-wool spots).
_DR_COUNTS = {
    0: ((0, 0), (0, 0), (0, 0), (0, 0)),
    1: ((3, 7), (0, 0), (0, 0), (0, 0)),
    2: ((8, 18), (2, 7), (0, 3), (0, 2)),
    3: ((18, 32), (12, 22), (2, 5), (2, 5)),
    4: ((34, 60), (26, 42), (3, 6), (3, 7)),
}

_BLOB_VERTICES = 16


def _wobbles(rng: np.random.Generator, n: int) -> np.ndarray:
    """Radius factors (n, vertices) of smooth irregular outlines: a few low harmonics with random phases."""
    t = np.linspace(0.0, 2 * math.pi, _BLOB_VERTICES, endpoint=False)
    amplitude = rng.uniform(0.0, (0.18, 0.12, 0.06), size=(n, 3))
    phase = rng.uniform(0.0, 2 * math.pi, size=(n, 3))
    harmonics = np.array([2, 3, 5])
    waves = amplitude[:, :, None] * np.cos(harmonics[None, :, None] * t[None, None, :] + phase[:, :, None])
    return 1.0 + waves.sum(axis=1)


def _count(rng: np.random.Generator, span: tuple[int, int]) -> int:
    return int(rng.integers(span[0], span[1] + 1))


def _scatter(
    rng: np.random.Generator,
    n: int,
    centre: tuple[float, float],
    spread: float | tuple[float, float],
    layout: _Layout,
    disc_clearance: float = 1.5,
) -> np.ndarray:
    """Up to ``n`` Gaussian-scattered points inside the FOV and away from the disc, shape (n, 2)."""
    if n <= 0:
        return np.zeros((0, 2))
    candidates = rng.normal(centre, spread, size=(4 * n + 8, 2))
    x, y = candidates[:, 0], candidates[:, 1]
    keep = layout.inside(x, y, margin=0.07) & layout.off_disc(x, y, disc_clearance)
    return candidates[keep][:n]


def _plan_findings(spec: FundusSpec, layout: _Layout, streams: _Streams) -> _Findings:
    findings = _Findings()
    _plan_diabetic_retinopathy(spec.dr_grade, layout, streams.lesions, findings)
    if spec.macular_edema:
        _plan_macular_edema(layout, streams.edema, findings)
    for name in spec.extra:
        _EXTRA_PLANNERS[name](layout, streams.extra(name), findings)
    return findings


def _plan_diabetic_retinopathy(grade: int, layout: _Layout, rng: np.random.Generator, out: _Findings) -> None:
    n_ma, n_haem, n_clusters, n_cws = (_count(rng, span) for span in _DR_COUNTS[grade])
    # Lesions gather at the posterior pole and spread further out as the disease advances.
    pole = (layout.fovea[0] - 0.12, layout.fovea[1])
    spread = 0.26 + 0.05 * grade

    points = _scatter(rng, n_ma, pole, spread, layout).tolist()
    sizes, alphas = rng.uniform(0.0045, 0.009, n_ma).tolist(), rng.uniform(0.85, 1.0, n_ma).tolist()
    for (x, y), r, alpha in zip(points, sizes, alphas):
        out.marks.append(_Mark("ellipse", x, y, r, r, _MICROANEURYSM, alpha, soft=True))

    points = _scatter(rng, n_haem, pole, spread, layout).tolist()
    tones = np.minimum(1.0, rng.uniform(0.85, 1.1, (n_haem, 1)) * np.array(_HAEMORRHAGE)).tolist()
    blot = (rng.random(n_haem) < 0.7).tolist()
    blot_size, dot_size = rng.uniform(0.014, 0.036, n_haem).tolist(), rng.uniform(0.007, 0.012, n_haem).tolist()
    aspects, alphas = rng.uniform(0.8, 1.2, n_haem).tolist(), rng.uniform(0.7, 0.92, n_haem).tolist()
    wobbles = _wobbles(rng, n_haem).tolist()
    for k, (x, y) in enumerate(points):
        colour = tuple(tones[k])
        if blot[k]:  # blot haemorrhage: irregular outline
            r = blot_size[k]
            out.marks.append(_Mark("blob", x, y, r, r * aspects[k], colour, alphas[k], soft=True,
                                   wobble=tuple(wobbles[k])))
        else:  # dot haemorrhage: small and round
            r = dot_size[k]
            out.marks.append(_Mark("ellipse", x, y, r, r, colour, alphas[k] + 0.05, soft=True))

    for centre in _scatter(rng, n_clusters, layout.fovea, 0.3, layout).tolist():
        _add_exudate_cluster(rng, centre, layout, out)

    centre = (0.5 * (layout.disc[0] + layout.fovea[0]), layout.fovea[1])
    for x, y in _scatter(rng, n_cws, centre, (0.35, 0.3), layout).tolist():
        _add_cotton_wool(rng, x, y, out)

    if grade == 4:
        _plan_proliferative(layout, rng, out)


def _add_exudate_cluster(rng: np.random.Generator, centre, layout: _Layout, out: _Findings) -> None:
    n = int(rng.integers(3, 13))
    points = rng.normal(centre, 0.035, size=(n, 2))
    sizes, alphas = rng.uniform(0.004, 0.011, n), rng.uniform(0.8, 0.95, n)
    keep = layout.inside(points[:, 0], points[:, 1], margin=0.05)
    for (x, y), r, alpha in zip(points[keep].tolist(), sizes[keep].tolist(), alphas[keep].tolist()):
        out.marks.append(_Mark("ellipse", x, y, r, r, _EXUDATE, alpha, soft=True))


def _add_cotton_wool(rng: np.random.Generator, x: float, y: float, out: _Findings) -> None:
    r = rng.uniform(0.022, 0.038)
    out.cotton_wool.append((x, y, r * rng.uniform(1.2, 1.8), r, rng.uniform(0, math.pi), rng.uniform(0.45, 0.7)))


def _plan_proliferative(layout: _Layout, rng: np.random.Generator, out: _Findings) -> None:
    """New-vessel tufts (on the disc or along an arcade) and, often, a boat-shaped preretinal bleed."""
    for _ in range(int(rng.integers(1, 4))):
        if rng.random() < 0.5:
            centre = (layout.disc[0] + rng.normal(0, 0.04), layout.disc[1] + rng.normal(0, 0.04))
        else:
            side = 1.0 if rng.random() < 0.5 else -1.0
            centre = (layout.fovea[0] + rng.uniform(-0.55, 0.3), layout.fovea[1] + side * rng.uniform(0.35, 0.5))
        _add_neovascular_tuft(rng, centre, out)
    if rng.random() < 0.6:
        side = 1.0 if rng.random() < 0.5 else -1.0
        x = layout.fovea[0] + rng.uniform(-0.45, 0.35)
        y = layout.fovea[1] + side * rng.uniform(0.3, 0.5)
        r = rng.uniform(0.05, 0.09)
        out.marks.append(_Mark("boat", x, y, r, r * 0.8, _HAEMORRHAGE, 0.9, soft=True))


def _add_neovascular_tuft(rng: np.random.Generator, centre, out: _Findings) -> None:
    n_loops = int(rng.integers(14, 27))
    starts = rng.normal(centre, 0.03, size=(n_loops, 2))
    headings = np.cumsum(rng.normal(0, 0.9, size=(n_loops, 4)), axis=1) + rng.uniform(0, 2 * math.pi, (n_loops, 1))
    steps = np.stack([np.cos(headings), np.sin(headings)], axis=-1) * 0.013
    paths = np.concatenate([starts[:, None, :], starts[:, None, :] + np.cumsum(steps, axis=1)], axis=1)
    for path in paths:
        out.marks.append(_Mark("path", path[0, 0], path[0, 1], 0.0035, 0.0035, _NEOVESSEL, 0.85, points=path))


def _plan_macular_edema(layout: _Layout, rng: np.random.Generator, out: _Findings) -> None:
    """A circinate ring of hard exudates around the fovea, with a few inside it."""
    fx, fy = layout.fovea
    cx, cy = fx + rng.normal(0, 0.035), fy + rng.normal(0, 0.035)
    ring = rng.uniform(0.11, 0.2)
    start = rng.uniform(0, 2 * math.pi)
    extent = rng.uniform(0.55, 0.95) * 2 * math.pi
    n_ring, n_inner = int(rng.integers(35, 71)), int(rng.integers(4, 13))
    angles = start + extent * rng.random(n_ring)
    radii = ring + rng.normal(0, 0.018, n_ring)
    inner_angles = rng.uniform(0, 2 * math.pi, n_inner)
    inner_radii = ring * 0.6 * np.sqrt(rng.random(n_inner))
    xs = cx + np.concatenate([radii * np.cos(angles), inner_radii * np.cos(inner_angles)])
    ys = cy + np.concatenate([radii * np.sin(angles), inner_radii * np.sin(inner_angles)])
    sizes = rng.uniform(0.004, 0.011, xs.size)
    alphas = rng.uniform(0.8, 0.95, xs.size)
    keep = layout.inside(xs, ys, margin=0.05)
    for x, y, r, a in zip(*(v[keep].tolist() for v in (xs, ys, sizes, alphas))):
        out.marks.append(_Mark("ellipse", x, y, r, r, _EXUDATE, a, soft=True))


def _plan_drusen(layout: _Layout, rng: np.random.Generator, out: _Findings) -> None:
    n = int(rng.integers(20, 61))
    points = _scatter(rng, n, layout.fovea, 0.17, layout).tolist()
    sizes, alphas = rng.uniform(0.006, 0.02, n).tolist(), rng.uniform(0.55, 0.75, n).tolist()
    for (x, y), r, alpha in zip(points, sizes, alphas):
        out.marks.append(_Mark("ellipse", x, y, r, r, _DRUSEN, alpha, soft=True))


def _plan_myopic(layout: _Layout, rng: np.random.Generator, out: _Findings) -> None:
    """Peripapillary atrophy crescent on the temporal side of a tilted disc, over a pale tessellated fundus."""
    rx, ry = layout.disc_rx * rng.uniform(1.3, 1.5), layout.disc_ry * rng.uniform(1.0, 1.1)
    x = layout.disc[0] + layout.disc_rx * rng.uniform(0.3, 0.45)
    out.beneath_disc.append(_Mark("ellipse", x, layout.disc[1], rx, ry, _ATROPHY, 0.9, soft=True, lesion=False))
    out.tessellation = max(out.tessellation, 0.45)
    out.pallor = max(out.pallor, 0.2)


def _plan_tessellated(layout: _Layout, rng: np.random.Generator, out: _Findings) -> None:
    out.tessellation = max(out.tessellation, 0.4)


def _plan_laser_spots(layout: _Layout, rng: np.random.Generator, out: _Findings) -> None:
    """Panretinal photocoagulation scars: a loose hexagonal grid in the mid-periphery, sparing the macula."""
    spacing = 0.07
    rows = np.arange(-1.0, 1.0 + spacing, spacing * 0.866)
    xs, ys = [], []
    for i, y in enumerate(rows):
        row = np.arange(-1.0, 1.0 + spacing, spacing) + (spacing / 2 if i % 2 else 0.0)
        xs.append(row)
        ys.append(np.full(row.size, y))
    x, y = np.concatenate(xs), np.concatenate(ys)
    x = x + rng.normal(0, 0.012, x.size)
    y = y + rng.normal(0, 0.012, y.size)
    fovea_distance = np.hypot(x - layout.fovea[0], y - layout.fovea[1])
    keep = (
        layout.inside(x, y, margin=0.06)
        & (fovea_distance > 0.42)
        & layout.off_disc(x, y, 2.2)
        & (rng.random(x.size) > 0.35)
    )
    for px, py, r in zip(x[keep].tolist(), y[keep].tolist(), rng.uniform(0.011, 0.019, x.size)[keep].tolist()):
        out.marks.append(_Mark("ellipse", px, py, r, r, _LASER_PIGMENT, 0.7, soft=True))
        out.marks.append(_Mark("ellipse", px, py, r * 0.62, r * 0.62, _LASER_SCAR, 0.7))


def _plan_hypertensive(layout: _Layout, rng: np.random.Generator, out: _Findings) -> None:
    """Narrow arteries with a copper-wire reflex and AV nicking, plus flame haemorrhages and soft exudates."""
    out.artery_scale = min(out.artery_scale, 0.6)
    out.copper_wire = True
    out.av_nicking = True
    for _ in range(int(rng.integers(3, 9))):
        angle = rng.uniform(0, 2 * math.pi)
        distance = rng.uniform(0.15, 0.45)
        x = layout.disc[0] + distance * math.cos(angle)
        y = layout.disc[1] + distance * math.sin(angle)
        if layout.inside(np.array(x), np.array(y), margin=0.08):
            _add_flame(rng, x, y, angle, out)  # nerve fibres run radially from the disc
    for x, y in _scatter(rng, int(rng.integers(1, 5)), layout.disc, 0.3, layout, disc_clearance=2.0):
        _add_cotton_wool(rng, x, y, out)


def _plan_occlusion(layout: _Layout, rng: np.random.Generator, out: _Findings) -> None:
    # The haemorrhages follow the occluded vein, so they are placed once the vessel tree exists.
    out.occluded_root = _SUPERIOR_TEMPORAL_VEIN if rng.random() < 0.5 else _INFERIOR_TEMPORAL_VEIN


def _add_flame(rng: np.random.Generator, x: float, y: float, angle: float, out: _Findings) -> None:
    length = rng.uniform(0.025, 0.06)
    width = rng.uniform(0.007, 0.016)
    out.marks.append(_Mark("rotated", x, y, length, width, _HAEMORRHAGE, rng.uniform(0.7, 0.9), soft=True, angle=angle))


_EXTRA_PLANNERS = {
    "drusen": _plan_drusen,
    "myopic": _plan_myopic,
    "tessellated": _plan_tessellated,
    "laser_spots": _plan_laser_spots,
    "hypertensive": _plan_hypertensive,
    "occlusion": _plan_occlusion,
}


# ---------------------------------------------------------------------------------------------------------
# Vessel tree
# ---------------------------------------------------------------------------------------------------------

_STEP = 0.025  # path step in FOV radii
_VEIN_WIDTH = 0.026
_ARTERY_WIDTH = 0.019
_CHILDREN_PER_ROOT = 8
_CHILDREN_PER_BRANCH = 4
_MAX_PIECE_STEPS = 20  # long pieces are split so their colour can follow the shading
_FOVEAL_AVASCULAR_ZONE = 0.085

# Superior roots; the inferior ones are their mirror images (heading, curvature and offset flip sign).
# kind, heading (deg), curvature (rad per radius), straight run, max turn (deg), late curvature,
# length, width factor, start offset (disc radii).
_SUPERIOR_ROOTS = (
    ("V", -78.0, 2.1, 0.10, 80.0, 0.35, 1.95, 1.00, (0.12, -0.30)),  # superior temporal vein
    ("A", -66.0, 2.4, 0.12, 74.0, 0.30, 1.95, 1.00, (0.02, -0.22)),  # superior temporal artery
    ("V", -108.0, -1.5, 0.06, 50.0, -0.2, 1.2, 0.72, (-0.10, -0.30)),  # superior nasal vein
    ("A", -118.0, -1.3, 0.08, 45.0, -0.2, 1.2, 0.72, (-0.15, -0.20)),  # superior nasal artery
    ("V", -178.0, 0.0, 0.0, 0.0, 0.0, 0.7, 0.50, (-0.25, -0.08)),  # nasal radial vessel
    ("A", -14.0, 0.5, 0.05, 20.0, 0.0, 0.65, 0.42, (0.22, -0.08)),  # papillomacular vessel
)
_SUPERIOR_TEMPORAL_VEIN = 0
_INFERIOR_TEMPORAL_VEIN = len(_SUPERIOR_ROOTS)


def _root_table() -> list[tuple]:
    swap = {"A": "V", "V": "A"}
    inferior = []
    for i, (kind, heading, kappa, run, turn, late, length, width, (ox, oy)) in enumerate(_SUPERIOR_ROOTS):
        # The two small vessels swap kind so that each side gets both an artery and a vein.
        mirrored_kind = kind if i < 4 else swap[kind]
        inferior.append((mirrored_kind, -heading, -kappa, run, turn, -late, length, width, (ox, -oy)))
    return list(_SUPERIOR_ROOTS) + inferior


_ROOTS = _root_table()


class _VesselPiece(NamedTuple):
    """A stretch of vessel drawn as one polyline of constant width and colour."""

    artery: bool
    depth: int
    width: float  # FOV radii
    points: list[float]  # flat pixel coordinates x0, y0, x1, y1, ...
    ax: float  # pixel position whose shading colours the piece
    ay: float


@dataclass
class _VesselTree:
    """The drawable vessel pieces, plus the path of an occluded vein for the haemorrhages along it."""

    pieces: list[_VesselPiece]
    occluded_path: np.ndarray  # (m, 3) canonical x, y, heading along the occluded vein and its branches


@dataclass
class _Generation:
    """Vessels of one branching depth, grown together; ``slot`` indexes their pre-drawn randomness."""

    x: np.ndarray  # (n, steps + 1) canonical path points
    y: np.ndarray
    heading: np.ndarray
    n_valid: np.ndarray  # leading points that stay inside the FOV and outside the fovea
    slot: np.ndarray
    root: np.ndarray
    artery: np.ndarray
    width: np.ndarray
    tortuosity: np.ndarray


def _walk(layout: _Layout, x0, y0, heading0, length, kappa, run, max_turn, late, tortuosity, noise):
    """Grow many vessel paths at once: a planned bend plus a random walk of the heading."""
    s = _STEP * np.arange(1, noise.shape[1] + 1)
    bend = np.minimum(np.clip(s - run[:, None], 0.0, None) * np.abs(kappa)[:, None], max_turn[:, None])
    bend_end = run + max_turn / np.maximum(np.abs(kappa), 1e-6)
    drift = np.clip(s - bend_end[:, None], 0.0, None) * late[:, None]
    heading = heading0[:, None] + np.sign(kappa)[:, None] * bend + drift
    heading += np.cumsum(noise * tortuosity[:, None], axis=1)
    x = np.empty((len(x0), s.size + 1))
    y = np.empty_like(x)
    x[:, 0], y[:, 0] = x0, y0
    np.cumsum(_STEP * np.cos(heading), axis=1, out=x[:, 1:])
    np.cumsum(_STEP * np.sin(heading), axis=1, out=y[:, 1:])
    x[:, 1:] += x0[:, None]
    y[:, 1:] += y0[:, None]
    heading = np.concatenate([heading[:, :1], heading], axis=1)
    fx, fy = layout.fovea
    ok = layout.inside(x, y, margin=0.015)
    ok &= (x - fx) ** 2 + (y - fy) ** 2 > _FOVEAL_AVASCULAR_ZONE**2
    ok[:, 1:] &= s[None, :] <= length[:, None]
    ok[:, 0] = True
    n_valid = np.where(ok.all(axis=1), ok.shape[1], np.argmin(ok, axis=1))
    return x, y, heading, n_valid


@dataclass
class _Spawn:
    index: np.ndarray  # (n, k) point index on the parent where each child leaves
    ok: np.ndarray  # (n, k) whether that child exists
    x0: np.ndarray  # (n, k) child start and parameters
    y0: np.ndarray
    heading: np.ndarray
    length: np.ndarray
    width: np.ndarray
    kappa: np.ndarray


def _spawn(layout: _Layout, parents: _Generation, u: np.ndarray, first, gap, length, taper) -> _Spawn:
    """Place children along each parent; ``u`` holds pre-drawn uniforms (n, k, 6)."""
    n, k, _ = u.shape
    gaps = _lerp(gap[0], gap[1], u[..., 0])
    gaps[:, 0] = _lerp(first[0], first[1], u[:, 0, 0])
    index = np.rint(np.cumsum(gaps, axis=1) / _STEP).astype(int)
    ok = index < parents.n_valid[:, None] - 3
    index = np.minimum(index, parents.x.shape[1] - 1)
    rows = np.arange(n)[:, None]
    side = np.where(u[..., 1] < 0.5, -1.0, 1.0)
    x0, y0, heading = parents.x[rows, index], parents.y[rows, index], parents.heading[rows, index]
    # Branches turning towards the fovea stay short, keeping the macula nearly free of large vessels.
    towards = np.cos(heading) * (layout.fovea[1] - y0) - np.sin(heading) * (layout.fovea[0] - x0)
    reach = np.where(side * towards > 0, 0.45, 1.0)
    return _Spawn(
        index=index,
        ok=ok,
        x0=x0,
        y0=y0,
        heading=heading + side * _lerp(0.45, 1.05, u[..., 2]),
        length=_lerp(length[0], length[1], u[..., 3]) * reach,
        width=parents.width[:, None] * taper ** np.arange(k)[None, :] * _lerp(0.55, 0.75, u[..., 4]),
        kappa=_lerp(-1.0, 1.0, u[..., 5]),
    )


def _children(layout: _Layout, parents: _Generation, spawn: _Spawn, k: int, noise: np.ndarray) -> _Generation:
    rows, cols = np.nonzero(spawn.ok)
    slot = parents.slot[rows] * k + cols
    n = rows.size
    tortuosity = parents.tortuosity[rows]
    x, y, heading, n_valid = _walk(
        layout,
        x0=spawn.x0[rows, cols],
        y0=spawn.y0[rows, cols],
        heading0=spawn.heading[rows, cols],
        length=spawn.length[rows, cols],
        kappa=spawn.kappa[rows, cols],
        run=np.zeros(n),
        max_turn=np.full(n, 10.0),
        late=np.zeros(n),
        tortuosity=tortuosity,
        noise=noise[slot],
    )
    return _Generation(x, y, heading, n_valid, slot, parents.root[rows], parents.artery[rows],
                       spawn.width[rows, cols], tortuosity)


def _grow_vessel_tree(layout: _Layout, rng: np.random.Generator, findings: _Findings) -> _VesselTree:
    """Arteries and veins leaving the disc in superior/inferior arcades, branching twice."""
    n_roots, k1, k2 = len(_ROOTS), _CHILDREN_PER_ROOT, _CHILDREN_PER_BRANCH
    steps0, steps1, steps2 = (int(math.ceil(length / _STEP)) for length in (1.95, 0.72, 0.36))
    # Every draw has a fixed shape, so a finding that reshapes one vessel leaves the others untouched.
    jitter = rng.random((n_roots, 4))
    noise0 = rng.standard_normal((n_roots, steps0))
    spawn1 = rng.random((n_roots, k1, 6))
    noise1 = rng.standard_normal((n_roots * k1, steps1))
    spawn2 = rng.random((n_roots * k1, k2, 6))
    noise2 = rng.standard_normal((n_roots * k1 * k2, steps2))

    table = list(zip(*_ROOTS))
    artery = np.array([kind == "A" for kind in table[0]])
    offsets = np.array(table[8], dtype=float)
    widths = np.where(artery, _ARTERY_WIDTH * findings.artery_scale, _VEIN_WIDTH) * np.array(table[7])
    tortuosity = np.full(n_roots, 0.035)
    if findings.occluded_root is not None:
        # A vein behind an occlusion is engorged and tortuous.
        widths[findings.occluded_root] *= 1.35
        tortuosity[findings.occluded_root] *= 1.4
    x, y, heading, n_valid = _walk(
        layout,
        x0=layout.disc[0] + offsets[:, 0] * layout.disc_rx,
        y0=layout.disc[1] + offsets[:, 1] * layout.disc_ry,
        heading0=np.radians(np.array(table[1])) + np.radians(6.0) * (jitter[:, 0] - 0.5) * 2,
        length=np.array(table[6]) * _lerp(0.9, 1.1, jitter[:, 1]),
        kappa=np.array(table[2]) * _lerp(0.85, 1.15, jitter[:, 2]),
        run=np.array(table[3]),
        max_turn=np.radians(np.array(table[4])),
        late=np.array(table[5]) * _lerp(0.7, 1.3, jitter[:, 3]),
        tortuosity=tortuosity,
        noise=noise0,
    )
    slots = np.arange(n_roots)
    roots = _Generation(x, y, heading, n_valid, slots, slots, artery, widths, tortuosity)
    taper = 0.9
    spawn_a = _spawn(layout, roots, spawn1, (0.08, 0.2), (0.16, 0.34), (0.25, 0.7), taper)
    # Smaller branches wander more than the trunks they leave.
    roots_for_children = _Generation(**{**roots.__dict__, "tortuosity": roots.tortuosity * (0.06 / 0.035)})
    branches = _children(layout, roots_for_children, spawn_a, k1, noise1)
    spawn_b = _spawn(layout, branches, spawn2[branches.slot], (0.06, 0.15), (0.1, 0.22), (0.1, 0.35), taper)
    twigs = _children(layout, branches, spawn_b, k2, noise2)

    pieces: list[_VesselPiece] = []
    _cut_into_pieces(layout, roots, 0, spawn_a, taper, pieces)
    _cut_into_pieces(layout, branches, 1, spawn_b, taper, pieces)
    _cut_into_pieces(layout, twigs, 2, None, taper, pieces)

    occluded = np.zeros((0, 3))
    if findings.occluded_root is not None:
        generations = (roots, branches, twigs)
        occluded = np.concatenate([_valid_points(g, g.root == findings.occluded_root) for g in generations])
    return _VesselTree(pieces, occluded)


def _valid_points(generation: _Generation, rows: np.ndarray) -> np.ndarray:
    points = [
        np.stack([generation.x[i, :n], generation.y[i, :n], generation.heading[i, :n]], axis=1)
        for i in np.flatnonzero(rows)
        for n in (int(generation.n_valid[i]),)
    ]
    return np.concatenate(points) if points else np.zeros((0, 3))


def _cut_into_pieces(layout, generation: _Generation, depth: int, spawn: _Spawn | None, taper: float, out) -> None:
    """Split each path where its drawn width changes (it narrows after each branch and near its end)."""
    px, py = layout.px_arrays(generation.x, generation.y)
    flat = np.stack([px, py], axis=-1).reshape(px.shape[0], -1).tolist()
    n_valid, widths = generation.n_valid.tolist(), generation.width.tolist()
    artery = generation.artery.tolist()
    if spawn is not None:
        index, ok = spawn.index.tolist(), spawn.ok.tolist()
    radius = layout.radius
    for i, nv in enumerate(n_valid):
        if nv < 2:
            continue
        cuts = [c for c, keep in zip(index[i], ok[i]) if keep] if spawn is not None else []
        bounds = [0, *cuts, nv - 1]
        segments = [(bounds[k], bounds[k + 1], widths[i] * taper**k) for k in range(len(bounds) - 1)]
        start, stop, width = segments[-1]
        if stop - start >= 10:
            # Vessels thin out towards their ends rather than stopping at full width.
            middle = (start + stop) // 2
            segments[-1:] = [(start, middle, width), (middle, stop, width * 0.72)]
        # Neighbouring segments that round to the same pixel width are drawn as one.
        merged = [segments[0]]
        for start, stop, width in segments[1:]:
            if round(width * radius) == round(merged[-1][2] * radius):
                merged[-1] = (merged[-1][0], stop, merged[-1][2])
            else:
                merged.append((start, stop, width))
        row, is_artery = flat[i], artery[i]
        for start, stop, width in merged:
            while stop > start:
                end = min(stop, start + _MAX_PIECE_STEPS)
                mid = start + end - (start + end) % 2  # flat index of the middle point's x
                out.append(_VesselPiece(is_artery, depth, width, row[2 * start: 2 * end + 2], row[mid], row[mid + 1]))
                start = end


def _plan_vessel_findings(spec: FundusSpec, layout: _Layout, tree: _VesselTree, findings: _Findings,
                          streams: _Streams) -> None:
    """Flame haemorrhages and soft exudates along the vein behind an occlusion."""
    if findings.occluded_root is None or len(tree.occluded_path) == 0:
        return
    rng = streams.stream(_EXTRAS, KNOWN_EXTRAS.index("occlusion"), 1)
    path = tree.occluded_path
    # Beyond the disc margin only: a branch occlusion bleeds downstream of the crossing.
    far = layout.off_disc(path[:, 0], path[:, 1], 2.0)
    path = path[far] if far.any() else path
    n = int(rng.integers(30, 71))
    picks = path[rng.integers(0, len(path), n)]
    spots = picks[:, :2] + rng.normal(0, 0.03, size=(n, 2))
    turns = rng.normal(0, 0.25, n)
    inside = layout.inside(spots[:, 0], spots[:, 1], margin=0.06).tolist()
    for (x, y), heading, turn, ok in zip(spots.tolist(), picks[:, 2].tolist(), turns.tolist(), inside):
        if ok:
            _add_flame(rng, x, y, heading + turn, findings)  # flames lie along the nerve fibres, i.e. the vein
    for x, y, _ in picks[: int(rng.integers(2, 6))].tolist():
        cx, cy = x + rng.normal(0, 0.05), y + rng.normal(0, 0.05)
        if layout.inside(np.array(cx), np.array(cy), margin=0.08):
            _add_cotton_wool(rng, cx, cy, findings)


# ---------------------------------------------------------------------------------------------------------
# Smooth low-resolution layer: pigment, macula, choroid, cotton-wool spots, camera and capture shading
# ---------------------------------------------------------------------------------------------------------

# Longest side of the smooth layer, which holds no detail finer than a few pixels: small images need less.
_SMOOTH_SIDE_SMALL, _SMOOTH_SIDE_LARGE, _SMALL_IMAGE = 128, 192, 512


def _channels(colour) -> np.ndarray:
    """An RGB triple shaped to broadcast over channel-first (3, h, w) arrays."""
    return np.asarray(colour, np.float32)[:, None, None]


@functools.lru_cache(maxsize=32)
def _interpolation(n_out: int, n_in: int) -> np.ndarray:
    """(n_out, n_in) weights that resample n_in knots to n_out points with eased linear interpolation."""
    position = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
    left = np.minimum(position.astype(int), n_in - 2)
    t = position - left
    t = t * t * (3 - 2 * t)  # easing hides the creases plain linear interpolation leaves at the knots
    weights = np.zeros((n_out, n_in), np.float32)
    weights[np.arange(n_out), left] = 1 - t
    weights[np.arange(n_out), left + 1] += t
    return weights


class _SmoothField:
    """Albedo, shading gain and additive haze on a small grid, plus the colour transform they define.

    The final colour of a surface with albedo ``a`` is ``1 - (1 - a * gain * tint) * (1 - haze)``: the
    camera and the illumination scale it, glare and crescents brighten it like a screen blend. Arrays are
    channel-first because numpy broadcasts a 2-D field over a leading channel axis far faster than over a
    trailing one.
    """

    def __init__(self, spec: FundusSpec, layout: _Layout, streams: _Streams, findings: _Findings) -> None:
        self.layout = layout
        w, h = layout.width, layout.height
        side = _SMOOTH_SIDE_SMALL if max(w, h) <= _SMALL_IMAGE else _SMOOTH_SIDE_LARGE
        scale = min(1.0, side / max(w, h))
        self.low_w, self.low_h = max(8, round(w * scale)), max(8, round(h * scale))
        self.to_low_x, self.to_low_y = self.low_w / w, self.low_h / h
        self.low_radius = layout.radius * self.to_low_x
        xs = ((np.arange(self.low_w, dtype=np.float32) + 0.5) / self.to_low_x - w / 2) / layout.radius
        ys = ((np.arange(self.low_h, dtype=np.float32) + 0.5) / self.to_low_y - h / 2) / layout.radius
        self.x, self.y = xs[None, :], ys[:, None]  # image-frame FOV radii, broadcastable to (h, w)
        self.xc = self.x * np.float32(layout.mirror)  # canonical x
        self.rho = np.sqrt(self.x * self.x + self.y * self.y)
        self.albedo = self._albedo(spec, streams, findings)
        self.gain, self.haze = self._capture(spec, streams.quality)
        self.tint = np.asarray(spec.camera.tint, np.float32)

    # -- albedo -------------------------------------------------------------------------------------------

    def _albedo(self, spec: FundusSpec, streams: _Streams, findings: _Findings) -> np.ndarray:
        layout, rng = self.layout, streams.anatomy
        u = rng.random(4)
        # Fundus pigmentation varies a lot between people: from pale orange to deep brown-red.
        base = np.array([_lerp(0.88, 0.99, u[0]), _lerp(0.38, 0.50, u[1]), _lerp(0.17, 0.27, u[2])], np.float32)
        base *= np.float32(_lerp(0.86, 1.0, u[3]))
        mottle = 1.0 + self._smooth_noise(rng, (6, 8)) * np.float32(0.035)
        albedo = _channels(base) * mottle
        if findings.pallor:
            albedo += (_channels((1.0, 0.62, 0.42)) - albedo) * np.float32(findings.pallor)
        if findings.tessellation:
            self._tessellate(albedo, findings.tessellation, streams.extra("tessellated"))

        # The peripapillary retina is brighter; the disc itself is drawn sharply on top.
        dx = (self.xc - layout.disc[0]) / np.float32(layout.disc_rx * 1.25)
        dy = (self.y - layout.disc[1]) / np.float32(layout.disc_ry * 1.25)
        glow = _bump(dx * dx + dy * dy, math.sqrt(0.5)) * np.float32(0.2)
        albedo += (_channels(_DISC_RIM) - albedo) * glow

        # Macula: a darker, browner area centred on the fovea, darkest in the foveal pit.
        d2 = (self.xc - layout.fovea[0]) ** 2 + (self.y - layout.fovea[1]) ** 2
        macula, pit = _bump(d2, 0.13), _bump(d2, 0.04)
        albedo *= 1.0 - _channels((0.22, 0.36, 0.30)) * macula - _channels((0.10, 0.14, 0.10)) * pit

        if findings.cotton_wool:
            self._blend_cotton_wool(albedo, findings.cotton_wool, spec.lesion_contrast)
        return np.clip(albedo, 0.0, 1.0, out=albedo)

    def _smooth_noise(self, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        """Zero-mean, unit-scale random field varying over a fraction of the image."""
        coarse = rng.standard_normal(shape).astype(np.float32)
        return _interpolation(self.low_h, shape[0]) @ coarse @ _interpolation(self.low_w, shape[1]).T

    def _tessellate(self, albedo: np.ndarray, strength: float, rng: np.random.Generator) -> None:
        """Choroidal vessels showing through a thin pigment layer: meandering stripes radiating outwards."""
        fx, fy = self.layout.fovea
        dx, dy = self.xc - fx, self.y - fy
        angle = np.arctan2(dy, dx)
        radius = np.sqrt(dx * dx + dy * dy)
        warp = self._smooth_noise(rng, (7, 9)) * np.float32(5.0)
        breaks = self._smooth_noise(rng, (12, 16))
        stripes = np.cos(angle * np.float32(rng.integers(30, 44)) + warp + radius * np.float32(9.0))
        gaps = _smoothstep(0.35, 0.95, stripes) * _smoothstep(-0.8, 0.6, breaks) * _smoothstep(0.1, 0.55, radius)
        albedo *= 1.0 - np.float32(strength) * gaps * _channels((0.55, 0.72, 0.6))

    def _blend_cotton_wool(self, albedo: np.ndarray, spots, contrast: float) -> None:
        mask = Image.new("L", (self.low_w, self.low_h), 0)
        draw = ImageDraw.Draw(mask)
        for x, y, rx, ry, angle, alpha in spots:
            px, py = self.layout.px(x, y)
            outline = _ellipse_outline(px * self.to_low_x, py * self.to_low_y, rx * self.low_radius,
                                       ry * self.low_radius, angle, self.layout.mirror)
            draw.polygon(outline, fill=_alpha_byte(alpha * contrast))
        # Cotton-wool spots have feathery edges.
        mask = mask.filter(ImageFilter.GaussianBlur(max(0.6, 0.012 * self.low_radius)))
        weight = np.asarray(mask, np.float32) * np.float32(1 / 255)
        albedo += (_channels(_COTTON_WOOL) - albedo) * weight

    # -- camera and capture -------------------------------------------------------------------------------

    def _capture(self, spec: FundusSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        """Gain (h, w) from vignetting, exposure, illumination and dust; haze (3, h, w) or None."""
        # Fixed-size draws keep the same seed's camera look whatever the quality settings are.
        u = rng.random(12)
        dust = rng.random((10, 4))
        streaks = rng.random((3, 5))
        rho = self.rho

        falloff = 1.0 - np.float32(0.16) * rho * rho
        vignette = 1.0 - np.float32(spec.camera.vignetting * 0.85) * _smoothstep(0.3, 1.0, rho) ** 1.4
        # Fade to black over the last low-resolution pixel so the rim is soft like a real aperture.
        aperture = np.clip((1.0 - rho) * np.float32(self.low_radius) + np.float32(0.5), 0.0, 1.0)
        gain = falloff * vignette * aperture * np.float32(0.92 * _lerp(0.94, 1.05, u[0]))
        haze = None

        if spec.illumination:
            direction = u[1] * 2 * math.pi
            along = self.x * np.float32(math.cos(direction)) + self.y * np.float32(math.sin(direction))
            gain *= 1.0 - np.float32(spec.illumination * 0.8) * _smoothstep(-0.3, 0.9, along)
            # The bright crescent sits on the rim opposite the dark side.
            facing = np.clip(-along / np.maximum(rho, 1e-3), 0.0, None) ** 2
            crescent = _bump((rho - 0.92) ** 2, 0.08 / math.sqrt(2)) * facing * np.float32(spec.illumination * 0.55)
            haze = _channels((1.0, 0.85, 0.6)) * crescent

        if spec.artifacts:
            gain *= self._dust_and_lashes(spec.artifacts, u, dust)
            glare = self._glare_and_streaks(spec.artifacts, u, streaks)
            haze = glare if haze is None else haze + glare

        return gain.astype(np.float32), (np.clip(haze, 0.0, 1.0) if haze is not None else None)

    def _dust_and_lashes(self, amount: float, u: np.ndarray, dust: np.ndarray) -> np.ndarray:
        shade = np.ones_like(self.rho)
        # Out-of-focus dust on the optics: soft dark discs, more of them the worse the capture.
        for k in range(int(round(amount * len(dust)))):
            angle, dist, size, depth = dust[k]
            cx = 0.85 * math.sqrt(dist) * math.cos(angle * 2 * math.pi)
            cy = 0.85 * math.sqrt(dist) * math.sin(angle * 2 * math.pi)
            r = _lerp(0.02, 0.06, size)
            d2 = (self.x - cx) ** 2 + (self.y - cy) ** 2
            shade *= 1.0 - _lerp(0.2, 0.45, depth) * min(1.0, amount * 1.5) * _bump(d2, r)
        if amount >= 0.25:
            # Eyelash shadow: a dark band with a wavy edge entering from the top or the bottom.
            side = 1.0 if u[5] < 0.5 else -1.0
            edge = side * self.y + 0.06 * np.sin(self.x * 9.0 + u[6] * 6.28)
            shade *= 1.0 - amount * 0.65 * _smoothstep(0.55, 0.95, edge)
        return shade

    def _glare_and_streaks(self, amount: float, u: np.ndarray, streaks: np.ndarray) -> np.ndarray:
        angle, dist = u[7] * 2 * math.pi, _lerp(0.55, 0.85, u[8])
        gx, gy = dist * math.cos(angle), dist * math.sin(angle)
        brightness = _bump((self.x - gx) ** 2 + (self.y - gy) ** 2, 0.13) * np.float32(amount * 0.55)
        brightness = brightness + amount * 0.1  # a milky veil lowers all contrast
        active = [s for s, threshold in zip(streaks, (0.15, 0.45, 0.75)) if amount > threshold]
        if active:
            mask = Image.new("L", (self.low_w, self.low_h), 0)
            draw = ImageDraw.Draw(mask)
            for x0, y0, x1, y1, strength in active:
                a = self.layout.px(_lerp(-0.9, 0.9, x0), _lerp(-0.9, 0.9, y0))
                b = self.layout.px(_lerp(-0.9, 0.9, x1), _lerp(-0.9, 0.9, y1))
                draw.line([a[0] * self.to_low_x, a[1] * self.to_low_y, b[0] * self.to_low_x, b[1] * self.to_low_y],
                          fill=int(255 * _lerp(0.4, 0.8, strength)), width=max(1, round(0.015 * self.low_radius)))
            mask = mask.filter(ImageFilter.GaussianBlur(max(0.7, 0.01 * self.low_radius)))
            brightness = brightness + np.asarray(mask, np.float32) * np.float32(amount * 0.5 / 255)
        return _channels((0.95, 0.95, 1.0)) * brightness.astype(np.float32)

    # -- output -------------------------------------------------------------------------------------------

    def to_image(self) -> Image.Image:
        colour = self.albedo * self.gain * _channels(self.tint)
        np.clip(colour, 0.0, 1.0, out=colour)
        if self.haze is not None:
            colour = 1.0 - (1.0 - colour) * (1.0 - self.haze)
        planes = (colour * np.float32(255.0) + np.float32(0.5)).astype(np.uint8)
        low = Image.merge("RGB", [Image.fromarray(plane, "L") for plane in planes])
        size = (self.layout.width, self.layout.height)
        return low if low.size == size else low.resize(size, Image.BILINEAR)

    def _cells(self, px, py) -> tuple[np.ndarray, np.ndarray]:
        ix = np.clip((np.asarray(px) * self.to_low_x).astype(int), 0, self.low_w - 1)
        iy = np.clip((np.asarray(py) * self.to_low_y).astype(int), 0, self.low_h - 1)
        return iy, ix

    def local_albedo(self, px, py) -> np.ndarray:
        """Albedo (n, 3) of the retina under the given pixel positions."""
        iy, ix = self._cells(px, py)
        return self.albedo[:, iy, ix].T

    def finish(self, albedo, px, py) -> np.ndarray:
        """Final 0..255 colours (n, 3) of surfaces with the given albedo (n, 3) at the given pixel positions."""
        iy, ix = self._cells(px, py)
        colour = np.clip(np.asarray(albedo, np.float32) * (self.gain[iy, ix][:, None] * self.tint), 0.0, 1.0)
        if self.haze is not None:
            colour = 1.0 - (1.0 - colour) * (1.0 - self.haze[:, iy, ix].T)
        return np.rint(colour * 255.0).astype(int)


# ---------------------------------------------------------------------------------------------------------
# Full-resolution drawing
# ---------------------------------------------------------------------------------------------------------


def _ellipse_outline(cx: float, cy: float, rx: float, ry: float, angle: float, mirror: float,
                     wobble: tuple[float, ...] = (), vertices: int = 12) -> list[tuple[float, float]]:
    """Pixel outline of an ellipse turned by ``angle`` (canonical frame), optionally with uneven radii."""
    if wobble:
        vertices = len(wobble)
    ca, sa = math.cos(angle), math.sin(angle)
    outline = []
    for k in range(vertices):
        t = 2 * math.pi * k / vertices
        scale = wobble[k] if wobble else 1.0
        ex, ey = rx * scale * math.cos(t), ry * scale * math.sin(t)
        outline.append((cx + mirror * (ex * ca - ey * sa), cy + ex * sa + ey * ca))
    return outline


def _draw_marks(draw: ImageDraw.ImageDraw, marks: list[_Mark], layout: _Layout, field_: _SmoothField,
                contrast: float) -> None:
    """Blend the marks into the image, lesions with their alpha scaled by ``contrast``."""
    if not marks:
        return
    px, py = layout.px_arrays(np.array([m.x for m in marks]), np.array([m.y for m in marks]))
    colours = field_.finish(np.array([m.colour for m in marks]), px, py).tolist()
    radius = layout.radius
    for mark, x, y, rgb in zip(marks, px.tolist(), py.tolist(), colours):
        alpha = mark.alpha * (contrast if mark.lesion else 1.0)
        rx, ry = mark.rx * radius, mark.ry * radius
        # Below a pixel, keep the amount of colour rather than the size, so small renders stay faithful.
        if mark.shape == "path" and rx < 1.0:
            alpha *= rx
        elif mark.shape != "path" and max(rx, ry) < 0.7:
            shrink = max(rx, ry) / 0.7
            alpha *= shrink * shrink
            rx, ry = rx / shrink, ry / shrink
        if mark.soft and min(rx, ry) >= 2.0:
            _draw_shape(draw, mark, layout, x, y, rx * 1.18, ry * 1.18, (*rgb, _alpha_byte(alpha * 0.3)))
        _draw_shape(draw, mark, layout, x, y, rx, ry, (*rgb, _alpha_byte(alpha)))


def _alpha_byte(alpha: float) -> int:
    return int(round(255 * min(1.0, max(0.0, alpha))))


def _draw_shape(draw, mark: _Mark, layout: _Layout, x: float, y: float, rx: float, ry: float, fill) -> None:
    """Draw one mark centred at pixel (x, y) with pixel radii (rx, ry)."""
    if fill[3] == 0:
        return
    if mark.shape == "ellipse":
        draw.ellipse((x - rx, y - ry, x + rx, y + ry), fill=fill)
    elif mark.shape in ("rotated", "blob"):
        # A few pixels across, half the outline vertices look the same and cost half as much.
        wobble = mark.wobble if max(rx, ry) > 6 else mark.wobble[::2]
        vertices = 16 if max(rx, ry) > 6 else 8
        draw.polygon(_ellipse_outline(x, y, rx, ry, mark.angle, layout.mirror, wobble, vertices), fill=fill)
    elif mark.shape == "boat":
        # A preretinal haemorrhage settles into a flat-topped boat shape.
        draw.chord((x - rx, y - ry, x + rx, y + ry), 0, 180, fill=fill)
    elif mark.shape == "path":
        px, py = layout.px_arrays(mark.points[:, 0], mark.points[:, 1])
        draw.line(np.stack([px, py], axis=1).ravel().tolist(), fill=fill, width=max(1, round(rx)))


def _draw_optic_disc(draw: ImageDraw.ImageDraw, layout: _Layout, field_: _SmoothField, cup_ratio: float) -> None:
    """A yellow-orange disc with a soft edge and a pale cup whose height is cup_ratio of the disc height."""
    (x, y, rx, ry), (cup_x, cup_y, cup_rx, cup_ry) = _disc_and_cup(layout, cup_ratio)
    rim, inner, cup = field_.finish(np.array([_DISC_RIM, _DISC_INNER, _CUP]), np.full(3, x), np.full(3, y)).tolist()
    # Stacked translucent ellipses give the disc a soft margin and a gentle radial gradient.
    layers = [
        (x, y, rx * 1.10, ry * 1.10, rim, 0.35),
        (x, y, rx * 1.04, ry * 1.04, rim, 0.6),
        (x, y, rx, ry, rim, 1.0),
        (x, y, rx * 0.85, ry * 0.85, inner, 0.5),
        (x, y, rx * 0.7, ry * 0.7, inner, 0.5),
    ]
    if cup_ratio > 0:
        layers += [(cup_x, cup_y, cup_rx * 1.15, cup_ry * 1.12, cup, 0.45), (cup_x, cup_y, cup_rx, cup_ry, cup, 1.0)]
    for cx, cy, ex, ey, rgb, alpha in layers:
        draw.ellipse((cx - ex, cy - ey, cx + ex, cy + ey), fill=(*rgb, _alpha_byte(alpha)))
    # The foveal light reflex: a small bright point in the middle of the dark macula.
    fx, fy = layout.px(*layout.fovea)
    fr = max(0.7, 0.01 * layout.radius)
    reflex = field_.finish(np.array([_FOVEAL_REFLEX]), np.array([fx]), np.array([fy]))[0].tolist()
    draw.ellipse((fx - fr, fy - fr, fx + fr, fy + fr), fill=(*reflex, 90))


def _draw_vessels(draw: ImageDraw.ImageDraw, tree: _VesselTree, layout: _Layout, field_: _SmoothField,
                  findings: _Findings) -> None:
    """Veins under arteries; each with a soft edge, arteries with a central light reflex."""
    min_width = 0.35 / layout.radius  # narrower vessels are invisible at this image size
    pieces = [p for p in tree.pieces if p.width >= min_width]
    if not pieces:
        return
    columns = list(zip(*pieces))
    artery, depth, width_px, ax, ay = (np.array(columns[i]) for i in (0, 1, 2, 4, 5))
    width_px = width_px * layout.radius
    local = field_.local_albedo(ax, ay)
    vessel = np.where(artery[:, None], np.array(_ARTERY), np.array(_VEIN))
    # Thin vessels cover only part of a pixel and small branches are paler: both reduce contrast.
    strength = (np.minimum(1.0, width_px) * np.array([1.0, 0.9, 0.78])[depth])[:, None]
    core = field_.finish(local + (vessel - local) * strength, ax, ay).tolist()
    edge = field_.finish(local + (vessel - local) * strength * 0.3, ax, ay).tolist()
    reflex_colour = np.array([1.0, 0.62, 0.35]) if findings.copper_wire else np.array([1.0, 0.75, 0.6])
    reflex_mix = 0.6 if findings.copper_wire else 0.35
    reflex = field_.finish(vessel + (reflex_colour - vessel) * reflex_mix, ax, ay).tolist()
    widths = np.maximum(1, np.rint(width_px)).astype(int).tolist()
    edge_widths = np.rint(width_px + np.maximum(1.5, 0.3 * width_px)).astype(int).tolist()
    reflex_widths = np.maximum(1, np.rint(width_px * 0.28)).astype(int).tolist()
    has_edge = (width_px >= 3.0).tolist()
    has_reflex = (width_px >= (3.0 if findings.copper_wire else 4.0)).tolist()

    for is_artery in (False, True):
        chosen = [i for i, p in enumerate(pieces) if p.artery == is_artery]
        if is_artery and findings.av_nicking:
            # Arteries in hypertension compress the veins they cross: clear a gap around them first.
            background = field_.finish(local, ax, ay).tolist()
            near_disc = ~layout.off_disc(*_canonical(layout, ax, ay), 1.6)
            for i in chosen:
                if depth[i] <= 1 and not near_disc[i]:
                    _stroke(draw, pieces[i].points, background[i], max(2, round(width_px[i] * 2.4)))
        for i in chosen:
            if has_edge[i]:
                _stroke(draw, pieces[i].points, edge[i], edge_widths[i])
        for i in chosen:
            _stroke(draw, pieces[i].points, core[i], widths[i])
        if is_artery:
            for i in chosen:
                if has_reflex[i]:
                    draw.line(pieces[i].points, fill=(*reflex[i], 200), width=reflex_widths[i])


def _stroke(draw: ImageDraw.ImageDraw, points: list[float], rgb, width: int) -> None:
    """An opaque polyline; wide ones get a round cap so consecutive pieces join without notches."""
    draw.line(points, fill=(*rgb, 255), width=width)
    if width >= 3:
        r = width / 2
        draw.ellipse((points[0] - r, points[1] - r, points[0] + r, points[1] + r), fill=(*rgb, 255))


def _canonical(layout: _Layout, px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (px - layout.width / 2) / (layout.mirror * layout.radius), (py - layout.height / 2) / layout.radius


# ---------------------------------------------------------------------------------------------------------
# Capture: defocus, sensor noise, field-of-view mask
# ---------------------------------------------------------------------------------------------------------

_DEFOCUS_AT_FULL_BLUR = 0.02  # Gaussian radius as a fraction of the short side when blur == 1
_NOISE_TILE = 256


def _defocus(image: Image.Image, blur: float) -> Image.Image:
    """Gaussian defocus with a radius proportional to the image size."""
    w, h = image.size
    radius = blur * _DEFOCUS_AT_FULL_BLUR * min(w, h)
    if radius < 0.5:
        return image
    factor = int(radius // 2)
    if factor < 2:
        return image.filter(ImageFilter.GaussianBlur(radius))
    # Blurring a reduced copy and scaling back is a low-pass filter of the same width at a fraction of the
    # cost of a wide full-resolution blur.
    small = image.resize((max(1, round(w / factor)), max(1, round(h / factor))), Image.BOX)
    small = small.filter(ImageFilter.GaussianBlur(radius / factor))
    return small.resize((w, h), Image.BILINEAR)


@functools.lru_cache(maxsize=64)
def _gaussian_lut(std: float) -> tuple[int, ...]:
    """Maps a uniform random byte to 128 plus a Gaussian deviate (inverse CDF at the byte's bin centre)."""
    deviate = statistics.NormalDist(128.0, std)
    return tuple(min(255, max(0, round(deviate.inv_cdf((i + 0.5) / 256)))) for i in range(256))


def _add_sensor_noise(image: Image.Image, std: float, rng: np.random.Generator) -> Image.Image:
    """Additive Gaussian luminance noise.

    Raw random bytes mapped through a lookup table cost a fraction of drawing Gaussian floats. Large
    images are processed tile by tile from one noise strip cropped at random offsets: several fresh
    full-size temporaries would cost more than the noise itself.
    """
    if std <= 0:
        return image
    w, h = image.size
    tile_w, tile_h = min(w, _NOISE_TILE), min(h, _NOISE_TILE)
    single = (tile_w, tile_h) == (w, h)
    strip_w = tile_w if single else 2 * tile_w
    n = strip_w * tile_h
    raw = rng.bit_generator.random_raw((n + 7) // 8).view(np.uint8)[:n]
    plane = Image.frombuffer("L", (strip_w, tile_h), raw, "raw", "L", 0, 1).point(_gaussian_lut(float(std)))
    strip = Image.merge("RGB", (plane, plane, plane))
    if single:
        return ImageChops.add(image, strip, 1.0, -128)
    boxes = [(x, y, min(w, x + tile_w), min(h, y + tile_h)) for y in range(0, h, tile_h) for x in range(0, w, tile_w)]
    for box, shift in zip(boxes, rng.integers(0, tile_w, len(boxes)).tolist()):
        region = image.crop(box)
        noise = strip.crop((shift, 0, shift + region.width, region.height))
        image.paste(ImageChops.add(region, noise, 1.0, -128), box[:2])
    return image


def _fill_outside_fov(image: Image.Image, layout: _Layout, colour: tuple[int, int, int]) -> None:
    """Paint everything outside the circular field of view with the camera's background colour."""
    w, h = image.size
    cx, cy, r = w / 2, h / 2, layout.radius
    n = int(min(720, max(48, r / 3)))
    draw = ImageDraw.Draw(image)
    fill = tuple(int(c) for c in colour)
    # Points are clamped one pixel beyond the frame: polygon edges are painted, and where the circle is
    # cropped by the frame the edge must not paint the retina along the border.
    t = np.linspace(0.0, math.pi, n)
    arc_x = np.clip(cx + r * np.cos(t), -1, w + 1)
    for sign in (-1.0, 1.0):  # upper half, then lower half
        arc_y = np.clip(cy + sign * r * np.sin(t), -1, h + 1)
        corner_y = -1 if sign < 0 else h + 1
        outline = [w + 1, corner_y, w + 1, cy, *np.stack([arc_x, arc_y], axis=1).ravel().tolist(), -1, cy, -1,
                   corner_y]
        draw.polygon(outline, fill=fill)
