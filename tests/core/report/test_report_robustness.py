"""The arena's image-quality robustness against literal fixtures: the spider's quality axis read from the
robustness summary on every dataset (the publisher-graded gap kept beside it), the robustness curves' means with
their t intervals (scipy), the most and least robust configurations, and every number of the section carrying
an id of the rows it comes from."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from focus_dagster.report import arena
from tests.core.report.test_report_arena import MODELS, _Numbers, _metrics

BLUR = {"registry": "r-1", "family": "optics"}
LIGHT = {"registry": "r-1", "family": "illumination"}


def _summary() -> pd.DataFrame:
    rows = [("s-g-brset", "enc_g", "brset", 0.10), ("s-g-idrid", "enc_g", "idrid", 0.20),
            ("s-o-brset", "enc_o", "brset", 0.05), ("s-toy", "toy", "brset", 0.01)]
    return pd.DataFrame([{"metric_id": mid, "model": model, "dataset": dataset, "task": "any_dr",
                          "method": "linear_probe", "train_dataset": dataset, "variants": 2, "n": 40, "n_pos": 12, "mean_relative_drop": drop,
                          "quality_axis": 1 - drop, "worst_degradation": "defocus_blur", "worst_severity": 5,
                          "worst_relative_drop": 2 * drop, "ce_baseline": "enc_g", "mce": None, "mce_reason": None,
                          "lineage_id": "l-1"} for mid, model, dataset, drop in rows])


def _robustness() -> pd.DataFrame:
    """enc_g on two datasets and enc_o on one, blur at severities 1 and 5; enc_g on brset also under
    underexposure."""
    rows = [("enc_g", "brset", "defocus_blur", BLUR, 1, 0.90, 0.85), ("enc_g", "brset", "defocus_blur", BLUR, 5, 0.90, 0.70),
            ("enc_g", "idrid", "defocus_blur", BLUR, 1, 0.70, 0.66), ("enc_g", "idrid", "defocus_blur", BLUR, 5, 0.70, 0.60),
            ("enc_o", "brset", "defocus_blur", BLUR, 1, 0.60, 0.58), ("enc_o", "brset", "defocus_blur", BLUR, 5, 0.60, 0.50),
            ("enc_g", "brset", "underexposure", LIGHT, 3, 0.90, 0.88)]
    frame = pd.DataFrame([{"metric_id": f"r-{m}-{d}-{name}-{s}", "model": m, "dataset": d, "task": "any_dr",
                           "method": "linear_probe", "degradation": name, "severity": s, "metric": "auroc",
                           "clean": clean, "degraded": degraded, "ci_low": degraded - 0.05, "ci_high": degraded + 0.05,
                           "delta": degraded - clean, "delta_low": degraded - clean - 0.02,
                           "delta_high": degraded - clean + 0.02, "p_value": 0.01, "relative_drop": (clean - degraded) / clean,
                           "n": 40, "n_pos": 12, "reason": None, "registry": "r-1",
                           "parameters": json.dumps({**family, "degradation": name, "severity": s})}
                          for m, d, name, family, s, clean, degraded in rows])
    ece = frame.assign(metric="ece", metric_id=frame["metric_id"] + "-ece", clean=0.1, degraded=0.2)  # not curves
    return pd.concat([frame, ece], ignore_index=True)


@pytest.fixture
def frame():
    return arena.with_families(pd.concat([_metrics(), arena.quality_axis_rows(_summary())], ignore_index=True), MODELS)


def test_the_quality_axis_is_defined_on_every_dataset_and_the_graded_gap_kept_beside_it(frame):
    table = arena.spider_table(frame)
    brset = table[(table["model"] == "enc_g") & (table["dataset"] == "brset")].set_index("axis")
    assert brset.loc["quality", "shown"] == pytest.approx(0.90) and brset.loc["quality", "metric_id"] == "s-g-brset"
    assert brset.loc["graded quality", "shown"] == pytest.approx(0.95)  # 1 - |-0.05|, the publisher's grades
    idrid = table[(table["model"] == "enc_g") & (table["dataset"] == "idrid")].set_index("axis")
    assert idrid.loc["quality", "shown"] == pytest.approx(0.80)  # IDRiD grades no quality: defined all the same
    assert np.isnan(idrid.loc["graded quality", "shown"]) and "no quality rows" in idrid.loc["graded quality", "reason"]


def test_a_quality_axis_above_one_is_shown_at_one_and_kept_as_it_is():
    summary = _summary()
    summary.loc[0, ["mean_relative_drop", "quality_axis"]] = (-0.08, 1.08)  # AUROC rose under the degradations
    frame = arena.with_families(pd.concat([_metrics(), arena.quality_axis_rows(summary)], ignore_index=True), MODELS)
    table = arena.spider_table(frame)
    row = table[(table["model"] == "enc_g") & (table["dataset"] == "brset") & (table["axis"] == "quality")].iloc[0]
    assert (row["shown"], row["value"]) == (1.0, pytest.approx(1.08))


def test_coverage_has_a_robustness_axis_per_dataset(frame):
    table = arena.coverage(frame, None, ["brset", "idrid", "papila"]).set_index(["dataset", "axis"])
    assert table.loc[("idrid", "robustness"), "covered"] == "yes"
    assert table.loc[("papila", "robustness"), "covered"] == "no"
    assert "robustness_summary has nothing for papila" in table.loc[("papila", "robustness"), "reason"]


def test_the_curves_are_means_over_configurations_with_student_t_intervals_and_severity_zero_clean():
    curves = arena.robustness_curves(_robustness(), MODELS)
    blur = curves[(curves["degradation"] == "defocus_blur")].set_index("severity")
    assert set(curves["panel"]) == {"optics", "illumination"} and set(blur["panel"]) == {"optics"}
    assert blur.loc[0, "configurations"] == 3 and blur.loc[0, "mean"] == pytest.approx((0.90 + 0.70 + 0.60) / 3)
    values = np.array([0.70, 0.60, 0.50])
    half = stats.t.ppf(0.975, 2) * values.std(ddof=1) / np.sqrt(3)
    assert blur.loc[5, "mean"] == pytest.approx(0.60)
    assert (blur.loc[5, "ci_low"], blur.loc[5, "ci_high"]) == pytest.approx((0.60 - half, 0.60 + half))
    assert sorted(blur.loc[5, "metric_ids"].split()) == ["r-enc_g-brset-defocus_blur-5", "r-enc_g-idrid-defocus_blur-5",
                                                          "r-enc_o-brset-defocus_blur-5"]
    light = curves[curves["degradation"] == "underexposure"].set_index("severity")
    assert list(light.index) == [0, 3] and light.loc[3, "configurations"] == 1 and np.isnan(light.loc[3, "ci_low"])


def test_the_most_and_least_robust_keep_pipeline_checks_apart():
    table = arena.robustness_extremes(_summary(), MODELS, count=2)
    real = table[~table["rank"].str.endswith("†")]
    assert list(real["metric_id"]) == ["s-o-brset", "s-g-brset", "s-g-idrid"]  # least: idrid, then brset (shown once)
    assert list(real["rank"]) == ["most robust 1", "most robust 2", "least robust 1"]
    assert list(table.loc[table["rank"].str.endswith("†"), "metric_id"]) == ["s-toy"]


def test_every_number_of_the_robustness_section_carries_ids_that_exist():
    from focus_dagster.report.build import ReportInputs, build_report

    samples = pd.DataFrame(columns=["model", "dataset", "task", "method", "train_dataset", "split", "score", "label"])
    report = build_report(ReportInputs(_metrics(), pd.DataFrame(), None, MODELS, ["brset", "idrid"],
                                       lambda datasets: samples, robustness=_robustness(),
                                       robustness_summary=_summary()))
    section = next(s for s in report.sections if s.name == "robustness")
    assert section.figure is not None and b"optics" in section.figure.svg
    parser = _Numbers()
    parser.feed(report.html)
    known = set(_metrics()["metric_id"]) | set(_summary()["metric_id"]) | set(_robustness()["metric_id"])
    for text, ids in parser.found:
        assert ids and set(ids.split()) <= known, (text, ids)
    assert {"s-g-idrid", "r-enc_g-idrid-defocus_blur-5"} <= report.metric_ids() <= known
