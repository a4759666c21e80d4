"""The fundus degradations against references computed independently: scipy for the blurs, Pillow for brightness,
contrast and JPEG, the measured spread for noise, the gain a flat disc must show for the illumination fields; the
published severity values against a literal copy of MedMNIST-C's RetinaMNIST set; and the promises of the package:
nothing painted outside the disc, the same bytes for the same image in another process, severities that scale with
the disc and hurt more as they rise."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from PIL import Image, ImageEnhance

from focus_dagster.degradations import DEGRADATIONS, DegradationError, degradation, degrade
from focus_dagster.degradations import ops
from focus_dagster.degradations.fundus import find_disc
from focus_dagster.synthetic.render import CAMERAS, FundusSpec, render_fundus

# MedMNIST-C's corruption registry, 'retinamnist' entry (github.com/francescodisalvo05/medmnistc-api,
# medmnistc/corruptions/registry.py), severities 1-5 as published.
RETINAMNIST = {
    "defocus_blur": [(4, 0.1), (5, 0.2), (6, 0.3), (7, 0.4), (8, 0.5)],
    "underexposure": [0.9, 0.8, 0.7, 0.6, 0.5],  # brightness_down
    "contrast_loss": [0.9, 0.8, 0.7, 0.6, 0.4],  # contrast_down
    "jpeg_compression": [30, 25, 20, 10, 5],
    "sensor_noise": [0.04, 0.08, 0.12, 0.16, 0.20],  # gaussian_noise
}


def flat_disc(size: int = 256, level=(150, 110, 70), radius: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A uniform disc on black, and its mask."""
    radius = radius or size * 0.45
    ys, xs = np.ogrid[:size, :size]
    inside = (xs + 0.5 - size / 2) ** 2 + (ys + 0.5 - size / 2) ** 2 <= radius**2
    image = np.zeros((size, size, 3), np.uint8)
    image[inside] = level
    return image, inside


@pytest.fixture(scope="module")
def fundus() -> np.ndarray:
    """A rendered look-alike photograph with vessels, disc and lesions (ICDR 3), 320 px."""
    spec = FundusSpec(width=320, height=320, camera=CAMERAS["canon_cr"], dr_grade=3)
    return np.asarray(render_fundus(spec, seed=7).convert("RGB"))


