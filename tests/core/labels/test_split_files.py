"""Published split files joined as their publishers describe them (shared/datasets.md, the reference README).

The split files are written here byte by byte, in the publishers' formats: BRSET `patient_id,image_id,split`,
mBRSET `patient,file,split`, the others `dataset,image_id,split,image_path,Task_DR_Binary,Task_Referable,
Task_Glaucoma` with an absolute cluster path. The IDRiD file reproduces the reference benchmark's defect
(datasets.md: test names repeat training names, and the file lists every test image under train as well).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pandas as pd

from checks.labels import LABEL_CHECKS, outcome_result
from focus_dagster.labels.expectations import check_split_has_test
from focus_dagster.labels.splits import assign_splits
from tests.support.environment import SHARED_REFERENCE, needs_reference


def write(directory: Path, dataset: str, content: bytes) -> Path:
    (directory / f"labels_splits_{dataset}.csv").write_bytes(content)
    return directory


def frames(dataset: str, rows: list[tuple], extra: dict[str, list] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Harmonised labels and native records of (image_id, image_path, patient_id, native_split) rows."""
    records = pd.DataFrame(rows, columns=["image_id", "image_path", "patient_id", "native_split"]).assign(**(extra or {}))
    labels = records[["image_id", "image_path", "patient_id"]].assign(dataset=dataset)
    for task in ("any_dr", "referable_dr", "gon"):
        labels[task] = None
    return labels, records


def assigned(assignment, labels: pd.DataFrame) -> dict[str, str]:
    return {i: s for i, s in zip(labels["image_id"], assignment.split) if i not in assignment.unassigned}


# ------------------------------------------------------------------------------------------- BRSET, mBRSET


def test_brset_split_file_is_joined_on_patient_and_image(tmp_path):
    rows = [
        ("img00001", "fundus_photos/img00001.jpg", "1", None),
        ("img00002", "fundus_photos/img00002.jpg", "1", None),
        ("img00003", "fundus_photos/img00003.jpg", "2", None),
        ("img00004", "fundus_photos/img00004.jpg", "3", None),  # the file lists it under patient 4
        ("img00005", "fundus_photos/img00005.jpg", "3", None),  # the file omits it
    ]
    labels, records = frames("brset", rows)
    # img00006 was rejected before splitting (a non-diabetic patient): in the records, not in the labels.
    records = pd.concat([records, pd.DataFrame([("img00006", "fundus_photos/img00006.jpg", "5", None)],
                                               columns=records.columns)], ignore_index=True)
    write(tmp_path, "brset", b"\xef\xbb\xbfpatient_id,image_id,split\n"
                             b"1,img00001,test\n1,img00002,test\n2,img00003,train\n4,img00004,val\n"
                             b"5,img00006,train\n9,img09999,train\n")
    result = assign_splits("brset", labels, records, tmp_path)
    assert result.method == "published"
    assert assigned(result, labels) == {"img00001": "test", "img00002": "test", "img00003": "train"}
    assert result.unassigned_codes == {"img00004": "split:patient_disagrees",
                                       "img00005": "split:absent_from_split_file"}
    assert "under patient 4, the label file under patient 3" in result.unassigned["img00004"]
    report = result.report
    assert report["join_key"] == "(patient_id, image_id)"
    assert report["patient_disagreements"] == 1
    assert report["examples_of_patient_disagreements"] == [
        {"image_id": "img00004", "split_file_patient": "4", "label_file_patient": "3"}]
    assert report["images_absent_from_split_file"] == 1
    assert report["split_file_images_rejected_before_splitting"] == 1
    assert report["split_file_images_the_dataset_lacks"] == 1  # img09999 only: img00004 is a disagreement


