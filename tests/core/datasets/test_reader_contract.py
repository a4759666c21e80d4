"""The reader contract: what every registered reader guarantees, checked on each synthetic look-alike.

Each dataset's own file tests its publisher's quirks; this one holds the promises that later steps rely
on whatever the layout, so a new reader is held to them by registering it.
"""

from __future__ import annotations

import pandas as pd
import pytest

from focus_dagster.datasets import DATASET_KEYS, DATASETS, get_reader, read_dataset
from focus_dagster.datasets.images import IMAGE_CHECKS
from focus_dagster.datasets.records import QUARANTINE_COLUMNS, SPLITS, STANDARD_COLUMNS
from focus_dagster.errors import DatasetLayoutError
from tests.support.environment import copy_tree

pytestmark = pytest.mark.parametrize("key", DATASET_KEYS)


@pytest.fixture(scope="module")
def reads(synth_all):
    """One default read of every look-alike, shared by the checks that only look at the result."""
    out, _ = synth_all
    return {key: read_dataset(key, out / key) for key in DATASET_KEYS}


def test_reader_is_registered_under_its_own_key(key):
    assert get_reader(key).key == key == DATASETS[key].key


def test_standard_columns_come_first_in_order(key, reads):
    assert list(reads[key].records.columns[: len(STANDARD_COLUMNS)]) == STANDARD_COLUMNS
    assert STANDARD_COLUMNS == ["image_id", "image_path", "patient_id", "native_split", "source_file", "source_row"]


def test_round_trip_equals_what_the_writer_says_it_wrote(key, reads, synth_all):
    manifest = synth_all[1][key]
    result = reads[key]
    assert result.rows_read == manifest.label_rows
    assert len(result.records) == manifest.expected_kept
    assert result.quarantine_counts() == manifest.expected_quarantine
    assert len(result.unlisted_images) == manifest.unlisted_images


def test_every_image_written_is_named_by_a_row_or_reported_unlisted(key, reads, synth_all):
    manifest = synth_all[1][key]
    result = reads[key]
    named = set(result.records["image_path"]) | set(result.quarantine["image_path"])
    on_disk = {rel for rel in named if (result.root / rel).is_file()}
    assert len(on_disk) + len(result.unlisted_images) == manifest.images_written


def test_every_row_read_is_kept_or_quarantined(key, reads):
    summary = reads[key].summary()
    assert summary["rows_read"] == summary["rows_kept"] + summary["rows_quarantined"] > 0
    assert sum(summary["quarantine_reasons"].values()) == summary["rows_quarantined"]
    assert summary["dataset"] == key


def test_image_ids_are_unique_text(key, reads):
    ids = reads[key].records["image_id"]
    assert ids.is_unique
    assert ids.map(lambda v: isinstance(v, str) and v != "").all()


def test_kept_images_exist_inside_the_root(key, reads):
    result = reads[key]
    root = result.root.resolve()
    for rel in result.records["image_path"]:
        assert not rel.startswith("/") and "\\" not in rel
        path = (result.root / rel).resolve()
        assert path.is_file() and path.is_relative_to(root), rel


def test_label_files_exist_and_name_the_source_of_every_row(key, reads):
    result = reads[key]
    assert result.label_files and all((result.root / rel).exists() for rel in result.label_files)
    # A folder listing may be the label file (JSIEC1000): its rows then come from folders inside it.
    folders = tuple(rel for rel in result.label_files if rel.endswith("/"))
    sources = set(result.records["source_file"]) | set(result.quarantine["source_file"])
    assert all(src in result.label_files or src.startswith(folders) for src in sources)


def test_quarantine_has_its_columns_and_a_reason_for_every_row(key, reads):
    quarantine = reads[key].quarantine
    assert list(quarantine.columns) == QUARANTINE_COLUMNS
    assert (quarantine["dataset"] == key).all()
    assert (quarantine["reason_code"].str.len() > 0).all() and (quarantine["reason"].str.len() > 0).all()


def test_native_split_is_one_of_the_splits_or_null(key, reads):
    splits = reads[key].records["native_split"].dropna()
    assert set(splits) <= set(SPLITS)


def test_source_rows_are_one_based_positions(key, reads):
    result = reads[key]
    rows = pd.concat([result.records["source_row"], result.quarantine["source_row"]])
    assert str(result.records["source_row"].dtype) == "int64" and (rows >= 1).all()


def test_reading_twice_gives_the_same_tables(key, synth_all):
    root = synth_all[0] / key
    first, second = read_dataset(key, root), read_dataset(key, root)
    pd.testing.assert_frame_equal(first.records, second.records)
    pd.testing.assert_frame_equal(first.quarantine, second.quarantine)
    assert (first.unlisted_images, first.label_files) == (second.unlisted_images, second.label_files)


def test_every_image_check_agrees_on_sound_images(key, reads, synth_all):
    root = synth_all[0] / key
    for check in IMAGE_CHECKS:
        pd.testing.assert_frame_equal(read_dataset(key, root, image_check=check).records, reads[key].records)


def test_a_truncated_image_is_quarantined_not_dropped(key, reads, synth_all, tmp_path):
    root = copy_tree(synth_all[0] / key, tmp_path / key)
    victim = reads[key].records.iloc[0]
    path = root / victim["image_path"]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    result = read_dataset(key, root)
    assert result.rows_read == reads[key].rows_read
    row = result.quarantine.set_index("image_id").loc[victim["image_id"]]
    assert row["reason_code"] == "image_unreadable" and victim["image_path"] in row["reason"]


def test_missing_root_is_a_layout_error_naming_the_dataset(key, tmp_path):
    with pytest.raises(DatasetLayoutError, match=rf"^\[{key}\] dataset root .* does not exist"):
        read_dataset(key, tmp_path / "nowhere")

