"""Input errors that say exactly what is wrong, and image paths confined after resolving links.

Every fixture is written here byte by byte (a BRSET-shaped `labels.csv` with the published column names of
datasets.md, images written with Pillow, pickles written with torch), and every expected line number, byte,
offset and field count is worked out by hand in the comments, not taken from the code under test.
"""

from __future__ import annotations

import json
import os

import pytest

from focus_dagster.datasets import read_dataset
from focus_dagster.errors import LabelFileError, NotMaterialisedError

from tests.support.tables import table_views

# The BRSET columns the reader requires (datasets.md), in a literal header of 15 names.
HEADER = (
    "image_id,patient_id,camera,patient_age,patient_sex,exam_eye,diabetes,DR_ICDR,macular_edema,"
    "increased_cup_disc,focus,iluminaton,image_field,artifacts,quality"
)


def full_row(image_id: str, patient: str) -> str:
    return f"{image_id},{patient},Canon CR,45,1,1,no,0,0,0,1,1,1,1,Adequate"


def brset_root(tmp_path, label_bytes: bytes, images=("img01", "img02", "img03"), png_named_jpg=()):
    """A BRSET-shaped root: `labels.csv` exactly as given, and `fundus_photos/<id>.jpg` for each image."""
    from PIL import Image

    root = tmp_path / "brset"
    (root / "fundus_photos").mkdir(parents=True)
    (root / "labels.csv").write_bytes(label_bytes)
    for image_id in images:
        fmt = "PNG" if image_id in png_named_jpg else "JPEG"
        Image.new("RGB", (8, 8), (120, 40, 20)).save(root / "fundus_photos" / f"{image_id}.jpg", format=fmt)
    return root


# --------------------------------------------------------------------------- label bytes


def test_an_invalid_byte_is_named_with_its_line_true_value_and_offset_from_the_files_first_byte(tmp_path):
    # BOM (offsets 0-2) + "image_id,patient_id\n" (20 bytes: 3-22) + "img01,1\n" (8 bytes: 23-30)
    # + line 3 "img02,Jo" (31-38), then the latin-1 byte 0xE3 ("ã" of "João") at offset 39, byte 9 of line 3.
    raw = b"\xef\xbb\xbf" + b"image_id,patient_id\n" + b"img01,1\n" + b"img02,Jo\xe3o\n"
    assert raw[39] == 0xE3  # the hand count above
    root = brset_root(tmp_path, raw, images=())
    with pytest.raises(LabelFileError) as caught:
        read_dataset("brset", root)
    message = str(caught.value)
    assert "is not valid utf-8-sig: byte 0xe3 at offset 39 on line 3 (byte 9 of the line, after b'img02,Jo';" in message
    assert "BOM included" in message
    # Before the fix the decoder's offset (36, counted after the BOM) was reported with the byte found there.
    assert "offset 36" not in message and "0x2c" not in message


def test_an_invalid_byte_in_a_file_without_bom_keeps_the_decoders_offset(tmp_path):
    # "image_id,patient_id\n" (0-19), line 2 "img01,\xff" : 0xFF at offset 26, byte 7 of line 2.
    raw = b"image_id,patient_id\n" + b"img01,\xff\n"
    root = brset_root(tmp_path, raw, images=())
    with pytest.raises(LabelFileError, match=r"byte 0xff at offset 26 on line 2 \(byte 7 of the line"):
        read_dataset("brset", root)


def test_a_file_cut_in_the_middle_of_its_last_line_quarantines_that_row_as_truncated(tmp_path):
    # Line 4 stops after 7 of the 15 fields ("img03, p3, Canon CR, 61, 1, 2, ye"): the file ends there.
    text = "\n".join([HEADER, full_row("img01", "p1"), full_row("img02", "p2"), "img03,p3,Canon CR,61,1,2,ye"])
    result = read_dataset("brset", brset_root(tmp_path, b"\xef\xbb\xbf" + text.encode()))
    assert result.records["image_id"].tolist() == ["img01", "img02"]
    [row] = result.quarantine.to_dict("records")
    assert row["image_id"] == "img03" and row["source_row"] == 3
    assert row["reason_code"] == "truncated_row"  # not unknown_code:diabetes for the cut value 'ye'
    assert row["reason"] == (
        "row truncated: the file ends in the middle of line 4, after 7 of 15 fields (last read: 'diabetes' = 'ye', "
        "possibly cut short too); restore the publisher's complete file"
    )


