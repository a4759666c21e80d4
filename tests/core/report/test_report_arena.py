"""The arena report's tables against literal fixtures: which row each number comes from, how aggregates are
formed (with the ids they average), and that every number of the HTML carries its id."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

from focus_dagster.report import arena
from focus_dagster.report.arena import ModelInfo
from tests.core.report.test_report_reference import PUBLISHED

MODELS = {
    "enc_g": ModelInfo("vm", "general"), "enc_o": ModelInfo("vm", "ophthalmic"),
    "toy": ModelInfo("vm", "pipeline-check"), "med": ModelInfo("mllm", "medical", 27.0),
}


def _row(model, dataset, task, axis, metric, value, group="", method="linear_probe", train=None, partition=None,
         reason=None):
    mid = f"m-{model}-{dataset}-{task}-{train or ''}-{axis}-{metric}-{group}"
    return {"metric_id": mid, "model": model, "dataset": dataset, "task": task, "method": method,
            "train_dataset": train if train is not None else (dataset if method == "linear_probe" else None),
            "axis": axis, "metric": metric, "group": group, "value": value, "ci_low": None, "ci_high": None,
            "n": 40, "n_pos": 12, "reason": reason, "partition": partition or dataset}


def _metrics() -> pd.DataFrame:
    rows = [
        _row("enc_g", "brset", "any_dr", "performance", "auroc", 0.90),
        _row("enc_g", "brset", "any_dr", "performance", "auprc", 0.80),
        _row("enc_g", "brset", "any_dr", "performance", "accuracy@0.5", 0.85),
        _row("enc_g", "brset", "any_dr", "calibration", "ece", 0.10),
        _row("enc_g", "brset", "any_dr", "fairness", "equalized_odds_gap", 0.20, "sex:max-min"),
        _row("enc_g", "brset", "any_dr", "quality", "accuracy_gap", -0.05, "quality:adequate-inadequate"),
        _row("enc_g", "idrid", "any_dr", "performance", "auroc", 0.70),
        _row("enc_g", "idrid", "any_dr", "fairness", "equalized_odds_gap", None, "sex:max-min",
             reason="not applicable: idrid does not publish sex (datasets.md)"),
        _row("enc_o", "brset", "any_dr", "performance", "auroc", 0.60),
        _row("enc_o", "idrid", "gon", "performance", "auroc", None, reason="too few positives for auroc: 2 < minimum 5"),
        _row("toy", "brset", "any_dr", "performance", "auroc", 0.99),
        _row("med", "brset", "any_dr", "performance", "auroc", 0.75, method="yes_no"),
        _row("med", "brset", "any_dr", "calibration", "ece", 0.25, method="yes_no"),
        # a probe of enc_g trained on brset, tested on idrid
        _row("enc_g", "idrid", "any_dr", "performance", "auroc", 0.65, train="brset", partition="cross"),
    ]
    return pd.DataFrame(rows)


@pytest.fixture
def frame():
    return arena.with_families(_metrics(), MODELS)


def test_mean_interval_is_the_student_t_interval():
    # mean 0.7, sd 0.1, n 3: half-width t(0.975, 2) * 0.1 / sqrt(3) = 4.302653 * 0.0577350 = 0.2484138
    mean, low, high = arena.mean_interval([0.6, 0.7, 0.8])
    assert mean == pytest.approx(0.7)
    assert (low, high) == (pytest.approx(0.4515862, abs=1e-6), pytest.approx(0.9484138, abs=1e-6))
    assert np.isnan(arena.mean_interval([0.8])[1])  # one configuration: no interval
    # n 2: t(0.975, 1) = 12.7062, sd 0.275772, half-width 12.7062 * 0.195 = 2.47771: the raw interval leaves [0, 1], and is clipped
    assert arena.mean_interval([0.6, 0.99]) == pytest.approx((0.795, 0.795 - 2.47771, 0.795 + 2.47771), abs=1e-5)
    assert arena.mean_interval([0.6, 0.99], (0.0, 1.0)) == pytest.approx((0.795, 0.0, 1.0))


@pytest.mark.parametrize("source, size", [
    ("google/gemma-3-27b-it", 27.0), ("Qwen/Qwen3-VL-8B-Instruct", 8.0), ("llava-hf/llama3-llava-next-8b-hf", 8.0),
    ("google/medgemma-4b-it", 4.0), ("google/medgemma-1.5-4b-it", 4.0), ("openai/clip-vit-base-patch32", None),
    ("google/siglip2-base-patch16-224", None), ("builtin:seeded tiny LLaVA", None),
])
def test_sizes_are_read_from_the_hub_ids_of_protocol_md(source, size):
    assert arena.size_from_source(source) == size


def test_spider_axes_read_their_rows_and_turn_gaps_into_higher_is_better(frame):
    table = arena.spider_table(frame)
    brset = table[(table["model"] == "enc_g") & (table["dataset"] == "brset")].set_index("axis")
    assert brset.loc["AUROC", "shown"] == 0.90
    assert brset.loc["1 - ECE", "shown"] == pytest.approx(0.90)
    assert brset.loc["fairness", "shown"] == pytest.approx(0.80)  # 1 - equalized-odds gap 0.20
    assert brset.loc["graded quality", "shown"] == pytest.approx(0.95)  # 1 - |-0.05|
    assert brset.loc["fairness", "metric_id"] == "m-enc_g-brset-any_dr--fairness-equalized_odds_gap-sex:max-min"
    idrid = table[(table["model"] == "enc_g") & (table["dataset"] == "idrid")].set_index("axis")
    assert np.isnan(idrid.loc["fairness", "shown"]) and "does not publish sex" in idrid.loc["fairness", "reason"]
    assert "no quality rows" in idrid.loc["graded quality", "reason"]
    assert "no robustness rows" in idrid.loc["quality", "reason"]  # no robustness summary in this fixture
    # the cross-dataset pair is not a configuration of its own; the pipeline check is marked
    assert set(table["dataset"][table["model"] == "enc_g"]) == {"brset", "idrid"}
    assert table[table["model"] == "toy"]["configuration"].str.endswith("†").all()


def test_top_configurations_keep_six_per_family_by_auroc():
    rows = [_row("enc_g", f"d{k}", "any_dr", "performance", "auroc", 0.5 + k / 100) for k in range(9)]
    top = arena.top_configurations(arena.with_families(pd.DataFrame(rows), MODELS))
    assert list(top["dataset"]) == ["d8", "d7", "d6", "d5", "d4", "d3"]


def test_top_configurations_put_those_that_fill_more_axes_first():
    """The lowest AUROC fills three axes, one other two: they lead; the rest follow by AUROC."""
    rows = [_row("enc_g", f"d{k}", "any_dr", "performance", "auroc", 0.5 + k / 100) for k in range(9)]
    rows += [_row("enc_g", "d0", "any_dr", "fairness", "equalized_odds_gap", 0.1, "sex:max-min"),
             _row("enc_g", "d0", "any_dr", "calibration", "ece", 0.2),
             _row("enc_g", "d2", "any_dr", "calibration", "ece", 0.3),
             _row("enc_g", "d5", "any_dr", "fairness", "equalized_odds_gap", None, "sex:max-min",
                  reason="1 usable group(s) for sex: a gap needs two"),  # a row without a number fills nothing
             _row("enc_g", "d8", "any_dr", "fairness", "equalized_odds_gap", 0.1, "age:max-min")]  # not the axis
    top = arena.top_configurations(arena.with_families(pd.DataFrame(rows), MODELS))
    assert list(top["dataset"]) == ["d0", "d2", "d8", "d7", "d6", "d5"]
    assert list(top["axes"]) == [3, 2, 1, 1, 1, 1]


def test_method_means_never_pool_pipeline_checks_with_real_models_and_list_their_ids(frame):
    means = arena.method_means(frame).set_index(["family", "method", "domain", "task"])
    general = means.loc[("vm", "linear_probe", "general", "any_dr")]
    assert general["configurations"] == 2 and general["mean"] == pytest.approx(0.80)
    assert set(general["metric_ids"].split()) == {"m-enc_g-brset-any_dr--performance-auroc-",
                                                  "m-enc_g-idrid-any_dr--performance-auroc-"}
    assert means.loc[("vm", "linear_probe", "pipeline-check", "any_dr"), "mean"] == 0.99
    assert ("vm", "linear_probe", "ophthalmic", "gon") not in means.index  # its only AUROC is undefined
    cliff = arena.task_cliff(frame).set_index(["series", "task"])
    assert cliff.loc[("vision encoders", "any_dr"), "configurations"] == 3  # enc_g x2, enc_o; not the toy
    assert cliff.loc[("vision encoders (pipeline check †)", "any_dr"), "mean"] == 0.99


def test_general_vs_ophthalmic_per_dataset(frame):
    table = arena.general_vs_ophthalmic(frame, ["brset", "idrid", "papila"]).set_index("dataset")
    assert table.loc["brset", "difference"] == pytest.approx(0.60 - 0.90)
    assert table.loc["idrid", "ophthalmic_configurations"] == 0 and "ophthalmic" in table.loc["idrid", "reason"]
    assert "general or ophthalmic" in table.loc["papila", "reason"]


def test_transfer_matrix_has_the_pair_and_the_in_domain_diagonal(frame):
    table = arena.transfer_table(frame)
    enc = table[table["model"] == "enc_g"].set_index(["train_dataset", "dataset"])
    assert enc.loc[("brset", "idrid"), "value"] == 0.65
    assert enc.loc[("brset", "brset"), "value"] == 0.90 and enc.loc[("idrid", "idrid"), "value"] == 0.70
    assert "enc_o" not in set(table["model"])  # no cross pair: no matrix


def test_mllm_table_and_reliability_targets(frame):
    mllm = arena.mllm_table(frame).set_index("model")
    assert mllm.loc["med", "auroc"] == 0.75 and mllm.loc["med", "ece"] == 0.25 and mllm.loc["med", "size_b"] == 27
    assert np.isnan(mllm.loc["med", "fairness_gap"])
    targets = arena.reliability_targets(frame)
    assert set(zip(targets["family"], targets["model"])) == {("vm", "enc_g"), ("mllm", "med")}


def test_reliability_bins_count_the_test_images():
    frame = arena.with_families(_metrics(), MODELS)
    targets = arena.reliability_targets(frame)
    samples = pd.DataFrame({"model": "med", "dataset": "brset", "task": "any_dr", "method": "yes_no",
                            "train_dataset": None, "split": ["test"] * 4 + ["train"],
                            "score": [0.05, 0.15, 0.12, 0.95, 0.5], "label": [0, 1, 0, 1, 1]})
    bins = arena.reliability_table(targets, samples)
    assert list(bins["count"]) == [1, 2, 0, 0, 0, 0, 0, 0, 0, 1]  # the train row is not counted
    assert bins["positive_rate"].iloc[1] == 0.5 and bins["mean_score"].iloc[1] == pytest.approx(0.135)
    assert set(bins["metric_id"]) == {"m-med-brset-any_dr--calibration-ece-"}


def test_coverage_gives_each_empty_cell_its_reason(frame):
    cells = arena.coverage(frame, None, ["brset", "idrid", "papila"]).set_index(["dataset", "axis"])
    assert cells.loc[("brset", "fairness"), "covered"] == "yes"
    assert cells.loc[("idrid", "fairness"), "reason"] == "not applicable: idrid does not publish sex (datasets.md)"
    assert cells.loc[("idrid", "transfer"), "covered"] == "yes"
    assert cells.loc[("papila", "performance"), "reason"].startswith("no rows: metrics has nothing for papila")
    empty = arena.empty_numbers(frame, None)
    assert set(empty["metric_ids"]) == {"m-enc_g-idrid-any_dr--fairness-equalized_odds_gap-sex:max-min",
                                        "m-enc_o-idrid-gon--performance-auroc-"}


def test_coverage_names_what_the_attribute_checks_withheld_or_blocked(frame):
    withheld = "attribute_coverage: sex is set on 82.8% of the test images (floor 90%)"
    blocked = "attributes_usable: every attribute papila publishes is below the floor: ..."
    notes = {"brset": {"fairness": [withheld], "quality": []}, "papila": {"fairness": [blocked], "quality": [blocked]}}
    cells = arena.coverage(frame, None, ["brset", "idrid", "papila"], notes).set_index(["dataset", "axis"])
    assert tuple(cells.loc[("brset", "fairness"), ["covered", "reason"]]) == ("yes", withheld)  # the rest stands
    assert cells.loc[("papila", "fairness"), "reason"] == blocked  # no rows, and the check says why
    assert cells.loc[("papila", "performance"), "reason"].startswith("no rows: metrics has nothing for papila")
    assert cells.loc[("idrid", "fairness"), "reason"] == "not applicable: idrid does not publish sex (datasets.md)"


def test_lora_means_keep_pipeline_check_adapters_apart():
    effects = pd.DataFrame([
        {"metric_id": f"m-{k}", "model": model, "dataset": "idrid", "task": "any_dr", "method": "yes_no_lora",
         "train_dataset": "idrid", "domain": "in_domain", "metric": "auroc", "base": 0.6, "adapted": 0.6 + delta,
         "delta": delta, "ci_low": None, "ci_high": None, "p_value": 0.5, "q_value": 0.5, "n": 30, "n_pos": 10,
         "reason": None}
        for k, (model, delta) in enumerate([("med", 0.02), ("med", 0.04), ("toy", 0.30)])])
    means = arena.lora_means(arena.lora_deltas(effects, MODELS)).set_index("series")
    assert means.loc["multimodal LLMs", "mean"] == pytest.approx(0.03)
    assert means.loc["multimodal LLMs", "metric_ids"] == "m-0 m-1"
    assert means.loc["multimodal LLMs (pipeline check †)", "mean"] == pytest.approx(0.30)


class _Numbers(HTMLParser):
    """Collect every table cell and span whose text is a number, with its data-metric-id (None when absent); a
    published value quoted beside ours (data-reference-id) in `quoted`."""

    def __init__(self):
        super().__init__()
        self.stack, self.found, self.quoted = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("data-reference-id"):
            self.quoted.append(attrs["data-reference-id"])
            tag = "quoted"
        self.stack.append((tag, attrs.get("data-metric-id")))

    def handle_endtag(self, tag):
        if self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1][0] in ("td", "span") and re.fullmatch(r"[-+]?\d+(\.\d+)?", data.strip()):
            self.found.append((data.strip(), self.stack[-1][1]))


def test_every_number_of_the_html_carries_metric_ids_that_exist(frame):
    from focus_dagster.report.build import ReportInputs, build_report

    samples = pd.DataFrame(columns=["model", "dataset", "task", "method", "train_dataset", "split", "score", "label"])
    report = build_report(ReportInputs(_metrics(), pd.DataFrame(), None, MODELS, ["brset", "idrid"],
                                       lambda datasets: samples))
    parser = _Numbers()
    parser.feed(report.html)
    assert len(parser.found) > 30
    known = set(_metrics()["metric_id"])
    for text, ids in parser.found:
        assert ids, f"{text} has no metric id"
        assert set(ids.split()) <= known, (text, ids)
    assert report.metric_ids() <= known
    # Nothing is fetched: no source or link to a network address, no request made by the script.
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:|//)""", report.html, re.I)
    assert not re.search(r"fetch\(|XMLHttpRequest|WebSocket|import\(|\bsrc=", report.html)
    # One script of its own, inline (no src); every other script element is data, never run.
    scripts = re.findall(r"<script([^>]*)>", report.html)
    assert scripts.count("") == 1 and all(s.startswith(' type="application/json" id=') for s in scripts if s)
    assert '<script type="application/json" id="spider-data">' in report.html
    assert '<script type="application/json" id="lineage">' in report.html
    assert sorted(parser.quoted) == sorted(PUBLISHED)  # each published value cites its reference (no adapter, no
    # Figure-5 model here: the paper's table alone quotes them, once each)


