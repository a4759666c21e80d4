"""Release fingerprints: stable for one release, different for any change a publisher could ship."""

from __future__ import annotations

import shutil

from focus_dagster.datasets.release import fingerprint_dataset
from tests.conftest import copy_tree


def test_fingerprint_is_stable_and_location_independent(synth_all, tmp_path):
    out, _ = synth_all
    a = fingerprint_dataset("g1020", out / "g1020")
    b = fingerprint_dataset("g1020", copy_tree(out / "g1020", tmp_path / "elsewhere"))
    assert a.version == b.version and len(a.version) == 24
    assert a.images > 0 and a.label_files >= 1


def test_any_published_change_changes_the_version(synth_all, tmp_path):
    out, _ = synth_all
    root = copy_tree(out / "brset", tmp_path / "brset")
    base = fingerprint_dataset("brset", root).version
    images = sorted((root / "fundus_photos").iterdir())

    label = root / "labels.csv"
    original = label.read_bytes()
    label.write_bytes(original.replace(b"Brazil", b"Brasil", 1))
    assert fingerprint_dataset("brset", root).version != base
    label.write_bytes(original)
    assert fingerprint_dataset("brset", root).version == base

    images[0].unlink()
    assert fingerprint_dataset("brset", root).version != base


def test_same_size_image_swap_needs_content_hashing(synth_all, tmp_path):
    out, _ = synth_all
    root = copy_tree(out / "brset", tmp_path / "brset")
    image = sorted((root / "fundus_photos").iterdir())[0]
    listing_only = fingerprint_dataset("brset", root).version
    hashed = fingerprint_dataset("brset", root, content_hash=True)
    data = bytearray(image.read_bytes())
    data[len(data) // 2] ^= 0xFF
    image.write_bytes(bytes(data))
    assert fingerprint_dataset("brset", root).version == listing_only
    assert fingerprint_dataset("brset", root, content_hash=True).version != hashed.version


def test_hidden_files_do_not_count(synth_all, tmp_path):
    out, _ = synth_all
    root = copy_tree(out / "jsiec1000", tmp_path / "j")
    base = fingerprint_dataset("jsiec1000", root).version
    (root / ".DS_Store").write_text("x")
    shutil.copytree(root / "1000images", root / ".partial-copy")
    assert fingerprint_dataset("jsiec1000", root).version == base
