"""`focus demo` end to end (two look-alikes, the default models, one LoRA adapter) and the arena report it builds:
its files, its numbers against the metric tables, the page in a real browser, and `focus report`."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from tests.core.report.test_report_reference import PUBLISHED
from tests.support.environment import require_chromium
from tests.support.focus_cli import run_focus
from tests.support.tables import table_views

pytestmark = pytest.mark.heavy(45)  # seconds on a quiet 2-core machine: started first

FIGURES = ("spider", "method_means", "general_vs_ophthalmic", "task_cliff", "mllm", "transfer", "reliability",
           "robustness", "lora", "coverage")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's home and what it printed: RFMiD 2.0 and Messidor-2 (whose seeded split leaves enough test images
    for defined AUROCs at 50 images), the default models, an adapter trained on Messidor-2."""
    tmp = tmp_path_factory.mktemp("demo")
    config = tmp / "focus.yaml"
    config.write_text("datasets: {rfmid_2: synthetic, messidor_2: synthetic}\nsynthetic: {per_dataset: 50, scale: 0.04}\n"
                      "lora: {train_datasets: [messidor_2], tasks: [any_dr]}\n")
    env = {"FOCUS_HOME": str(tmp / "home"), "FOCUS_CONFIG": str(config)}
    code, out = run_focus(env, "demo")
    assert code == 0, out
    return tmp / "home", env, out


def _table(home: Path, sql: str) -> pd.DataFrame:
    with table_views(home) as con:
        return con.execute(sql).df()


def test_demo_runs_end_to_end_and_says_where_results_are(demo):
    """The whole graph on two look-alikes with the default models, one LoRA adapter trained on Messidor-2
    included: scored in-domain and on RFMiD 2.0, and compared with its base."""
    home, env, out = demo
    assert "rfmid_2     read    50 = kept    49 + quarantined   1 | labelled    49 (native split)" in out
    assert "FAILED" not in out and out.count("warn: ") == 2 and "artifacts/tables" in out
    # The UI on this demo's instance: `make ui` alone would open the one under ./.focus.
    assert (f"  open the UI: FOCUS_HOME={env['FOCUS_HOME']} FOCUS_CONFIG={env['FOCUS_CONFIG']} .venv/bin/focus ui   "
            "(http://127.0.0.1:3000, lineage graph and every run above)") in out.splitlines()
    assert re.search(r"lora adapter +tiny_llava\.messidor_2\.any_dr +\d+ examples, \d+ steps, loss", out), out
    assert re.search(r"adapted scores +tiny_llava\.messidor_2\.any_dr \(pipeline-check\) +\d+ rows over 2 datasets",
                     out), out
    assert re.search(r"lora effects .* \d+ rows, 2 comparisons with deltas", out), out
    assert re.search(r"arena report +10 figures, 17 tables, \d+ metric ids cited: .*reports/arena/index.html", out), out
    assert (home / "dagster" / "dagster.yaml").is_file()
    assert (home / "artifacts" / "adapters" / "tiny_llava.messidor_2.any_dr" / "manifest.json").is_file()
    with table_views(home) as con:
        assert con.execute("SELECT count(*) FROM records.messidor_2").fetchone()[0] == 50
        assert con.execute("SELECT reason_code FROM records.quarantine").fetchall() == [("image_missing",)]
        assert con.execute("SELECT stage, reason_code FROM labels.rejects ORDER BY stage DESC").fetchall() == [
            ("records", "image_missing"), ("labels", "label:ungradable")]
        assert con.execute("SELECT count(*) FROM labels.harmonised WHERE dataset = 'messidor_2'").fetchone()[0] == 49
        adapted = con.execute("SELECT DISTINCT dataset, train_dataset FROM predictions.samples "
                              "WHERE method = 'yes_no_lora' ORDER BY dataset").fetchall()
        domains = con.execute("SELECT domain, count(*) FROM metrics.lora_effects WHERE metric = 'brier' "
                              "AND delta IS NOT NULL GROUP BY domain ORDER BY domain").fetchall()
    assert adapted == [("messidor_2", "messidor_2"), ("rfmid_2", "messidor_2")]
    assert domains == [("in_domain", 1), ("out_of_domain", 1)]


