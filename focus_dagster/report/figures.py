"""The arena's figures, drawn with matplotlib (no pyplot state: each figure is its own object) from the tables
of `arena.py`, as SVG for the HTML report and PNG for the files and the UI.

One palette per family (blues: vision encoders, greens: dual-encoder VLMs, purples: multimodal LLMs),
pipeline-check models dashed or hatched and marked †, no gridlines but the ones that help reading a value.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from focus_dagster.report.arena import FAMILIES, SPIDER_AXES, TASKS

PALETTES = {"vm": "Blues", "vlm": "Greens", "mllm": "Purples"}
DOMAIN_COLOURS = {"general": "#3b6fb6", "ophthalmic": "#d9822b", "medical": "#c23b3b", "pipeline-check": "#8c8c8c",
                  "unregistered": "#555555"}
DOMAIN_COLOURS_DEFAULT = "#555555"
DAGGER = "†"  # marks what is drawn for a pipeline-check model
DAGGER_NOTE = "† pipeline-check model: seeded random weights; it tests the plumbing and says nothing about retinal AI"
# Sizes in points at the figure's own size, which the page shows unscaled (WIDTH fits a page 800 px wide): 8.5 pt is
# 11.3 px, the smallest text of any figure.
SMALL = 8.5
STYLE = {
    "font.size": 9, "axes.titlesize": 9.5, "axes.labelsize": 9, "legend.fontsize": SMALL, "xtick.labelsize": SMALL,
    "ytick.labelsize": SMALL, "axes.spines.top": False, "axes.spines.right": False, "svg.fonttype": "none",
    "figure.dpi": 100, "savefig.bbox": "tight", "svg.hashsalt": "focus-arena",
}
WIDTH = 7.2  # inches: 691 px, inside the text column of an 800-px window, so nothing is shrunk to fit
ROW_HEIGHT = 3.0  # inches per row of panels


@dataclass(frozen=True)
class Drawn:
    """A figure as the report keeps it."""

    svg: bytes
    png: bytes
    marks: dict[str, str] = field(default_factory=dict)  # SVG group id of a mark -> the metric id(s) it draws
    checks: frozenset[str] = frozenset()  # SVG group ids of what is drawn for pipeline-check models (the page hides)


def family_colour(family: str, k: int = 0, n: int = 1):
    """The k-th of n shades of a family's palette (dark to light, never too pale to read)."""
    from matplotlib import colormaps

    cmap = colormaps[PALETTES.get(family, "Greys")]
    return cmap(0.9 - 0.5 * (k / max(n - 1, 1)))


