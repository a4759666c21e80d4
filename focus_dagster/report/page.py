"""The report as one self-contained HTML file: figures inline as SVG (their text is the page's), tables whose every
number carries the metric_id it comes from (`data-metric-id`, shown on hover), or, for a value the reference study
published and the report quotes beside ours, the id of that reference (`data-reference-id`, report/reference.py);
one inline script of its own (filters, the pipeline-check toggle, sorting, the lineage panel) and nothing fetched
from a network. A click on a number opens its chain (what `focus trace ID` prints, as of the build) in a side
panel, from one JSON block of data (`<script type="application/json" id="lineage">`, never run): every distinct
link once, and per metric id its own row's facts and the keys of the links it stands on.

Every text of the page goes through `html.escape`, the section and table names and the header lines too: model
ids, dataset keys, values of users' files and reasons are shown as written in any browser, never read as markup;
the script is a constant that reads the rows' data attributes and parses the JSON block (whose `<`, `>` and `&`
are written as JSON escapes, so no value can end the block), and it writes text only (`textContent`), so no value
of the data is ever code or markup.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from focus_dagster.models.spec import DOMAINS
from focus_dagster.report.arena import PIPELINE_CHECK, UNREGISTERED

MODEL_DOMAINS = (*DOMAINS, UNREGISTERED)  # a model's domain, as the arena names it (not LoRA's in/out-of-domain)
MAX_HTML_ROWS = 200
# The columns a reader filters every table by (a row carries them as data attributes, shown or not).
FILTER_KEYS = ("family", "domain", "model", "dataset", "task", "method")
OPEN_ROWS = 25  # longer tables start folded: the figure and its reading come first
# The picked configurations' colours, in order (Okabe & Ito's palette, told apart with colour-vision deficiencies).
PICK_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#999999")


@dataclass(frozen=True)
class Num:
    """A number in prose, with the metric id(s) it comes from."""

    value: float
    ids: str
    spec: str = ".3f"


@dataclass
class ReportTable:
    """A table of the report: its CSV is `frame` whole; the HTML shows `shown` columns, and each column named in
    `ids` is a number whose metric id(s) are in that other column."""

    name: str
    title: str
    frame: pd.DataFrame
    shown: list[str]
    ids: dict[str, str] = field(default_factory=dict)
    formats: dict[str, str] = field(default_factory=dict)
    quoted: dict[str, str] = field(default_factory=dict)  # a published value's column -> its reference id's column


@dataclass
class Section:
    name: str
    title: str
    reading: list  # text and Num parts: the one-line reading of what the section shows
    figure: object | None  # figures.Drawn
    tables: list[ReportTable]
    notes: list[str] = field(default_factory=list)
    picker: dict | None = None  # the spider's: every configuration it can draw (arena.spider_choices)


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1180px;
       color: #222; line-height: 1.45; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2.4rem;
       border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
.meta, .note { color: #555; font-size: .85rem; } .reading { font-size: 1rem; margin: .4rem 0 .8rem; }
figure { margin: .6rem 0; } figure svg { max-width: 100%; height: auto; border: 1px solid #eee; }
table { border-collapse: collapse; font-size: .78rem; margin: .4rem 0 1rem; }
th, td { border-bottom: 1px solid #e5e5e5; padding: .15rem .45rem; text-align: left; vertical-align: top; }
th { background: #f6f6f6; position: sticky; top: 0; } td.num, span.num { font-variant-numeric: tabular-nums; }
td.num { text-align: right; } .num[data-metric-id] { cursor: pointer; border-bottom: 1px dotted #999; }
td.num[data-metric-id] { border-bottom: 1px solid #e5e5e5; } tr.folded td { color: #555; font-style: italic; }
details { margin: .3rem 0 1rem; } summary { cursor: pointer; color: #333; }
.wide { overflow-x: auto; max-width: 100%; }
.picker { border: 1px solid #eee; padding: .5rem .7rem; margin: .6rem 0 1rem; }
.picker select { max-width: 100%; font-size: .85rem; } .picker ul { list-style: none; padding: 0; margin: .4rem 0; }
.picker li { font-size: .85rem; margin: .1rem 0; } .picker li button { margin-left: .4rem; }
.swatch { display: inline-block; width: .8rem; height: .8rem; margin-right: .35rem; vertical-align: -1px; }
#spider-own { width: 100%; max-width: 480px; height: auto; display: block; }
tr[data-own] td { background: #fff4e5; } tr[data-own] td:first-child { box-shadow: inset 4px 0 #e66101; }
.own { box-shadow: inset 4px 0 #e66101; background: #fff4e5; padding: 0 .4rem; }
#controls { position: sticky; top: 0; background: #fff; padding: .4rem 0; border-bottom: 1px solid #ddd; z-index: 2; }
#controls select, #controls label { margin: .15rem .6rem .15rem 0; font-size: .85rem; }
th[data-sort] { cursor: pointer; } th[aria-sort="ascending"]::after { content: " ▲"; }
th[aria-sort="descending"]::after { content: " ▼"; } .shown { color: #555; }
p, summary, figcaption { overflow-wrap: anywhere; }
code { background: #f3f3f3; padding: 0 .25rem; border-radius: 3px; } nav a { margin-right: .8rem; }
svg [data-metric-id] { cursor: pointer; }
#lineage-panel { position: fixed; top: 0; right: 0; bottom: 0; width: min(36rem, 94vw); overflow: auto; z-index: 5;
       background: #fff; border-left: 1px solid #bbb; box-shadow: -4px 0 16px rgba(0,0,0,.12); padding: .8rem 1rem;
       font-size: .8rem; }
#lineage-panel h3 { font-size: .95rem; margin: .2rem 2rem .4rem 0; overflow-wrap: anywhere; }
#lineage-close { position: absolute; top: .5rem; right: .6rem; font-size: 1.1rem; cursor: pointer; }
#lineage-panel .link { border-left: 2px solid #ddd; padding: .1rem 0 .1rem .5rem; margin: .25rem 0; }
#lineage-panel .link.stale { border-left-color: #c62828; } #lineage-panel .stale-mark, #lineage-panel .changed {
       color: #b71c1c; font-weight: 600; }
#lineage-panel .fact { color: #444; overflow-wrap: anywhere; font-family: ui-monospace, monospace; font-size: .74rem; }
#lineage-panel button.id { font: inherit; font-family: ui-monospace, monospace; margin: .1rem; cursor: pointer; }
"""