def test_the_researchers_own_models_are_marked_in_every_table_and_named_in_the_controls():
    from focus_dagster.report.build import ReportInputs, build_report

    mine = {**MODELS, "clinic_net": ModelInfo("vm", "ophthalmic", own=True)}
    rows = _metrics()
    own_rows = rows[rows["model"] == "enc_o"].assign(model="clinic_net", metric_id=lambda f: "own-" + f["metric_id"])
    samples = pd.DataFrame(columns=["model", "dataset", "task", "method", "train_dataset", "split", "score", "label"])
    report = build_report(ReportInputs(pd.concat([rows, own_rows], ignore_index=True), pd.DataFrame(), None, mine,
                                       ["brset", "idrid"], lambda datasets: samples))
    marked = re.findall(r"<tr([^>]*)>", report.html)
    assert marked and all(('data-own="yes"' in a) == ('data-model="clinic_net"' in a) for a in marked)
    assert any('data-own="yes"' in a for a in marked)
    assert re.search(r'<div id="controls"[^>]*>.*your models: clinic_net</span></div>', report.html)
    plain = build_report(ReportInputs(rows, pd.DataFrame(), None, MODELS, ["brset", "idrid"], lambda d: samples))
    assert "data-own=" not in plain.html and "your models" not in plain.html