def test_the_demo_prints_each_steps_progress_as_it_runs_and_the_time_of_every_stage(demo):
    """Not a terminal here: a plain line each, indented under the summary lines, as the steps log them."""
    _, _, out = demo
    lines = out.splitlines()
    for pattern in (r"messidor_2 image checks \(header\): 50/50 images in \d+s, [\d.]+ images/s",
                    r"embeddings efficientnet_lite0@rfmid_2: 49/49 images in \d+s",
                    r"yes/no scores tiny_llava@messidor_2 \(\d questions per image\): 49/49 images in",
                    r"lora tiny_llava training: (\d+)/\1 examples in \d+s, [\d.]+ examples/s",
                    r"metrics rfmid_2: (\d+)/\1 configurations in", r"fairness metrics messidor_2: (\d+)/\1 configurations",
                    r"arena report: (\d+)/\1 sections in"):
        assert any(re.fullmatch(rf" +\d+s    {pattern}.*", line) for line in lines), (pattern, out)
    # Each model's summary line follows the progress of its steps.
    progress = next(i for i, line in enumerate(lines) if "embeddings efficientnet_lite0@messidor_2:" in line)
    summary = next(i for i, line in enumerate(lines)
                   if re.match(r" +\d+s  embeddings\+probes\+robustness efficientnet_lite0", line))
    assert progress < summary
    [stages] = [line for line in lines if line.startswith("  time per stage: ")]
    assert re.fullmatch(r"  time per stage: releases \d+s, data layer \d+s \(2 runs\), "
                        r"embeddings\+probes\+robustness \d+s \(4 runs\), zero-shot\+robustness \d+s \(2 runs\), "
                        r"yes/no\+robustness \d+s \(2 runs\), "
                        r"lora training \d+s, adapted scores \d+s \(2 runs\), metrics \d+s \(2 runs\), leaderboard \d+s, "
                        r"robustness summary \d+s, lora effects \d+s, arena report \d+s", stages), stages


def test_the_demo_leaderboard_ranks_the_real_encoder_first_and_marks_pipeline_checks(demo):
    """efficientnet_lite0 is the one real model of the defaults; tiny_clip and tiny_llava are pipeline checks."""
    _, _, out = demo
    rows = re.findall(r"^    (\w+) +(\w+) +[\d.]+ \([\d.]+-[\d.]+\)  (\S+( †)?) on ", out, flags=re.MULTILINE)
    best = {(method, task): model for method, task, model, _ in rows}
    assert {model for (method, _), model in best.items() if method == "linear_probe"} == {"efficientnet_lite0"}, out
    assert best[("zero_shot", "any_dr")] == "tiny_clip †" and best[("yes_no", "any_dr")] == "tiny_llava †", out
    assert "    † pipeline check: a seeded toy model that tests the plumbing" in out