def page(title: str, header: list[str], sections: list[Section], trace_example: str,
         lineage: dict | None = None, own_models: tuple[str, ...] = ()) -> str:
    """The whole HTML document; `lineage`: the chains of its numbers (platform/trace.py `chains`), embedded as data;
    the rows of `own_models` (the researcher's models, not the catalog's) are marked."""
    nav = " ".join(f'<a href="#{html.escape(s.name)}">{html.escape(s.title)}</a>' for s in sections)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *(f'<p class="meta">{html.escape(line)}</p>' for line in header),  # they name the tables' location
        '<p class="note">Every number carries the <code>metric_id</code> of the row it comes from: click it to see '
        "its chain as of this build (predictions, model weights, labels, records, release, runs, code version; "
        "a stale link says what changed since), hover it to see the id. <code>focus trace ID</code> walks the "
        f"same chain as it is now (e.g. <code>focus trace {html.escape(trace_example)}</code>; in the UI, launch "
        "the job <code>focus_trace</code> with the id). A mean lists the "
        "ids it averages (click or hover, and in its CSV's <code>metric_ids</code> column). Research use only.</p>",
        f"<nav>{nav}</nav>",
        '<div id="controls" hidden><span class="note">Show:</span> <label><input type="checkbox" '
        'id="pipeline-checks"> pipeline-check models †</label>' + _own_legend(own_models) + "</div>",
    ]
    parts += [section_html(s, frozenset(own_models)) for s in sections]
    parts += ['<aside id="lineage-panel" role="dialog" aria-label="lineage of a number" tabindex="-1" hidden>'
              '<button type="button" id="lineage-close" aria-label="close">×</button><div id="lineage-body"></div>'
              "</aside>",
              json_data("lineage", lineage if lineage is not None else {"links": {}, "metrics": {}}),
              f"<script>{SCRIPT}{SPIDER_SCRIPT}</script></body></html>"]
    return "\n".join(parts)


