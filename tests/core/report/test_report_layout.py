"""The report's figures and tables as a reader meets them, against literal inputs: figure text no smaller than
11 px at the figure's own size, an AUROC axis that starts below every value drawn, each figure's ids its own, and
rows without a number folded into one line per reason (the CSV keeps every row). The page itself, measured in
chromium, is in tests/ops/test_demo_report.py."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pandas as pd

from focus_dagster.report import figures
from focus_dagster.report.page import ReportTable, Section, inline_svg, section_html, table_html

PX_PER_PT = 96 / 72  # CSS: an SVG drawn in points shows 4/3 px per point at 100% zoom


def _cliff(low: float, second: float = 0.55) -> pd.DataFrame:
    """Two series of the task cliff (means 0.8 and `second`), the last whisker down to `low`."""
    rows = []
    for series, family, mean in (("vision encoders", "vm", 0.8), ("dual-encoder VLMs", "vlm", second)):
        for task in ("any_dr", "referable_dr", "gon"):
            rows.append({"series": series, "family": family, "task": task, "mean": mean, "ci_low": mean - 0.05,
                         "ci_high": min(mean + 0.05, 1.0), "metric_ids": f"m-{family}-{task}-1 m-{family}-{task}-2"})
    rows[-1]["ci_low"] = low
    return pd.DataFrame(rows)


def _font_sizes(svg: bytes) -> list[float]:
    return [float(size) for size in re.findall(rb"font-size: ([0-9.]+)px", svg)]


def test_every_text_of_a_figure_is_at_least_11_px():
    drawn = figures.render(figures.draw_task_cliff, _cliff(0.4))
    sizes = _font_sizes(drawn.svg)
    assert sizes and min(sizes) * PX_PER_PT >= 11.0, sorted(set(sizes))
    width_pt = float(re.search(rb'<svg[^>]* width="([0-9.]+)pt"', drawn.svg).group(1))
    assert width_pt * PX_PER_PT <= 760, "wider than the text column of an 800-px window: it would be shrunk"


def test_an_auroc_axis_starts_below_the_lowest_whisker_and_shows_chance():
    from matplotlib.figure import Figure

    for low, second, most in ((0.21, 0.55, 0.21), (0.7, 0.75, 0.5)):
        fig = Figure()
        figures.draw_task_cliff(fig, _cliff(low, second))
        bottom, top = fig.axes[0].get_ylim()
        assert bottom <= most and bottom >= 0 and top >= 1.0, (low, bottom)


def test_two_figures_inline_in_one_page_share_no_id():
    first = inline_svg(figures.render(figures.draw_task_cliff, _cliff(0.4)).svg, "one", "first").encode()
    second = inline_svg(figures.render(figures.draw_task_cliff, _cliff(0.3)).svg, "two", "second").encode()
    ids = [set(re.findall(rb'\bid="([^"]+)"', svg)) for svg in (first, second)]
    assert ids[0] and ids[1] and not ids[0] & ids[1]
    for svg, own in zip((first, second), ids):  # every reference points to an id of the same figure
        assert set(re.findall(rb'(?:url\(#|href="#)([^")]+)', svg)) <= own
    assert b"<?xml" not in first and b"<metadata" not in first and b"http" not in first.lower()


class _Rows(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.folded, self.cell = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
            if ("class", "folded") in attrs:
                self.folded.append(len(self.rows) - 1)

    def handle_data(self, data):
        if self.rows and data.strip():
            self.rows[-1].append(data.strip())


def test_rows_without_a_number_fold_into_one_line_per_reason_with_their_count():
    frame = pd.DataFrame({
        "adapter": ["a", "a", "b", "b", "c", "d", "e"],
        "delta": [0.1, None, None, None, None, None, -0.2],
        "metric_id": ["m1", "m2", "m3", "m4", "m5", "m6", "m7"],
        "reason": [None, "no adapter trained", "no adapter trained", "too few positives", "no adapter trained",
                   None, None],
    })
    table = ReportTable("lora", "every adapted configuration", frame, ["adapter", "delta", "reason"],
                        {"delta": "metric_id"})
    parser = _Rows()
    parser.feed(table_html(table))
    body = [row for k, row in enumerate(parser.rows) if k not in parser.folded][1:]  # after the header row
    assert body == [["a", "0.100"], ["d", "–"], ["e", "-0.200"]]  # d: no number and no reason, so it stays
    assert [parser.rows[k] for k in parser.folded] == [["3 rows without a number: no adapter trained"],
                                                        ["1 row without a number: too few positives"]]


def test_a_section_draws_its_figure_inline_with_its_title_as_label():
    section = Section("task_cliff", "The task cliff", ["reading"], figures.render(figures.draw_task_cliff,
                                                                                   _cliff(0.4)), [])
    text = section_html(section)
    assert '<svg role="img" aria-label="The task cliff"' in text and "<img" not in text


def test_everything_drawn_for_a_pipeline_check_series_is_tagged_for_the_page_to_hide():
    """The task cliff with one real and one pipeline-check series: without the groups tagged data-pipeline-check,
    nothing of the pipeline-check series' colour is left (line, whiskers, caps, legend key) nor any text with its †
    but the footnote; the real series is untouched."""
    import xml.etree.ElementTree as ET
    from matplotlib.colors import to_hex

    table = _cliff(0.4)
    table.loc[table["family"] == "vlm", "series"] = "dual-encoder VLMs (pipeline check †)"
    drawn = figures.render(figures.draw_task_cliff, table)
    page_svg = inline_svg(drawn.svg, "task_cliff", "the task cliff", drawn.marks, drawn.checks)
    # The page leaves the namespaces to the HTML parser; an XML parser needs xlink declared.
    root = ET.fromstring(page_svg.replace("<svg ", '<svg xmlns:xlink="http://www.w3.org/1999/xlink" ', 1))
    parents = {child: parent for parent in root.iter() for child in parent}
    tagged = [e for e in root.iter() if e.get("data-pipeline-check") == "yes"]
    assert tagged
    for element in tagged:
        parents[element].remove(element)
    styles = " ".join(e.get("style", "") for e in root.iter())
    check, real = (to_hex(figures.family_colour(f)) for f in ("vlm", "vm"))
    assert check not in styles and real in styles
    texts = ["".join(e.itertext()) for e in root.iter() if e.tag == "text"]
    assert [t for t in texts if "†" in t] == [figures.DAGGER_NOTE]
    assert any("vision encoders" in t for t in texts)