def test_the_report_files_cite_rows_of_the_metric_tables(demo):
    home, _, _ = demo
    folder = home / "artifacts" / "reports" / "arena"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert sorted(Path(p).stem for p in manifest["figures"]) == sorted(FIGURES)
    for name in FIGURES:
        assert (folder / "figures" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any(key.startswith("metrics[messidor_2]") for key in manifest["sources"])
    values = _table(home, "SELECT metric_id, model, dataset, task, method, axis, metric, \"group\", value "
                          "FROM metrics.values")
    known = set(values["metric_id"]) | _other_ids(home)
    for csv in manifest["tables"]:
        table = pd.read_csv(folder / csv)
        for column in [c for c in table.columns if c == "metric_id" or c.endswith("metric_ids")]:
            cited = {i for cell in table[column].dropna() for i in str(cell).split()}
            assert cited <= known, (csv, column, sorted(cited - known)[:3])
    # A mean is the mean of the rows it lists, recomputed from metrics.values.
    means = pd.read_csv(folder / "tables" / "method_means.csv")
    by_id = values.set_index("metric_id")["value"]
    for row in means.itertuples():
        cited = row.metric_ids.split()
        assert len(cited) == row.configurations and by_id[cited].mean() == pytest.approx(row.mean)
    # The task cliff pools the efficientnet encoder's in-domain AUROCs per task, nothing else.
    cliff = pd.read_csv(folder / "tables" / "task_cliff.csv").set_index(["series", "task"])
    auroc = values[(values["model"] == "efficientnet_lite0") & (values["metric"] == "auroc")
                   & (values["axis"] == "performance") & values["value"].notna()]
    in_domain = auroc.merge(_table(home, "SELECT metric_id FROM metrics.values WHERE partition <> 'cross'"))
    for task, rows in in_domain.groupby("task"):
        assert cliff.loc[("vision encoders", task), "mean"] == pytest.approx(rows["value"].mean())


def _other_ids(home) -> set[str]:
    """The metric ids of the tables beside metrics.values that the report cites."""
    return {i for table in ("metrics.lora_effects", "metrics.robustness", "metrics.robustness_summary")
            for i in _table(home, f"SELECT metric_id FROM {table}")["metric_id"]}


def test_the_quality_axis_is_defined_on_datasets_without_graded_quality(demo):
    """Neither RFMiD 2.0 nor Messidor-2 grades image quality: the spider's quality axis comes from the robustness
    summary (1 - mean relative AUROC drop), the publisher-graded axis stays empty with its reason."""
    home, _, _ = demo
    spider = pd.read_csv(home / "artifacts" / "reports" / "arena" / "tables" / "spider.csv")
    summary = _table(home, "SELECT metric_id, quality_axis FROM metrics.robustness_summary").set_index("metric_id")
    quality = spider[(spider["axis"] == "quality") & spider["shown"].notna()]
    assert len(quality) and set(quality["dataset"]) <= {"rfmid_2", "messidor_2"}
    for row in quality.itertuples():
        assert row.value == pytest.approx(summary.loc[row.metric_id, "quality_axis"])
        assert row.shown == pytest.approx(min(1.0, row.value))  # drawn at most 1
    graded = spider[spider["axis"] == "graded quality"]
    assert graded["shown"].isna().all() and graded["reason"].notna().all()


def test_the_report_in_chromium_every_figure_renders_and_every_number_traces(demo):
    chromium = require_chromium()
    from playwright.sync_api import sync_playwright

    home, _, _ = demo
    page_path = home / "artifacts" / "reports" / "arena" / "index.html"
    known = set(_table(home, "SELECT metric_id FROM metrics.values")["metric_id"]) | _other_ids(home)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            requests = []
            page.on("request", lambda request: requests.append(request.url))
            page.goto(page_path.as_uri(), wait_until="load")
            images = page.eval_on_selector_all(
                "figure svg", "svgs => svgs.map(s => [s.getAttribute('aria-label'), s.querySelectorAll('path').length"
                              " > 0, s.getBoundingClientRect().width, s.getBoundingClientRect().height])")
            marks = page.eval_on_selector_all(
                "figure svg g[data-metric-id]", "gs => gs.map(g => [g.closest('section').id, "
                                                "g.getAttribute('data-metric-id')])")
            numbers = page.eval_on_selector_all(
                "td, span", "cells => cells.filter(c => c.children.length === 0 && "
                            "/^[-+]?[0-9]+([.][0-9]+)?$/.test(c.textContent.trim()))"
                            ".map(c => [c.textContent.trim(), c.getAttribute('data-metric-id'), c.title, "
                            "c.getAttribute('data-reference-id')])")
            screenshot = home / "arena_report.png"
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    assert len(images) == len(FIGURES) and all(done and w > 100 and h > 100 for _, done, w, h in images), images
    assert [r for r in requests if not r.startswith(("file:", "data:"))] == []  # nothing from a network
    assert len(numbers) > 50
    # Every figure's marks carry ids of the tables (a click opens their chain); the coverage counts cite none.
    marked = {section for section, _ in marks}
    assert marked == set(FIGURES) - {"coverage"}
    assert all(set(ids.split()) <= known for _, ids in marks)
    quoted = [reference for _, _, _, reference in numbers if reference]
    assert set(quoted) == set(PUBLISHED)  # the study's values, each citing its reference (the LoRA means quote some
    for text, ids, title, reference in numbers:  # beside ours too)
        if reference:
            assert not ids and "published value" in title, (text, reference)
            assert float(text) == pytest.approx(PUBLISHED[reference], abs=5e-4), (text, reference)
            continue
        assert ids, f"the number {text} carries no metric id"
        assert set(ids.split()) <= known, (text, ids)
        assert "metric_id" in title or "metric ids" in title
    assert screenshot.stat().st_size > 50_000


# In the page: the text of every figure with its size on screen and its box, the page's width against the window's.
MEASURE = """() => {
  const figures = [...document.querySelectorAll('figure svg')].map(svg => ({
    section: svg.closest('section').id,
    texts: [...svg.querySelectorAll('text')].filter(t => t.textContent.trim()).map(t => {
      const box = t.getBoundingClientRect(), ctm = t.getScreenCTM();
      return {text: t.textContent.trim(), px: parseFloat(getComputedStyle(t).fontSize) * Math.hypot(ctm.a, ctm.b),
              box: [box.left, box.top, box.right, box.bottom]};
    })}));
  return {figures, page: document.documentElement.scrollWidth, window: document.documentElement.clientWidth};
}"""


def _overlapping(texts: list[dict], slack: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes cover each other by more than `slack` px both ways."""
    pairs = []
    for k, a in enumerate(texts):
        for b in texts[k + 1:]:
            across = min(a["box"][2], b["box"][2]) - max(a["box"][0], b["box"][0])
            down = min(a["box"][3], b["box"][3]) - max(a["box"][1], b["box"][1])
            if across > slack and down > slack:
                pairs.append((a["text"], b["text"]))
    return pairs


@pytest.mark.parametrize("width", [800, 1300])
def test_the_report_reads_at_100_percent_in_a_narrow_and_a_wide_window(demo, width):
    """Every figure's text at least 11 px on screen, no two texts of a figure on top of each other, and nothing
    wider than the window (a table wider than the page scrolls in its own box)."""
    chromium = require_chromium()
    from playwright.sync_api import sync_playwright

    home, _, _ = demo
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto((home / "artifacts" / "reports" / "arena" / "index.html").as_uri(), wait_until="load")
            seen = page.evaluate(MEASURE)
        finally:
            browser.close()
    assert seen["page"] <= seen["window"], f"the page scrolls sideways: {seen['page']} px in a {width}-px window"
    assert [figure["section"] for figure in seen["figures"]] == list(FIGURES)
    for figure in seen["figures"]:
        assert len(figure["texts"]) > 5, figure["section"]
        small = [(t["text"], round(t["px"], 1)) for t in figure["texts"] if t["px"] < 11.0]
        assert not small, (figure["section"], small[:5])
        assert not _overlapping(figure["texts"]), (figure["section"], _overlapping(figure["texts"])[:5])


@contextmanager
def _report_page(home: Path, width: int = 1300):
    """The demo's arena page open in chromium, with the list of the errors it raises."""
    chromium = require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto((home / "artifacts" / "reports" / "arena" / "index.html").as_uri(), wait_until="load")
            yield page, errors
        finally:
            browser.close()


def test_the_report_filters_sorts_and_shows_pipeline_checks_on_request_in_chromium(demo):
    """The page's controls on the method-means table, each count against its CSV: pipeline checks hidden at first
    (the demo has a real encoder) and shown on request, a task picked, a family picked, and a column sorted both
    ways by clicks on its header."""
    home, _, _ = demo
    means = pd.read_csv(home / "artifacts" / "reports" / "arena" / "tables" / "method_means.csv")
    rows = "table[data-table=method_means] tbody tr:not(.folded)"
    with _report_page(home) as (page, errors):

        def shown() -> int:
            return page.eval_on_selector_all(rows, "rows => rows.filter(r => !r.hidden).length")

        def column(name: str) -> list[str]:
            k = list(means.columns).index(name)  # the page shows the CSV's first columns, in order
            return page.eval_on_selector_all(rows, f"rows => rows.filter(r => !r.hidden).map(r => "
                                                   f"r.cells[{k}].textContent)")

        assert not page.is_checked("#pipeline-checks")
        assert shown() == (means["domain"] != "pipeline-check").sum()
        page.check("#pipeline-checks")
        assert shown() == len(means)
        page.select_option("select[data-key=task]", "any_dr")
        any_dr = means[means["task"] == "any_dr"]
        assert shown() == len(any_dr)
        summary = page.text_content("details:has(table[data-table=method_means]) summary")
        assert f"{len(any_dr)} of {len(means)} rows shown" in summary
        header = page.locator("table[data-table=method_means] th", has_text="mean").first
        header.click()
        assert column("mean") == [f"{v:.3f}" for v in sorted(any_dr["mean"])]
        header.click()
        assert column("mean") == [f"{v:.3f}" for v in sorted(any_dr["mean"], reverse=True)]
        page.select_option("select[data-key=task]", "")
        page.select_option("select[data-key=family]", "vm")
        assert shown() == (means["family"] == "vm").sum() > 0
    assert errors == []


def _lines(text: str) -> list[str]:
    """Lines as the eye reads them: spaces collapsed, a float's ".0" dropped (JSON keeps no 1.0 apart from 1)."""
    return [re.sub(r"(\d)\.0\b", r"\1", re.sub(r"\s+", " ", line).strip()) for line in text.splitlines()
            if line.strip()]


def test_a_click_on_a_number_opens_its_chain_as_focus_trace_prints_it_in_chromium(demo):
    """A table's number: the side panel names its metric id and shows the chain `focus trace ID` prints for it,
    line for line, link by link down to the release; a mean lists its ids and each opens its chain; a bar of a
    figure opens the chain of the rows it draws; Escape and the close button close the panel; no page error."""
    from types import SimpleNamespace

    from focus_dagster.platform.trace import format_trace, trace

    home, _, _ = demo
    where = SimpleNamespace(tables=str(home / "artifacts" / "tables"), artifacts=str(home / "artifacts"))
    with _report_page(home) as (page, errors):
        assert page.is_hidden("#lineage-panel")
        cell = page.locator("td.num[data-metric-id]:not([data-metric-id*=' ']):visible").first
        metric_id = cell.get_attribute("data-metric-id")
        cell.click()
        assert page.is_visible("#lineage-panel")
        shown = page.inner_text("#lineage-body")
        links = page.eval_on_selector_all("#lineage-body [data-link]", "links => links.map(l => l.dataset.link)")
        page.keyboard.press("Escape")
        assert page.is_hidden("#lineage-panel")

        mean = page.locator(".reading span.num[data-metric-id*=' ']:visible").first
        ids = mean.get_attribute("data-metric-id").split()
        mean.click()
        listed = page.eval_on_selector_all("#lineage-body button[data-chain]", "bs => bs.map(b => b.textContent)")
        page.locator("#lineage-body button[data-chain]").nth(1).click()
        second = page.inner_text("#lineage-body h3")
        page.click("#lineage-close")
        assert page.is_hidden("#lineage-panel")

        bar = page.locator("#method_means svg g[data-metric-id]").first
        bar_ids = bar.get_attribute("data-metric-id").split()
        bar.click()
        opened = page.inner_text("#lineage-body h3")
        page.keyboard.press("Escape")
    assert errors == []
    traced = trace(metric_id, where)
    assert _lines(shown)[0].startswith(f"{metric_id}: value ") and _lines(shown) == _lines(format_trace(traced))
    assert links == [link["id"] for link in traced["links"]]
    assert any(link.startswith("dataset_release[") for link in links) and "predictions[" in shown
    assert listed == ids and len(ids) > 1 and second.startswith(f"{ids[1]}: value ")
    assert opened.startswith(f"{bar_ids[0]}: value ") if len(bar_ids) == 1 else opened.startswith("This number is formed")


def test_the_spider_picker_draws_the_configurations_picked_at_their_values_in_chromium(demo):
    """Two configurations picked onto the page's own spider: one outline each, every point at its value on its
    axis (the radius against the spider CSV's `shown`), carrying the metric id of that CSV row, whose chain a click
    opens; a configuration removed, then pipeline-check configurations offered only once they are shown."""
    home, _, _ = demo
    spider = pd.read_csv(home / "artifacts" / "reports" / "arena" / "tables" / "spider.csv")
    real = spider[~spider["pipeline_check"]]
    offered_js = "o => o.filter(x => x.value).map(x => x.text)"
    with _report_page(home, 1000) as (page, errors):
        offered = page.eval_on_selector_all("#spider-pick option", offered_js)
        assert set(real["configuration"]) <= set(offered) and not any("†" in o for o in offered)
        chosen = list(dict.fromkeys(real["configuration"]))[:2]
        for label in chosen:
            page.select_option("#spider-pick", label=label)
        outlines = page.eval_on_selector_all(
            "#spider-own g.picked-configuration", "gs => gs.map(g => [g.dataset.configuration, [...g.querySelectorAll"
            "('circle')].map(c => [c.dataset.axis, c.dataset.metricId, Math.hypot(c.cx.baseVal.value - 240, "
            "c.cy.baseVal.value - 200) / 140])])")
        point = page.locator("#spider-own circle[data-metric-id]").first
        point_id = point.get_attribute("data-metric-id")
        point.click()
        opened = page.inner_text("#lineage-body h3")
        page.keyboard.press("Escape")
        page.click(f"#spider-picked li button[aria-label='remove {chosen[0]}']")
        left = page.eval_on_selector_all("#spider-own g.picked-configuration", "gs => gs.map(g => g.dataset.configuration)")
        page.check("#pipeline-checks")
        offered_all = page.eval_on_selector_all("#spider-pick option", offered_js)
    assert errors == []
    assert [label for label, _ in outlines] == chosen
    for label, points in outlines:
        rows = spider[(spider["configuration"] == label) & spider["shown"].notna()].set_index("axis")
        assert sorted(axis for axis, _, _ in points) == sorted(rows.index)
        for axis, metric_id, radius in points:
            assert metric_id == rows.loc[axis, "metric_id"]
            assert radius == pytest.approx(rows.loc[axis, "shown"], abs=1e-4), (label, axis)
    assert point_id in opened
    assert left == [chosen[1]]
    assert any("†" in o for o in offered_all) and chosen[1] not in offered_all and chosen[0] in offered_all


def test_the_figures_hide_what_they_draw_for_pipeline_checks_with_their_rows_in_chromium(demo):
    """The pipeline-check toggle reaches the figures: the method-means bars and the spider's points drawn for
    pipeline-check models (as many as the CSVs' pipeline-check rows with a number, the real ones untouched) are
    hidden at first, with the rest of their series, and shown with one tick."""
    home, _, _ = demo
    tables = home / "artifacts" / "reports" / "arena" / "tables"
    means, spider = pd.read_csv(tables / "method_means.csv"), pd.read_csv(tables / "spider.csv")
    means = means[means["mean"].notna()]
    spider = spider[spider["shown"].notna()]
    count = "(marks, check) => marks.filter(m => (m.dataset.pipelineCheck === 'yes') === check).length"
    shown = "marks => marks.filter(m => getComputedStyle(m).display !== 'none').length"
    with _report_page(home) as (page, errors):
        for figure, frame, column in (("method_means", means, "domain"), ("spider", spider, "pipeline_check")):
            checks = frame[column].eq("pipeline-check") if column == "domain" else frame[column].astype(bool)
            marks = f"#{figure} figure svg g[data-metric-id]"
            assert page.eval_on_selector_all(marks, count, True) == checks.sum() > 0, figure
            assert page.eval_on_selector_all(marks, count, False) == (~checks).sum() > 0, figure
        tagged = "figure svg [data-pipeline-check]"
        hidden_at_first = page.eval_on_selector_all(tagged, shown)
        page.check("#pipeline-checks")
        shown_on_request = page.eval_on_selector_all(tagged, shown)
        total = page.eval_on_selector_all(tagged, "marks => marks.length")
    assert errors == []
    assert hidden_at_first == 0 and shown_on_request == total > 0


def test_the_report_folds_rows_without_a_number_into_one_line_per_reason(demo):
    """The spider's table: each row of its CSV without a number (an axis the dataset cannot have, a group too
    small) is counted in the folded line of its reason; the other rows are shown one by one."""
    from html.parser import HTMLParser

    home, _, _ = demo
    folder = home / "artifacts" / "reports" / "arena"
    spider = pd.read_csv(folder / "tables" / "spider.csv")
    empty = spider[["shown", "value"]].isna().all(axis=1) & spider["reason"].notna()

    class Rows(HTMLParser):
        table, row, rows, folded = None, None, 0, []

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "table":
                self.table = attrs.get("data-table")
            if tag == "tr" and self.table == "spider":
                self.row = attrs.get("class") or "row"

        def handle_endtag(self, tag):
            if tag == "tr" and self.row == "row":
                self.rows += 1
            self.row = None if tag == "tr" else self.row

        def handle_data(self, data):
            if self.row == "folded" and data.strip():
                self.folded.append(data.strip())

    parser = Rows()
    parser.feed((folder / "index.html").read_text())
    counted = {re.match(r"(\d+) rows? without a number: (.*)", line).groups()[::-1] for line in parser.folded}
    assert counted == {(reason, str(count)) for reason, count in spider.loc[empty, "reason"].value_counts().items()}
    assert empty.any() and parser.rows - 1 == (~empty).sum()  # the header row, then one row per row with a number


def test_focus_report_finds_the_demo_report_current_and_rebuilds_when_a_table_changes(demo, monkeypatch, capsys):
    from focus_dagster.platform.cli import main
    from focus_dagster.config import load_config
    from resources import FocusStorage, layout

    home, env, _ = demo
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main(["report"]) == 0
    assert f"arena report (up to date with the tables): {home / 'artifacts' / layout.ARENA_REPORT_PAGE}" in \
        capsys.readouterr().out
    # A new version of one metrics partition (same rows, a new stamp): the report is stale, and rebuilt.
    storage = FocusStorage.from_config(load_config())
    rows = storage.read_partition(layout.METRICS, "messidor_2")
    storage.replace_partition(layout.METRICS, "messidor_2", rows,
                              stamp={"asset": "metrics", "partition": "messidor_2", "run_id": "test", "version": "v2",
                                     "code_version": "test", "facts": {}, "inputs": {}})
    assert main(["report"]) == 0
    out = capsys.readouterr().out
    assert "building the arena report (1 table partition(s) changed since it was built (e.g. metrics[messidor_2]))" in out
    manifest = json.loads((home / "artifacts" / layout.ARENA_REPORT / "manifest.json").read_text())
    run_id = manifest["run_id"]
    assert re.search(rf"arena report: .*index.html  \(run {run_id[:8]}\)", out), out
    assert main(["report"]) == 0 and "up to date" in capsys.readouterr().out


def test_a_metric_id_is_looked_up_from_the_ui_with_the_focus_trace_job(demo, monkeypatch):
    """The job a researcher launches from the Launchpad with an id copied from the report: its run shows the same
    chain `focus trace ID` prints, from the metric to the release; an unknown id fails the run, naming it."""
    import dagster as dg

    from assets.trace import TRACE_JOB
    from focus_dagster.config import load_config
    from focus_dagster.definitions import build_definitions

    home, env, _ = demo
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    metric_id = _table(home, "SELECT metric_id FROM metrics.values WHERE metric = 'auroc' AND value IS NOT NULL "
                             "AND method = 'linear_probe' ORDER BY metric_id LIMIT 1")["metric_id"].iloc[0]
    job = build_definitions(load_config()).resolve_job_def(TRACE_JOB)

    def launch(wanted: str):
        return job.execute_in_process(run_config={"ops": {"trace_metric": {"config": {"metric_id": wanted}}}},
                                      instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)

    result = launch(metric_id)
    assert result.success
    [output] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT]
    chain = output.event_specific_data.metadata["chain"].value
    code, printed = run_focus(env, "trace", metric_id)
    assert code == 0 and printed.strip() and printed.strip() in chain
    assert all(link in chain for link in ("predictions[", "harmonised_labels[", "dataset_records[",
                                          "dataset_release[")), chain
    failed = launch("no-such-metric")
    assert not failed.success
    [failure] = [e for e in failed.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "no-such-metric" in failure.event_specific_data.error.message