def json_text(value, indent: int | None = None) -> str:
    """JSON that can stand inside an HTML <script> block: `<`, `>` and `&` as JSON escapes (so no value can end the
    block or open a comment), a number that is not finite as null (JSON has none)."""
    text = json.dumps(_finite(value), default=str, allow_nan=False, indent=indent,
                      separators=None if indent is not None else (",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finite(value):
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


# The page's one script, a constant (nothing of the data is ever written into it): a select per filter key over
# the values the rows carry, the pipeline-check toggle (off when the page has real models), the count of rows
# shown in each table's summary, and sorting by a click on any column header (numbers as numbers, "–" last).
SCRIPT = """
(() => {
  const keys = %s;
  const controls = document.getElementById("controls"), checks = document.getElementById("pipeline-checks");
  const rows = [...document.querySelectorAll("table[data-table] tbody tr:not(.folded)")];
  for (const key of keys) {
    const values = [...new Set(rows.map(r => r.dataset[key]).filter(Boolean))].sort();
    if (values.length < 2) continue;
    const select = document.createElement("select");
    select.dataset.key = key;
    select.setAttribute("aria-label", key);
    select.append(new Option("every " + key, ""), ...values.map(v => new Option(v, v)));
    controls.append(select);
  }
  checks.checked = !rows.some(r => r.dataset.pipelineCheck === "no");
  const apply = () => {
    const chosen = [...controls.querySelectorAll("select")].filter(s => s.value).map(s => [s.dataset.key, s.value]);
    for (const row of rows) {
      row.hidden = chosen.some(([k, v]) => row.dataset[k] !== undefined && row.dataset[k] !== v)
        || (!checks.checked && row.dataset.pipelineCheck === "yes");
    }
    for (const drawn of document.querySelectorAll("figure svg [data-pipeline-check]")) {
      drawn.style.display = checks.checked ? "" : "none";
    }
    for (const table of document.querySelectorAll("table[data-table]")) {
      const mine = [...table.tBodies[0].rows].filter(r => !r.classList.contains("folded"));
      const shown = table.closest("details").querySelector("summary .shown");
      if (shown) shown.textContent = ` ${mine.filter(r => !r.hidden).length} of ${mine.length} rows shown`;
    }
  };
  const value = (row, k) => {
    const text = row.cells[k].textContent.trim();
    const number = row.cells[k].classList.contains("num") ? parseFloat(text) : NaN;
    return [Number.isNaN(number) ? null : number, text];
  };
  for (const th of document.querySelectorAll("table[data-table] th[data-sort]")) {
    th.addEventListener("click", () => {
      const body = th.closest("table").tBodies[0], k = th.cellIndex;
      const up = th.getAttribute("aria-sort") !== "ascending";
      th.closest("tr").querySelectorAll("th").forEach(h => h.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      const sorted = [...body.rows].filter(r => !r.classList.contains("folded")).sort((a, b) => {
        const [x, xs] = value(a, k), [y, ys] = value(b, k);
        if (x === null || y === null) return x === y ? xs.localeCompare(ys) * (up ? 1 : -1) : (x === null ? 1 : -1);
        return (x - y) * (up ? 1 : -1);
      });
      body.prepend(...sorted);
    });
  }
  controls.addEventListener("change", apply);
  controls.hidden = false;
  apply();

  // The lineage panel: a click on a number shows its chain as `focus trace` prints it (links named and numbered as
  // there, each once, "shown above" when reached again), from the JSON block; a mean lists its ids.
  const data = JSON.parse(document.getElementById("lineage").textContent);
  const panel = document.getElementById("lineage-panel"), body = document.getElementById("lineage-body");
  const node = (tag, text, cls) => {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  };
  const fixed = v => (v === null || v === undefined) ? "null" : Number(v).toFixed(4);
  // A recorded fact as focus trace prints it: objects as JSON with ", " and ": ", true and false as True, False
  // (a float with nothing after the point shows without it: JSON does not keep 1.0 apart from 1).
  const factText = v => typeof v === "boolean" ? (v ? "True" : "False") : Object.is(v, -0) ? "-0.0"
    : typeof v !== "object" ? String(v)
    : JSON.stringify(v, null, 1).replace(/,\\n\\s*/g, ", ").replace(/\\n\\s*/g, "");
  const open = () => { panel.hidden = false; panel.focus(); };
  const idButton = id => {
    const b = node("button", id, "id");
    b.type = "button";
    b.dataset.chain = id;
    return b;
  };
  const chain = (id, from) => {
    body.replaceChildren();
    const metric = data.metrics[id];
    if (from) {
      const back = node("button", `← the ${from.length} ids of this number`, "id");
      back.type = "button";
      back.addEventListener("click", () => list(from));
      body.append(back);
    }
    if (!metric) {
      body.append(node("h3", id), node("p", `This page holds no chain for ${id}: run focus trace ${id} (or launch ` +
                                            "the job focus_trace with it in the UI)."));
      return open();
    }
    const head = node("h3", `${id}: value ${fixed(metric.value)} (95%% CI ${fixed(metric.ci[0])} to ` +
                            `${fixed(metric.ci[1])})`);
    body.append(head);
    if (metric.reason) body.append(node("p", `reason: ${metric.reason}`, "fact"));
    const names = new Map(), owners = new Map(), done = new Set();
    let stale = false;
    const block = (link, name, depth, parent) => {
      const div = node("div", undefined, "link" + (link.stale ? " stale" : ""));
      div.style.marginLeft = (depth ? 0.9 : 0) + "rem";
      div.dataset.link = name;
      const title = node("div");
      title.append(node("strong", `${depth ? "<- " : ""}${link.link}: `), node("span", name, "link-id"));
      if (link.version) title.append(node("span", `  version ${link.version}`, "fact"));
      if (link.stale) { title.append(node("span", "  [STALE]", "stale-mark")); stale = true; }
      div.append(title);
      if (link.run) div.append(node("div", `run: ${link.run.run_id}`, "fact"));
      for (const [key, value] of Object.entries(link.recorded || {})) {
        if (value === null || value === "" || (typeof value === "object" && Object.keys(value).length === 0)) continue;
        div.append(node("div", `${key}: ${factText(value)}`, "fact"));
      }
      for (const change of link.changed) div.append(node("div", `CHANGED: ${change}`, "changed"));
      parent.append(div);
      return div;
    };
    const visit = (key, depth, parent) => {
      const link = data.links[key];
      let name = names.get(key);
      if (name === undefined) {
        name = link.id;
        if (!(link.link === "weights" && owners.has(name))) {
          for (let n = 2; owners.has(name) && owners.get(name) !== key; n++) name = `${link.id}#${n}`;
          owners.set(name, key);
        }
        names.set(key, name);
      }
      if (done.has(name)) {
        const again = node("div", `<- ${name} (shown above)${link.stale ? "  [STALE]" : ""}`, "link");
        again.style.marginLeft = "0.9rem";
        parent.append(again);
        return;
      }
      done.add(name);
      const div = block(link, name, depth, parent);
      for (const child of link.inputs) visit(child, depth + 1, div);
    };
    const top = block(metric.link, metric.link.id, 0, body);
    done.add(metric.link.id);
    owners.set(metric.link.id, null);
    for (const key of metric.link.inputs) visit(key, 1, top);
    if (stale) head.append(node("span", "  [STALE]", "stale-mark"));
    open();
  };
  const list = ids => {
    body.replaceChildren(node("h3", `This number is formed from ${ids.length} metric ids`),
                         node("p", "Click one for its chain.", "note"));
    const box = node("div");
    box.append(...ids.map(idButton));
    body.append(box);
    open();
  };
  document.addEventListener("click", event => {
    const button = event.target.closest("#lineage-panel button[data-chain]");
    if (button) {
      const from = [...body.querySelectorAll("button[data-chain]")].map(b => b.dataset.chain);
      return chain(button.dataset.chain, from.length > 1 ? from : null);
    }
    const number = event.target.closest("[data-metric-id]");
    if (!number || panel.contains(number)) return;
    const ids = number.getAttribute("data-metric-id").split(/\\s+/).filter(Boolean);
    if (ids.length === 1) chain(ids[0]); else if (ids.length) list(ids);
  });
  document.getElementById("lineage-close").addEventListener("click", () => { panel.hidden = true; });
  document.addEventListener("keydown", event => { if (event.key === "Escape") panel.hidden = true; });
})();
""" % json.dumps(list(FILTER_KEYS))


# The spider picker's part of the script (a constant too): it reads the configurations from the JSON data block and
# draws the picked ones as SVG elements whose text is set as text, never parsed.
SPIDER_SCRIPT = """
(() => {
  const data = document.getElementById("spider-data");
  if (!data) return;
  const spider = JSON.parse(data.textContent), colours = %s;
  const select = document.getElementById("spider-pick"), list = document.getElementById("spider-picked");
  const plot = document.getElementById("spider-own"), checks = document.getElementById("pipeline-checks");
  const NS = plot.namespaceURI;
  const cx = 240, cy = 200, radius = 140, n = spider.axes.length, picked = [];
  const at = (k, v) => [cx + radius * v * Math.sin(2 * Math.PI * k / n),
                        cy - radius * v * Math.cos(2 * Math.PI * k / n)];
  const svg = (name, attributes, text) => {
    const element = document.createElementNS(NS, name);
    for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
    if (text !== undefined) element.textContent = text;
    return element;
  };
  const options = () => {
    const full = picked.length >= colours.length;
    select.replaceChildren(new Option(full ? "(as many as there are colours)" : "add a configuration…", ""));
    for (const [family, name] of Object.entries(spider.families)) {
      const group = document.createElement("optgroup");
      group.label = name;
      spider.configurations.forEach((c, i) => {
        if (c.family === family && !picked.includes(i) && (checks.checked || !c.check)) {
          group.append(new Option(c.label, i));
        }
      });
      if (group.children.length) select.append(group);
    }
    select.disabled = full;
  };
  const draw = () => {
    plot.replaceChildren();
    for (const v of [0.25, 0.5, 0.75, 1]) {
      plot.append(svg("polygon", {points: spider.axes.map((_, k) => at(k, v).join(",")).join(" "), fill: "none",
                                  stroke: v === 1 ? "#888" : "#ddd"}));
    }
    spider.axes.forEach((label, k) => {
      const [x, y] = at(k, 1), [tx, ty] = at(k, 1.16);
      plot.append(svg("line", {x1: cx, y1: cy, x2: x, y2: y, stroke: "#ddd"}));
      plot.append(svg("text", {x: tx, y: ty, "text-anchor": "middle", "dominant-baseline": "middle",
                               "font-size": 13}, label));
    });
    if (!picked.length) {
      plot.append(svg("text", {x: cx, y: cy, "text-anchor": "middle", "font-size": 13, fill: "#666"},
                           "pick a configuration above"));
    }
    list.replaceChildren();
    picked.forEach((i, j) => {
      const c = spider.configurations[i], colour = colours[j];
      const group = svg("g", {class: "picked-configuration", stroke: colour, fill: colour});
      group.dataset.configuration = c.label;
      for (let k = 0; k < n; k++) {  // an axis without a number leaves the outline open there
        const a = c.values[k], b = c.values[(k + 1) %% n];
        if (a === null || b === null) continue;
        const [x1, y1] = at(k, a), [x2, y2] = at((k + 1) %% n, b);
        group.append(svg("line", {x1, y1, x2, y2, "stroke-width": 2}));
      }
      c.values.forEach((v, k) => {
        if (v === null) return;
        const [x, y] = at(k, v), point = svg("circle", {cx: x, cy: y, r: 4});
        point.dataset.metricId = c.ids[k];
        point.dataset.axis = spider.axes[k];
        point.append(svg("title", {}, `${c.label}: ${spider.axes[k]} ${v.toFixed(3)} (metric_id ${c.ids[k]})`));
        group.append(point);
      });
      plot.append(group);
      const item = document.createElement("li"), swatch = document.createElement("span");
      const remove = document.createElement("button");
      swatch.className = "swatch";
      swatch.style.background = colour;
      remove.type = "button";
      remove.textContent = "remove";
      remove.setAttribute("aria-label", "remove " + c.label);
      remove.addEventListener("click", () => { picked.splice(picked.indexOf(i), 1); update(); });
      item.append(swatch, c.label, remove);
      list.append(item);
    });
  };
  const update = () => { options(); draw(); };
  select.addEventListener("change", () => { if (select.value !== "") picked.push(Number(select.value)); update(); });
  document.getElementById("spider-clear").addEventListener("click", () => { picked.length = 0; update(); });
  checks.addEventListener("change", () => {
    for (let j = picked.length - 1; j >= 0; j--) {  // hidden pipeline checks leave the picked spider too
      if (!checks.checked && spider.configurations[picked[j]].check) picked.splice(j, 1);
    }
    update();
  });
  update();
})();
""" % json.dumps(list(PICK_COLOURS))


def section_html(section: Section, own: frozenset = frozenset()) -> str:
    name = html.escape(section.name)
    out = [f'<section id="{name}"><h2>{html.escape(section.title)}</h2>',
           f'<p class="reading">{prose(section.reading)}</p>']
    if section.figure is not None:
        figure = section.figure
        drawn = inline_svg(figure.svg, section.name, section.title, figure.marks, figure.checks)
        out.append(f'<figure>{drawn}<figcaption class="note">figures/{name}.png</figcaption></figure>')
    if section.picker is not None:
        out.append(_picker_html(section.picker))
    out += [f'<p class="note">{html.escape(note)}</p>' for note in section.notes]
    for table in section.tables:
        out.append(table_html(table, own))
    out.append("</section>")
    return "\n".join(out)


def _picker_html(choices: dict) -> str:
    """The spider picker: a select over every configuration the spider can draw, the list of those picked (the
    legend, each removable) and the plot the page's script draws them on; the configurations as JSON data."""
    count = len(choices["configurations"])
    return ('<div class="picker"><p class="note">Compare any configurations on one spider: pick them here (any of the '
            f"{count} with a test AUROC; up to {len(PICK_COLOURS)}). A point is a metric row: hover it for its value "
            'and id.</p><select id="spider-pick" aria-label="add a configuration to the spider"></select> '
            '<button type="button" id="spider-clear">clear</button><ul id="spider-picked"></ul>'
            '<svg id="spider-own" viewBox="0 0 480 400" role="img" aria-label="the picked configurations on the '
            'spider axes"></svg>' + json_data("spider-data", choices) + "</div>")


def json_data(element_id: str, value) -> str:
    """`value` as a JSON data block the page's script reads (never runs): <, > and & are written as JSON escapes,
    so no text of the data can end the block or open markup."""
    return f'<script type="application/json" id="{html.escape(element_id)}">{json_text(value)}</script>'


_SVG_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.S)
_SVG_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_SVG_NAMESPACES = re.compile(r'\s+xmlns(:\w+)?="[^"]*"')
_SVG_IDS = re.compile(r'(\bid="|url\(#|href="#)([^")]+)')
_SVG_MARK = re.compile(r'<g id="([^"]+)">')


def _tagged(match: re.Match, marks: dict[str, str], checks: frozenset[str]) -> str:
    """A figure's group with the metric ids it draws (and their hover title), and whether it is a pipeline check's."""
    gid = match.group(1)
    ids, check = marks.get(gid), gid in checks
    if ids is None and not check:
        return match.group(0)
    attributes = f' data-metric-id="{html.escape(ids)}"' if ids is not None else ""
    attributes += ' data-pipeline-check="yes"' if check else ""
    title = f"<title>{html.escape(_hover(ids))}</title>" if ids is not None else ""
    return f'<g id="{gid}"{attributes}>{title}'


def inline_svg(svg: bytes, prefix: str, title: str, marks: dict[str, str] | None = None,
               checks: frozenset[str] = frozenset()) -> str:
    """Matplotlib's SVG as an element of the page, its text real text (so it is read, searched and measured at the
    size it is drawn) rather than an image: without the XML prologue and metadata, the namespaces the HTML parser
    supplies itself, and every id prefixed with the section's name (matplotlib numbers them from 1 in each figure,
    so two figures' "axes_1" or clip paths would collide in one document). The figure's text was escaped by
    matplotlib's SVG writer. A mark drawn for metric rows (`marks`: its group's id -> their ids, figures._mark)
    carries them as `data-metric-id`, with a hover title, as a table's number does; a group drawn for a pipeline-check
    model (`checks`) carries `data-pipeline-check`, so that it is hidden with the pipeline-check rows."""
    text = _SVG_METADATA.sub("", _SVG_PROLOGUE.sub("", svg.decode("utf-8"), count=1))
    text = _SVG_NAMESPACES.sub("", text)
    text = _SVG_IDS.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", text)
    if marks or checks:
        named = {f"{prefix}-{gid}": ids for gid, ids in (marks or {}).items()}
        checked = frozenset(f"{prefix}-{gid}" for gid in checks)
        text = _SVG_MARK.sub(lambda m: _tagged(m, named, checked), text)
    return text.replace("<svg ", f'<svg role="img" aria-label="{html.escape(title)}" ', 1)


def prose(parts: list) -> str:
    """Text with numbers: each Num a span carrying its metric id(s)."""
    return "".join(number_span(p) if isinstance(p, Num) else html.escape(str(p)) for p in parts)


def plain(parts: list) -> str:
    """The same reading as plain text (Markdown in the UI)."""
    return "".join(format_number(p.value, p.spec) if isinstance(p, Num) else str(p) for p in parts)


def number_span(number: Num) -> str:
    return (f'<span class="num" data-metric-id="{html.escape(number.ids)}" title="{html.escape(_hover(number.ids))}">'
            f"{format_number(number.value, number.spec)}</span>")


def placeholders(table: ReportTable) -> pd.Series:
    """Rows that hold no number, only the reason why (a configuration not computed, a group too small): shown
    folded, one line per reason with its count; the CSV keeps each of them."""
    frame = table.frame
    if "reason" not in frame.columns or not table.ids or frame.empty:
        return pd.Series(False, index=frame.index)
    numbers = frame[[c for c in table.ids if c in frame.columns]]
    return numbers.isna().all(axis=1) & frame["reason"].notna() & (frame["reason"].astype(str) != "")


def table_html(table: ReportTable, own: frozenset = frozenset()) -> str:
    frame = table.frame
    folded = placeholders(table)
    rows = frame[~folded].head(MAX_HTML_ROWS)
    head = "".join(f'<th data-sort scope="col">{html.escape(c.replace("_", " "))}</th>' for c in table.shown)
    body = []
    for record in rows.to_dict("records"):
        cells = []
        for column in table.shown:
            value = record.get(column)
            if column in table.ids:
                cells.append(_number_cell(value, record.get(table.ids[column]) or "", table.formats.get(column, ".3f")))
            elif column in table.quoted:
                cells.append(_quoted_cell(value, record.get(table.quoted[column]) or "",
                                          table.formats.get(column, ".3f")))
            else:
                cells.append(f"<td>{html.escape(_text(value))}</td>")
        body.append(f"<tr{_row_attributes(record, own)}>" + "".join(cells) + "</tr>")
    if folded.any():
        body += _folded_rows(frame.loc[folded, "reason"], len(table.shown))
    name = html.escape(table.name)
    kept = int((~folded).sum())
    more = (f'<p class="note">first {MAX_HTML_ROWS} of {kept} rows with numbers; all of them in tables/{name}.csv</p>'
            if kept > MAX_HTML_ROWS else "")
    return (f"<details{' open' if len(rows) <= OPEN_ROWS else ''}><summary>{html.escape(table.title)} "
            f'<span class="note">(tables/{name}.csv)</span><span class="shown note"></span></summary>'
            f'<div class="wide"><table data-table="{name}"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(body) + f"</tbody></table></div>{more}</details>")


def _row_attributes(record: dict, own: frozenset = frozenset()) -> str:
    """The row's values of the filter keys, whether it is a pipeline-check model's, and whether one of the `own`
    models (the researcher's), as data attributes."""
    attributes = [f' data-{key}="{html.escape(record[key])}"' for key in FILTER_KEYS
                  if isinstance(record.get(key), str) and record[key]
                  and (key != "domain" or record[key] in MODEL_DOMAINS)]  # not LoRA's in/out-of-domain
    check = _pipeline_check(record)
    if check is not None:
        attributes.append(f' data-pipeline-check="{"yes" if check else "no"}"')
    if record.get("model") in own:
        attributes.append(' data-own="yes"')
    return "".join(attributes)


def _own_legend(own_models: tuple[str, ...]) -> str:
    """The note of the control bar that names the researcher's models, marked as their rows are."""
    if not own_models:
        return ""
    names = ", ".join(html.escape(m) for m in own_models)
    return (' <span class="note own" title="models of focus.yaml that are not in the catalog">your models: '
            f"{names}</span>")


def _pipeline_check(record: dict) -> bool | None:
    """Whether the row is a pipeline-check model's: its flag, its domain or its series; None when it cannot say."""
    flag = record.get("pipeline_check")
    if isinstance(flag, (bool, np.bool_)):
        return bool(flag)
    if isinstance(record.get("domain"), str) and record["domain"] in MODEL_DOMAINS:
        return record["domain"] == PIPELINE_CHECK
    if isinstance(record.get("series"), str):
        return "pipeline check" in record["series"]
    return None


def _folded_rows(reasons: pd.Series, columns: int) -> list[str]:
    """One line per reason, with the number of rows it stands for, in the order the reasons first appear."""
    counts = reasons.astype(str).value_counts(sort=False)
    return [f'<tr class="folded"><td colspan="{columns}">{count} row{"s" if count > 1 else ""} without a number: '
            f"{html.escape(reason)}</td></tr>" for reason, count in counts.items()]


def _number_cell(value, ids: str, spec: str) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return '<td class="num">–</td>'
    if not ids:  # a count of nothing; any other number must say where it comes from
        if value == 0:
            return '<td class="num">none</td>'
        raise ValueError(f"the number {value} has no metric id: every number of the report must cite its row")
    return (f'<td class="num" data-metric-id="{html.escape(ids)}" title="{html.escape(_hover(ids))}">'
            f"{format_number(value, spec)}</td>")


def _quoted_cell(value, reference: str, spec: str) -> str:
    """A published value, quoted: it cites the reference it comes from, not a metric row of this grid (a dash where
    the study published none for the row)."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return '<td class="num">–</td>'
    if not reference:
        raise ValueError(f"the published value {value} names no reference")
    return (f'<td class="num quoted" data-reference-id="{html.escape(reference)}" '
            f'title="{html.escape(f"published value, reference {reference} (report/reference.py)")}">'
            f"{format_number(value, spec)}</td>")


def _hover(ids: str) -> str:
    many = ids.split()
    if len(many) == 1:
        return f"metric_id {many[0]} · focus trace {many[0]}"
    return f"from {len(many)} metric ids: {' '.join(many[:6])}{' …' if len(many) > 6 else ''} (all in the CSV)"


def format_number(value, spec: str = ".3f") -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "–"
    if spec == "d":
        return str(int(value))
    return format(float(value), spec)


def _text(value) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, (bool,)) or str(value) in ("True", "False"):
        return "yes" if value in (True, "True") else ""
    return str(value)
