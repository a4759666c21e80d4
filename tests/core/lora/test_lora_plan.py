"""Which adapters focus.yaml asks for, and what each is trained on."""

import re
from pathlib import Path

import pandas as pd
import pytest

from focus_dagster.config import parse_config
from focus_dagster.errors import ConfigError
from focus_dagster.adapter_plan import AdapterKey, LoraPlan, training_set

ALL_TEN = ["brset", "mbrset", "papila", "rfmid", "rfmid_2", "idrid", "messidor_2", "refuge", "g1020", "jsiec1000"]


def test_the_default_grid_is_every_mllm_on_brset_and_mbrset_for_the_tasks_they_define():
    # datasets.md: BRSET defines any_dr, referable_dr and gon; mBRSET has no glaucoma column (gon null).
    keys = [a.key for a in LoraPlan().adapters(["tiny_llava", "medgemma_4b"], ALL_TEN)]
    assert keys == [
        "tiny_llava.brset.any_dr", "tiny_llava.brset.referable_dr", "tiny_llava.brset.gon",
        "tiny_llava.mbrset.any_dr", "tiny_llava.mbrset.referable_dr",
        "medgemma_4b.brset.any_dr", "medgemma_4b.brset.referable_dr", "medgemma_4b.brset.gon",
        "medgemma_4b.mbrset.any_dr", "medgemma_4b.mbrset.referable_dr",
    ]
    assert LoraPlan().adapters(["tiny_llava"], ["idrid", "papila"]) == []  # no training dataset registered
    assert LoraPlan(models=()).adapters(["tiny_llava"], ALL_TEN) == []  # `lora: {models: []}`: no adapters


def test_focus_yaml_chooses_models_training_datasets_tasks_and_settings(tmp_path):
    config = parse_config({"datasets": {"idrid": "synthetic", "papila": "synthetic"},
                           "lora": {"models": ["tiny_llava"], "train_datasets": ["papila", "idrid"],
                                    "tasks": ["gon", "any_dr"], "settings": {"learning_rate": 1, "epochs": 2}}},
                          tmp_path)
    assert [a.key for a in config.lora.adapters(["tiny_llava", "medgemma_4b"], config.dataset_keys)] == [
        "tiny_llava.papila.gon", "tiny_llava.idrid.any_dr"]  # PAPILA defines only gon, IDRiD no gon
    assert config.lora.settings == {"learning_rate": 1.0, "epochs": 2}
    assert parse_config(config.to_document(), tmp_path) == config


@pytest.mark.parametrize("lora, named", [
    ({"train": ["brset"]}, "lora.train: unknown key; allowed: models, train_datasets, tasks, settings"),
    ({"train_datasets": ["mbrset"]}, "lora.train_datasets ['mbrset'] are not registered"),
    ({"tasks": ["glaucoma"]}, "lora.tasks.0: must be one of 'any_dr', 'referable_dr' or 'gon' (got 'glaucoma')"),
    ({"settings": {"lr": 0.1}}, "lora.settings.lr: unknown key; allowed: r, alpha, dropout"),
    ({"settings": {"epochs": "two"}}, "lora.settings.epochs: must be a whole number (got 'two')"),
    ({"settings": {"micro_batch": 0}}, "lora.settings.micro_batch: must be >= 1 (got 0)"),
    ({"models": "tiny_llava"}, "lora.models: must be a list (got 'tiny_llava')"),
    ({"tasks": []}, "lora.tasks: must not be empty (got [])"),
])
def test_a_wrong_lora_block_names_the_key(tmp_path, lora, named):
    source = tmp_path / "focus.yaml"
    with pytest.raises(ConfigError, match=re.escape(f"{source}: {named}")):
        parse_config({"datasets": {"brset": "synthetic"}, "lora": lora}, tmp_path, source)


def test_adapter_keys_round_trip_and_refuse_what_is_not_one():
    assert AdapterKey.parse("medgemma_1_5_4b.rfmid_2.referable_dr") == AdapterKey("medgemma_1_5_4b", "rfmid_2",
                                                                                 "referable_dr")
    with pytest.raises(ValueError, match="not an adapter key"):
        AdapterKey.parse("tiny_llava.brset")


LABELS = pd.DataFrame({
    "image_id": ["img5", "img2", "img9", "img1", "img7", "img3"],
    "image_path": ["f/5.jpg", "f/2.jpg", "f/9.jpg", "f/1.jpg", "f/7.jpg", "f/3.jpg"],
    "split": ["train", "train", "test", "train", "train", "val"],
    "any_dr": [1, 0, 1, None, 1, 0],
})
ASKED = pd.DataFrame({"image_id": ["img1", "img2", "img3", "img5", "img7", "img9"], "task": "any_dr",
                      "question": [f"Q{i}?" for i in (1, 2, 3, 5, 7, 9)]})


def test_the_training_set_is_the_labelled_training_split_with_each_images_question():
    found = training_set(LABELS, ASKED, "any_dr", Path("/data/brset"))
    # train + labelled only (img1 has no label, img3 is val, img9 test), in image_id order
    assert found.rows == [("img2", Path("/data/brset/f/2.jpg"), "Q2?", "no"),
                          ("img5", Path("/data/brset/f/5.jpg"), "Q5?", "yes"),
                          ("img7", Path("/data/brset/f/7.jpg"), "Q7?", "yes")]
    assert (found.positives, found.negatives, found.one_class_reason) == (2, 1, None)


def test_one_class_gives_a_reason_and_a_missing_question_an_error():
    one_class = training_set(LABELS[LABELS["image_id"] != "img2"], ASKED, "any_dr", Path("/d"))
    assert one_class.one_class_reason == ("the training split has 2 positive and 0 negative images for this task: "
                                          "a yes/no adapter needs both answers")
    with pytest.raises(ValueError, match=r"1 training image\(s\) have no any_dr question \(e.g. \['img5'\]\)"):
        training_set(LABELS, ASKED[ASKED["image_id"] != "img5"], "any_dr", Path("/d"))


def test_focus_yaml_knows_every_training_setting():
    from dataclasses import fields

    from focus_dagster.adapter_plan import SETTING_TYPES
    from focus_dagster.lora.settings import LoraSettings

    assert set(SETTING_TYPES) == {f.name for f in fields(LoraSettings)}
