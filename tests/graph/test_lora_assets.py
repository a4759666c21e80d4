"""lora_adapters materialised in-process: the built-in tiny LLaVA fine-tuned on the BRSET look-alike."""

from __future__ import annotations

import hashlib
import json

import dagster as dg
import pandas as pd
import pytest

from assets.labels import DATA_LAYER_JOB
from assets.lora import LORA_ADAPTERS_JOB
from focus_dagster.adapter_plan import LoraPlan
from tests.support.events import materialisation_metadata
from tests.support.tables import table_views
from tests.support.world import build_world

# Two optimizer steps of two micro-batches of two: enough to see every part of training, cheap on a CPU.
SMALL = {"max_steps": 2, "micro_batch": 2, "accumulation": 2, "learning_rate": 1e-3}


def make_world(synth_all, tmp, settings=SMALL, glaucoma_everywhere=False):
    config, defs, instance = build_world(synth_all, tmp, models=("tiny_llava",),
                                         lora=LoraPlan(tasks=("any_dr", "gon"), settings=settings))
    if glaucoma_everywhere:  # a release where every image has an increased cup-to-disc ratio: gon has one class
        labels_csv = config.root_of("brset") / "labels.csv"
        labels = pd.read_csv(labels_csv, dtype=str, keep_default_na=False)
        labels.assign(increased_cup_disc="1").to_csv(labels_csv, index=False)
    assert defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance).success
    return config, defs, instance


def train(defs, instance, key: str, raise_on_error=True):
    return defs.resolve_job_def(LORA_ADAPTERS_JOB).execute_in_process(partition_key=key, instance=instance,
                                                                      raise_on_error=raise_on_error)