def test_a_short_line_inside_the_file_is_reported_as_truncated_with_the_absent_columns(tmp_path):
    # Line 3 holds 4 of the 15 fields; pandas would fill the other 11 with "" and the codes would reject them.
    text = "\n".join([HEADER, full_row("img01", "p1"), "img02,p2,Canon CR,50", full_row("img03", "p3")]) + "\n"
    result = read_dataset("brset", brset_root(tmp_path, text.encode()))
    assert result.records["image_id"].tolist() == ["img01", "img03"]
    [row] = result.quarantine.to_dict("records")
    assert (row["image_id"], row["reason_code"]) == ("img02", "truncated_row")
    assert row["reason"] == (
        "row truncated: the row on line 3 has 4 of 15 fields (last read: 'patient_age' = '50'); "
        "the columns from 'patient_sex' on are absent"
    )


def test_a_trailing_header_only_comma_and_a_complete_last_line_without_newline_are_not_truncation(tmp_path):
    # The published BRSET file ends without a final newline; a trailing comma on the header adds a nameless column.
    text = "\n".join([HEADER + ",", full_row("img01", "p1"), full_row("img02", "p2")])
    result = read_dataset("brset", brset_root(tmp_path, text.encode(), images=("img01", "img02")))
    assert result.quarantine.empty and len(result.records) == 2


def test_a_file_ending_inside_a_quoted_value_is_named_truncated(tmp_path):
    text = HEADER + "\n" + full_row("img01", "p1") + '\nimg02,p2,"Canon'
    with pytest.raises(LabelFileError, match=r"ends inside a quoted value \(the row starting on line 3\)"):
        read_dataset("brset", brset_root(tmp_path, text.encode()))


# --------------------------------------------------------------------------- images


def test_a_png_named_jpg_is_kept_and_noted_in_the_read_result(tmp_path):
    text = "\n".join([HEADER, full_row("img01", "p1"), full_row("img02", "p2")]) + "\n"
    root = brset_root(tmp_path, text.encode(), images=("img01", "img02"), png_named_jpg=("img02",))
    assert (root / "fundus_photos" / "img02.jpg").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = read_dataset("brset", root)
    assert result.records["image_id"].tolist() == ["img01", "img02"] and result.quarantine.empty
    assert list(result.records.columns[:6]) == [
        "image_id", "image_path", "patient_id", "native_split", "source_file", "source_row"]
    [note] = result.image_notes.to_dict("records")
    assert note == {
        "dataset": "brset", "source_file": "labels.csv", "source_row": 2, "image_id": "img02",
        "image_path": "fundus_photos/img02.jpg", "note_code": "extension_mismatch",
        "note": "image file fundus_photos/img02.jpg: its content is PNG but its extension '.jpg' says JPEG; "
                "kept, since it decodes by its content",
    }
    assert result.summary()["image_notes"] == {"extension_mismatch": 1}
    assert result.accounting_line().endswith("; 1 kept record(s) with an image note (extension_mismatch: 1)")
    # "none" reads no image byte, so it cannot tell; "full" agrees with "header".
    assert read_dataset("brset", root, image_check="none").image_notes.empty
    assert len(read_dataset("brset", root, image_check="full").image_notes) == 1


def test_an_image_linked_to_a_file_outside_the_root_is_quarantined(tmp_path):
    from PIL import Image

    text = "\n".join([HEADER, full_row("img01", "p1"), full_row("img02", "p2"), full_row("img03", "p3")]) + "\n"
    root = brset_root(tmp_path, text.encode(), images=("img01",))
    outside = tmp_path / "elsewhere" / "secret.jpg"
    outside.parent.mkdir()
    Image.new("RGB", (8, 8)).save(outside, format="JPEG")
    os.symlink(outside, root / "fundus_photos" / "img02.jpg")  # looks inside, leads outside
    (root / "spare").mkdir()
    Image.new("RGB", (8, 8)).save(root / "spare" / "img03.jpg", format="JPEG")
    os.symlink("../spare/img03.jpg", root / "fundus_photos" / "img03.jpg")  # a link that stays inside: fine
    result = read_dataset("brset", root)
    assert result.records["image_id"].tolist() == ["img01", "img03"]
    [row] = result.quarantine.to_dict("records")
    assert (row["image_id"], row["reason_code"]) == ("img02", "path_escapes_root")
    assert row["reason"] == (
        f"image path 'fundus_photos/img02.jpg' leads through a symbolic link to {os.path.realpath(outside)}, "
        f"outside the dataset root {os.path.realpath(root)}; only files inside the root are accepted (copy the "
        "images into the root rather than linking them)"
    )


