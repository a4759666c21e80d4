"""The reference study's published values beside ours: the values as the study states them (a literal fixture
typed from the shared protocol, ../shared/protocol.md "Reference results"), and ours formed by hand from literal
metric rows: which rows each figure pools, what it leaves out, and what a grid without the configuration says."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from focus_dagster.report import arena
from focus_dagster.report.arena import ModelInfo
from focus_dagster.report.reference import beside_ours

# The published values, typed from the protocol's summary of arXiv:2609.33158 (not from the module).
PUBLISHED = {
    "mean.vm.general": 0.828, "mean.vm.ophthalmic": 0.667, "mean.mllm.medical": 0.803, "mean.mllm.general": 0.658,
    "gap.mbrset": 0.162,
    "medgemma_27b.auroc": 0.797, "gemma3_27b.auroc": 0.648, "medgemma_27b.ece": 0.19, "gemma3_27b.ece": 0.36,
    "lora.in.accuracy": 0.033, "lora.in.ece": -0.040, "lora.in.auroc": 0.004,
    "lora.out.accuracy": 0.012, "lora.out.ece": -0.018, "lora.out.auroc": 0.002,
}
MODELS = {
    "gen_a": ModelInfo("vm", "general"), "gen_b": ModelInfo("vm", "general"), "oph": ModelInfo("vm", "ophthalmic"),
    "medgemma_27b": ModelInfo("mllm", "medical", 27.0), "gemma3_27b": ModelInfo("mllm", "general", 27.0),
    "toy": ModelInfo("vm", "pipeline-check"),
}


def _row(model, dataset, task, value, axis="performance", metric="auroc", method="linear_probe", partition=None,
         group=""):
    return {"metric_id": f"m-{model}-{dataset}-{task}-{axis}-{metric}-{partition or ''}", "model": model,
            "dataset": dataset, "task": task, "method": method,
            "train_dataset": dataset if method == "linear_probe" else None, "axis": axis, "metric": metric,
            "group": group, "value": value, "ci_low": None, "ci_high": None, "n": 40, "n_pos": 12, "reason": None,
            "partition": partition or dataset}


@pytest.fixture
def table() -> pd.DataFrame:
    rows = [
        _row("gen_a", "mbrset", "any_dr", 0.90), _row("gen_b", "mbrset", "gon", 0.70),
        _row("gen_a", "idrid", "any_dr", 0.80),
        _row("oph", "mbrset", "any_dr", 0.60), _row("oph", "idrid", "gon", None),  # undefined: left out
        _row("toy", "mbrset", "any_dr", 0.99),  # a pipeline check: never pooled with real models
        _row("gen_a", "idrid", "any_dr", 0.10, partition="cross"),  # a cross-dataset pair: not in-domain
        _row("gen_a", "mbrset", "any_dr", 0.50, group="sex:female"),  # a group row, not the configuration's AUROC
        _row("medgemma_27b", "brset", "any_dr", 0.85, method="yes_no"),
        _row("medgemma_27b", "idrid", "gon", 0.75, method="yes_no"),
        _row("medgemma_27b", "brset", "any_dr", 0.20, axis="calibration", metric="ece", method="yes_no"),
    ]
    frame = arena.with_families(pd.DataFrame(rows), MODELS)
    deltas = pd.DataFrame([
        {"domain": "in_domain", "metric": "accuracy@0.5", "delta": 0.05, "pipeline_check": False, "metric_id": "l-1"},
        {"domain": "in_domain", "metric": "accuracy@0.5", "delta": 0.01, "pipeline_check": False, "metric_id": "l-2"},
        {"domain": "in_domain", "metric": "accuracy@0.5", "delta": 0.90, "pipeline_check": True, "metric_id": "l-3"},
        {"domain": "out_of_domain", "metric": "ece", "delta": None, "pipeline_check": False, "metric_id": "l-4"},
    ])
    return beside_ours(frame, deltas).set_index("reference")


def test_every_published_value_is_the_studys_with_its_table_or_figure(table):
    assert table["published"].to_dict() == PUBLISHED
    assert table["source"].str.fullmatch(r"arXiv:2609\.33158 (Table [345]|Figure 5)").all()
    assert table.loc["gap.mbrset", "source"].endswith("Table 4")
    assert table.loc["medgemma_27b.ece", "source"].endswith("Figure 5")


def test_method_means_pool_every_real_in_domain_configuration(table):
    general = table.loc["mean.vm.general"]
    assert general["ours"] == pytest.approx((0.90 + 0.70 + 0.80) / 3) and general["configurations"] == 3
    assert general["difference"] == pytest.approx((0.90 + 0.70 + 0.80) / 3 - 0.828)
    assert set(general["metric_ids"].split()) == {"m-gen_a-mbrset-any_dr-performance-auroc-",
                                                  "m-gen_b-mbrset-gon-performance-auroc-",
                                                  "m-gen_a-idrid-any_dr-performance-auroc-"}
    assert table.loc["mean.vm.ophthalmic", "ours"] == pytest.approx(0.60)  # its undefined AUROC left out
    assert table.loc["mean.mllm.medical", "ours"] == pytest.approx(0.80)


def test_the_encoder_gap_is_general_minus_ophthalmic_on_the_dataset(table):
    gap = table.loc["gap.mbrset"]
    assert gap["ours"] == pytest.approx((0.90 + 0.70) / 2 - 0.60) and gap["configurations"] == 3


def test_a_models_means_and_lora_means_over_real_configurations(table):
    assert table.loc["medgemma_27b.auroc", "ours"] == pytest.approx(0.80)
    assert table.loc["medgemma_27b.ece", "ours"] == pytest.approx(0.20)
    accuracy = table.loc["lora.in.accuracy"]
    assert accuracy["ours"] == pytest.approx(0.03) and accuracy["metric_ids"] == "l-1 l-2"


def test_a_figure_this_grid_cannot_form_is_empty_with_what_would_fill_it(table):
    gemma = table.loc["gemma3_27b.auroc"]
    assert np.isnan(gemma["ours"]) and np.isnan(gemma["difference"]) and gemma["configurations"] == 0
    assert "gemma3_27b is not in this grid" in gemma["reason"]
    assert "no general multimodal" not in gemma["reason"]
    assert "no general model of this family" in table.loc["mean.mllm.general", "reason"]
    assert "out-of-domain" in table.loc["lora.out.ece", "reason"]  # its one delta is undefined
    assert table.loc[table["ours"].notna(), "reason"].eq("").all()


def test_without_any_adapter_every_lora_row_says_so():
    frame = arena.with_families(pd.DataFrame([_row("gen_a", "mbrset", "any_dr", 0.9)]), MODELS)
    table = beside_ours(frame, arena.lora_deltas(None, MODELS)).set_index("reference")
    lora = table[table.index.str.startswith("lora.")]
    assert len(lora) == 6 and lora["ours"].isna().all()
    assert lora["reason"].str.contains("no adapter of a real multimodal LLM").all()


# ------------------------------------------------------------------------------ columns of other tables


def test_the_lora_means_quote_table_5_beside_each_domain_and_metric_and_ours_minus_it_for_real_models():
    from focus_dagster.report.reference import beside

    means = arena.lora_means(pd.DataFrame([
        {"domain": "in_domain", "metric": "accuracy@0.5", "delta": 0.05, "pipeline_check": False, "metric_id": "l-1"},
        {"domain": "in_domain", "metric": "accuracy@0.5", "delta": 0.90, "pipeline_check": True, "metric_id": "l-2"},
        {"domain": "out_of_domain", "metric": "ece", "delta": -0.02, "pipeline_check": False, "metric_id": "l-3"},
        {"domain": "out_of_domain", "metric": "brier", "delta": 0.01, "pipeline_check": False, "metric_id": "l-4"},
    ]))
    real = means["series"] == arena.series_of("mllm", False)
    table = beside(means, "lora_mean", {"domain": "domain", "metric": "metric"}, "mean", real)
    rows = {(r.series == arena.series_of("mllm", False), r.domain, r.metric): r for r in table.itertuples()}
    accuracy = rows[(True, "in_domain", "accuracy@0.5")]
    assert (accuracy.published, accuracy.published_reference) == (0.033, "lora.in.accuracy")
    assert accuracy.published_difference == pytest.approx(0.05 - 0.033)
    ece = rows[(True, "out_of_domain", "ece")]
    assert (ece.published, ece.published_difference) == (-0.018, pytest.approx(-0.02 + 0.018))
    check = rows[(False, "in_domain", "accuracy@0.5")]  # the published value beside it, no difference
    assert check.published == 0.033 and np.isnan(check.published_difference)
    brier = rows[(True, "out_of_domain", "brier")]  # the study published no Brier delta
    assert np.isnan(brier.published) and pd.isna(brier.published_reference) and np.isnan(brier.published_difference)


def test_the_mllm_table_quotes_figure_5_on_medgemma_and_gemma_rows_only(table):
    from focus_dagster.report.build import ReportInputs, build_report

    rows = [_row("medgemma_27b", "brset", "any_dr", 0.85, method="yes_no"),
            _row("medgemma_27b", "brset", "any_dr", 0.20, axis="calibration", metric="ece", method="yes_no"),
            _row("gen_a", "brset", "any_dr", 0.9)]
    samples = pd.DataFrame(columns=["model", "dataset", "task", "method", "train_dataset", "split", "score", "label"])
    report = build_report(ReportInputs(pd.DataFrame(rows), pd.DataFrame(), None, MODELS, ["brset"], lambda d: samples))
    mllm = next(t for t in report.tables if t.name == "mllm").frame.set_index("model")
    medgemma = mllm.loc["medgemma_27b"]
    assert (medgemma["published_auroc"], medgemma["published_auroc_reference"]) == (0.797, "medgemma_27b.auroc")
    assert (medgemma["published_ece"], medgemma["published_ece_reference"]) == (0.19, "medgemma_27b.ece")
    assert medgemma["published_auroc_difference"] == pytest.approx(0.85 - 0.797)
    cells = re.findall(r'data-reference-id="([^"]+)"[^>]*>([^<]+)</td>', report.html)
    assert ("medgemma_27b.auroc", "0.797") in cells and ("medgemma_27b.ece", "0.190") in cells
    assert all(PUBLISHED[ref] == pytest.approx(float(text), abs=5e-4) for ref, text in cells)


def test_the_encoder_table_quotes_table_4_on_mbrset_as_published_and_ours_the_same_way_round():
    from focus_dagster.report.build import ReportInputs, build_report

    rows = [_row("gen_a", "mbrset", "any_dr", 0.90), _row("oph", "mbrset", "any_dr", 0.60),
            _row("gen_a", "idrid", "any_dr", 0.80)]
    samples = pd.DataFrame(columns=["model", "dataset", "task", "method", "train_dataset", "split", "score", "label"])
    report = build_report(ReportInputs(pd.DataFrame(rows), pd.DataFrame(), None, MODELS, ["mbrset", "idrid"],
                                       lambda d: samples))
    table = next(t for t in report.tables if t.name == "general_vs_ophthalmic").frame.set_index("dataset")
    mbrset, idrid = table.loc["mbrset"], table.loc["idrid"]
    assert (mbrset["published_general_minus_ophthalmic"], mbrset["published_general_minus_ophthalmic_reference"]) == (
        0.162, "gap.mbrset")
    assert mbrset["difference"] == pytest.approx(0.60 - 0.90)  # the table's own: ophthalmic - general
    assert mbrset["published_general_minus_ophthalmic_difference"] == pytest.approx((0.90 - 0.60) - 0.162)
    assert np.isnan(idrid["published_general_minus_ophthalmic"])
    assert re.search(r'data-reference-id="gap.mbrset"[^>]*>\+0\.162</td>', report.html)
    section = next(s for s in report.sections if s.name == "general_vs_ophthalmic")
    assert "general − ophthalmic +0.162" in section.figure.svg.decode()
    assert "retfound_mae_meh" in " ".join(section.notes)  # what would fill a dataset without ophthalmic encoders


# ------------------------------------------------------------------------------ marks on the figures


def _drawn(draw, *args):
    """The figure `draw` makes, laid out as the report draws it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(layout="constrained")
    FigureCanvasAgg(fig)
    draw(fig, *args)
    fig.draw_without_rendering()
    return fig


