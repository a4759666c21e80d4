"""degraded_embeddings and robustness_metrics materialised in process on the BRSET look-alike with a pipeline-check
encoder: every test image under every degradation and severity of the plan, the probe's clean and degraded
metrics checked against scikit-learn on the files the steps wrote, each row naming the degradation's parameters."""

from __future__ import annotations

import json

import dagster as dg
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from assets.evaluation import ENCODER_JOB
from assets.labels import DATA_LAYER_JOB
from assets.robustness import ROBUSTNESS_JOB
from focus_dagster.degradations.plan import DegradationPlan
from focus_dagster.evaluation.probes import load_probes
from tests.support.events import materialisation_metadata
from tests.support.tables import table_views
from tests.support.world import build_world

PLAN = DegradationPlan(types=("defocus_blur", "surround_noise"), severities=(1, 5))
KEY = dg.MultiPartitionKey({"model": "tiny_vit", "dataset": "brset"})
RECORDS = 160


@pytest.fixture(scope="module")
def world(synth_all, tmp_path_factory):
    """A BRSET look-alike of its own, large enough that every task has a probe and test images of both classes
    (the session's 24-record look-alikes leave too few test images to fit one)."""
    from focus_dagster.synthetic import synthesize

    tmp = tmp_path_factory.mktemp("robustness")
    synthesize(tmp / "data", ["brset"], per_dataset=RECORDS, seed=7, scale=0.05, workers=1)
    config, defs, instance = build_world(synth_all, tmp, datasets=(), roots={"brset": tmp / "data" / "brset"},
                                         models=("tiny_vit", "tiny_clip", "tiny_llava"), degradations=PLAN)
    assert defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance).success
    assert defs.resolve_job_def(ENCODER_JOB).execute_in_process(partition_key=KEY, instance=instance).success
    result = defs.resolve_job_def(ROBUSTNESS_JOB).execute_in_process(partition_key=KEY, instance=instance)
    return config, defs, instance, materialisation_metadata(result, "degraded_embeddings")


def test_every_test_image_is_embedded_under_every_degradation_and_severity(world):
    config, _, _, meta = world
    labels = pd.read_parquet(config.artifacts / "labels" / "brset.parquet")
    test_ids = sorted(labels.loc[labels["split"] == "test", "image_id"])
    degraded = pd.read_parquet(config.artifacts / "degraded_embeddings" / "tiny_vit" / "brset.parquet")
    for (name, severity), variant in degraded.groupby(["degradation", "severity"]):
        assert sorted(variant["image_id"]) == test_ids, (name, severity)
    assert sorted(degraded.groupby(["degradation", "severity"]).groups) == [
        ("defocus_blur", 1), ("defocus_blur", 5), ("surround_noise", 1), ("surround_noise", 5)]
    clean = pd.read_parquet(config.artifacts / "embeddings" / "tiny_vit" / "brset.parquet").set_index("image_id")
    blurred = degraded[(degraded["degradation"] == "defocus_blur") & (degraded["severity"] == 5)]
    moved = [np.abs(np.asarray(e) - np.asarray(clean.loc[i, "embedding"])).max()
             for i, e in zip(blurred["image_id"], blurred["embedding"])]
    assert min(moved) > 0  # every blurred image reached the model blurred
    parameters = {(d["degradation"], d["severity"]): d["value"]
                  for d in meta["degradations"]}
    assert parameters[("defocus_blur", 5)] == [8, 0.5] and parameters[("surround_noise", 1)] == 0.04


def test_robustness_rows_equal_scikit_learn_on_the_written_scores(world):
    config, _, _, _ = world
    with table_views(config) as con:
        rows = con.execute("SELECT * FROM metrics.robustness WHERE metric = 'auroc'").df()
    labels = pd.read_parquet(config.artifacts / "labels" / "brset.parquet")
    clean = pd.read_parquet(config.artifacts / "probe_predictions" / "tiny_vit" / "brset.parquet")
    degraded = pd.read_parquet(config.artifacts / "degraded_embeddings" / "tiny_vit" / "brset.parquet")
    probes = load_probes(config.artifacts / "probes" / "tiny_vit" / "brset.npz")
    assert set(rows["task"]) == set(probes) == {"any_dr", "referable_dr", "gon"} and len(rows) == len(probes) * 4
    assert set(rows["train_dataset"]) == {"brset"}  # an in-domain probe, trained on brset: recorded on each row
    for row in rows.itertuples():
        truth = labels.loc[(labels["split"] == "test") & labels[row.task].notna(), ["image_id", row.task]]
        scores = clean[clean["task"] == row.task].merge(truth, on="image_id")
        variant = degraded[(degraded["degradation"] == row.degradation) & (degraded["severity"] == row.severity)]
        both = scores.merge(variant, on="image_id")
        y = both[row.task].astype(int)
        # The probe by hand: L2-normalised embedding . coef + intercept, through the logistic function.
        probe = probes[row.task]
        matrix = np.stack(both["embedding"].to_numpy())
        matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        degraded_scores = 1 / (1 + np.exp(-(matrix @ probe.coef + probe.intercept)))
        assert row.clean == pytest.approx(roc_auc_score(y, both["score"]), abs=1e-9)
        assert row.degraded == pytest.approx(roc_auc_score(y, degraded_scores), abs=1e-9)
        assert row.delta == pytest.approx(row.degraded - row.clean, abs=1e-9)
        assert row.delta_low <= row.delta <= row.delta_high and row.ci_low <= row.degraded <= row.ci_high
        assert row.relative_drop == pytest.approx((row.clean - row.degraded) / row.clean, abs=1e-9)
        described = json.loads(row.parameters)
        assert described["degradation"] == row.degradation and described["severity"] == row.severity
        assert row.registry == described["registry"] and described["registry"].startswith("focus-degradations-")