def test_an_image_folder_linked_to_another_disk_is_outside_the_root(tmp_path):
    from PIL import Image

    text = "\n".join([HEADER, full_row("img01", "p1")]) + "\n"
    real_photos = tmp_path / "other_disk" / "photos"
    real_photos.mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(real_photos / "img01.jpg", format="JPEG")
    root = tmp_path / "brset"
    root.mkdir()
    (root / "labels.csv").write_text(text)
    os.symlink(real_photos, root / "fundus_photos")
    result = read_dataset("brset", root)
    assert result.records.empty and result.quarantine["reason_code"].tolist() == ["path_escapes_root"]
    assert str(real_photos / "img01.jpg") in result.quarantine["reason"][0]


# --------------------------------------------------------------------------- storage reads after a failure


@pytest.fixture
def storage(tmp_path):
    from resources.storage import FocusStorage

    return FocusStorage(tables_url=str(tmp_path / "tables"), artifacts_dir=str(tmp_path / "a"))


def test_a_missing_labels_file_names_the_asset_partition_to_materialise(storage, tmp_path):
    missing = tmp_path / "a" / "labels" / "brset.parquet"
    expected = (
        "harmonised_labels[brset] has not been materialised (its last run failed or never ran, or a blocking check "
        f"upstream stopped it): materialise it first; file {missing} is missing."
    )
    for read in (storage.read_stamped_labels, storage.read_labels):
        with pytest.raises(NotMaterialisedError) as caught:
            read("brset")
        assert str(caught.value) == expected
        assert (caught.value.asset, caught.value.partition) == ("harmonised_labels", "brset")
        assert not isinstance(caught.value, FileNotFoundError)


def test_missing_model_outputs_and_questions_name_their_partition_as_the_ui_spells_it(storage):
    cases = {
        "embeddings/tiny_vit/brset.parquet": ("image_embeddings", "brset|tiny_vit"),
        "questions/idrid.parquet": ("yes_no_questions", "idrid"),
        "token_probabilities/tiny_mllm/papila.parquet": ("token_probabilities", "papila|tiny_mllm"),
        "probe_predictions/tiny_vit/g1020.skipped.parquet": ("probe_predictions", "g1020|tiny_vit"),
    }
    for rel, (asset, partition) in cases.items():
        with pytest.raises(NotMaterialisedError, match=rf"^{asset}\[{partition}\] has not been materialised") as caught:
            storage.read_stamped_parquet(rel)
        assert caught.value.path.endswith(rel)
    with pytest.raises(NotMaterialisedError, match=r"^the asset that writes it has not been materialised"):
        storage.read_parquet("somewhere/else.parquet")


# --------------------------------------------------------------------------- pickled weights


