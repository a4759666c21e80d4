"""Messidor-2 reader: both label-file schemas, the doubled image folder, ungradable rows, bad input."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd
import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.errors import DatasetLayoutError
from focus_dagster.synthetic import messidor_2 as writer
from tests.support.environment import SHARED_REFERENCE, copy_tree, needs_reference

LABELS = "messidor_data.csv"
IMAGES = "messidor-2/preprocess"
REFERENCE_SPLIT = SHARED_REFERENCE / "published_splits" / "labels_splits_messidor_2.csv"


@pytest.fixture
def messidor(synth_all, tmp_path):
    out, manifests = synth_all
    return copy_tree(out / "messidor_2", tmp_path / "messidor_2"), manifests["messidor_2"]


def labels(root) -> pd.DataFrame:
    return pd.read_csv(root / LABELS, dtype=str, keep_default_na=False)


def save(root, frame: pd.DataFrame) -> None:
    frame.to_csv(root / LABELS, index=False)


def test_image_id_is_the_file_stem_and_no_patient_or_split(messidor):
    root, _ = messidor
    records = read_dataset("messidor_2", root).records
    assert records["patient_id"].isna().all() and records["native_split"].isna().all()
    # The id is the file stem; the path keeps the exact name, extension case included.
    assert (records["image_path"] == IMAGES + "/" + records["id_code"]).all()
    assert (records["image_id"] + records["id_code"].str[-4:] == records["id_code"]).all()


def test_both_parts_of_the_set_are_named_as_published(messidor):
    root, _ = messidor
    names = read_dataset("messidor_2", root).records["id_code"]
    assert names.str.fullmatch(r"\d{8}_\d{5}_0[124]00_PP\.png|IM\d{6}\.JPG").all()
    assert names.str.endswith(".png").any() and names.str.endswith(".JPG").any()


def test_ungradable_rows_are_kept_with_null_grades(messidor):
    root, _ = messidor
    raw = labels(root)
    ungradable = raw["adjudicated_gradable"] == "0"
    assert ungradable.sum() >= 1 and (raw.loc[ungradable, "diagnosis"] == "").all()
    records = read_dataset("messidor_2", root).records.set_index("id_code")
    kept = records.loc[raw.loc[ungradable, "id_code"]]
    assert kept["diagnosis"].isna().all() and kept["adjudicated_dme"].isna().all()
    assert str(records["diagnosis"].dtype) == "Int64"
    assert records["diagnosis"].notna().sum() == (~ungradable).sum()


def test_original_grade_file_schema_is_read_with_its_own_columns(messidor):
    root, manifest = messidor
    before = read_dataset("messidor_2", root).records
    raw = labels(root).rename(columns={"id_code": "image_id", "diagnosis": "adjudicated_dr_grade"})
    save(root, raw)
    after = read_dataset("messidor_2", root).records
    assert len(after) == manifest.expected_kept
    assert "adjudicated_dr_grade" in after and "diagnosis" not in after and "id_code" not in after
    assert after["image_id"].tolist() == before["image_id"].tolist()
    assert after["image_path"].tolist() == before["image_path"].tolist()
    assert after["adjudicated_dr_grade"].equals(before["diagnosis"].rename("adjudicated_dr_grade"))


def test_doubled_image_folder_and_nested_root_are_tolerated(messidor):
    root, manifest = messidor
    (root / "messidor-2" / "preprocess").rename(root / "tmp-preprocess")
    (root / "messidor-2" / "messidor-2").mkdir()
    (root / "tmp-preprocess").rename(root / "messidor-2" / "messidor-2" / "preprocess")
    records = read_dataset("messidor_2", root).records
    assert len(records) == manifest.expected_kept
    assert records["image_path"].str.startswith("messidor-2/messidor-2/preprocess/").all()

    nested = root / root.name
    nested.mkdir()
    for entry in ["messidor-2", LABELS]:
        shutil.move(root / entry, nested / entry)
    records = read_dataset("messidor_2", root).records
    assert len(records) == manifest.expected_kept
    assert records["image_path"].str.startswith(f"{root.name}/messidor-2/messidor-2/preprocess/").all()


def test_file_names_without_extension_find_their_image(messidor):
    root, manifest = messidor
    raw = labels(root)
    raw["id_code"] = raw["id_code"].str.rsplit(".", n=1).str[0]
    save(root, raw)
    records = read_dataset("messidor_2", root).records
    assert len(records) == manifest.expected_kept
    assert records["image_path"].str.endswith(".JPG").any() and records["image_path"].str.endswith(".png").any()


def test_path_escaping_names_are_quarantined_even_when_the_target_exists(messidor):
    root, manifest = messidor
    raw = labels(root)
    first = raw.loc[0, "id_code"]
    # A file the escaping name would reach inside the root: still refused.
    shutil.copy(root / IMAGES / first, root / "messidor-2" / "x.png")
    raw.loc[0, "id_code"] = "../x.png"
    raw.loc[1, "id_code"] = "../../../../etc/y.png"
    raw.loc[2, "id_code"] = ""
    save(root, raw)
    result = read_dataset("messidor_2", root)
    codes = result.quarantine.set_index("source_row")["reason_code"].to_dict()
    assert codes == {1: "path_escapes_root", 2: "path_escapes_root", 3: "missing_file_name"}
    assert "../x.png" in result.quarantine.loc[0, "reason"]
    assert result.rows_read == manifest.label_rows


def test_unknown_code_values_are_quarantined(messidor):
    root, manifest = messidor
    raw = labels(root)
    raw.loc[0, "diagnosis"] = "5"
    raw.loc[1, "adjudicated_gradable"] = "yes"
    raw.loc[2, "adjudicated_dme"] = "2"
    save(root, raw)
    result = read_dataset("messidor_2", root)
    codes = result.quarantine.set_index("source_row")["reason_code"].to_dict()
    assert codes == {
        1: "unknown_code:diagnosis", 2: "unknown_code:adjudicated_gradable", 3: "unknown_code:adjudicated_dme"
    }
    assert len(result.records) == manifest.label_rows - 3


def test_missing_column_names_schema_expected_and_found(messidor):
    root, _ = messidor
    save(root, labels(root).drop(columns=["adjudicated_gradable"]))
    with pytest.raises(DatasetLayoutError) as err:
        read_dataset("messidor_2", root)
    assert "['adjudicated_gradable']" in str(err.value) and "diagnosis" in str(err.value)
    save(root, labels(root).rename(columns={"id_code": "file"}))
    with pytest.raises(DatasetLayoutError, match=r"id_code.*\n.*found: .*'file'"):
        read_dataset("messidor_2", root)


def test_missing_label_file_or_image_folder_names_what_was_looked_for(messidor):
    root, _ = messidor
    shutil.rmtree(root / "messidor-2")
    with pytest.raises(DatasetLayoutError, match=r"messidor-2/preprocess.*messidor-2/messidor-2/preprocess"):
        read_dataset("messidor_2", root)
    (root / LABELS).unlink()
    with pytest.raises(DatasetLayoutError, match="messidor_data.csv"):
        read_dataset("messidor_2", root)


def test_writer_is_deterministic_and_keeps_real_proportions(tmp_path):
    a = writer.plan(tmp_path / "a", 400, np.random.default_rng(1), 0.05)
    b = writer.plan(tmp_path / "b", 400, np.random.default_rng(1), 0.05)
    assert a.jobs == b.jobs
    assert (tmp_path / "a" / LABELS).read_bytes() == (tmp_path / "b" / LABELS).read_bytes()
    raw = labels(tmp_path / "a")
    grades = raw.loc[raw["adjudicated_gradable"] == "1", "diagnosis"].astype(int)
    assert grades.value_counts().sort_index().tolist() == writer.allocate(writer.ICDR_COUNTS, len(grades)).tolist()
    assert raw["id_code"].str.endswith(".png").mean() == pytest.approx(writer.MESSIDOR_1_SHARE, abs=0.01)


@needs_reference(REFERENCE_SPLIT)
def test_image_ids_match_the_published_split_file(tmp_path):
    """Laid out as on the benchmark authors' disk (doubled folder), the reader gives their image ids."""
    split = pd.read_csv(REFERENCE_SPLIT, dtype=str, keep_default_na=False)
    tails = split["image_path"].str.split("/Messidor-2/", n=1).str[1]
    assert tails.str.startswith("messidor-2/messidor-2/preprocess/").all()
    root = tmp_path / "Messidor-2"
    (root / "messidor-2" / "messidor-2" / "preprocess").mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (4, 4)).save(tmp_path / "tiny.png")
    for tail in tails:
        os.link(tmp_path / "tiny.png", root / tail)
    names = tails.str.rsplit("/", n=1).str[1]
    pd.DataFrame({"id_code": names, "diagnosis": "0", "adjudicated_dme": "0", "adjudicated_gradable": "1"}).to_csv(
        root / LABELS, index=False
    )
    records = read_dataset("messidor_2", root, image_check="none").records
    assert records["image_id"].tolist() == split["image_id"].tolist()
    assert records["image_path"].tolist() == tails.tolist()
    # Facts of datasets.md the split file confirms: 1,057 + 687 gradable files, 727 with any DR (ICDR >= 1).
    assert names.str.endswith(".png").sum() == 1057 and names.str.endswith(".JPG").sum() == 687
    assert (split["Task_DR_Binary"] == "1").sum() == sum(writer.ICDR_COUNTS[1:])