def test_a_second_run_reuses_the_degraded_shards(world):
    config, defs, instance, _ = world
    again = materialisation_metadata(
        defs.resolve_job_def(ROBUSTNESS_JOB).execute_in_process(partition_key=KEY, instance=instance),
        "degraded_embeddings")
    assert again["shards_reused"] >= 1
    first = pd.read_parquet(config.artifacts / "degraded_embeddings" / "tiny_vit" / "brset.parquet")
    assert again["dagster/row_count"] == len(first)


def test_the_summary_has_a_row_per_configuration_with_its_mean_drop_and_mce_against_the_baseline(world):
    from assets.robustness import ROBUSTNESS_SUMMARY_JOB

    config, defs, instance, _ = world
    meta = materialisation_metadata(defs.resolve_job_def(ROBUSTNESS_SUMMARY_JOB).execute_in_process(instance=instance))
    with table_views(config) as con:
        summary = con.execute("SELECT * FROM metrics.robustness_summary").df()
        rows = con.execute("SELECT * FROM metrics.robustness WHERE metric = 'auroc'").df()
    assert meta["ce_baseline"] == "tiny_vit" and len(summary) == rows["task"].nunique() == 3
    for row in summary.itertuples():
        mine = rows[rows["task"] == row.task]
        assert row.variants == 4 and row.mean_relative_drop == pytest.approx(mine["relative_drop"].mean())
        assert row.train_dataset == "brset"
        assert row.mce == pytest.approx(1.0)  # the only encoder is its own baseline