def render(draw, *args) -> Drawn:
    """Draw a figure with `draw(fig, *args)` in the house style, WIDTH wide (the drawing sets its height by its rows
    of panels), laid out by matplotlib's constrained layout so that titles, labels, legends and colour bars do not
    run into each other; then the footnote below all of it. Its SVG and PNG (150 dpi)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(WIDTH, ROW_HEIGHT), layout="constrained")
        FigureCanvasAgg(fig)  # a renderer to measure text with while drawing (`_apart`)
        draw(fig, *args)
        _place_footnote(fig)
        checks = _pipeline_check_groups(fig)
        svg, png = io.BytesIO(), io.BytesIO()
        fig.savefig(svg, format="svg", metadata={"Date": None})
        fig.savefig(png, format="png", dpi=150, metadata={"Software": None})
    return Drawn(svg.getvalue(), png.getvalue(), dict(getattr(fig, "_focus_marks", {})), checks)


def _pipeline_check_groups(fig) -> frozenset[str]:
    """Give an SVG group id to every artist drawn for a pipeline-check model and return them, so that the page can
    hide them with the pipeline-check rows: lines, bars (with their whiskers), points and texts whose label or text
    carries the † (the drawings name every pipeline-check series, point and bar with it), and their legend entries.
    Panel titles, tick labels and the footnote stay."""
    found = list(getattr(fig, "_focus_checks", []))  # what the drawing tagged itself (`_check`)
    for ax in fig.axes:
        found += [a for a in (*ax.lines, *ax.collections, *ax.patches) if DAGGER in str(a.get_label())]
        found += [t for t in ax.texts if DAGGER in t.get_text()]
        for container in ax.containers:
            if DAGGER in str(container.get_label()):
                whiskers = getattr(container, "errorbar", None)
                found += [*container.get_children(), *(whiskers.get_children() if whiskers else ())]
    for legend in (*fig.legends, *(ax.get_legend() for ax in fig.axes)):
        for drawn, text in _legend_entries(legend) if legend is not None else ():
            if DAGGER in text.get_text():
                found += [*drawn, text]
    groups = set()
    for k, artist in enumerate(a for a in found if a is not None):
        if artist.get_gid() is None:
            artist.set_gid(f"focus-check-{k}")
        groups.add(artist.get_gid())
    return frozenset(groups)


def _legend_entries(legend):
    """(the artists of its key, its text) for each entry of a legend, found by walking its boxes: an entry is a box
    of a DrawingArea (the key, which may hold several artists: an errorbar's line, caps and bars) and a TextArea."""
    from matplotlib.offsetbox import DrawingArea, TextArea

    boxes = [legend]
    while boxes:
        children = boxes.pop().get_children()
        if len(children) == 2 and isinstance(children[0], DrawingArea) and isinstance(children[1], TextArea):
            yield children[0].get_children(), children[1].get_children()[0]
        else:
            boxes += [c for c in children if hasattr(c, "get_children")]


def _check(fig, *artists) -> None:
    """Tag artists drawn for a pipeline-check model whose label cannot say so (an unlabelled point, a bar, a line
    whose label names a degradation): the page hides them with the pipeline-check rows."""
    fig.__dict__.setdefault("_focus_checks", []).extend(a for a in artists if a is not None)


def _marked_points(fig, ax, xs, ys, ids, check: bool = False) -> None:
    """Over points drawn otherwise (a line's vertices, a bar's end), invisible points a little wider, each carrying
    the metric ids of the value it sits on, so that a click there opens their chain; tagged when a pipeline check's."""
    for x, y, marked in zip(xs, ys, ids):
        if pd.notna(x) and pd.notna(y) and isinstance(marked, str) and marked.strip():
            (point,) = ax.plot([x], [y], ls="none", marker="o", ms=7, alpha=0.0, zorder=4)
            _mark(fig, point, marked)
            if check:
                _check(fig, point)


def _mark(fig, artist, ids) -> None:
    """Let a mark that draws metric rows carry their ids (space-separated) into the page: its SVG group gets an id
    that page.inline_svg turns into `data-metric-id`, so a click on it opens the same chain as the tables' number."""
    if not isinstance(ids, str) or not ids.strip():
        return
    marks = fig.__dict__.setdefault("_focus_marks", {})
    gid = f"{MARK_PREFIX}{len(marks)}"
    artist.set_gid(gid)
    marks[gid] = ids.strip()


MARK_PREFIX = "focus-mark-"


def _panels(fig, n: int, columns: int, row_height: float = ROW_HEIGHT, **kwargs) -> list:
    """n axes, `columns` to a row (fewer when n is smaller), the figure as tall as its rows."""
    columns = max(1, min(columns, n))
    rows = -(-n // columns)
    fig.set_size_inches(WIDTH, row_height * rows)
    return [fig.add_subplot(rows, columns, k + 1, **kwargs) for k in range(n)]


def _note(fig, show: bool) -> None:
    """The pipeline-check footnote, placed by `render` below everything else once the layout is known."""
    if show:
        fig._focus_footnote = DAGGER_NOTE


def _place_footnote(fig) -> None:
    note = getattr(fig, "_focus_footnote", None)
    if not note:
        return
    fig.draw_without_rendering()  # runs the layout: the lowest text is where it will be drawn
    fig.set_layout_engine("none")  # and stays there
    for legend in fig.legends:
        # A figure legend is anchored to the figure's edge, and a tight save moves that edge down to the note:
        # pinned where the layout put it, in figure coordinates, it stays above.
        box = legend.get_window_extent().transformed(fig.transFigure.inverted())
        legend.set_bbox_to_anchor(box, transform=fig.transFigure)
        legend.set_loc("center")
        legend.borderaxespad = 0
    lowest = fig.get_tightbbox().y0 / fig.get_size_inches()[1]
    fig.text(0.0, lowest - 0.02, note, fontsize=SMALL, color="#555555", ha="left", va="top")


def _two_lines(configuration: str) -> str:
    """A configuration's name ("model · method · task · dataset ...") broken at its middle separator."""
    parts = configuration.split(" · ")
    middle = (len(parts) + 1) // 2
    return " · ".join(parts[:middle]) + ("\n" + " · ".join(parts[middle:]) if parts[middle:] else "")


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


# ------------------------------------------------------------------------------------------ spider


def draw_spider(fig, table: pd.DataFrame) -> None:
    families = [f for f in FAMILIES if f in set(table["family"])] or ["vm"]
    labels = [a.label for a in SPIDER_AXES]
    angles = np.linspace(0, 2 * np.pi, len(labels), endpoint=False)
    for family, ax in zip(families, _panels(fig, len(families), 1, 3.0, projection="polar")):
        ax.tick_params(axis="x", pad=4)
        mine = table[table["family"] == family]
        configs = list(dict.fromkeys(mine["configuration"]))
        for j, config in enumerate(configs):
            rows = mine[mine["configuration"] == config].set_index("axis").reindex(labels)
            values = rows["shown"].to_numpy(float)
            check = bool(rows["pipeline_check"].fillna(False).any())
            ring = np.append(values, values[0])  # NaN leaves the outline open on that axis
            ax.plot(np.append(angles, angles[0]), ring, color=family_colour(family, j, len(configs)), lw=1.2,
                    ls="--" if check else "-", marker="o", ms=2.5, label=_two_lines(config))
            _marked_points(fig, ax, angles, values, rows["metric_id"], check)  # each vertex one metric row
        ax.set_xticks(angles)
        ax.set_xticklabels(labels)
        ax.set_ylim(0, 1)
        ax.set_yticks([0.25, 0.5, 0.75, 1.0])
        ax.set_yticklabels(["", "0.5", "", "1"], color="#777777")
        ax.set_title(FAMILIES.get(family, family), pad=12)
        if configs:
            ax.legend(loc="center left", bbox_to_anchor=(1.25, 0.5), frameon=False)
        else:
            ax.text(0, 0, "no configuration with a defined AUROC", ha="center", color="#666666")
    _note(fig, bool(table["pipeline_check"].any()) if len(table) else False)


# ------------------------------------------------------------------------------------ method means


def draw_method_means(fig, table: pd.DataFrame, published: pd.DataFrame | None = None) -> None:
    """Bars per method and model domain; the study's published mean of a family, method and domain (all tasks)
    as a dashed line in that domain's colour, named in the legend, which says when no such model is in this grid
    (the panel of a family this grid lacks is drawn for its published lines alone)."""
    published = published if published is not None else pd.DataFrame(columns=["family"])
    families = [f for f in FAMILIES if f in set(table["family"]) | set(published["family"])] or ["vm"]
    for k, (family, ax) in enumerate(zip(families, _panels(fig, len(families), 2, 3.6))):
        mine = table[table["family"] == family]
        groups = list(dict.fromkeys(zip(mine["method"], mine["domain"])))
        width = 0.8 / max(len(groups), 1)
        for j, (method, domain) in enumerate(groups):
            rows = mine[(mine["method"] == method) & (mine["domain"] == domain)].set_index("task").reindex(TASKS)
            x = np.arange(len(TASKS)) + (j - (len(groups) - 1) / 2) * width
            error = _error_bars(rows)
            check = domain == "pipeline-check"
            bars = ax.bar(x, rows["mean"], width * 0.92, yerr=error, capsize=2,
                          color=family_colour(family, j, len(groups)), hatch="///" if check else None,
                          edgecolor="white" if not check else "#444444", lw=0.5,
                          label=f"{method}, {domain}" + (" †" if check else ""), error_kw={"lw": 0.8})
            for bar, ids in zip(bars.patches, rows["metric_ids"]):
                _mark(fig, bar, ids)  # a bar: the mean of the metric rows it lists
        for mark in published[published["family"] == family].itertuples():
            here = (mark.method, mark.domain) in groups
            ax.axhline(mark.value, color=DOMAIN_COLOURS.get(mark.domain, DOMAIN_COLOURS_DEFAULT), lw=1.2,
                       ls=(0, (4, 2)), label=f"published {mark.domain} {mark.method}: {mark.value:.3f}"
                       + ("" if here else f"\n(no {mark.domain} model in this grid)"))
        ax.set_xticks(np.arange(len(TASKS)))
        ax.set_xticklabels(TASKS)
        ax.set_ylim(0, 1)
        ax.axhline(0.5, color="#999999", lw=0.6, ls=":")
        ax.set_title(FAMILIES.get(family, family))
        if k % 2 == 0:
            ax.set_ylabel("mean test AUROC\n(95% t interval)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    _note(fig, bool((table["domain"] == "pipeline-check").any()) if len(table) else False)


def _data_start(values: pd.DataFrame) -> float:
    """Where an AUROC axis starts: just below the lowest value drawn (whiskers included) or chance (0.5), whichever
    is lower, so no mark is cut and chance is always on the axis."""
    numbers = values.to_numpy(float)
    low = float(np.nanmin(numbers)) if np.isfinite(numbers).any() else 0.5
    return max(0.0, np.floor((min(low, 0.5) - 0.02) * 20) / 20)


def _error_bars(rows: pd.DataFrame):
    low = (rows["mean"] - rows["ci_low"]).to_numpy(float)
    high = (rows["ci_high"] - rows["mean"]).to_numpy(float)
    return np.nan_to_num(np.vstack([low, high]), nan=0.0)


# ------------------------------------------------------------------------------ general vs ophthalmic


def draw_general_vs_ophthalmic(fig, table: pd.DataFrame) -> None:
    (ax,) = _panels(fig, 1, 1, 0.32 * len(table) + 1.5)
    y = np.arange(len(table))[::-1]
    for row, yy in zip(table.itertuples(), y):
        if pd.notna(row.general_mean) and pd.notna(row.ophthalmic_mean):
            ax.plot([row.general_mean, row.ophthalmic_mean], [yy, yy], color="#bbbbbb", lw=1.5, zorder=1)
    for domain, marker in (("general", "o"), ("ophthalmic", "s")):
        ax.scatter(table[f"{domain}_mean"], y, marker=marker, s=28, color=DOMAIN_COLOURS[domain], zorder=2,
                   label=f"{domain} vision encoders")
        _marked_points(fig, ax, table[f"{domain}_mean"], y, table[f"{domain}_metric_ids"])  # a mean over its rows
    start = _data_start(table[["general_mean", "ophthalmic_mean"]])
    for row, yy in zip(table.itertuples(), y):
        if pd.isna(row.general_mean) and pd.isna(row.ophthalmic_mean):
            ax.text(0.5, yy, "no defined AUROC", va="center", color="#777777")
        published = getattr(row, "published_general_minus_ophthalmic", np.nan)
        if pd.notna(published):  # the study's gap on this dataset, stated beside the row
            ax.text(1.0, yy - 0.2, f"study (Table 4): general − ophthalmic {published:+.3f}", ha="right",
                    va="top", color="#555555")
    ax.set_yticks(y)
    ax.set_yticklabels(table["dataset"])
    ax.set_xlim(start, 1.02)
    ax.axvline(0.5, color="#999999", lw=0.6, ls=":")
    ax.set_xlabel("mean linear-probe test AUROC over models and tasks")
    ax.legend(frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=2)


# --------------------------------------------------------------------------------------- task cliff


def draw_task_cliff(fig, table: pd.DataFrame) -> None:
    (ax,) = _panels(fig, 1, 1, 3.4)
    x = np.arange(len(TASKS))
    for series, rows in table.groupby("series", sort=True):
        family = rows["family"].iloc[0]
        check = "pipeline check" in series
        rows = rows.set_index("task").reindex(TASKS)
        ax.errorbar(x, rows["mean"], yerr=_error_bars(rows), color=family_colour(family), marker="o", ms=4,
                    ls="--" if check else "-", capsize=3, lw=1.3, label=series)
        _marked_points(fig, ax, x, rows["mean"], rows["metric_ids"], check)
    ax.set_xticks(x)
    ax.set_xticklabels(TASKS)
    ax.set_ylim(_data_start(table[["mean", "ci_low"]]) if len(table) else 0.0, 1.01)
    ax.axhline(0.5, color="#999999", lw=0.6, ls=":")
    ax.set_ylabel("mean test AUROC (95% t interval)")
    if len(table):
        ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=2)
    else:
        _empty(ax, "no defined AUROC yet")
    _note(fig, bool(table["series"].str.contains("pipeline check").any()) if len(table) else False)


# ---------------------------------------------------------------------------------------- MLLMs


def draw_mllm(fig, table: pd.DataFrame, published: pd.DataFrame | None = None) -> None:
    """Left: each multimodal LLM's mean AUROC against its mean ECE, and the models whose AUROC and ECE the study
    published as hollow diamonds, named; right: fairness and image-quality gaps."""
    left, right = _panels(fig, 2, 1, 3.2)
    names_drawn = _published_models(left, published)
    if table.empty:
        left.set_title("no multimodal LLM in this grid: the study's published models only" if names_drawn
                       else "no multimodal LLM selected")
        _empty(right, "no multimodal LLM in this grid")
        _names_inside(left, names_drawn)
        _apart(fig, [label for _, label in names_drawn])
        return
    for row in table.itertuples():
        size = 25 + 6 * row.size_b if pd.notna(row.size_b) else 25
        marker = "X" if row.pipeline_check else ("s" if row.method == "yes_no_lora" else "o")
        point = left.scatter(row.auroc, row.ece, s=size, marker=marker, alpha=0.85,
                             color=DOMAIN_COLOURS.get(row.domain, DOMAIN_COLOURS_DEFAULT))
        _mark(fig, point, f"{row.auroc_metric_ids} {row.ece_metric_ids}")  # the point: both means' rows
        if row.pipeline_check:
            _check(fig, point)
        name = _mllm_name(row)
        size_text = f", {row.size_b:g}B" if pd.notna(row.size_b) else ""
        if pd.notna(row.auroc) and pd.notna(row.ece):
            names_drawn.append((row.auroc, left.annotate(name + size_text, (row.auroc, row.ece), xytext=(5, 3),
                                                         textcoords="offset points")))
    from matplotlib.ticker import MaxNLocator

    left.xaxis.set_major_locator(MaxNLocator(5))
    left.set_xlabel("mean test AUROC")
    left.set_ylabel("mean ECE (10 bins; lower is better)")
    left.set_title("AUROC vs ECE (colour: domain; area: size)")
    for domain in sorted(set(table["domain"])):
        left.scatter([], [], color=DOMAIN_COLOURS.get(domain, DOMAIN_COLOURS_DEFAULT), label=domain)
    left.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    left.margins(0.12)
    _names_inside(left, names_drawn)
    _apart(fig, [label for _, label in names_drawn])
    names = [_mllm_name(r) for r in table.itertuples()]
    y = np.arange(len(table))
    for offset, gap, colour, label in ((-0.2, "fairness_gap", 0, "sex equalized-odds gap"),
                                       (0.2, "quality_gap", 1, "|quality accuracy gap|")):
        bars = right.barh(y + offset, table[gap].fillna(0), 0.4, color=family_colour("mllm", colour, 2), label=label)
        for bar, ids, check in zip(bars.patches, table[f"{gap}_metric_ids"], table["pipeline_check"]):
            _mark(fig, bar, ids)
            if check:
                _check(fig, bar)
    for yy, (fair, quality) in enumerate(zip(table["fairness_gap"], table["quality_gap"])):
        for offset, value in ((-0.2, fair), (0.2, quality)):
            if pd.isna(value):
                right.text(0.005, yy + offset, "n/a", va="center", color="#777777")
    right.set_yticks(y)
    right.set_yticklabels(names)
    right.set_xlabel("mean gap over configurations (lower is fairer / more robust)")
    right.set_title("fairness and image-quality gaps")
    right.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _note(fig, bool(table["pipeline_check"].any()))


def _mllm_name(row) -> str:
    """A multimodal LLM as its points and bars name it: the model, (LoRA) when adapted, † for a pipeline check."""
    return f"{row.model}{' (LoRA)' if row.method == 'yes_no_lora' else ''}{' †' if row.pipeline_check else ''}"


def _published_models(ax, published: pd.DataFrame | None) -> list:
    """The study's models with a published AUROC and ECE, as hollow diamonds named "<model> (published)"; their
    (x, label) for `_names_inside`."""
    if published is None or published.empty:
        return []
    labels = []
    for model, rows in published.groupby("model", sort=True):
        values = rows.set_index("metric")["value"]
        if not {"auroc", "ece"} <= set(values.index):
            continue
        name = rows["quantity"].iloc[0].split(",")[0]
        ax.scatter(values["auroc"], values["ece"], s=40, marker="D", facecolors="none", edgecolors="#222222",
                   lw=1.0, label="published (hollow)" if not labels else None)
        labels.append((values["auroc"], ax.annotate(f"{name} (published)", (values["auroc"], values["ece"]),
                                                    xytext=(5, 3), textcoords="offset points", color="#444444")))
    return labels


def _names_inside(ax, labels: list) -> None:
    """A point's name on the side of the point that faces the middle of the axes, so it stays inside them."""
    low, high = ax.get_xlim()
    for x, label in labels:
        if x > (low + high) / 2:
            label.set_horizontalalignment("right")
            label.xyann = (-5, label.xyann[1])


def _apart(fig, labels: list) -> None:
    """Moves point labels down, one line at a time, until none covers another (points close in AUROC and ECE
    put their names on top of each other)."""
    if len(labels) < 2:
        return
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    placed = []
    for label in labels:
        for _ in range(len(labels)):
            box = label.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed):
                break
            x, y = label.xyann
            label.xyann = (x, y - box.height * 72 / fig.dpi - 1)
        placed.append(label.get_window_extent(renderer))


# ------------------------------------------------------------------------------------- transfer


MAX_TRANSFER_PANELS = 6


def transfer_panels(table: pd.DataFrame) -> list[tuple[str, str]]:
    """The (model, task) matrices drawn: those with the most defined cells, at most MAX_TRANSFER_PANELS."""
    defined = table[table["value"].notna()].groupby(["model", "task"]).size()
    ranked = sorted(defined.items(), key=lambda item: (-item[1], item[0]))
    return [key for key, _ in ranked[:MAX_TRANSFER_PANELS]]


def draw_transfer(fig, table: pd.DataFrame) -> None:
    from matplotlib import colormaps

    panels = transfer_panels(table)
    if not panels:
        _empty(fig.add_subplot(1, 1, 1), "no cross-dataset pair with a defined AUROC")
        return
    frames = {(model, task): table[(table["model"] == model) & (table["task"] == task)] for model, task in panels}
    names = {panel: sorted(set(mine["train_dataset"]) | set(mine["dataset"])) for panel, mine in frames.items()}
    columns = 2 if max(map(len, names.values())) <= 6 else 1  # cells wide enough for their numbers
    cmap = colormaps["viridis"].with_extremes(bad="#e6e6e6")
    for k, ((model, task), ax) in enumerate(zip(panels, _panels(fig, len(panels), columns, 3.4))):
        mine, shown = frames[model, task], names[model, task]
        grid = mine.pivot_table(index="train_dataset", columns="dataset", values="value", aggfunc="first")
        grid = grid.reindex(index=shown, columns=shown)
        ids = mine.pivot_table(index="train_dataset", columns="dataset", values="metric_id", aggfunc="first")
        ids = ids.reindex(index=shown, columns=shown)
        image = ax.imshow(np.ma.masked_invalid(grid.to_numpy(float)), cmap=cmap, vmin=0.0, vmax=1.0)
        for (i, j), value in np.ndenumerate(grid.to_numpy(float)):
            text = ax.text(j, i, "–" if np.isnan(value) else f"{value:.2f}", ha="center", va="center",
                           fontsize=SMALL, color="black" if np.isnan(value) or value > 0.6 else "white")
            if not np.isnan(value):
                _mark(fig, text, ids.iat[i, j])  # a cell's number: its metric row
        ax.set_xticks(range(len(shown)))
        ax.set_xticklabels(shown, rotation=90)
        ax.set_yticks(range(len(shown)))
        ax.set_yticklabels(shown)
        check = bool(mine["pipeline_check"].any())
        ax.set_title(f"{model}{' †' if check else ''}\n{task}")
        if k % columns == 0:
            ax.set_ylabel("trained on")
        ax.set_xlabel("tested on")
    fig.colorbar(image, ax=fig.axes, shrink=0.8, label="test AUROC")
    _note(fig, bool(table[table.set_index(["model", "task"]).index.isin(panels)]["pipeline_check"].any()))


# ---------------------------------------------------------------------------------- reliability


def draw_reliability(fig, table: pd.DataFrame) -> None:
    configs = list(dict.fromkeys(table["configuration"]))
    if not configs:
        _empty(fig.add_subplot(1, 1, 1), "no configuration with a defined ECE")
        return
    for k, (config, ax) in enumerate(zip(configs, _panels(fig, len(configs), 2, 3.0))):
        rows = table[table["configuration"] == config]
        family = rows["family"].iloc[0]
        centres = ((rows["bin_lower"] + rows["bin_upper"]) / 2).to_numpy(float)
        widths = (rows["bin_upper"] - rows["bin_lower"]).clip(lower=0.02).to_numpy(float)
        check = bool(rows["pipeline_check"].iloc[0])
        bars = ax.bar(centres, rows["positive_rate"].fillna(0), widths * 0.92, color=family_colour(family),
                      hatch="///" if check else None, edgecolor="white", lw=0.4)
        ax.plot([0, 1], [0, 1], color="#999999", lw=0.8, ls="--")
        for bar, centre, count, rate, ids in zip(bars.patches, centres, rows["count"], rows["positive_rate"],
                                                 rows["metric_id"]):
            text = ax.text(centre, (0 if pd.isna(rate) else rate) + 0.02, str(int(count)), ha="center",
                           fontsize=SMALL)
            _mark(fig, bar, ids)  # a bin of the ECE whose row it carries
            if check:
                _check(fig, bar, text)
        ax.set_xlim(0, 1.02)
        ax.set_ylim(0, 1.1)
        ax.set_xlabel("mean score in bin")
        if k % 2 == 0:
            ax.set_ylabel("observed positive rate\n(bar labels: images)")
        ax.set_title(f"{_two_lines(config)}\nECE {rows['ece'].iloc[0]:.3f}")
    _note(fig, bool(table["pipeline_check"].any()))


# ----------------------------------------------------------------------------------- robustness


def draw_robustness(fig, curves: pd.DataFrame) -> None:
    """Mean AUROC against severity (0: clean), one panel per degradation family; a colour per degradation (named
    in the panel when it has several), a line style per model series (pipeline checks dashed, named once below
    the panels), whiskers the t interval over configurations."""
    panels = list(dict.fromkeys(curves["panel"])) if len(curves) else []
    if not panels:
        _empty(fig.add_subplot(1, 1, 1), "no degraded test image scored yet")
        return
    from matplotlib import colormaps
    from matplotlib.lines import Line2D

    columns = 2
    start = _data_start(curves[["mean", "ci_low"]])
    for k, (panel, ax) in enumerate(zip(panels, _panels(fig, len(panels), columns, 3.0))):
        mine = curves[curves["panel"] == panel]
        names = list(dict.fromkeys(mine["degradation"]))
        for j, name in enumerate(names):
            colour = colormaps["tab10"](j % 10)
            for n, (series, line) in enumerate(mine[mine["degradation"] == name].groupby("series", sort=True)):
                line = line.sort_values("severity")
                check = "pipeline check" in series
                drawn = ax.errorbar(line["severity"], line["mean"], yerr=_whiskers(line), color=colour, lw=1.2,
                                    ls="--" if check else "-", marker="o", ms=3, capsize=2,
                                    label=name if n == 0 else None)
                _marked_points(fig, ax, line["severity"], line["mean"], line["metric_ids"], check)
                if check:
                    _check(fig, *drawn.get_children())
        ax.set_xticks(range(0, 6))
        ax.set_xlabel("severity (0: clean)")
        if k % columns == 0:
            ax.set_ylabel("mean test AUROC")
        ax.set_ylim(start, 1.01)
        ax.set_title(panel if len(names) > 1 else f"{panel}: {names[0]}")
        if len(names) > 1:
            ax.legend(frameon=False, loc="lower left")
    series = sorted(set(curves["series"]))
    fig.legend(handles=[Line2D([], [], color="#444444", ls="--" if "pipeline check" in s else "-", marker="o", ms=3,
                               label=s) for s in series],
               loc="outside lower center", ncol=min(2, len(series)), frameon=False)
    _note(fig, bool(curves["series"].str.contains("pipeline check").any()))


def _whiskers(rows: pd.DataFrame):
    """Asymmetric error bars from the t interval (none where there is a single configuration)."""
    mean = rows["mean"].to_numpy(float)
    lower = np.nan_to_num(mean - rows["ci_low"].to_numpy(float), nan=0.0).clip(min=0)
    upper = np.nan_to_num(rows["ci_high"].to_numpy(float) - mean, nan=0.0).clip(min=0)
    return np.vstack([lower, upper])


# ----------------------------------------------------------------------------------------- LoRA


def draw_lora(fig, deltas: pd.DataFrame, means: pd.DataFrame, published: pd.DataFrame | None = None) -> None:
    """Per metric, each adapted configuration's delta in-domain and out-of-domain, their means with a t interval,
    and the study's published mean delta as a hollow star beside them (drawn with no adapter here too)."""
    from focus_dagster.report.arena import LORA_METRICS

    published = published if published is not None else pd.DataFrame(columns=["metric", "domain", "value"])
    if deltas["delta"].notna().sum() == 0 and published.empty:
        _empty(fig.add_subplot(1, 1, 1), "no adapted configuration with a delta yet")
        return
    rng = np.random.default_rng(0)  # the jitter only spreads overlapping points
    for metric, ax in zip(LORA_METRICS, _panels(fig, len(LORA_METRICS), 3, 3.2)):
        for j, domain in enumerate(("in_domain", "out_of_domain")):
            rows = deltas[(deltas["metric"] == metric) & (deltas["domain"] == domain) & deltas["delta"].notna()]
            x = j + rng.uniform(-0.15, 0.15, len(rows))
            checks = rows["pipeline_check"].astype(bool)
            for check, points in ((False, ~checks), (True, checks)):
                if points.any():
                    drawn = ax.scatter(x[points.to_numpy()], rows.loc[points, "delta"], s=10, alpha=0.6,
                                       color=family_colour("mllm", j, 2), marker="x" if check else "o")
                    if check:
                        _check(fig, drawn)
                    _marked_points(fig, ax, x[points.to_numpy()], rows.loc[points, "delta"],
                                   rows.loc[points, "metric_id"], check)
            mine = means[(means["metric"] == metric) & (means["domain"] == domain)]
            for s, m in enumerate(mine.sort_values("series").to_dict("records")):  # real models first, then †
                check = "pipeline check" in m["series"]
                error = None if pd.isna(m["ci_low"]) else [[m["mean"] - m["ci_low"]], [m["ci_high"] - m["mean"]]]
                drawn = ax.errorbar([j + 0.3 + 0.12 * s], [m["mean"]], yerr=error, fmt="D", ms=4, capsize=3,
                                    color="#888888" if check else "black")
                _marked_points(fig, ax, [j + 0.3 + 0.12 * s], [m["mean"]], [m["metric_ids"]], check)
                if check:
                    _check(fig, *drawn.get_children())
            mark = published[(published["metric"] == metric) & (published["domain"] == domain)]
            ax.scatter([j - 0.3] * len(mark), mark["value"], s=60, marker="*", facecolors="none",
                       edgecolors="#c23b3b", lw=1.0)
        if deltas["delta"].notna().sum() == 0:
            ax.text(0.5, 0.04, "no adapter in this grid", transform=ax.transAxes, ha="center", color="#666666")
        ax.axhline(0, color="#999999", lw=0.7)
        ax.set_xticks([0, 1])
        ax.set_xticklabels(["in-\ndomain", "out-of-\ndomain"])
        ax.set_xlim(-0.6, 1.6)
        ax.set_title(f"Δ {metric}")
    fig.axes[0].set_ylabel("adapted - base")
    from matplotlib.lines import Line2D

    fig.legend(handles=[Line2D([], [], ls="", marker="o", color="#666666", label="one configuration"),
                        Line2D([], [], ls="", marker="D", color="black", label="mean, 95% t interval"),
                        Line2D([], [], ls="", marker="D", color="#888888", label="mean of pipeline checks †"),
                        Line2D([], [], ls="", marker="*", markerfacecolor="none", markeredgecolor="#c23b3b", ms=9,
                               label="published mean (Table 5)")],
               loc="outside lower center", ncol=2, frameon=False)
    _note(fig, bool(deltas["pipeline_check"].any()))


# ------------------------------------------------------------------------------------- coverage


def draw_coverage(fig, table: pd.DataFrame) -> None:
    from matplotlib.colors import ListedColormap

    datasets = list(dict.fromkeys(table["dataset"]))
    (ax,) = _panels(fig, 1, 1, 0.3 * len(datasets) + 1.9)
    axes = list(dict.fromkeys(table["axis"]))
    grid = table.pivot(index="dataset", columns="axis", values="covered").reindex(index=datasets, columns=axes)
    # Cells as wide as the figure allows: each axis name fits over its column unturned.
    ax.imshow((grid == "yes").to_numpy(int), cmap=ListedColormap(["#eeeeee", "#4c9a6a"]), vmin=0, vmax=1,
              aspect="auto")
    for (i, j), value in np.ndenumerate(grid.to_numpy()):
        ax.text(j, i, "✓" if value == "yes" else "–", ha="center", va="center", fontsize=SMALL,
                color="white" if value == "yes" else "#777777")
    ax.set_xticks(range(len(axes)))
    ax.set_xticklabels(axes)
    ax.set_yticks(range(len(datasets)))
    ax.set_yticklabels(datasets)
    ax.set_title("which dataset contributes to which axis\n(– : no defined number; the reasons are listed below)")
