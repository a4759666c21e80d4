"""yes_no_questions and token_probabilities materialised in-process with the built-in tiny LLaVA."""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pytest

from assets.datasets import OBSERVE_JOB
from assets.labels import DATA_LAYER_JOB
from assets.mllm import TOKEN_PROBABILITIES_JOB
from tests.support.events import check_verdict, materialisation_metadata
from tests.support.world import build_world

LEAKY = {"version": "leaky-1", "datasets": {"brset": {
    "gon": "Findings: increased_cup_disc = {increased_cup_disc}. Glaucoma? Answer with yes or no only."}}}


def make_world(synth_all, tmp, datasets=("brset", "papila"), questions=None):
    config, defs, instance = build_world(synth_all, tmp, datasets, models=("tiny_llava",), questions=questions)
    for dataset in datasets:
        defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key=dataset, instance=instance,
                                                                raise_on_error=False)
    return config, defs, instance


@pytest.fixture(scope="module")
def world(synth_all, tmp_path_factory):
    return make_world(synth_all, tmp_path_factory.mktemp("mllm"))


def score(defs, instance, dataset, raise_on_error=True):
    key = dg.MultiPartitionKey({"model": "tiny_llava", "dataset": dataset})
    return defs.resolve_job_def(TOKEN_PROBABILITIES_JOB).execute_in_process(
        partition_key=key, instance=instance, raise_on_error=raise_on_error)


def test_questions_are_rendered_per_image_and_pass_the_leak_check(world):
    config, _, _ = world
    asked = pd.read_parquet(config.artifacts / "questions" / "brset.parquet")
    labels = pd.read_parquet(config.artifacts / "labels" / "brset.parquet")
    assert len(asked) == 3 * len(labels) and set(asked["task"]) == {"any_dr", "referable_dr", "gon"}
    assert not asked["leak"].astype(bool).any()
    papila = pd.read_parquet(config.artifacts / "questions" / "papila.parquet")
    assert set(papila["task"]) == {"gon"}  # only the tasks the dataset defines


def test_token_probabilities_cover_every_image_and_task_and_resume(world):
    config, defs, instance = world
    result = score(defs, instance, "brset")
    meta = materialisation_metadata(result)
    frame = pd.read_parquet(config.artifacts / "token_probabilities" / "tiny_llava" / "brset.parquet")
    labels = pd.read_parquet(config.artifacts / "labels" / "brset.parquet")
    assert meta["images"] == len(labels) and len(frame) == 3 * len(labels)
    assert list(frame[["image_id", "task"]].itertuples(index=False)) == sorted(
        frame[["image_id", "task"]].itertuples(index=False))
    assert frame["score"].between(0, 1).all() and frame["score"].std() > 0
    pd.testing.assert_series_equal(frame["score"], frame["p_yes"] / (frame["p_yes"] + frame["p_no"]),
                                   check_names=False)
    assert (frame["p_yes_reference"] <= frame["p_yes"]).all()
    assert set(frame["answer"]) <= {"yes", "no", "unparseable"} and sum(meta["answers"].values()) == len(frame)
    assert meta["questions_version"] == "focus-yes-no-1" and meta["device"] == "cpu"
    assert meta["pipeline_check_model"] is True and check_verdict(result, "checkpoint_audit").passed
    again = materialisation_metadata(score(defs, instance, "brset"))
    assert again["shards_reused"] >= 1  # resumed from shards: the same numbers (the stamp names the new run)
    resumed = pd.read_parquet(config.artifacts / "token_probabilities" / "tiny_llava" / "brset.parquet")
    pd.testing.assert_frame_equal(resumed, frame)


def test_an_unreadable_image_is_quarantined_and_counted(world):
    config, defs, instance = world
    labels = pd.read_parquet(config.artifacts / "labels" / "papila.parquet")
    victim = config.root_of("papila") / labels["image_path"].iloc[0]
    victim.write_bytes(victim.read_bytes()[:200])
    meta = materialisation_metadata(score(defs, instance, "papila"))
    quarantine = pd.read_parquet(config.artifacts / "token_probabilities" / "tiny_llava" / "papila.quarantine.parquet")
    assert meta["images_unreadable"] == 1 and quarantine["image_id"].tolist() == [labels["image_id"].iloc[0]]
    assert meta["images"] == len(labels) - 1


def test_a_leaking_question_fails_the_check_and_blocks_scoring(synth_all, tmp_path):
    """Defect 4: a BRSET question that shows increased_cup_disc. The blocking check fails, the asset refuses to
    score, and automation does not request it."""
    config, defs, instance = make_world(synth_all, tmp_path, datasets=("brset",), questions=LEAKY)
    records = instance.get_latest_materialization_event(dg.AssetKey("yes_no_questions"))
    assert records is not None
    asked = pd.read_parquet(config.artifacts / "questions" / "brset.parquet")
    assert asked.loc[asked["task"] == "gon", "leak"].str.contains("increased_cup_disc").all()
    result = score(defs, instance, "brset", raise_on_error=False)
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "leak the label" in failure.event_specific_data.error.message
    assert not (config.artifacts / "token_probabilities" / "tiny_llava" / "brset.parquet").exists()


@pytest.mark.parametrize("questions, requested", [(LEAKY, set()), (None, {"brset|tiny_llava"})])
def test_automation_requests_scoring_only_after_the_leak_check_passed(synth_all, tmp_path, questions, requested):
    _, defs, instance = build_world(synth_all, tmp_path, models=("tiny_llava",), questions=questions)
    defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance)
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance,
                                                            raise_on_error=False)
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert result.get_requested_partitions(dg.AssetKey("token_probabilities")) == requested