def test_focus_trace_of_a_degraded_number_shows_its_degradation_and_reaches_the_files(world, monkeypatch, capsys):
    """A robustness number traced from the command line: its degradation's parameters in the row, the degraded
    embeddings' link with every degradation of the plan, the clean probe scores and the labels, as recorded by
    the steps that read them; then the configuration's quality axis from the summary, through the same rows."""
    from assets.robustness import ROBUSTNESS_SUMMARY_JOB
    from focus_dagster.platform.cli import main

    config, defs, instance, _ = world
    assert defs.resolve_job_def(ROBUSTNESS_SUMMARY_JOB).execute_in_process(instance=instance).success
    monkeypatch.setenv("FOCUS_HOME", str(config.home))
    monkeypatch.setenv("FOCUS_CONFIG", "")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setattr("focus_dagster.config.load_config", lambda environ=None: config)
    with table_views(config) as con:
        row = con.execute("SELECT * FROM metrics.robustness WHERE metric = 'auroc' AND degradation = 'defocus_blur' "
                          "AND severity = 5 ORDER BY task LIMIT 1").df().iloc[0]
        summary = con.execute("SELECT * FROM metrics.robustness_summary WHERE task = ?", [row["task"]]).df().iloc[0]
        ids = con.execute("SELECT metric_id FROM metrics.robustness").df()["metric_id"]
    assert ids.is_unique and ids.str.fullmatch(r"m-[0-9a-f]{16}").all()
    assert main(["trace", row["metric_id"], "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["value"] == pytest.approx(row["degraded"])
    assert result["stale"] is False, [(link["id"], link["changed"]) for link in result["links"] if link["changed"]]
    links = {link["id"]: link for link in result["links"]}
    recorded = links[f"metric:{row['metric_id']}"]["recorded"]
    assert (recorded["degradation"], recorded["severity"]) == ("defocus_blur", 5)
    assert json.loads(recorded["parameters"])["value"] == [8, 0.5]  # the registry's severity-5 kernel and sigma
    assert {"robustness_metrics[tiny_vit|brset]", "degraded_embeddings[tiny_vit|brset]",
            "probe_predictions[tiny_vit|brset]", "harmonised_labels[brset]", "weights[tiny_vit]"} <= set(links)
    plan = links["degraded_embeddings[tiny_vit|brset]"]["recorded"]["degradations"]
    assert {(d["degradation"], d["severity"]) for d in plan} == {("defocus_blur", 1), ("defocus_blur", 5),
                                                                 ("surround_noise", 1), ("surround_noise", 5)}
    assert main(["trace", row["metric_id"]]) == 0
    text = capsys.readouterr().out
    assert '"degradation": "defocus_blur"' in text and "<- model output: degraded_embeddings[tiny_vit|brset]" in text
    assert main(["trace", summary["metric_id"], "--json"]) == 0
    quality = json.loads(capsys.readouterr().out)
    assert quality["value"] == pytest.approx(summary["quality_axis"])
    assert "robustness_metrics[tiny_vit|brset]" in {link["id"] for link in quality["links"]}


def test_zero_shot_prompts_on_degraded_images_are_compared_with_their_clean_scores(world, monkeypatch, capsys):
    """The dual encoder's zero-shot rows: its clean AUROC is scikit-learn's on the clean zero-shot scores of the test
    images, accuracy has no threshold to be measured at (with that reason), every (task, degradation, severity)
    has a row, and `focus trace` of one walks to the zero-shot scores and the degraded embeddings."""
    from assets.models import ZERO_SHOT_JOB
    from assets.robustness import ZERO_SHOT_ROBUSTNESS_JOB
    from focus_dagster.platform.cli import main

    config, defs, instance, _ = world
    clip = dg.MultiPartitionKey({"model": "tiny_clip", "dataset": "brset"})
    for job in (ENCODER_JOB, ROBUSTNESS_JOB, ZERO_SHOT_JOB, ZERO_SHOT_ROBUSTNESS_JOB):
        assert defs.resolve_job_def(job).execute_in_process(partition_key=clip, instance=instance).success
    with table_views(config) as con:
        rows = con.execute("SELECT * FROM metrics.robustness WHERE method = 'zero_shot'").df()
        clean = con.execute("SELECT * FROM predictions.zero_shot WHERE model = 'tiny_clip'").df()
        probe_ids = set(con.execute("SELECT metric_id FROM metrics.robustness WHERE method = 'linear_probe'").df()[
            "metric_id"])
    labels = pd.read_parquet(config.artifacts / "labels" / "brset.parquet")
    assert set(rows["model"]) == {"tiny_clip"} and set(rows["partition"]) == {"tiny_clip|brset|zero_shot"}
    assert rows["train_dataset"].isna().all()  # zero-shot trains on nothing
    assert len(rows) == clean["task"].nunique() * 4 * 3  # tasks x variants x (AUROC, accuracy, ECE)
    assert rows["metric_id"].is_unique and not set(rows["metric_id"]) & probe_ids
    for row in rows[rows["metric"] == "auroc"].itertuples():
        truth = labels.loc[(labels["split"] == "test") & labels[row.task].notna(), ["image_id", row.task]]
        scored = clean[clean["task"] == row.task].merge(truth, on="image_id")
        assert row.clean == pytest.approx(roc_auc_score(scored[row.task].astype(int), scored["score"]), abs=1e-9)
        assert row.delta == pytest.approx(row.degraded - row.clean, abs=1e-9)
    accuracy = rows[rows["metric"] == "accuracy@youden"]
    assert accuracy["degraded"].isna().all() and accuracy["reason"].notna().all()
    monkeypatch.setenv("FOCUS_HOME", str(config.home))
    monkeypatch.setenv("FOCUS_CONFIG", "")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setattr("focus_dagster.config.load_config", lambda environ=None: config)
    target = rows[rows["metric"] == "auroc"].iloc[0]["metric_id"]
    assert main(["trace", target, "--json"]) == 0
    links = {link["id"] for link in json.loads(capsys.readouterr().out)["links"]}
    assert {"zero_shot_robustness[tiny_clip|brset]", "zero_shot_scores[tiny_clip|brset]",
            "degraded_embeddings[tiny_clip|brset]", "weights[tiny_clip]"} <= links


def test_yes_no_answers_on_degraded_images_are_compared_with_their_clean_scores(world):
    """The multimodal LLM's yes/no questions asked again of every degraded test image: one probability row per
    image, task, degradation and severity; the robustness rows' clean AUROC is scikit-learn's on the clean
    token probabilities of the test images, and accuracy has no threshold (with that reason)."""
    from assets.mllm import TOKEN_PROBABILITIES_JOB
    from assets.robustness import YES_NO_ROBUSTNESS_JOB

    config, defs, instance, _ = world
    llava = dg.MultiPartitionKey({"model": "tiny_llava", "dataset": "brset"})
    for job in (TOKEN_PROBABILITIES_JOB, YES_NO_ROBUSTNESS_JOB):
        assert defs.resolve_job_def(job).execute_in_process(partition_key=llava, instance=instance).success
    labels = pd.read_parquet(config.artifacts / "labels" / "brset.parquet")
    test_ids = set(labels.loc[labels["split"] == "test", "image_id"])
    degraded = pd.read_parquet(config.artifacts / "degraded_token_probabilities" / "tiny_llava" / "brset.parquet")
    clean = pd.read_parquet(config.artifacts / "token_probabilities" / "tiny_llava" / "brset.parquet")
    for (name, severity, task), variant in degraded.groupby(["degradation", "severity", "task"]):
        assert set(variant["image_id"]) == test_ids and variant["image_id"].is_unique, (name, severity, task)
    with table_views(config) as con:
        rows = con.execute("SELECT * FROM metrics.robustness WHERE method = 'yes_no'").df()
    assert set(rows["partition"]) == {"tiny_llava|brset|yes_no"}
    assert len(rows) == clean["task"].nunique() * 4 * 3
    for row in rows[rows["metric"] == "auroc"].itertuples():
        truth = labels.loc[(labels["split"] == "test") & labels[row.task].notna(), ["image_id", row.task]]
        scored = clean[clean["task"] == row.task].merge(truth, on="image_id").dropna(subset=["score"])
        assert row.clean == pytest.approx(roc_auc_score(scored[row.task].astype(int), scored["score"]), abs=1e-9)
    assert rows.loc[rows["metric"] == "accuracy@youden", "reason"].notna().all()


def test_one_run_of_clean_and_degraded_embeddings_reads_the_encoders_weights_once(world, monkeypatch):
    """(After the yes/no test: the summary and trace tests above read the encoder's rows alone.) The robustness
    job embeds the clean test images, then the degraded ones, in one run: the eager encoder
    the first step loaded serves the second (ModelHub). The multimodal LLM of a yes/no robustness run is loaded
    by each of its steps: LoRA changes the modules of the model it is given, so none is shared."""
    from assets.robustness import YES_NO_ROBUSTNESS_JOB
    from focus_dagster.models import registry

    _, defs, instance, _ = world
    loads, load_model = [], registry.load_model
    monkeypatch.setattr(registry, "load_model",
                        lambda spec, interfaces=None: loads.append(spec.id) or load_model(spec, interfaces))
    assert defs.resolve_job_def(ROBUSTNESS_JOB).execute_in_process(partition_key=KEY, instance=instance).success
    assert loads == ["tiny_vit"]
    loads.clear()
    llava = dg.MultiPartitionKey({"model": "tiny_llava", "dataset": "brset"})
    assert defs.resolve_job_def(YES_NO_ROBUSTNESS_JOB).execute_in_process(partition_key=llava,
                                                                          instance=instance).success
    assert loads == ["tiny_llava", "tiny_llava"]


def test_focus_export_takes_out_every_robustness_row_with_the_stamps_they_name(world, tmp_path):
    """`focus export --tables robustness robustness_summary`: every row of both tables with all its columns, and
    the manifest holds the lineage stamp each row names (the step that wrote it), as `focus trace` reads it."""
    from assets.robustness import ROBUSTNESS_SUMMARY_JOB
    from tests.ops.test_export import focus

    config, defs, instance, _ = world
    assert defs.resolve_job_def(ROBUSTNESS_SUMMARY_JOB).execute_in_process(instance=instance).success
    folder = tmp_path / "out"
    code, _, err = focus(config, "export", "--out", str(folder), "--format", "parquet", "--tables", "robustness",
                         "robustness_summary")
    assert code == 0, err
    manifest = json.loads((folder / "manifest.json").read_text())
    with table_views(config) as con:
        rows = con.execute("SELECT * FROM metrics.robustness").df()
        summary = con.execute("SELECT * FROM metrics.robustness_summary").df()
    exported = pd.read_parquet(folder / "robustness.parquet")
    assert sorted(exported["metric_id"]) == sorted(rows["metric_id"]) and list(exported.columns) == list(rows.columns)
    assert sorted(pd.read_parquet(folder / "robustness_summary.parquet")["metric_id"]) == sorted(summary["metric_id"])
    named = set(rows["lineage_id"]) | set(summary["lineage_id"].dropna())
    assert named and named <= {stamp_id for stamp_id, stamp in manifest["row_stamps"].items() if stamp}
