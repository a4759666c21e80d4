"""The arena's figures, drawn with matplotlib (no pyplot state: each figure is its own object) from the tables
of `arena.py`, as SVG for the HTML report and PNG for the files and the UI.

One palette per family (blues: vision encoders, greens: dual-encoder VLMs, purples: multimodal LLMs),
pipeline-check models dashed or hatched and marked †, no gridlines but the ones that help reading a value.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pandas as pd

from focus_dagster.report.arena import FAMILIES, SPIDER_AXES, TASKS

PALETTES = {"vm": "Blues", "vlm": "Greens", "mllm": "Purples"}
DOMAIN_COLOURS = {"general": "#3b6fb6", "ophthalmic": "#d9822b", "medical": "#c23b3b", "pipeline-check": "#8c8c8c",
                  "unregistered": "#555555"}
DOMAIN_COLOURS_DEFAULT = "#555555"
DAGGER_NOTE = "† pipeline-check model: seeded random weights; it tests the plumbing and says nothing about retinal AI"
STYLE = {
    "font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "axes.spines.top": False, "axes.spines.right": False, "svg.fonttype": "none",
    "figure.dpi": 100, "savefig.bbox": "tight",
}


@dataclass(frozen=True)
class Drawn:
    """A figure as the report keeps it."""

    svg: bytes
    png: bytes


def family_colour(family: str, k: int = 0, n: int = 1):
    """The k-th of n shades of a family's palette (dark to light, never too pale to read)."""
    from matplotlib import colormaps

    cmap = colormaps[PALETTES.get(family, "Greys")]
    return cmap(0.9 - 0.5 * (k / max(n - 1, 1)))