class MakesAFolder:
    """A pickle payload: unpickling it without the weights-only restriction would create `path`."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def pickled_hub_folder(folder, marker):
    """A hub-format ViT folder (config.json) whose only weights file is a pickle that runs code when loaded."""
    import torch

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "vit", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64, "image_size": 32, "patch_size": 8}))
    torch.save({"embeddings.cls_token": MakesAFolder(str(marker))}, folder / "pytorch_model.bin")
    return folder


def assert_platform_refusal(exc, where: str, marker):
    message = str(exc)
    assert message.startswith(f"model 'pickled_vit': torch.load(weights_only=True) refuses {where} (")
    assert "GLOBAL posix.mkdir" in message  # PyTorch's reason, which names what the pickle would have called
    assert "): it pickles more than tensors, or is no PyTorch checkpoint at all." in message
    assert "The platform never loads weights with weights_only=False, whatever PyTorch's own message" in message
    # PyTorch's own advice (retry with weights_only=False, or allowlist the global) does not reach the user.
    assert "will likely succeed" not in message and "add_safe_globals" not in message
    assert exc.__cause__ is None and exc.__suppress_context__
    assert not marker.exists()  # nothing was unpickled


def test_a_hub_folder_with_pickled_weights_is_refused_with_the_platforms_checkpoint_error(tmp_path):
    from focus_dagster.models.loaders.hub_family import load_hf_vision
    from focus_dagster.models.spec import CheckpointError, ModelSpec

    marker = tmp_path / "unpickled"
    folder = pickled_hub_folder(tmp_path / "vit", marker)
    spec = ModelSpec(id="pickled_vit", interface="vm", domain="general", family="hf_vit", source="local",
                     path=str(folder))
    with pytest.raises(CheckpointError) as caught:
        load_hf_vision(spec)
    assert_platform_refusal(caught.value, f"{folder} (pytorch_model.bin)", marker)


def test_a_pickled_checkpoint_file_is_refused_with_the_same_words(tmp_path):
    from focus_dagster.models.audit import read_weights
    from focus_dagster.models.spec import CheckpointError

    marker = tmp_path / "unpickled"
    folder = pickled_hub_folder(tmp_path / "vit", marker)
    with pytest.raises(CheckpointError) as caught:
        read_weights(folder / "pytorch_model.bin", "pickled_vit")
    assert_platform_refusal(caught.value, str(folder / "pytorch_model.bin"), marker)


def test_after_a_data_layer_failure_the_embeddings_step_names_it_and_a_pickled_folder_fails_checkpoint_audit(
    synth_all, tmp_path
):
    """In-process: a label file with a bad byte fails the data layer; the embeddings step then names
    harmonised_labels[brset]; once the data layer succeeds, the pickled hub folder fails checkpoint_audit."""
    import dagster as dg

    from assets.labels import DATA_LAYER_JOB
    from assets.models import EMBEDDINGS_JOB
    from tests.support.events import check_evaluations
    from tests.support.world import build_world

    marker = tmp_path / "unpickled"
    folder = pickled_hub_folder(tmp_path / "vit", marker)
    entry = {"id": "pickled_vit", "family": "hf_vit", "interface": "vm", "domain": "general", "source": "local",
             "path": str(folder), "preprocess": {"size": 32, "resize_to": 36}}
    config, defs, instance = build_world(synth_all, tmp_path, models=(entry,))
    labels = config.root_of("brset") / "labels.csv"
    original = labels.read_bytes()
    labels.write_bytes(original + b"\xff")
    failed = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(
        partition_key="brset", instance=instance, raise_on_error=False)
    assert not failed.success
    assert f"byte 0xff at offset {len(original)}" in str(failed.all_events)

    def embeddings():
        key = dg.MultiPartitionKey({"model": "pickled_vit", "dataset": "brset"})
        return defs.resolve_job_def(EMBEDDINGS_JOB).execute_in_process(
            partition_key=key, instance=instance, raise_on_error=False)

    first = embeddings()
    [failure] = [e for e in first.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failure.event_specific_data.error.cause  # Dagster wraps the step's own error
    assert error.cls_name == "NotMaterialisedError"
    assert error.message.startswith("focus_dagster.errors.NotMaterialisedError: harmonised_labels[brset] has not been "
                                    "materialised")

    labels.write_bytes(original)
    assert defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance).success
    second = embeddings()
    assert not second.success
    [check] = check_evaluations(second)
    assert check.check_name == "checkpoint_audit" and not check.passed
    assert "never loads weights with weights_only=False" in check.metadata["error"].value
    assert not marker.exists()


def test_the_records_step_stores_the_image_notes_beside_the_records(tmp_path):
    """In-process: `dataset_records` writes the note of the PNG named .jpg to records.image_notes."""
    import dagster as dg
    from focus_dagster.config import FocusConfig
    from tests.support.world import world_for

    text = "\n".join([HEADER, full_row("img01", "p1"), full_row("img02", "p2")]) + "\n"
    root = brset_root(tmp_path, text.encode(), images=("img01", "img02"), png_named_jpg=("img02",))
    config, defs, instance = world_for(FocusConfig(home=tmp_path / "home", roots={"brset": root}, models=("tiny_vit",)))
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={dg.AssetKey("dataset_records")})
    assert job.execute_in_process(partition_key="brset", instance=instance).success
    with table_views(config) as con:
        rows = con.execute("SELECT image_id, note_code, source_row FROM records.image_notes").fetchall()
    assert rows == [("img02", "extension_mismatch", 2)]