def test_mbrset_split_file_is_joined_on_patient_and_file(tmp_path):
    rows = [
        ("1.1", "images/1.1.jpg", "1", None),
        ("1.3", "images/1.3.jpg", "1", None),
        ("2.1", "images/2.1.jpg", "2", None),
        ("10.3", "images/10.3.jpg", "10", None),
    ]
    labels, records = frames("mbrset", rows, {"file": ["1.1.jpg", "1.3.jpg", "2.1.jpg", "10.3.jpg"]})
    write(tmp_path, "mbrset", b"patient,file,split\r\n1,1.1.jpg,train\r\n1,1.3.jpg,test\r\n"
                              b"3,2.1.jpg,test\r\n010,10.3.jpg,val\r\n")
    result = assign_splits("mbrset", labels, records, tmp_path)
    assert assigned(result, labels) == {"1.1": "train", "1.3": "test", "10.3": "val"}  # 010 is patient 10
    assert result.unassigned_codes == {"2.1": "split:patient_disagrees"}
    assert result.report["join_key"] == "(patient, file)"
    assert result.report["patient_disagreements"] == 1
    assert result.report["split_file_images_the_dataset_lacks"] == 0


# ------------------------------------------------------------------------------------------------ IDRiD

TRAIN_DIR = "B. Disease Grading/1. Original Images/a. Training Set"
TEST_DIR = "B. Disease Grading/1. Original Images/b. Testing Set"
CLUSTER = b"/lustre/x/datasets/IDRiD/B. Disease Grading/B. Disease Grading/1. Original Images/"
IDRID_HEADER = b"dataset,image_id,split,image_path,Task_DR_Binary,Task_Referable,Task_Glaucoma\n"
# As the reference file: the training rows of the colliding names carry the *test* image's path.
IDRID_REFERENCE_DEFECT = (
    IDRID_HEADER
    + b"idrid,IDRiD_001,train," + CLUSTER + b"b. Testing Set/IDRiD_001.jpg,1,1,\n"
    + b"idrid,IDRiD_002,train," + CLUSTER + b"b. Testing Set/IDRiD_002.jpg,0,0,\n"
    + b"idrid,IDRiD_003,train," + CLUSTER + b"a. Training Set/IDRiD_003.jpg,1,0,\n"
    + b"idrid,IDRiD_001,test," + CLUSTER + b"b. Testing Set/IDRiD_001.jpg,1,1,\n"
    + b"idrid,IDRiD_002,test," + CLUSTER + b"b. Testing Set/IDRiD_002.jpg,0,0,\n"
)


def idrid_frames():
    rows = [(f"train/IDRiD_00{n}", f"{TRAIN_DIR}/IDRiD_00{n}.jpg", None, "train") for n in (1, 2, 3)]
    rows += [(f"test/IDRiD_00{n}", f"{TEST_DIR}/IDRiD_00{n}.jpg", None, "test") for n in (1, 2)]
    return frames("idrid", rows)


def test_idrid_reference_defect_takes_the_native_split_and_is_reported(tmp_path):
    labels, records = idrid_frames()
    result = assign_splits("idrid", labels, records, write(tmp_path, "idrid", IDRID_REFERENCE_DEFECT))
    assert result.unassigned == {}
    assert assigned(result, labels) == {
        "train/IDRiD_001": "train", "train/IDRiD_002": "train", "train/IDRiD_003": "train",
        "test/IDRiD_001": "test", "test/IDRiD_002": "test",
    }
    report = result.report
    assert report["images_with_conflicting_splits"] == 2
    assert report["conflicts_given_the_native_split"] == 2
    assert report["images_displaced_by_a_namesake"] == 2
    assert report["images_absent_from_split_file"] == 0
    assert report["examples_of_conflicts"][0] == {
        "image_id": "test/IDRiD_001", "split_file": ["test", "train"], "native": "test"}
    assert check_split_has_test(labels.assign(split=result.split)).success


