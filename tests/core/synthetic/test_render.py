"""The synthetic fundus renderer: output contract, determinism, and that every label visibly changes the image."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from focus_dagster.synthetic.render import (
    CAMERAS,
    KNOWN_EXTRAS,
    CameraSignature,
    FundusSpec,
    render_fundus,
)

GENERIC = CAMERAS["generic"]
# A camera without sensor noise, for measurements that noise would swamp.
QUIET = CameraSignature("quiet", (1.0, 1.0, 1.0), 0.95, 0.3, 0.0, (0, 0, 0))
REQUIRED_CAMERAS = (
    "canon_cr", "nikon_nf5050", "phelcom_eyer", "zeiss_visucam500", "canon_cr2",
    "kowa_vx10", "topcon_trc", "topcon_nw400", "generic",
)


def pixels(spec: FundusSpec, seed: int = 0) -> np.ndarray:
    return np.asarray(render_fundus(spec, seed), dtype=np.int32)


def spec(size=(256, 256), camera=GENERIC, **labels) -> FundusSpec:
    return FundusSpec(size[0], size[1], camera, **labels)


def dark_red_lesion_pixels(image: np.ndarray, reference: np.ndarray) -> int:
    """Pixels clearly darker than the lesion-free reference that stay red-dominant."""
    darker = reference.sum(axis=2) - image.sum(axis=2) > 30
    red = image[..., 0] > image[..., 1] + 20
    return int((darker & red).sum())


def new_yellow_pixels(image: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Mask of pixels that became clearly brighter and yellow (red and green well above blue)."""
    brighter = image.sum(axis=2) - reference.sum(axis=2) > 40
    yellow = (image[..., 0] > image[..., 2] + 50) & (image[..., 1] > image[..., 2] + 30)
    return brighter & yellow


def cup_pixels(image: np.ndarray) -> int:
    """Pale cup pixels: bright, with green almost as high as red (retina and rim are much redder)."""
    r, g = image[..., 0], image[..., 1]
    return int(((r > 120) & (g > 0.85 * r)).sum())


def laplacian_energy(image: np.ndarray) -> float:
    grey = image.sum(axis=2).astype(np.float64)
    lap = 4 * grey[1:-1, 1:-1] - grey[:-2, 1:-1] - grey[2:, 1:-1] - grey[1:-1, :-2] - grey[1:-1, 2:]
    return float(np.abs(lap).mean())


def test_output_is_rgb_of_the_requested_size():
    for width, height in [(256, 256), (300, 200), (97, 131)]:
        image = render_fundus(spec((width, height), dr_grade=2), seed=3)
        assert image.mode == "RGB"
        assert image.size == (width, height)


def test_full_size_image_renders():
    image = render_fundus(spec((4288, 2848), CAMERAS["kowa_vx10"], dr_grade=3, macular_edema=True), seed=1)
    assert image.size == (4288, 2848)
    array = np.asarray(image)
    assert tuple(array[0, 0]) == CAMERAS["kowa_vx10"].background
    assert array[1424, 2144, 0] > 100


def test_same_seed_gives_identical_bytes_and_other_seeds_differ():
    labelled = spec(dr_grade=3, macular_edema=True, extra=("drusen",), blur=0.2, artifacts=0.4, illumination=0.3)
    first = render_fundus(labelled, seed=11).tobytes()
    assert render_fundus(labelled, seed=11).tobytes() == first
    assert render_fundus(labelled, seed=12).tobytes() != first
    # Another seed also moves the anatomy, not just the noise: a noise-free grade-0 image changes too.
    assert render_fundus(spec(camera=QUIET), seed=1).tobytes() != render_fundus(spec(camera=QUIET), seed=2).tobytes()


def test_outside_the_field_of_view_is_background_and_the_centre_is_bright():
    image = pixels(spec(), seed=5)
    for corner in (image[0, 0], image[0, -1], image[-1, 0], image[-1, -1]):
        assert tuple(corner) == GENERIC.background
    centre = image[118:138, 118:138].reshape(-1, 3).mean(axis=0)
    assert centre[0] > 100
    assert centre[0] > centre[1] > centre[2]  # orange-red retina


def test_field_of_view_larger_than_the_frame_is_cropped_top_and_bottom():
    camera = CAMERAS["topcon_trc"]
    assert camera.fov > 1
    image = pixels(spec((300, 200), camera), seed=2)
    assert tuple(image[0, 0]) == camera.background
    assert image[0, 150, 0] > 40  # the circle runs off the top edge, so retina shows there


def test_higher_grades_draw_more_dark_red_lesions():
    for seed in (0, 1):
        base = pixels(spec(), seed)
        counts = [dark_red_lesion_pixels(pixels(spec(dr_grade=grade), seed), base) for grade in range(5)]
        assert counts[0] == 0
        assert 0 < counts[1] < counts[2] < counts[4]
        assert counts[1] < counts[3] < counts[4]