def as_tensor(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(image.copy()).permute(2, 0, 1).float() / 255


def as_uint8(image: torch.Tensor) -> np.ndarray:
    return (image.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()


def test_published_severities_are_medmnist_cs_retina_set():
    for name, values in RETINAMNIST.items():
        assert [degradation(name).value(s) for s in range(1, 6)] == values, name
        assert "MedMNIST-C" in degradation(name).values_source


def test_every_degradation_has_five_severities_and_an_operation(fundus):
    for name, spec in DEGRADATIONS.items():
        assert len(spec.values) == 5, name
        assert degrade(fundus, name, 3, "any").shape == fundus.shape
        described = spec.describe(3)
        assert described["registry"] and described["severity"] == 3 and described["degradation"] == name


def test_unknown_names_and_severities_are_refused_with_what_exists(fundus):
    with pytest.raises(DegradationError, match=r"unknown degradation 'fog'.*defocus_blur"):
        degrade(fundus, "fog", 1, "k")
    with pytest.raises(DegradationError, match=r"severity 6 is not one of \(1, 2, 3, 4, 5\)"):
        degrade(fundus, "haze", 6, "k")
    with pytest.raises(DegradationError, match="H x W x 3 uint8"):
        degrade(fundus.astype(np.float32), "haze", 1, "k")


def test_defocus_equals_scipys_convolution_with_an_independently_built_disk(fundus):
    radius, sigma = 6.5, 1.5
    grid = np.arange(-12, 13)
    disk = (grid[None, :] ** 2 + grid[:, None] ** 2 <= radius**2).astype(float)
    disk = ndi.gaussian_filter(disk, sigma, mode="constant", truncate=4)
    disk /= disk.sum()
    image = fundus.astype(float) / 255
    reference = np.stack([ndi.convolve(image[..., c], disk, mode="mirror") for c in range(3)], axis=-1)
    ours = ops.defocus_blur(as_tensor(fundus).double(), radius, sigma).permute(1, 2, 0).numpy()
    assert np.abs(ours - reference).max() < 2e-3  # the two kernels' Gaussian tails differ below 0.5 grey levels


def test_haze_equals_the_core_plus_halo_computed_by_scipy(fundus):
    disc = find_disc(fundus)
    t = 0.55
    image = fundus.astype(float) / 255
    halo = np.stack([ndi.gaussian_filter(image[..., c], 0.2 * disc.radius, mode="mirror") for c in range(3)], -1)
    reference = t * image + (1 - t) * halo
    ours = ops.haze(as_tensor(fundus), t, disc).permute(1, 2, 0).numpy()
    assert np.abs(ours - reference).mean() < 2 / 255 and np.abs(ours - reference).max() < 8 / 255


@pytest.mark.parametrize("factor", [0.9, 0.5])
def test_brightness_and_contrast_are_pillows(fundus, factor):
    picture = Image.fromarray(fundus)
    for ours, enhancer in ((ops.brightness, ImageEnhance.Brightness), (ops.contrast, ImageEnhance.Contrast)):
        reference = np.asarray(enhancer(picture).enhance(factor)).astype(int)
        assert np.abs(as_uint8(ours(as_tensor(fundus), factor)).astype(int) - reference).max() <= 2


@pytest.mark.parametrize("quality", [30, 5])
def test_jpeg_is_what_pillow_writes_at_the_same_quality(fundus, quality):
    out = io.BytesIO()
    Image.fromarray(fundus).save(out, format="JPEG", quality=quality)
    reference = np.asarray(Image.open(out).convert("RGB")).astype(float)
    ours = as_uint8(ops.jpeg(as_tensor(fundus), quality)).astype(float)
    assert psnr(ours, reference) > 38 > psnr(ours, fundus.astype(float))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    error = np.mean((a - b) ** 2)
    return float("inf") if error == 0 else float(10 * np.log10(255**2 / error))  # inf: the same bytes as Pillow's


def test_sensor_noise_has_the_published_spread_per_reference_pixel():
    image, inside = flat_disc(448, level=(128, 128, 128))  # disc 403 px across: a grain of 2 px
    out = degrade(image, "sensor_noise", 3, "flat").astype(float)
    residual = (out - image)[inside]
    assert residual.std() / 255 == pytest.approx(0.12, rel=0.05)
    assert abs(residual.mean()) < 1
    assert (out[0:400:2, 0:400:2] == out[1:401:2, 1:401:2]).mean() > 0.9  # one draw per 2 x 2 block


def test_illumination_fields_leave_the_gain_their_definition_says():
    image, inside = flat_disc(300, level=(200, 200, 200))
    gain = degrade(image, "uneven_illumination", 5, "flat")[..., 0][inside] / 200
    assert gain.max() == pytest.approx(1, abs=0.01) and gain.min() == pytest.approx(1 - 0.8, abs=0.02)
    assert gain.mean() == pytest.approx(1 - 0.8 / 2, abs=0.02)  # linear across a disc: the mean is the centre's
    shadow = degrade(image, "edge_shadow", 5, "flat")[..., 0] / 200
    assert shadow[150, 150] == pytest.approx(1, abs=0.01)
    assert shadow[150, 150 + 67] == pytest.approx(1 - 0.8 * 0.5**4, abs=0.01)  # half the radius (135 px)
    assert shadow[150, 150 + 133] == pytest.approx(1 - 0.8 * (133.5 / 135) ** 4, abs=0.02)


@pytest.mark.parametrize("name", [n for n, d in DEGRADATIONS.items() if d.region == "disc"])
def test_nothing_is_painted_outside_the_disc(fundus, name):
    outside = ~find_disc(fundus).mask()
    assert np.array_equal(degrade(fundus, name, 5, "k")[outside], fundus[outside])


def test_the_control_paints_only_outside_the_disc(fundus):
    inside = find_disc(fundus).mask()
    out = degrade(fundus, "surround_noise", 5, "k")
    assert np.array_equal(out[inside], fundus[inside]) and not np.array_equal(out[~inside], fundus[~inside])


def test_the_disc_is_found_where_it_was_drawn_even_when_the_frame_crops_it():
    image, inside = flat_disc(400, radius=170)
    disc = find_disc(image)
    assert (disc.cx, disc.cy, disc.radius) == (200, 200, 170)
    cropped = image[60:340]  # top and bottom cut off: the width still spans the whole disc
    disc = find_disc(cropped)
    assert (disc.cx, disc.cy, disc.radius) == (200, 140, 170)
    assert np.array_equal(disc.mask(), inside[60:340])


def test_a_centre_crop_that_cuts_the_disc_on_every_side_keeps_its_true_radius():
    """A model's centre crop: rows and columns all hold retina, only the corners are black. The rim seen in the
    corners gives the radius drawn (170 px), where the frame's extent alone would say 130."""
    image, inside = flat_disc(400, radius=170)
    crop = image[70:330, 70:330]
    disc = find_disc(crop)
    assert (disc.cx, disc.cy, disc.radius) == (130, 130, 170)
    assert np.array_equal(disc.mask(), inside[70:330, 70:330])


def test_a_crop_inside_the_disc_is_degraded_to_its_corners():
    """Retina up to every corner, no black at all: the disc is at least the circle through the corners, so blur
    reaches every pixel; an inscribed circle would leave the corners sharp."""
    image, _ = flat_disc(400, radius=190)
    image[::8] = 40  # stripes for the blur to smear
    crop = np.ascontiguousarray(image[112:288, 112:288])  # 176 px inside a disc 380 px across
    disc = find_disc(crop)
    assert (disc.cx, disc.cy) == (88, 88) and disc.radius >= 88 * 2**0.5
    assert disc.mask().all()
    blurred = degrade(crop, "defocus_blur", 5, "k")
    corner = (slice(0, 20), slice(0, 20))
    assert not np.array_equal(blurred[corner], crop[corner])


def test_severities_scale_with_the_disc_so_a_bigger_photograph_degrades_alike():
    """The same retina at 224 and at 896 px: blurred at the same severity, the large one brought down to 224 px
    matches the small one, as the reference-pixel definition promises (a fixed radius in pixels would not)."""
    spec = FundusSpec(width=896, height=896, camera=CAMERAS["canon_cr"], dr_grade=3)
    large = np.asarray(render_fundus(spec, seed=3).convert("RGB"))
    small = np.asarray(Image.fromarray(large).resize((224, 224), Image.BOX))
    blurred_small = degrade(small, "defocus_blur", 4, "k").astype(float)
    shrunk = np.asarray(Image.fromarray(degrade(large, "defocus_blur", 4, "k")).resize((224, 224), Image.BOX))
    inside = find_disc(small).mask()
    error = np.abs(shrunk.astype(float) - blurred_small)[inside].mean()
    unscaled = np.abs(shrunk.astype(float) - small.astype(float))[inside].mean()
    assert error < 0.35 * unscaled, (error, unscaled)


@pytest.mark.parametrize("name", [n for n, d in DEGRADATIONS.items() if not d.control])
def test_each_severity_moves_the_retina_further_from_clean(fundus, name):
    inside = find_disc(fundus).mask()
    change = [np.abs(degrade(fundus, name, s, "k").astype(float) - fundus)[inside].mean() for s in range(1, 6)]
    assert all(a < b for a, b in zip(change, change[1:])), change


def test_the_same_image_and_severity_give_the_same_bytes_in_another_process(fundus, tmp_path):
    np.save(tmp_path / "fundus.npy", fundus)
    script = ("import sys, hashlib, numpy as np; from focus_dagster.degradations import degrade; "
              "image = np.load(sys.argv[1]); "
              "print(' '.join(hashlib.sha256(degrade(image, n, 4, 'img-1').tobytes()).hexdigest() "
              "for n in ('sensor_noise', 'uneven_illumination', 'defocus_blur', 'jpeg_compression')))")
    there = subprocess.run([sys.executable, "-c", script, str(tmp_path / "fundus.npy")], capture_output=True,
                           text=True, check=True).stdout.split()
    import hashlib

    here = [hashlib.sha256(degrade(fundus, n, 4, "img-1").tobytes()).hexdigest()
            for n in ("sensor_noise", "uneven_illumination", "defocus_blur", "jpeg_compression")]
    assert here == there
    assert not np.array_equal(degrade(fundus, "sensor_noise", 4, "img-1"), degrade(fundus, "sensor_noise", 4, "img-2"))
