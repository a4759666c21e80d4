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


@pytest.fixture(scope="module")
def world(synth_all, tmp_path_factory):
    config, defs, instance = build_world(synth_all, tmp_path_factory.mktemp("robustness"), models=("tiny_vit",),
                                         degradations=PLAN)
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
    assert set(rows["task"]) == set(probes) and len(rows) == len(probes) * 4
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
    assert meta["ce_baseline"] == "tiny_vit" and len(summary) == rows["task"].nunique()
    for row in summary.itertuples():
        mine = rows[rows["task"] == row.task]
        assert row.variants == 4 and row.mean_relative_drop == pytest.approx(mine["relative_drop"].mean())
        assert row.mce == pytest.approx(1.0)  # the only encoder is its own baseline
