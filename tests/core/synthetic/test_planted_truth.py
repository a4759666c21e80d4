"""Validation against planted truth: the effects the synthetic generator plants appear in the fairness and
quality tables with intervals that exclude zero, and nothing appears where nothing was planted.

The pipeline is the platform's own core, as the assets call it: a BRSET look-alike (2,400 records, about 1,200
benchmark images; the keyed-hash split does not stratify, so the test split needs this many for the
intervals to resolve the planted effects) -> harmonised labels -> EfficientNet-Lite0 embeddings (real ImageNet weights) -> in-domain
linear probes -> `metric_rows`, with 1,000 bootstrap resamples. Planted (focus_dagster.synthetic.PLANTED_EFFECTS):
women's lesions at 45% contrast, and degraded inadequate-quality images. Not planted: anything by age.
"""

from __future__ import annotations

import pandas as pd
import pytest

from focus_dagster.synthetic import PLANTED_EFFECTS

pytestmark = pytest.mark.heavy(70)  # seconds on a quiet 2-core machine: started first

TASKS_WITH_DR = ("any_dr", "referable_dr")


@pytest.fixture(scope="module")
def brset_metrics(tmp_path_factory):
    from focus_dagster.datasets.registry import get_reader
    from focus_dagster.evaluation import predictions as P
    from focus_dagster.evaluation.probes import in_domain_probes
    from focus_dagster.evaluation.tables import metric_rows
    from focus_dagster.inference.engine import run_on_images
    from focus_dagster.labels import harmonise
    from focus_dagster.labels.expectations import check_metadata_coverage
    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.models.registry import load_encoder
    from focus_dagster.synthetic import synthesize

    root = tmp_path_factory.mktemp("planted")
    synthesize(root, ["brset"], per_dataset=2400, seed=11, scale=0.125)
    read = get_reader("brset").read(root / "brset")
    labels = harmonise("brset", read.records, read.quarantine, root=root / "brset", splits_dir=None, seed=0).labels
    encoder = load_encoder(CATALOG["efficientnet_lite0"]).to("cpu")
    items = [(i, str(root / "brset" / p)) for i, p in zip(labels["image_id"], labels["image_path"])]
    run = run_on_images(encoder.embed, items, encoder.spec.preprocess, work_dir=root / "shards",
                        fingerprint="planted", device="cpu")
    embeddings = pd.DataFrame({"image_id": run.image_ids, "embedding": list(run.outputs)})
    probes = in_domain_probes("brset", embeddings, labels)
    frame = P.finish(P.with_labels(probes.predictions, labels, "planted"), dataset="brset", model="efficientnet_lite0",
                     interface="vm", method="linear_probe")
    coverage = {column: share > 0 for column, share in check_metadata_coverage(labels).info.items()}
    rows = metric_rows(frame, labels[["image_id", "age", "sex", "quality", "camera"]], coverage)
    return rows.set_index(["task", "metric", "group"])


def interval(rows, task, metric, group):
    row = rows.loc[(task, metric, group)]
    return row["value"], row["ci_low"], row["ci_high"]


@pytest.mark.parametrize("task", TASKS_WITH_DR)
def test_the_planted_sex_effect_appears_with_an_interval_below_zero(brset_metrics, task):
    """Fainter lesions for women: lower DR sensitivity for women than for men (F - M < 0, interval too)."""
    assert "sex_lesion_contrast" in PLANTED_EFFECTS
    value, low, high = interval(brset_metrics, task, "tpr_gap", "sex:F-M")
    assert value < 0 and high < 0, (value, low, high)


def test_the_planted_quality_effect_appears_with_an_interval_above_zero(brset_metrics):
    """Degraded inadequate images: accuracy adequate - inadequate > 0, interval too."""
    assert "quality_accuracy_loss" in PLANTED_EFFECTS
    value, low, high = interval(brset_metrics, "any_dr", "accuracy_gap", "quality:adequate-inadequate")
    assert value > 0 and low > 0, (value, low, high)


def test_nothing_appears_where_nothing_was_planted(brset_metrics):
    """Age has no planted effect: of the signed age differences (3 tasks x 6 metrics), no more intervals
    exclude zero than a 95% interval's error rate allows (expected about 1 in 20; at most 2 of 18 here)."""
    signed = brset_metrics.reset_index()
    signed = signed[signed["group"].str.startswith("age_median:") & ~signed["group"].str.endswith("max-min")]
    signed = signed.dropna(subset=["ci_low", "ci_high"])
    assert len(signed) >= 15
    excluding = signed[(signed["ci_low"] > 0) | (signed["ci_high"] < 0)]
    assert len(excluding) <= 2, excluding[["task", "metric", "value", "ci_low", "ci_high"]]
