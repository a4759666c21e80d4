"""Release fingerprints: stable for one release, different for any change a publisher could ship."""

from __future__ import annotations

import shutil

from focus_dagster.datasets.release import fingerprint_dataset
from tests.support.environment import copy_tree


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


def _small_release(root):
    """A literal two-image release: 3 + 5 image bytes and a 4-byte label file (12 bytes in all)."""
    (root / "fundus_photos").mkdir(parents=True)
    (root / "fundus_photos" / "a.jpg").write_bytes(b"\xff\xd8\xff")
    (root / "fundus_photos" / "b.jpg").write_bytes(b"\xff\xd8\xff\xd9\x00")
    (root / "labels.csv").write_bytes(b"a,b\n")
    return root


def _fingerprint_within(seconds, *args, **kwargs):
    """The fingerprint, or a failure when the walk is still running after `seconds` (a hang never ends the test)."""
    import threading

    box = {}

    def walk():
        try:
            box["fp"] = fingerprint_dataset(*args, **kwargs)
        except Exception as exc:  # reported below, in the test's thread
            box["error"] = exc

    worker = threading.Thread(target=walk, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"the fingerprint walk did not finish within {seconds}s"
    assert "error" not in box, f"the fingerprint walk failed: {box.get('error')!r}"
    return box["fp"]


def test_a_link_cycle_in_an_image_folder_cannot_hang_the_fingerprint(tmp_path):
    import os

    root = _small_release(tmp_path / "brset")
    plain = fingerprint_dataset("brset", root)
    os.symlink(".", root / "fundus_photos" / "again")  # the folder inside itself
    os.symlink("..", root / "fundus_photos" / "up")  # the root inside its own image folder
    looped = _fingerprint_within(10, "brset", root, content_hash=True)
    assert (looped.images, looped.label_files, looped.total_bytes) == (2, 1, 12)
    linked = _fingerprint_within(10, "brset", root)
    assert linked.version != plain.version  # the links are part of the release as it sits on disk
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, symlinks=True)
    assert _fingerprint_within(10, "brset", copy).version == linked.version  # links hashed by relative target


def test_a_folder_link_leaving_the_root_is_recorded_but_not_walked(tmp_path):
    import os

    root = _small_release(tmp_path / "brset")
    plain = fingerprint_dataset("brset", root)
    other_disk = tmp_path / "other_disk"
    other_disk.mkdir()
    (other_disk / "c.jpg").write_bytes(b"\xff\xd8\xff\xd9")
    os.symlink(other_disk, root / "fundus_photos" / "more")
    linked = fingerprint_dataset("brset", root)
    assert (linked.images, linked.total_bytes) == (2, 12)  # nothing outside the root is counted
    assert linked.version != plain.version
    (other_disk / "d.jpg").write_bytes(b"\xff\xd8\xff\xd9")
    assert fingerprint_dataset("brset", root).version == linked.version