def test_the_method_means_figure_draws_the_published_means_even_without_such_a_model():
    from focus_dagster.report import figures, reference

    table = pd.DataFrame(columns=["family", "method", "domain", "task", "mean", "ci_low", "ci_high", "metric_ids"])
    fig = _drawn(figures.draw_method_means, table, reference.published("method_mean"))
    lines = {round(line.get_ydata()[0], 3): ax.get_title() for ax in fig.axes for line in ax.get_lines()
             if line.get_linestyle() == "--"}
    assert lines == {0.828: "vision encoders", 0.667: "vision encoders", 0.803: "multimodal LLMs",
                     0.658: "multimodal LLMs"}
    labels = [text.get_text() for ax in fig.axes for text in ax.get_legend().get_texts()]
    assert "published ophthalmic linear_probe: 0.667\n(no ophthalmic model in this grid)" in labels


def test_the_mllm_figure_places_medgemma_and_gemma_where_the_study_published_them():
    from focus_dagster.report import figures, reference

    fig = _drawn(figures.draw_mllm, pd.DataFrame(), reference.published("model_mean"))
    points = {tuple(np.round(point, 3)) for collection in fig.axes[0].collections
              for point in collection.get_offsets()}
    assert points == {(PUBLISHED["medgemma_27b.auroc"], PUBLISHED["medgemma_27b.ece"]),
                      (PUBLISHED["gemma3_27b.auroc"], PUBLISHED["gemma3_27b.ece"])}
    names = {text.get_text() for text in fig.axes[0].texts}
    assert {"MedGemma-27B (published)", "Gemma-3-27B (published)"} <= names


def test_the_lora_figure_marks_the_published_mean_deltas_per_metric_and_domain():
    from focus_dagster.report import arena, figures, reference

    deltas = arena.lora_deltas(None, {})
    fig = _drawn(figures.draw_lora, deltas, arena.lora_means(deltas), reference.published("lora_mean"))
    marked = {}
    for ax in fig.axes:
        for collection in ax.collections:
            for x, y in collection.get_offsets():
                marked[(ax.get_title(), "in" if x < 0.5 else "out")] = round(float(y), 3)
    assert marked == {("Δ accuracy@0.5", "in"): PUBLISHED["lora.in.accuracy"],
                      ("Δ ece", "in"): PUBLISHED["lora.in.ece"], ("Δ auroc", "in"): PUBLISHED["lora.in.auroc"],
                      ("Δ accuracy@0.5", "out"): PUBLISHED["lora.out.accuracy"],
                      ("Δ ece", "out"): PUBLISHED["lora.out.ece"], ("Δ auroc", "out"): PUBLISHED["lora.out.auroc"]}