def render(draw, *args, width: float = 7.0, height: float = 4.0) -> Drawn:
    """Draw a figure with `draw(fig, *args)` in the house style; return its SVG and PNG (150 dpi)."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height))
        draw(fig, *args)
        svg, png = io.BytesIO(), io.BytesIO()
        fig.savefig(svg, format="svg", metadata={"Date": None})
        fig.savefig(png, format="png", dpi=150, metadata={"Software": None})
    return Drawn(svg.getvalue(), png.getvalue())


def _note(fig, show: bool, below: float = -0.02) -> None:
    if show:
        fig.text(0.01, below, DAGGER_NOTE, fontsize=6.5, color="#555555", ha="left", va="top")


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


# ------------------------------------------------------------------------------------------ spider


def draw_spider(fig, table: pd.DataFrame) -> None:
    families = [f for f in FAMILIES if f in set(table["family"])] or ["vm"]
    labels = [a.label for a in SPIDER_AXES]
    angles = np.linspace(0, 2 * np.pi, len(labels), endpoint=False)
    for k, family in enumerate(families):
        ax = fig.add_subplot(1, len(families), k + 1, projection="polar")
        ax.tick_params(axis="x", pad=6)
        mine = table[table["family"] == family]
        configs = list(dict.fromkeys(mine["configuration"]))
        for j, config in enumerate(configs):
            rows = mine[mine["configuration"] == config].set_index("axis").reindex(labels)
            values = rows["shown"].to_numpy(float)
            check = bool(rows["pipeline_check"].fillna(False).any())
            ring = np.append(values, values[0])  # NaN leaves the outline open on that axis
            ax.plot(np.append(angles, angles[0]), ring, color=family_colour(family, j, len(configs)), lw=1.2,
                    ls="--" if check else "-", marker="o", ms=2.5, label=config)
        ax.set_xticks(angles)
        ax.set_xticklabels(labels)
        ax.set_ylim(0, 1)
        ax.set_yticks([0.25, 0.5, 0.75, 1.0])
        ax.set_yticklabels(["", "0.5", "", "1"], color="#777777")
        ax.set_title(FAMILIES.get(family, family), pad=14)
        if configs:
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False, fontsize=5.5)
        else:
            ax.text(0, 0, "no configuration with a defined AUROC", ha="center", fontsize=7, color="#666666")
    fig.subplots_adjust(wspace=0.55)
    _note(fig, bool(table["pipeline_check"].any()) if len(table) else False)


# ------------------------------------------------------------------------------------ method means


def draw_method_means(fig, table: pd.DataFrame) -> None:
    families = [f for f in FAMILIES if f in set(table["family"])] or ["vm"]
    for k, family in enumerate(families):
        ax = fig.add_subplot(1, len(families), k + 1)
        mine = table[table["family"] == family]
        groups = list(dict.fromkeys(zip(mine["method"], mine["domain"])))
        width = 0.8 / max(len(groups), 1)
        for j, (method, domain) in enumerate(groups):
            rows = mine[(mine["method"] == method) & (mine["domain"] == domain)].set_index("task").reindex(TASKS)
            x = np.arange(len(TASKS)) + (j - (len(groups) - 1) / 2) * width
            error = _error_bars(rows)
            check = domain == "pipeline-check"
            ax.bar(x, rows["mean"], width * 0.92, yerr=error, capsize=2, color=family_colour(family, j, len(groups)),
                   hatch="///" if check else None, edgecolor="white" if not check else "#444444", lw=0.5,
                   label=f"{method}, {domain}" + (" †" if check else ""), error_kw={"lw": 0.8})
        ax.set_xticks(np.arange(len(TASKS)))
        ax.set_xticklabels(TASKS)
        ax.set_ylim(0, 1)
        ax.axhline(0.5, color="#999999", lw=0.6, ls=":")
        ax.set_title(FAMILIES.get(family, family))
        if k == 0:
            ax.set_ylabel("mean test AUROC (95% t interval)")
        if groups:
            ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    _note(fig, bool((table["domain"] == "pipeline-check").any()) if len(table) else False, below=-0.25)


def _error_bars(rows: pd.DataFrame):
    low = (rows["mean"] - rows["ci_low"]).to_numpy(float)
    high = (rows["ci_high"] - rows["mean"]).to_numpy(float)
    return np.nan_to_num(np.vstack([low, high]), nan=0.0)


# ------------------------------------------------------------------------------ general vs ophthalmic


def draw_general_vs_ophthalmic(fig, table: pd.DataFrame) -> None:
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(len(table))[::-1]
    for row, yy in zip(table.itertuples(), y):
        if pd.notna(row.general_mean) and pd.notna(row.ophthalmic_mean):
            ax.plot([row.general_mean, row.ophthalmic_mean], [yy, yy], color="#bbbbbb", lw=1.5, zorder=1)
    for domain, marker in (("general", "o"), ("ophthalmic", "s")):
        ax.scatter(table[f"{domain}_mean"], y, marker=marker, s=28, color=DOMAIN_COLOURS[domain], zorder=2,
                   label=f"{domain} vision encoders")
    for row, yy in zip(table.itertuples(), y):
        if pd.isna(row.general_mean) and pd.isna(row.ophthalmic_mean):
            ax.text(0.52, yy, "no defined AUROC", va="center", fontsize=6, color="#777777")
    ax.set_yticks(y)
    ax.set_yticklabels(table["dataset"])
    ax.set_xlim(0.3, 1.05)
    ax.axvline(0.5, color="#999999", lw=0.6, ls=":")
    ax.set_xlabel("mean linear-probe test AUROC over models and tasks")
    ax.legend(frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=2)


# --------------------------------------------------------------------------------------- task cliff


def draw_task_cliff(fig, table: pd.DataFrame) -> None:
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(TASKS))
    for series, rows in table.groupby("series", sort=True):
        family = rows["family"].iloc[0]
        check = "pipeline check" in series
        rows = rows.set_index("task").reindex(TASKS)
        ax.errorbar(x, rows["mean"], yerr=_error_bars(rows), color=family_colour(family), marker="o", ms=4,
                    ls="--" if check else "-", capsize=3, lw=1.3, label=series)
    ax.set_xticks(x)
    ax.set_xticklabels(TASKS)
    ax.set_ylim(0.3, 1.0)
    ax.axhline(0.5, color="#999999", lw=0.6, ls=":")
    ax.set_ylabel("mean test AUROC (95% t interval)")
    if len(table):
        ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        _empty(ax, "no defined AUROC yet")
    _note(fig, bool(table["series"].str.contains("pipeline check").any()) if len(table) else False)


# ---------------------------------------------------------------------------------------- MLLMs


def draw_mllm(fig, table: pd.DataFrame) -> None:
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    if table.empty:
        _empty(left, "no multimodal LLM selected")
        _empty(right, "")
        return
    for row in table.itertuples():
        size = 25 + 6 * row.size_b if pd.notna(row.size_b) else 25
        marker = "X" if row.pipeline_check else ("s" if row.method == "yes_no_lora" else "o")
        left.scatter(row.auroc, row.ece, s=size, marker=marker, alpha=0.85,
                     color=DOMAIN_COLOURS.get(row.domain, DOMAIN_COLOURS_DEFAULT))
        name = f"{row.model}{' (LoRA)' if row.method == 'yes_no_lora' else ''}{' †' if row.pipeline_check else ''}"
        size_text = f", {row.size_b:g}B" if pd.notna(row.size_b) else ""
        if pd.notna(row.auroc) and pd.notna(row.ece):
            left.annotate(name + size_text, (row.auroc, row.ece), fontsize=6, xytext=(4, 3), textcoords="offset points")
    from matplotlib.ticker import MaxNLocator

    left.xaxis.set_major_locator(MaxNLocator(5))
    left.set_xlabel("mean test AUROC")
    left.set_ylabel("mean ECE (10 bins; lower is better)")
    left.set_title("AUROC vs ECE (colour: domain; area: size)")
    for domain in sorted(set(table["domain"])):
        left.scatter([], [], color=DOMAIN_COLOURS.get(domain, DOMAIN_COLOURS_DEFAULT), label=domain)
    left.legend(frameon=False, fontsize=6)
    names = [f"{r.model}{' (LoRA)' if r.method == 'yes_no_lora' else ''}{' †' if r.pipeline_check else ''}"
             for r in table.itertuples()]
    y = np.arange(len(table))
    right.barh(y - 0.2, table["fairness_gap"].fillna(0), 0.4, color=family_colour("mllm", 0, 2),
               label="sex equalized-odds gap")
    right.barh(y + 0.2, table["quality_gap"].fillna(0), 0.4, color=family_colour("mllm", 1, 2),
               label="|quality accuracy gap|")
    for yy, (fair, quality) in enumerate(zip(table["fairness_gap"], table["quality_gap"])):
        for offset, value in ((-0.2, fair), (0.2, quality)):
            if pd.isna(value):
                right.text(0.005, yy + offset, "n/a", va="center", fontsize=5.5, color="#777777")
    right.set_yticks(y)
    right.set_yticklabels(names)
    right.set_xlabel("mean gap over configurations (lower is fairer / more robust)")
    right.set_title("fairness and image-quality gaps")
    right.legend(frameon=False, fontsize=6)
    _note(fig, bool(table["pipeline_check"].any()))


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
    columns = min(len(panels), 3)
    rows_n = int(np.ceil(len(panels) / columns))
    cmap = colormaps["viridis"].with_extremes(bad="#e6e6e6")
    for k, (model, task) in enumerate(panels):
        ax = fig.add_subplot(rows_n, columns, k + 1)
        mine = table[(table["model"] == model) & (table["task"] == task)]
        names = sorted(set(mine["train_dataset"]) | set(mine["dataset"]))
        grid = mine.pivot_table(index="train_dataset", columns="dataset", values="value", aggfunc="first")
        grid = grid.reindex(index=names, columns=names)
        image = ax.imshow(np.ma.masked_invalid(grid.to_numpy(float)), cmap=cmap, vmin=0.0, vmax=1.0)
        for (i, j), value in np.ndenumerate(grid.to_numpy(float)):
            ax.text(j, i, "–" if np.isnan(value) else f"{value:.2f}", ha="center", va="center", fontsize=5,
                    color="black" if np.isnan(value) or value > 0.6 else "white")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=5.5)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=5.5)
        check = bool(mine["pipeline_check"].any())
        ax.set_title(f"{model}{' †' if check else ''} · {task}", fontsize=7.5)
        if k % columns == 0:
            ax.set_ylabel("trained on")
        ax.set_xlabel("tested on", fontsize=6.5)
    fig.colorbar(image, ax=fig.axes, shrink=0.6, label="test AUROC")
    _note(fig, bool(table[table.set_index(["model", "task"]).index.isin(panels)]["pipeline_check"].any()))


# ---------------------------------------------------------------------------------- reliability


def draw_reliability(fig, table: pd.DataFrame) -> None:
    configs = list(dict.fromkeys(table["configuration"]))
    if not configs:
        _empty(fig.add_subplot(1, 1, 1), "no configuration with a defined ECE")
        return
    for k, config in enumerate(configs):
        ax = fig.add_subplot(1, len(configs), k + 1)
        rows = table[table["configuration"] == config]
        family = rows["family"].iloc[0]
        centres = ((rows["bin_lower"] + rows["bin_upper"]) / 2).to_numpy(float)
        widths = (rows["bin_upper"] - rows["bin_lower"]).clip(lower=0.02).to_numpy(float)
        ax.bar(centres, rows["positive_rate"].fillna(0), widths * 0.92, color=family_colour(family),
               hatch="///" if rows["pipeline_check"].iloc[0] else None, edgecolor="white", lw=0.4)
        ax.plot([0, 1], [0, 1], color="#999999", lw=0.8, ls="--")
        for centre, count, rate in zip(centres, rows["count"], rows["positive_rate"]):
            ax.text(centre, (0 if pd.isna(rate) else rate) + 0.02, str(int(count)), ha="center", fontsize=5.5)
        ax.set_xlim(0, 1.02)
        ax.set_ylim(0, 1.1)
        ax.set_xlabel("mean score in bin")
        if k == 0:
            ax.set_ylabel("observed positive rate (bar labels: images)")
        ax.set_title(f"{config}\nECE {rows['ece'].iloc[0]:.3f}", fontsize=6.5)
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

    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    low = float(np.nanmin(curves[["mean", "ci_low"]].to_numpy(float)))
    for k, panel in enumerate(panels):
        ax = fig.add_subplot(rows, columns, k + 1)
        mine = curves[curves["panel"] == panel]
        names = list(dict.fromkeys(mine["degradation"]))
        for j, name in enumerate(names):
            colour = colormaps["tab10"](j % 10)
            for n, (series, line) in enumerate(mine[mine["degradation"] == name].groupby("series", sort=True)):
                line = line.sort_values("severity")
                ax.errorbar(line["severity"], line["mean"], yerr=_whiskers(line), color=colour, lw=1.2,
                            ls="--" if "pipeline check" in series else "-", marker="o", ms=3, capsize=2,
                            label=name if n == 0 else None)
        ax.set_xticks(range(0, 6))
        ax.set_xlabel("severity (0: clean)")
        if k % columns == 0:
            ax.set_ylabel("mean test AUROC")
        ax.set_ylim(max(0.0, min(low, 0.5) - 0.02), 1.01)
        ax.set_title(panel if len(names) > 1 else f"{panel}: {names[0]}")
        if len(names) > 1:
            ax.legend(frameon=False, fontsize=6, loc="lower left")
    series = sorted(set(curves["series"]))
    fig.legend(handles=[Line2D([], [], color="#444444", ls="--" if "pipeline check" in s else "-", marker="o", ms=3,
                               label=s) for s in series],
               loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, len(series)), frameon=False, fontsize=7)
    fig.subplots_adjust(hspace=0.6, wspace=0.3)
    _note(fig, bool(curves["series"].str.contains("pipeline check").any()), below=-0.07)


def _whiskers(rows: pd.DataFrame):
    """Asymmetric error bars from the t interval (none where there is a single configuration)."""
    mean = rows["mean"].to_numpy(float)
    lower = np.nan_to_num(mean - rows["ci_low"].to_numpy(float), nan=0.0).clip(min=0)
    upper = np.nan_to_num(rows["ci_high"].to_numpy(float) - mean, nan=0.0).clip(min=0)
    return np.vstack([lower, upper])


# ----------------------------------------------------------------------------------------- LoRA


def draw_lora(fig, deltas: pd.DataFrame, means: pd.DataFrame) -> None:
    from focus_dagster.report.arena import LORA_METRICS

    if deltas["delta"].notna().sum() == 0:
        _empty(fig.add_subplot(1, 1, 1), "no adapted configuration with a delta yet")
        return
    rng = np.random.default_rng(0)  # the jitter only spreads overlapping points
    for k, metric in enumerate(LORA_METRICS):
        ax = fig.add_subplot(1, len(LORA_METRICS), k + 1)
        for j, domain in enumerate(("in_domain", "out_of_domain")):
            rows = deltas[(deltas["metric"] == metric) & (deltas["domain"] == domain) & deltas["delta"].notna()]
            x = j + rng.uniform(-0.15, 0.15, len(rows))
            ax.scatter(x, rows["delta"], s=10, alpha=0.6, color=family_colour("mllm", j, 2),
                       marker="x" if rows["pipeline_check"].any() else "o")
            mine = means[(means["metric"] == metric) & (means["domain"] == domain)]
            for s, m in enumerate(mine.sort_values("series").to_dict("records")):  # real models first, then †
                check = "pipeline check" in m["series"]
                error = None if pd.isna(m["ci_low"]) else [[m["mean"] - m["ci_low"]], [m["ci_high"] - m["mean"]]]
                ax.errorbar([j + 0.3 + 0.12 * s], [m["mean"]], yerr=error, fmt="D", ms=4, capsize=3,
                            color="#888888" if check else "black")
        ax.axhline(0, color="#999999", lw=0.7)
        ax.set_xticks([0, 1])
        ax.set_xticklabels(["in-domain", "out-of-domain"])
        ax.set_xlim(-0.5, 1.6)
        ax.set_title(f"Δ {metric} (adapted - base)")
    fig.axes[0].set_ylabel("delta per configuration; ◆ mean (95% t interval; grey: pipeline check †)")
    _note(fig, bool(deltas["pipeline_check"].any()))


# ------------------------------------------------------------------------------------- coverage


def draw_coverage(fig, table: pd.DataFrame) -> None:
    from matplotlib.colors import ListedColormap

    ax = fig.add_subplot(1, 1, 1)
    datasets = list(dict.fromkeys(table["dataset"]))
    axes = list(dict.fromkeys(table["axis"]))
    grid = table.pivot(index="dataset", columns="axis", values="covered").reindex(index=datasets, columns=axes)
    ax.imshow((grid == "yes").to_numpy(int), cmap=ListedColormap(["#eeeeee", "#4c9a6a"]), vmin=0, vmax=1)
    for (i, j), value in np.ndenumerate(grid.to_numpy()):
        ax.text(j, i, "✓" if value == "yes" else "–", ha="center", va="center", fontsize=7,
                color="white" if value == "yes" else "#777777")
    ax.set_xticks(range(len(axes)))
    ax.set_xticklabels(axes, rotation=30, ha="right")
    ax.set_yticks(range(len(datasets)))
    ax.set_yticklabels(datasets)
    ax.set_title("which dataset contributes to which axis (– : no defined number; the reasons are listed below)")