def test_a_conflict_without_a_native_split_is_still_rejected(tmp_path):
    """G1020 has no native split: an image the file puts in two splits stays unassigned, with its reason."""
    rows = [("image_0", "G1020/Images/image_0.jpg", None, None), ("image_1", "G1020/Images/image_1.jpg", None, None)]
    labels, records = frames("g1020", rows)
    path = b"/lustre/x/datasets/G1020/G1020/Images/"
    write(tmp_path, "g1020", b"dataset,image_id,split,image_path,Task_DR_Binary,Task_Referable,Task_Glaucoma\n"
                             b"g1020,image_0,train," + path + b"image_0.jpg,,,0\n"
                             b"g1020,image_1,train," + path + b"image_1.jpg,,,1\n"
                             b"g1020,image_1,test," + path + b"image_1.jpg,,,1\n")
    result = assign_splits("g1020", labels, records, tmp_path)
    assert assigned(result, labels) == {"image_0": "train"}
    assert result.unassigned_codes == {"image_1": "split:conflicting"}
    assert result.report["conflicts_given_the_native_split"] == 0
    # What is left has no test side: the blocking check says so.
    outcome = check_split_has_test(labels.assign(split=result.split)[lambda f: f["image_id"] == "image_0"])
    assert not outcome.success and outcome.info["images_per_split"] == {"train": 1, "val": 0, "test": 0}


# ------------------------------------------------------------------------------------------ split_has_test


def test_split_has_test_is_blocking_and_fails_without_test_images():
    labels = pd.DataFrame({"image_id": ["a", "b", "c"], "split": ["train", "train", "val"]})
    outcome = check_split_has_test(labels)
    assert (outcome.success, outcome.unexpected_count, outcome.checked_count) == (False, 1, 1)
    assert outcome.examples == [{"split": "test", "images": 0,
                                 "images_per_split": {"train": 2, "val": 1, "test": 0}}]
    [check] = [c for c in LABEL_CHECKS if c.name == "split_has_test"]
    assert check.blocking
    result = outcome_result(outcome, check.blocking, check_name=check.name)
    assert result.passed is False and result.severity == dg.AssetCheckSeverity.ERROR
    passing = check_split_has_test(labels.assign(split=["train", "test", "val"]))
    assert passing.success and passing.info["images_per_split"] == {"train": 1, "val": 1, "test": 1}


# --------------------------------------------------------------------------------------------- Messidor-2

MESSIDOR_SPLITS = SHARED_REFERENCE / "published_splits" / "labels_splits_messidor_2.csv"


@needs_reference(MESSIDOR_SPLITS)
def test_messidor_2_published_names_hold_no_exam_key():
    """Why the seeded Messidor-2 split stays per image (the reader sets no patient_id).

    Messidor-2 is 874 two-eye exams: 529 from Messidor-1 (names `<yyyymmdd>_<nnnnn>_<service>_PP`) and 345
    from Brest (`IM<nnnnnn>`), 1,744 of them gradable. The published files name no exam: the label file
    has `id_code`, grade, DME and gradability only, and the split file's names show that
    - no Messidor-1 prefix is shared by the two eyes of an exam and no one else: the only shared prefix is
      the acquisition date, 24 dates with 7 to 118 images each (a lump of dozens of exams, not an exam),
      and the middle number recurs on different dates, so it identifies no exam either;
    - consecutive IM numbers pair most Brest exams but not all: 23 IM images have no consecutive
      neighbour, where exam-wise numbering would leave only the 3 partners of the ungradable images.
    """
    names = pd.read_csv(MESSIDOR_SPLITS, dtype=str, keep_default_na=False)["image_id"]
    assert len(names) == 1744 and names.is_unique
    brest = names[names.str.startswith("IM")]
    messidor_1 = names[~names.str.startswith("IM")]
    assert messidor_1.str.fullmatch(r"\d{8}_\d{5}_0[124]00_PP").all()
    parts = messidor_1.str.split("_", expand=True)
    per_date = parts[0].value_counts()
    assert (len(per_date), per_date.min(), per_date.max()) == (24, 7, 118)
    repeated = parts[1][parts[1].duplicated(keep=False)]
    assert repeated.size > 0 and parts[parts[1].isin(repeated)].groupby(1)[0].nunique().min() == 2
    numbers = brest.str[2:].astype(int).sort_values()
    runs = (numbers.diff() != 1).cumsum().value_counts().value_counts().to_dict()
    assert runs == {2: 332, 1: 23}