def folder_sha256(folder) -> str:
    """sha256 over a folder's files, sorted by relative name, each name + NUL then its bytes (written here from
    that definition, independently of the platform's helper)."""
    digest = hashlib.sha256()
    for item in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(item.relative_to(folder).as_posix().encode() + b"\0" + item.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def world(synth_all, tmp_path_factory):
    return make_world(synth_all, tmp_path_factory.mktemp("lora"))


def test_an_adapter_is_trained_on_the_training_split_and_described_by_its_manifest(world):
    config, defs, instance = world
    assert defs.resolve_assets_def("lora_adapters").partitions_def.get_partition_keys() == [
        "tiny_llava.brset.any_dr", "tiny_llava.brset.gon"]
    meta = materialisation_metadata(train(defs, instance, "tiny_llava.brset.any_dr"))
    folder = config.artifacts / "adapters" / "tiny_llava.brset.any_dr"
    assert {p.name for p in folder.iterdir()} >= {"adapter_model.safetensors", "adapter_config.json", "manifest.json"}
    assert meta["sha256"] == hashlib.sha256((folder / "adapter_model.safetensors").read_bytes()).hexdigest()
    manifest = json.loads((folder / "manifest.json").read_text())
    labels = pd.read_parquet(config.artifacts / "labels" / "brset.parquet")
    train_rows = labels[(labels["split"] == "train") & labels["any_dr"].notna()]
    assert (manifest["examples"], manifest["positives"]) == (len(train_rows), int(train_rows["any_dr"].sum()))
    assert manifest["base_weights_sha256"] == folder_sha256(config.model_cache / "tiny_llava")
    assert manifest["questions_version"] == "focus-yes-no-1" and manifest["task"] == "any_dr"
    assert manifest["settings"]["r"] == 8 and manifest["settings"]["alpha"] == 16
    assert manifest["settings"]["learning_rate"] == 1e-3 and manifest["seed"] == 0
    assert manifest["steps"] == meta["steps"] == 2 and len(manifest["losses"]) == 2
    # The lineage is what the step read: the labels' stamp travels from the labels file into the manifest.
    import pyarrow.parquet as pq

    labels_stamp = json.loads(pq.read_schema(config.artifacts / "labels" / "brset.parquet").metadata[b"focus.lineage"])
    assert manifest["lineage"]["inputs"]["labels"]["version"] == labels_stamp["version"]
    assert manifest["labels_version"] == labels_stamp["version"]
    assert not (config.artifacts / "adapters" / "tiny_llava.brset.any_dr.skipped.json").exists()


def test_one_class_in_the_training_split_gives_no_adapter_and_the_reason(synth_all, tmp_path):
    config, defs, instance = make_world(synth_all, tmp_path, glaucoma_everywhere=True)
    result = train(defs, instance, "tiny_llava.brset.gon")
    meta = materialisation_metadata(result)
    record = json.loads((config.artifacts / "adapters" / "tiny_llava.brset.gon.skipped.json").read_text())
    labels = pd.read_parquet(config.artifacts / "labels" / "brset.parquet")
    n_train = int(((labels["split"] == "train") & labels["gon"].notna()).sum())
    assert record["reason"] == meta["reason"] == (
        f"the training split has {n_train} positive and 0 negative images for this task: "
        "a yes/no adapter needs both answers")
    assert meta["adapter"] == "none" and not (config.artifacts / "adapters" / "tiny_llava.brset.gon").exists()


def test_adapted_scores_join_the_predictions_as_their_own_method(world):
    from assets.evaluation import EVALUATION_JOB
    from assets.lora import ADAPTED_SCORES_JOB

    config, defs, instance = world
    if not (config.artifacts / "adapters" / "tiny_llava.brset.any_dr" / "manifest.json").exists():
        train(defs, instance, "tiny_llava.brset.any_dr")
    scored = defs.resolve_job_def(ADAPTED_SCORES_JOB).execute_in_process(
        partition_key="tiny_llava.brset.any_dr@brset", instance=instance)
    meta = materialisation_metadata(scored)
    adapter = config.artifacts / "adapters" / "tiny_llava.brset.any_dr"
    assert meta["adapter_sha256"] == hashlib.sha256((adapter / "adapter_model.safetensors").read_bytes()).hexdigest()
    assert meta["in_domain"] is True and meta["training_dataset"] == "brset"
    frame = pd.read_parquet(config.artifacts / "adapted_token_probabilities" / "tiny_llava.brset.any_dr" /
                            "brset.parquet")
    labels = pd.read_parquet(config.artifacts / "labels" / "brset.parquet")
    assert set(frame["task"]) == {"any_dr"} and len(frame) == len(labels)  # every image, the adapter's task only
    pd.testing.assert_series_equal(frame["score"], frame["p_yes"] / (frame["p_yes"] + frame["p_no"]),
                                   check_names=False)

    assert defs.resolve_job_def(EVALUATION_JOB).execute_in_process(
        partition_key="brset", instance=instance, run_config={"ops": {op: {"config": {"n_resamples": 50}} for op in
                                                                       ("metrics", "fairness_metrics",
                                                                        "quality_metrics")}}).success
    with table_views(config) as con:
        samples = con.execute("SELECT * FROM predictions.samples WHERE method = 'yes_no_lora'").df()
        unavailable = con.execute("SELECT * FROM predictions.unavailable WHERE method = 'yes_no_lora'").df()
        metrics = con.execute("SELECT * FROM metrics.values WHERE method = 'yes_no_lora' AND metric = 'auroc' "
                              "AND axis = 'performance'").df()
    test_labels = labels[(labels["split"] == "test") & labels["any_dr"].notna()]
    assert set(samples["train_dataset"]) == {"brset"} and set(samples["task"]) == {"any_dr"}
    assert len(samples[samples["split"] == "test"]) == len(test_labels)
    merged = samples.merge(frame, on=["image_id", "task"])
    assert (merged["score_x"] == merged["score_y"]).all()  # the adapted scores, as written
    # The gon adapter was never trained here: its configuration is unavailable, with the reason.
    [row] = unavailable.to_dict("records")
    assert (row["task"], row["train_dataset"]) == ("gon", "brset") and "tiny_llava.brset.gon" in row["reason"]
    reasons = dict(zip(metrics["task"], metrics["reason"]))
    assert set(reasons) == {"any_dr", "gon"} and "tiny_llava.brset.gon" in reasons["gon"]
    assert "not materialised" not in str(reasons["any_dr"]), reasons  # computed (this tiny test split: 13 images)
    # focus trace: the adapted number stands on the adapted scores, the adapter (its training labels and
    # questions) and the base weights, all current.
    from focus_dagster.platform.trace import trace

    [adapted_id] = metrics.loc[metrics["task"] == "any_dr", "metric_id"]
    chain = trace(adapted_id, config)
    links = {link["id"]: link for link in chain["links"]}
    assert {"adapted_token_probabilities[tiny_llava.brset.any_dr|brset]", "lora_adapters[tiny_llava.brset.any_dr]",
            "weights[tiny_llava]", "harmonised_labels[brset]", "yes_no_questions[brset]"} <= set(links), sorted(links)
    adapter_link = links["lora_adapters[tiny_llava.brset.any_dr]"]
    assert adapter_link["link"] == "adapter" and "weights[tiny_llava]" in adapter_link["inputs"]
    assert not chain["stale"], [(k, v["changed"]) for k, v in links.items() if v["changed"]]


def test_lora_effects_pair_adapted_and_base_scores_on_the_same_images(world):
    """The comparison against an independent computation: scikit-learn's AUROC and accuracy on the paired test
    images, and the reason where there is nothing to compare; `focus trace` reaches both score sets."""
    from sklearn.metrics import accuracy_score, roc_auc_score

    from assets.evaluation import EVALUATION_JOB
    from assets.lora import ADAPTED_SCORES_JOB, LORA_EFFECTS_JOB
    from assets.mllm import TOKEN_PROBABILITIES_JOB
    from focus_dagster.platform.trace import trace

    config, defs, instance = world
    if not (config.artifacts / "adapted_token_probabilities" / "tiny_llava.brset.any_dr" / "brset.parquet").exists():
        train(defs, instance, "tiny_llava.brset.any_dr")
        defs.resolve_job_def(ADAPTED_SCORES_JOB).execute_in_process(
            partition_key="tiny_llava.brset.any_dr@brset", instance=instance)
    defs.resolve_job_def(TOKEN_PROBABILITIES_JOB).execute_in_process(
        partition_key=dg.MultiPartitionKey({"model": "tiny_llava", "dataset": "brset"}), instance=instance)
    fast = {"ops": {op: {"config": {"n_resamples": 200}} for op in ("metrics", "fairness_metrics", "quality_metrics")}}
    assert defs.resolve_job_def(EVALUATION_JOB).execute_in_process(partition_key="brset", instance=instance,
                                                                   run_config=fast).success
    result = defs.resolve_job_def(LORA_EFFECTS_JOB).execute_in_process(
        instance=instance, run_config={"ops": {"lora_effects": {"config": {"n_resamples": 200}}}})
    with table_views(config) as con:
        effects = con.execute("SELECT * FROM metrics.lora_effects").df()
        samples = con.execute("SELECT * FROM predictions.samples WHERE split = 'test' AND task = 'any_dr' AND "
                              "method IN ('yes_no', 'yes_no_lora')").df()
    adapted = samples[samples["method"] == "yes_no_lora"].set_index("image_id")
    base = samples[samples["method"] == "yes_no"].set_index("image_id").loc[adapted.index]
    y = adapted["label"].astype(int)
    rows = effects[effects["task"] == "any_dr"].set_index("metric")
    assert set(rows.index) == {"auroc", "accuracy@0.5", "accuracy@youden", "ece", "brier"}
    assert (rows["domain"] == "in_domain").all() and (rows["n"] == len(adapted)).all()
    expected = accuracy_score(y, adapted["score"] >= 0.5) - accuracy_score(y, base["score"] >= 0.5)
    assert abs(rows.loc["accuracy@0.5", "delta"] - expected) < 1e-12
    if y.nunique() == 2 and min(y.sum(), len(y) - y.sum()) >= 5:
        expected = roc_auc_score(y, adapted["score"]) - roc_auc_score(y, base["score"])
        assert abs(rows.loc["auroc", "delta"] - expected) < 1e-12
    else:  # too few test images of a class in this tiny look-alike: undefined, with the reason
        assert pd.isna(rows.loc["auroc", "delta"]) and rows.loc["auroc", "reason"]
    gon = effects[effects["task"] == "gon"]
    assert len(gon) == 5 and gon["delta"].isna().all() and gon["reason"].str.contains("no adapted scores").all()
    assert materialisation_metadata(result)["comparisons"] == 1

    chain = trace(rows.loc["accuracy@0.5", "metric_id"], config)
    links = {link["id"] for link in chain["links"]}
    assert {"adapted_token_probabilities[tiny_llava.brset.any_dr|brset]", "lora_adapters[tiny_llava.brset.any_dr]",
            "token_probabilities[tiny_llava|brset]", "weights[tiny_llava]"} <= links, " ".join(sorted(links))
    assert chain["links"][0]["asset"] == "lora_effects" and len(chain["links"][0]["inputs"]) == 2