def test_macular_edema_adds_yellow_exudates_around_the_macula():
    base = pixels(spec(), 4)
    mask = new_yellow_pixels(pixels(spec(macular_edema=True), 4), base)
    assert mask.sum() > 40
    ys, xs = np.nonzero(mask)
    # Right eye: the macula is near the centre, the disc far to the right.
    assert abs(xs.mean() - 128) < 40 and abs(ys.mean() - 128) < 40
    assert new_yellow_pixels(pixels(spec(dr_grade=1), 4), base).sum() == 0


def test_larger_cup_disc_ratio_gives_a_larger_pale_cup():
    small = cup_pixels(pixels(spec((384, 384), cup_disc_ratio=0.2), 6))
    large = cup_pixels(pixels(spec((384, 384), cup_disc_ratio=0.8), 6))
    assert small > 0
    assert large > 3 * small


def test_lower_lesion_contrast_makes_lesions_fainter():
    base = pixels(spec(), 8)

    def lesion_signal(contrast: float) -> float:
        return float(np.abs(pixels(spec(dr_grade=3, lesion_contrast=contrast), 8) - base).mean())

    faint, full = lesion_signal(0.3), lesion_signal(1.0)
    assert 0 < faint < 0.6 * full


def test_defocus_removes_high_frequencies():
    sharp = laplacian_energy(pixels(spec(camera=QUIET, dr_grade=2), 9))
    blurred = laplacian_energy(pixels(spec(camera=QUIET, dr_grade=2, blur=1.0), 9))
    assert blurred < 0.4 * sharp


def test_uneven_illumination_darkens_one_side():
    def side_ratio(image: np.ndarray) -> float:
        brightness = image.sum(axis=2)[64:192, 64:192]
        halves = [brightness[:64].mean(), brightness[64:].mean(), brightness[:, :64].mean(), brightness[:, 64:].mean()]
        return min(halves) / max(halves)

    assert side_ratio(pixels(spec(illumination=1.0), 3)) < side_ratio(pixels(spec(), 3)) - 0.15


def test_artifacts_change_the_image():
    clean = pixels(spec(), 3)
    assert np.abs(pixels(spec(artifacts=0.8), 3) - clean).mean() > 3


def test_left_and_right_eyes_put_the_disc_on_opposite_sides():
    def cup_centre_x(eye: str) -> float:
        image = pixels(spec(eye=eye, cup_disc_ratio=0.6), 10)
        r, g = image[..., 0], image[..., 1]
        return float(np.nonzero((r > 120) & (g > 0.85 * r))[1].mean())

    assert cup_centre_x("R") > 128 + 40
    assert cup_centre_x("L") < 128 - 40


def test_small_and_large_renderings_show_the_same_picture():
    small = pixels(spec(camera=QUIET, dr_grade=3), 12)
    large = render_fundus(spec((1024, 1024), camera=QUIET, dr_grade=3), 12)
    shrunk = np.asarray(large.resize((256, 256), resample=2), dtype=np.int32)  # bilinear with antialiasing
    other_seed = pixels(spec(camera=QUIET, dr_grade=3), 13)
    same_picture = np.abs(shrunk - small).mean()
    assert same_picture < 8
    assert same_picture < 0.5 * np.abs(other_seed - small).mean()


@pytest.mark.parametrize("name", KNOWN_EXTRAS)
def test_each_extra_finding_changes_the_image(name):
    base = pixels(spec(), 14)
    changed = np.abs(pixels(spec(extra=(name,)), 14) - base).sum(axis=2) > 30
    assert changed.sum() > 60


def test_unknown_extra_and_bad_labels_raise_value_error():
    with pytest.raises(ValueError):
        render_fundus(spec(extra=("cataract_of_the_moon",)), seed=0)
    for bad in (dict(dr_grade=5), dict(eye="X"), dict(cup_disc_ratio=1.2), dict(blur=1.5), dict(lesion_contrast=-1)):
        with pytest.raises(ValueError):
            spec(**bad)


def test_camera_may_be_given_by_name():
    assert spec(camera="phelcom_eyer").camera is CAMERAS["phelcom_eyer"]
    assert spec(extra="drusen").extra == ("drusen",)


def test_every_camera_renders_and_the_smartphone_camera_looks_different():
    assert set(REQUIRED_CAMERAS) <= set(CAMERAS)
    means = {}
    for name, camera in CAMERAS.items():
        image = pixels(spec((160, 120), camera), 15)
        assert image.shape == (120, 160, 3)
        assert tuple(image[0, 0]) == camera.background
        inside = image[40:80, 60:100].reshape(-1, 3).mean(axis=0)
        means[name] = inside
    canon, phelcom = means["canon_cr"], means["phelcom_eyer"]
    assert np.abs(canon - phelcom).max() > 15
    assert phelcom[1] / phelcom[0] > canon[1] / canon[0] + 0.05  # greener
    signatures = {dataclasses.astuple(camera)[1:] for camera in CAMERAS.values()}
    assert len(signatures) == len(CAMERAS)
