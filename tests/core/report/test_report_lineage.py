"""The arena report's lineage: the chain each number opens in the page (and lineage.json) is the chain `focus trace`
walks for its id, built from a small table store written here, each link once, stale links marked."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pandas as pd
import pytest

from focus_dagster import lineage
from focus_dagster.config import FocusConfig
from resources import FocusStorage, layout

WEIGHTS = "feedbeef" * 8  # the weights hash the encoder's stamp records
RELEASE = "fp-brset-0001"  # the release fingerprint the records were read from


def _stamp(asset, partition, version, inputs=None, **facts):
    return lineage.stamp(asset, partition, f"run-{asset}", version, code_version="c1", inputs=inputs, **facts)


@pytest.fixture
def store(tmp_path):
    """brset's release -> records -> labels and the encoder's embeddings -> predictions -> two metric rows, each
    written as its step would (rows and stamp in one commit), the embeddings as a stamped Parquet artifact."""
    storage = FocusStorage.from_config(FocusConfig(home=tmp_path / "home", roots={}))
    release = _stamp(layout.DATASET_RELEASE, "brset", RELEASE, images=2)
    records = _stamp(layout.DATASET_RECORDS, "brset", "r1", {"release": release}, root="/data/brset")
    storage.replace_table(layout.records_table("brset"), pd.DataFrame({"image_id": ["a", "b"]}), stamp=records)
    labels = _stamp(layout.HARMONISED_LABELS, "brset", "l1", {"records": records}, label_rule="brset.icdr")
    storage.replace_partition(layout.LABELS, "brset", _labels(), stamp=labels)
    embeddings = _stamp(layout.IMAGE_EMBEDDINGS, "enc|brset", "e1", {"records": records},
                        model={"id": "enc", "source": "local", "weights_sha256": WEIGHTS})
    storage.write_parquet(layout.EMBEDDINGS.file("enc", "brset"), pd.DataFrame({"image_id": ["a", "b"]}), embeddings)
    predictions = _stamp(layout.PREDICTIONS, "brset", "p1", {"labels": labels, "embeddings": embeddings})
    storage.replace_partition(layout.SAMPLES, "brset", pd.DataFrame({"partition": ["brset"], "score": [0.5]}),
                              stamp=predictions)
    rows = pd.DataFrame([_metric_row(f"m-{metric}", metric, value, lineage.stamp_id(predictions))
                         for metric, value in (("auroc", 0.81), ("ece", 0.07))])
    storage.replace_partition(layout.METRICS, "brset", rows, stamp=_stamp(layout.METRICS_ASSET, "brset", "m1"),
                              stamps=(predictions,))
    return storage


def _labels(version: str = "l1") -> pd.DataFrame:
    return pd.DataFrame({"dataset": ["brset", "brset"], "image_id": ["a", "b"], "any_dr": [0, 1 if version == "l1" else 0]})


def _metric_row(metric_id, metric, value, lineage_id):
    return {"metric_id": metric_id, "model": "enc", "dataset": "brset", "task": "any_dr", "method": "linear_probe",
            "train_dataset": "brset", "axis": "performance" if metric == "auroc" else "calibration", "metric": metric,
            "group": "", "value": value, "ci_low": value - 0.05, "ci_high": value + 0.05, "n": 40, "n_pos": 12,
            "reason": None, "weights_sha256": WEIGHTS, "code_version": "c1", "predictions_version": "p1",
            "lineage_id": lineage_id, "run_id": "run-metrics", "partition": "brset"}


def _walk(storage: FocusStorage, ids=("m-auroc", "m-ece")) -> dict:
    """The chains as the report asset computes them, from the metric rows it read."""
    from assets.report import chains_of_rows

    (metrics,), _ = storage.read_tables_with_lineage([layout.METRICS])
    return chains_of_rows(storage, [(layout.METRICS, metrics)], list(ids))


def _trace(storage: FocusStorage, metric_id: str) -> dict:
    from focus_dagster.platform.trace import trace

    return trace(metric_id, SimpleNamespace(tables=storage.tables_url, artifacts=storage.artifacts_dir))


def _plain(value):
    return json.loads(json.dumps(value, default=str))


def test_each_number_s_embedded_chain_is_the_chain_focus_trace_walks(store):
    from focus_dagster.platform.trace import chain_of

    walked = _walk(store)
    for metric_id in ("m-auroc", "m-ece"):
        chain = chain_of(walked, metric_id)
        assert _plain(chain) == _plain(_trace(store, metric_id))
        links = {link["id"]: link for link in chain["links"]}
        # What this test wrote, link by link, from the metric down to the release, none stale.
        assert list(links) == [f"metric:{metric_id}", "predictions[brset]", "image_embeddings[enc|brset]",
                               "dataset_records[brset]", "dataset_release[brset]", "weights[enc]",
                               "harmonised_labels[brset]"]
        assert links["weights[enc]"]["recorded"]["weights_sha256"] == WEIGHTS == links["weights[enc]"]["version"]
        assert links["dataset_release[brset]"]["version"] == RELEASE
        assert links["harmonised_labels[brset]"]["recorded"]["label_rule"] == "brset.icdr"
        assert links[f"metric:{metric_id}"]["run"]["run_id"] == "run-metrics" and not chain["stale"]
    # Both numbers stand on the same links: each is kept once, and each metric names only its top link.
    assert len(walked["links"]) == 6
    text = json.dumps(walked)
    for key, link in walked["links"].items():
        assert text.count(f'"{key}": {{') == 1, link["id"]
    top = {tuple(walked["metrics"][m]["link"]["inputs"]) for m in ("m-auroc", "m-ece")}
    assert len(top) == 1 and walked["links"][next(iter(top))[0]]["id"] == "predictions[brset]"


def test_a_rewritten_input_is_marked_stale_in_the_page_and_in_lineage_json(store, tmp_path):
    from focus_dagster.platform.trace import chain_of
    from focus_dagster.report.arena import ModelInfo
    from focus_dagster.report.build import ReportInputs, build_report, lineage_markdown, write_report

    # The labels are rewritten after the numbers were computed; nothing downstream is recomputed.
    store.replace_partition(layout.LABELS, "brset", _labels("l2"),
                            stamp=_stamp(layout.HARMONISED_LABELS, "brset", "l2", label_rule="brset.icdr"))
    (metrics,), _ = store.read_tables_with_lineage([layout.METRICS])
    from assets.report import chains_of_rows

    samples = pd.DataFrame(columns=["model", "dataset", "task", "method", "train_dataset", "split", "score", "label"])
    inputs = ReportInputs(metrics, pd.DataFrame(), None, {"enc": ModelInfo("vm", "general")}, ["brset"],
                          lambda datasets: samples,
                          chains=lambda ids: chains_of_rows(store, [(layout.METRICS, metrics)], ids))
    report = build_report(inputs)
    [block] = re.findall(r'<script type="application/json" id="lineage">(.*?)</script>', report.html, re.S)
    embedded = json.loads(block)
    assert set(embedded["metrics"]) == {"m-auroc", "m-ece"} == report.numbers()
    chain = chain_of(embedded, "m-auroc")
    assert chain == _plain(_trace(store, "m-auroc")) and chain["stale"]
    links = {link["id"]: link for link in chain["links"]}
    stale = {name for name, link in links.items() if link["stale"]}
    assert stale == {"metric:m-auroc", "predictions[brset]"}
    assert any("harmonised_labels[brset] was rewritten" in change and "this read version l1" in change
               for change in links["predictions[brset]"]["changed"])
    folder = write_report(report, tmp_path / "arena")
    assert json.loads((folder / "lineage.json").read_text()) == embedded
    assert json.loads((folder / "manifest.json").read_text())["lineage"] == "lineage.json"
    # The asset's metadata: one line per distinct link, stale first, bounded.
    text = lineage_markdown(report)
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == 6 and lines[0].startswith("- predictions\\[brset\\] · version p1 · **stale**: ")
    assert "2 numbers stand on 6 links, 1 stale" in text
    short = lineage_markdown(report, limit=2).splitlines()
    assert short[-1] == "- … and 4 more: every link is in lineage.json" and len(short) == 2 + 2 + 1
