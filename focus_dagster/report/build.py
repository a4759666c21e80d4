"""The arena report: the sections (figure, reading, tables) built from the metric tables, and the files written.

`build_report` computes; `write_report` writes one folder atomically: `index.html` (self-contained),
`figures/<section>.png`, `tables/<table>.csv`, `lineage.json` (the chain behind every number cited, as the page
embeds it) and `manifest.json` (what was read, with the lineage stamp ids of the tables' partitions, and what was
written).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from focus_dagster.markup import md_text
from focus_dagster.models.catalog import CATALOG
from focus_dagster.report import arena, figures, reference
from focus_dagster.report.page import Num, ReportTable, Section, format_number, json_text, page, plain

TITLE = "FOCUS arena report"
LINEAGE_FILE = "lineage.json"
LINEAGE_LINES = 200  # links listed in the asset's metadata; every one is in lineage.json


@dataclass
class ReportInputs:
    """What the report reads: the metric rows (metrics.values, every partition), the configurations without
    predictions (predictions.unavailable), the LoRA comparison rows when adapters exist, the models' facts,
    the registered datasets, and a reader of test predictions by dataset (for the reliability diagrams)."""

    metrics: pd.DataFrame
    unavailable: pd.DataFrame
    effects: pd.DataFrame | None
    models: dict[str, arena.ModelInfo]
    datasets: list[str]
    read_samples: Callable[[list[str]], pd.DataFrame]
    sources: dict[str, str] = field(default_factory=dict)  # "asset[partition]" -> lineage stamp id read
    header: list[str] = field(default_factory=list)
    comparisons: pd.DataFrame | None = None  # metrics.comparisons: the model pairs focus.yaml declares
    # dataset -> axis -> what the coverage checks of group_attributes said of its rows (labels/coverage.axis_notes)
    attribute_notes: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    robustness: pd.DataFrame | None = None  # metrics.robustness: every degraded number against its clean one
    robustness_summary: pd.DataFrame | None = None  # metrics.robustness_summary: one row per configuration
    # The lineage of the numbers cited (their metric ids -> {"links": {key: link}, "metrics": {id: ...}}, as
    # platform/trace.py's `chains` walks them from the rows read here, compared with what is there now); the page
    # opens each number's chain from it. None: the page says `focus trace ID` instead.
    chains: Callable[[list[str]], dict] | None = None


@dataclass
class Report:
    sections: list[Section]
    html: str
    sources: dict[str, str]
    lineage: dict | None = None  # what `chains` gave for the numbers cited (written as lineage.json)

    @property
    def tables(self) -> list[ReportTable]:
        return [t for s in self.sections for t in s.tables]

    def metric_ids(self) -> set[str]:
        """Every metric id the report cites."""
        ids = set()
        for table in self.tables:
            for column in set(table.ids.values()):
                ids.update(i for cell in table.frame[column].dropna() for i in str(cell).split())
        return ids

    def numbers(self) -> set[str]:
        """Every metric id a number of the page carries: the tables', the readings' and the figures' marks."""
        ids = self.metric_ids()
        for section in self.sections:
            ids.update(i for part in section.reading if isinstance(part, Num) for i in part.ids.split())
            if section.figure is not None:
                ids.update(i for marked in section.figure.marks.values() for i in marked.split())
        return ids


def build_report(inputs: ReportInputs, say: Callable[[str], None] | None = None) -> Report:
    """Every section from the inputs, then the page; `say` gets progress lines over the sections (each draws a
    figure, the slow part)."""
    from focus_dagster.progress import Progress

    quality_axis = arena.quality_axis_rows(inputs.robustness_summary)
    # The quality-axis rows fill only the columns they have (an all-empty column would sway concat's dtypes).
    quality_axis = quality_axis.dropna(axis=1, how="all")
    metrics = pd.concat([inputs.metrics, quality_axis], ignore_index=True) if len(quality_axis) else inputs.metrics
    frame = arena.with_families(metrics, inputs.models)
    builders = [
        lambda: _spider(frame), lambda: _method_means(frame), lambda: _general_vs_ophthalmic(frame, inputs.datasets),
        lambda: _task_cliff(frame), lambda: _mllm(frame), lambda: _transfer(frame),
        lambda: _reliability(frame, inputs.read_samples),
        lambda: _robustness(inputs.robustness, inputs.robustness_summary, inputs.models),
        lambda: _lora(inputs.effects, inputs.models),
        lambda: _comparisons(inputs.comparisons),
        lambda: _paper(frame, arena.lora_deltas(inputs.effects, inputs.models)),
        lambda: _coverage(frame, inputs.effects, inputs.unavailable, inputs.datasets, inputs.attribute_notes),
    ]
    progress, sections = Progress("arena report", len(builders), "sections", say), []
    for build in builders:
        sections.append(build())
        progress.advance()
    example = _trace_example(frame)
    shown = Report(sections, "", {}).numbers() | _pickable(sections)
    lineage = inputs.chains(sorted(shown)) if inputs.chains is not None else None
    own = tuple(model for model, info in inputs.models.items() if info.own)
    text = page(TITLE, inputs.header, sections, example, lineage, own)
    return Report(sections, text, dict(inputs.sources), lineage)


def _pickable(sections: list[Section]) -> set[str]:
    """The metric ids of every point the spider picker can draw (each opens its chain too)."""
    return {i for s in sections if s.picker for c in s.picker["configurations"] for i in c["ids"] if i}


def write_report(report: Report, folder: Path, manifest: dict | None = None) -> Path:
    """Write the report into `folder` in one rename (a reader sees the old report or the new, never half)."""
    from focus_dagster.files import atomic_path

    with atomic_path(Path(folder)) as partial:
        (partial / "figures").mkdir(parents=True)
        (partial / "tables").mkdir()
        (partial / "index.html").write_text(report.html, encoding="utf-8")
        for section in report.sections:
            if section.figure is not None:
                (partial / "figures" / f"{section.name}.png").write_bytes(section.figure.png)
        for table in report.tables:
            table.frame.to_csv(partial / "tables" / f"{table.name}.csv", index=False)
        if report.lineage is not None:
            (partial / LINEAGE_FILE).write_text(json_text(report.lineage, indent=1) + "\n", encoding="utf-8")
        (partial / "manifest.json").write_text(json.dumps({
            **(manifest or {}), "sources": report.sources,
            "figures": [f"figures/{s.name}.png" for s in report.sections if s.figure is not None],
            "tables": [f"tables/{t.name}.csv" for t in report.tables],
            **({"lineage": LINEAGE_FILE} if report.lineage is not None else {}),
        }, indent=2, default=str) + "\n")
    return Path(folder)


# ------------------------------------------------------------------------------------------ sections


def _spider(frame: pd.DataFrame) -> Section:
    table = arena.spider_table(frame)
    reading = [f"Six configurations of each family on {len(arena.SPIDER_AXES)} axes where higher is better: those "
               "with a number on the most axes, by test AUROC among equals."]
    best = table[table["axis"] == "AUROC"].sort_values("shown", ascending=False).groupby("family", sort=False).head(1)
    for row in best.itertuples():
        reading += [f" Best {arena.FAMILIES.get(row.family, row.family)}: {row.configuration}, AUROC ",
                    Num(row.shown, row.metric_id), "."]
    notes = [f"{axis.label}: {axis.definition}." for axis in arena.SPIDER_AXES] + [arena.MISSING_AXIS]
    shown = ["configuration", "axis", "shown", "value", "reason"]
    return Section("spider", "Top configurations per family (spider plots)", reading,
                   figures.render(figures.draw_spider, table),
                   [ReportTable("spider", "axis values of the top configurations (shown = higher is better; value = "
                                "the metric row)", table, shown, {"shown": "metric_id", "value": "metric_id"})],
                   notes, picker=arena.spider_choices(frame))


def _mean_table(name: str, title: str, table: pd.DataFrame, keys: list[str]) -> ReportTable:
    return ReportTable(name, title, table, [*keys, "configurations", "mean", "ci_low", "ci_high"],
                       {c: "metric_ids" for c in ("configurations", "mean", "ci_low", "ci_high")},
                       {"configurations": "d"})


def _method_means(frame: pd.DataFrame) -> Section:
    table = arena.method_means(frame)
    real = table[table["domain"] != arena.PIPELINE_CHECK]
    reading = ["Mean test AUROC per family, method, model domain and task, with a 95% t interval over the "
               "configurations."]
    if len(real):
        top, low = real.loc[real["mean"].idxmax()], real.loc[real["mean"].idxmin()]
        reading += [f" Highest: {top['method']} of {top['domain']} {arena.FAMILIES.get(top['family'])} on "
                    f"{top['task']}, ", Num(top["mean"], top["metric_ids"]), f"; lowest: {low['method']} of "
                    f"{low['domain']} {arena.FAMILIES.get(low['family'])} on {low['task']}, ",
                    Num(low["mean"], low["metric_ids"]), "."]
    return Section("method_means", "Method means per family and task", reading,
                   figures.render(figures.draw_method_means, table, reference.published("method_mean")),
                   [_mean_table("method_means", "mean AUROC per family, method, domain and task", table,
                                ["family", "method", "domain", "task"])],
                   ["Pipeline-check models form their own domain († , hatched) and are never pooled with real models.",
                    f"Dashed lines: the means the reference study published ({reference.STUDY} Table 3, all tasks "
                    "pooled), in the colour of their model domain; the legend says when this grid has no such model. "
                    "They stand beside ours in the reference-study section."])


def _general_vs_ophthalmic(frame: pd.DataFrame, datasets: list[str]) -> Section:
    table = arena.general_vs_ophthalmic(frame, datasets)
    both = table[table["difference"].notna()]
    if len(both):
        mean = both["difference"].mean()
        reading = ["Ophthalmic minus general vision encoders, mean linear-probe AUROC: ",
                   Num(mean, " ".join(both["metric_ids"]), "+.3f"), f" on average over {len(both)} dataset(s)."]
    else:
        sides = [d for d in ("general", "ophthalmic") if table[f"{d}_configurations"].sum()]
        reading = ["No dataset has both a general and an ophthalmic vision encoder with a defined AUROC"
                   + (f": only {sides[0]} encoders are shown." if sides else ".")]
    # Table 4 states the gap the other way round (general - ophthalmic): quoted as published, ours turned to match.
    table = reference.beside(table.assign(general_minus_ophthalmic=-table["difference"]), "encoder_gap",
                             {"dataset": "dataset"}, "general_minus_ophthalmic", table["difference"].notna(),
                             "published_general_minus_ophthalmic")
    shown = ["dataset", "general_mean", "general_configurations", "ophthalmic_mean", "ophthalmic_configurations",
             "difference", "published_general_minus_ophthalmic", "reason"]
    ids = {"general_mean": "general_metric_ids", "general_configurations": "general_metric_ids",
           "ophthalmic_mean": "ophthalmic_metric_ids", "ophthalmic_configurations": "ophthalmic_metric_ids",
           "difference": "metric_ids"}
    encoders = ", ".join(m for m, spec in CATALOG.items() if spec.interface == "vm" and spec.domain == "ophthalmic")
    return Section("general_vs_ophthalmic", "General vs ophthalmic vision encoders", reading,
                   figures.render(figures.draw_general_vs_ophthalmic, table),
                   [ReportTable("general_vs_ophthalmic", "mean linear-probe AUROC per dataset (over models and tasks)",
                                table, shown, ids, {"general_configurations": "d", "ophthalmic_configurations": "d",
                                                    "difference": "+.3f",
                                                    "published_general_minus_ophthalmic": "+.3f"},
                                quoted={"published_general_minus_ophthalmic":
                                        "published_general_minus_ophthalmic_reference"})],
                   [f"The reference study published general minus ophthalmic encoders on mBRSET, {reference.STUDY} "
                    "Table 4 (stated under its row in the figure): quoted as published, the opposite sign of this "
                    "table's difference. A dataset needs both kinds of vision encoder for a difference; the catalog's "
                    f"ophthalmic ones: {encoders} (select them under `models:`, with their weights on this "
                    "machine)."])


def _task_cliff(frame: pd.DataFrame) -> Section:
    table = arena.task_cliff(frame)
    reading = ["Mean test AUROC per family and task."]
    for series, rows in table[~table["series"].str.contains("pipeline check")].groupby("series", sort=True):
        if len(rows) > 1:
            hard, easy = rows.loc[rows["mean"].idxmin()], rows.loc[rows["mean"].idxmax()]
            reading += [f" {series}: hardest {hard['task']} (", Num(hard["mean"], hard["metric_ids"]),
                        f"), easiest {easy['task']} (", Num(easy["mean"], easy["metric_ids"]), ")."]
    return Section("task_cliff", "The task cliff: mean AUROC per family and task", reading,
                   figures.render(figures.draw_task_cliff, table),
                   [_mean_table("task_cliff", "mean AUROC per family and task", table, ["series", "task"])])


def _mllm(frame: pd.DataFrame) -> Section:
    table = arena.mllm_table(frame)
    reading = ["Multimodal LLMs: mean AUROC against mean ECE (colour: medical / general; area: parameters), "
               "and their mean fairness and image-quality gaps."]
    ranked = table[table["auroc"].notna()].sort_values("auroc", ascending=False)
    if len(ranked):
        top = ranked.iloc[0]
        reading += [f" Highest mean AUROC: {top['model']} ({top['method']}), ",
                    Num(top["auroc"], top["auroc_metric_ids"]), ", ECE ", Num(top["ece"], top["ece_metric_ids"]), "."]
    shown = ["model", "method", "domain", "size", "auroc", "published_auroc", "ece", "published_ece", "fairness_gap",
             "quality_gap"]
    ids = {name: f"{name}_metric_ids" for name in ("auroc", "ece", "fairness_gap", "quality_gap")}
    # The size as text (a model's size is not a measured number): size_b stays numeric in the CSV.
    shown_table = table.assign(size=table["size_b"].map(lambda v: f"{v:g}B" if pd.notna(v) else "not stated"))
    real_yes_no = ~table["pipeline_check"].astype(bool) & (table["method"] == "yes_no")  # the published figure's rows
    for metric, axis in (("auroc", "performance"), ("ece", "calibration")):  # Figure 5's two models, where selected
        shown_table = reference.beside(shown_table, "model_mean", {"model": "model"}, metric, real_yes_no,
                                       f"published_{metric}", axis=axis, metric=metric)
        shown_table.loc[~real_yes_no.to_numpy(), [f"published_{metric}", f"published_{metric}_reference"]] = np.nan
    return Section("mllm", "Multimodal LLMs: AUROC vs ECE, size, medical vs general", reading,
                   figures.render(figures.draw_mllm, table, reference.published("model_mean")),
                   [ReportTable("mllm", "per multimodal LLM and method (means over its configurations; published: "
                                f"the reference study's value, {reference.STUDY} Figure 5)", shown_table, shown, ids,
                                quoted={"published_auroc": "published_auroc_reference",
                                        "published_ece": "published_ece_reference"})],
                   ["fairness gap: mean sex equalized-odds gap; quality gap: mean |accuracy(adequate) - "
                    "accuracy(inadequate)| (BRSET, mBRSET); n/a where no configuration defines it.",
                    f"Hollow diamonds: MedGemma-27B and Gemma-3-27B as the reference study published them "
                    f"({reference.STUDY} Figure 5); select them under `models:` to place ours beside them."])


def _transfer(frame: pd.DataFrame) -> Section:
    table = arena.transfer_table(frame)
    defined = table[table["value"].notna() & ~table["pipeline_check"].astype(bool)]
    off = defined[defined["train_dataset"] != defined["dataset"]]
    diagonal = defined[defined["train_dataset"] == defined["dataset"]]
    reading = ["Probes trained on one dataset (rows) and tested on another (columns); the diagonal is in-domain."]
    if len(off) and len(diagonal):
        reading += [" Real models (no pipeline check): mean AUROC off the diagonal ",
                    Num(off["value"].mean(), " ".join(off["metric_id"])), " vs on it ",
                    Num(diagonal["value"].mean(), " ".join(diagonal["metric_id"])), "."]
    panels = figures.transfer_panels(table)
    notes = [f"Drawn: the {len(panels)} model x task matrices with the most defined cells; every pair is in the "
             "table."] if panels else []
    return Section("transfer", "Cross-dataset transfer (train A -> test B)", reading,
                   figures.render(figures.draw_transfer, table),
                   [ReportTable("transfer", "AUROC of every (model, task, trained on, tested on)", table,
                                ["model", "task", "train_dataset", "dataset", "value", "ci_low", "ci_high", "reason"],
                                {c: "metric_id" for c in ("value", "ci_low", "ci_high")})], notes)


def _reliability(frame: pd.DataFrame, read_samples) -> Section:
    targets = arena.reliability_targets(frame)
    samples = read_samples(sorted(set(targets["dataset"]))) if len(targets) else pd.DataFrame(
        columns=["split", "train_dataset", "label", "score", *arena.KEY[:-1]])
    table = arena.reliability_table(targets, samples)
    reading = ["Reliability diagrams of the best configuration of each family: observed positive rate per score "
               "bin (10 equal-width bins, image counts on the bars) against the diagonal of perfect calibration."]
    for config, rows in table.groupby("configuration", sort=False):
        reading += [f" {config}: ECE ", Num(rows["ece"].iloc[0], rows["metric_id"].iloc[0]), "."]
    columns = ["configuration", "bin_lower", "bin_upper", "count", "mean_score", "positive_rate", "ece"]
    ids = {c: "metric_id" for c in columns[1:]}
    return Section("reliability", "Reliability diagrams of the top configurations", reading,
                   figures.render(figures.draw_reliability, table),
                   [ReportTable("reliability", "bins of the 10-bin ECE (each row carries that ECE's metric id)", table,
                                columns, ids, {"count": "d", "bin_lower": ".1f", "bin_upper": ".1f"})])


def _robustness(rows: pd.DataFrame | None, summary: pd.DataFrame | None, models: dict) -> Section:
    """Robustness curves (mean AUROC against severity, one panel per degradation family), the most and least
    robust configurations, and every degraded number in the CSV."""
    curves = arena.robustness_curves(rows, models)
    extremes = arena.robustness_extremes(summary, models)
    reading = ["Test AUROC under graded degradations of the test images (severity 0: clean; the probes fit on "
               "clean training images), mean over configurations per model series."]
    real = extremes[~extremes["rank"].str.endswith("†")]
    if len(real):
        most, least = real.iloc[0], real[real["rank"].str.startswith("least")]
        reading += [f" Most robust: {most['configuration']}, mean relative AUROC drop ",
                    Num(most["mean_relative_drop"], most["metric_id"]), "."]
        if len(least):
            reading += [f" Least robust: {least.iloc[0]['configuration']}, ",
                        Num(least.iloc[0]["mean_relative_drop"], least.iloc[0]["metric_id"]), "."]
    if curves.empty:
        reading = ["No degraded test image has been scored yet: robustness_metrics is not materialised, or "
                   "`degradations: false` in focus.yaml turns the image-quality axis off."]
    every = (rows if rows is not None else pd.DataFrame(columns=ROBUSTNESS_TABLE_COLUMNS)).reindex(
        columns=ROBUSTNESS_TABLE_COLUMNS)
    number_ids = {c: "metric_id" for c in ("severity", "clean", "degraded", "ci_low", "ci_high", "delta", "delta_low",
                                           "delta_high", "p_value")}
    formats = {"delta": "+.3f", "delta_low": "+.3f", "delta_high": "+.3f", "p_value": ".3g", "severity": "d"}
    return Section("robustness", "Image-quality robustness: AUROC under graded degradations", reading,
                   figures.render(figures.draw_robustness, curves),
                   [ReportTable("robustness_extremes", "the most and least robust configurations (mean relative "
                                "AUROC drop over every degradation and severity; mCE: ImageNet-C's mean corruption "
                                "error with 1 - AUROC, normalised by the baseline model)", extremes,
                                ["rank", "configuration", "quality_axis", "mean_relative_drop", "worst_degradation",
                                 "worst_severity", "worst_relative_drop", "mce", "ce_baseline"],
                                {c: "metric_id" for c in ("quality_axis", "mean_relative_drop", "worst_severity",
                                                          "worst_relative_drop", "mce")},
                                {"worst_severity": "d"}),
                    ReportTable("robustness_curves", "mean AUROC per degradation, model series and severity (0: "
                                "clean)", curves, ["panel", "degradation", "series", "severity", "configurations",
                                                   "mean", "ci_low", "ci_high"],
                                {c: "metric_ids" for c in ("severity", "configurations", "mean", "ci_low", "ci_high")},
                                {"severity": "d", "configurations": "d"}),
                    ReportTable("robustness", "every degraded number against its clean one (paired interval of the "
                                "change)", every, ROBUSTNESS_TABLE_COLUMNS[:-2], number_ids, formats)],
                   ["Degradations are painted inside the fundus disc only, seeded per image; their parameters and "
                    "sources are in each row's `parameters` (robustness.csv) and in `focus trace` of any number."])


ROBUSTNESS_TABLE_COLUMNS = ["model", "dataset", "task", "method", "degradation", "severity", "metric", "clean",
                            "degraded", "ci_low", "ci_high", "delta", "delta_low", "delta_high", "p_value", "reason",
                            "parameters", "metric_id"]


def _lora(effects: pd.DataFrame | None, models: dict) -> Section:
    deltas = arena.lora_deltas(effects, models)
    means = arena.lora_means(deltas)
    reading = ["Adapted minus base model on the same test images (paired bootstrap), in-domain (the adapter's "
               "training dataset) vs out-of-domain."]
    for row in means[means["metric"] == "auroc"].itertuples():
        reading += [f" {row.series}, mean Δ AUROC {row.domain.replace('_', '-')}: ",
                    Num(row.mean, row.metric_ids, "+.3f"), f" over {row.configurations} configuration(s)."]
    if deltas.empty:
        reading = ["No LoRA adapter has been compared with its base model yet (none selected, or lora_effects not "
                   "materialised)."]
    columns = ["adapter", "dataset", "domain", "metric", "base", "adapted", "delta", "ci_low", "ci_high", "p_value",
               "q_value", "n", "reason"]
    ids = {c: "metric_id" for c in ("base", "adapted", "delta", "ci_low", "ci_high", "p_value", "q_value", "n")}
    formats = {"delta": "+.3f", "ci_low": "+.3f", "ci_high": "+.3f", "p_value": ".3g", "q_value": ".3g", "n": "d"}
    beside = reference.beside(means, "lora_mean", {"domain": "domain", "metric": "metric"}, "mean",
                              means["series"] == arena.series_of("mllm", False))
    means_table = _mean_table("lora_means", "mean delta per domain and metric; published: the reference study's mean "
                              f"delta of real adapters ({reference.STUDY} Table 5), and ours - published for real "
                              "models", beside, ["series", "domain", "metric"])
    means_table.shown += ["published", "published_difference"]
    means_table.ids["published_difference"] = "metric_ids"
    means_table.formats.update({"published": "+.3f", "published_difference": "+.3f"})
    means_table.quoted["published"] = "published_reference"
    return Section("lora", "LoRA fine-tuning: deltas in-domain vs out-of-domain", reading,
                   figures.render(figures.draw_lora, deltas, means, reference.published("lora_mean")),
                   [means_table,
                    ReportTable("lora", "every adapted configuration (q: Benjamini-Hochberg per metric x domain)",
                                deltas, columns, ids, formats)],
                   [f"Hollow stars: the mean deltas the reference study published ({reference.STUDY} Table 5), "
                    "drawn whether or not this grid has an adapter of a real model."])


def _paper(frame: pd.DataFrame, deltas: pd.DataFrame) -> Section:
    """The reference study's published values (report/reference.py) with this grid's same figures beside them."""
    table = reference.beside_ours(frame, deltas)
    formed = table[table["ours"].notna()]
    reading = [f"The reference study's published values ({reference.STUDY}, {reference.REFERENCE_VERSION}) beside "
               f"the same figures formed from this grid: {len(formed)} of {len(table)} can be formed here."]
    if len(formed):
        far = formed.loc[formed["difference"].abs().idxmax()]
        reading += [f" Furthest from the published value: {far['quantity']}, ours ",
                    Num(far["ours"], far["metric_ids"]), f" against the published {far['published']:.3f} "
                    f"({far['source']})."]
    shown = ["quantity", "source", "published", "ours", "difference", "configurations", "reason"]
    ids = {"ours": "metric_ids", "difference": "metric_ids", "configurations": "metric_ids"}
    formats = {"published": ".3f", "ours": ".3f", "difference": "+.3f", "configurations": "d"}
    return Section("paper", "The reference study beside ours", reading, None,
                   [ReportTable("paper", "published values and ours (difference = ours - published; the metric rows "
                                "each of ours is formed from are its ids)", table, shown, ids, formats,
                                quoted={"published": "reference"})],
                   ["For orientation, not a target to tune to: a difference says how this grid, these datasets and "
                    "this code compare with the published run. Published values are facts of the study; each row "
                    "names its table or figure."])


def _comparisons(comparisons: pd.DataFrame | None) -> Section:
    """The declared model pairs: every delta A - B with its interval, p and q (the CSV holds every row)."""
    table = comparisons if comparisons is not None else pd.DataFrame(columns=[*COMPARISON_COLUMNS, "metric_id"])
    reading = ["Model A minus model B on the same test images (paired bootstrap), for the pairs `compare:` of "
               "focus.yaml declares; q: Benjamini-Hochberg per pair and metric over its configurations."]
    auroc = table[(table["metric"] == "auroc") & (table["group"] == "") & table["delta"].notna()]
    for (a, b), rows in auroc.groupby(["model_a", "model_b"], sort=True):
        wins = int(((rows["q_value"] < 0.05) & (rows["delta"] > 0)).sum())
        losses = int(((rows["q_value"] < 0.05) & (rows["delta"] < 0)).sum())
        reading += [f" {a} vs {b}: mean Δ AUROC ", Num(rows["delta"].mean(), " ".join(rows["metric_id"]), "+.3f"),
                    f" over {len(rows)} configuration(s); A higher at q < 0.05 in {wins}, lower in {losses}."]
    if table.empty:
        reading = ["No model pair is compared: declare pairs as `compare: [[A, B]]` in focus.yaml (the "
                   "model_comparisons asset), or run `focus compare A B` for any two models."]
    ids = {c: "metric_id" for c in ("a", "b", "delta", "ci_low", "ci_high", "p_value", "q_value")}
    formats = {"delta": "+.3f", "ci_low": "+.3f", "ci_high": "+.3f", "p_value": ".3g", "q_value": ".3g"}
    return Section("comparisons", "Model comparisons: A - B on the same test images", reading, None,
                   [ReportTable("comparisons", "every delta of every declared pair (metric [group]; a reason where "
                                "none could be computed)", table, COMPARISON_COLUMNS, ids, formats)])


COMPARISON_COLUMNS = ["model_a", "model_b", "dataset", "task", "method", "metric", "group", "a", "b", "delta",
                      "ci_low", "ci_high", "p_value", "q_value", "reason"]


def _coverage(frame, effects, unavailable, datasets, notes=None) -> Section:
    table = arena.coverage(frame, effects, datasets, notes)
    empty = arena.empty_numbers(frame, effects)
    missing = arena.unavailable_configurations(unavailable, frame)
    covered = int((table["covered"] == "yes").sum())
    reading = [f"{covered} of {len(table)} dataset x axis cells hold at least one number; every empty cell, every "
               "empty number and every configuration without predictions is listed with its reason; a fairness or "
               "quality cell also names each attribute below its coverage floor, with its figure (its rows are kept "
               "without a value)."]
    return Section("coverage", "Coverage: which dataset feeds which axis, and why a cell is empty", reading,
                   figures.render(figures.draw_coverage, table),
                   [ReportTable("coverage", "dataset x axis", table, ["dataset", "axis", "covered", "reason"]),
                    ReportTable("empty_numbers", "numbers without a value, by dataset, axis and reason", empty,
                                ["dataset", "axis", "reason", "numbers"], {"numbers": "metric_ids"}, {"numbers": "d"}),
                    ReportTable("unavailable", "configurations without predictions (predictions.unavailable)",
                                missing, [*arena.CONFIG_COLUMNS, "reason", "metric_id"])])


def _trace_example(frame: pd.DataFrame) -> str:
    top = arena.top_configurations(frame, top=1)
    return top["metric_id"].iloc[0] if len(top) else "m-<id>"


# ---------------------------------------------------------------------------------------- the UI's view


def headline_markdown(report: Report) -> str:
    """The headline tables (method means, task cliff, LoRA means) as Markdown, with each reading; readings and
    names carry model ids and dataset keys of the user's, so they are escaped."""
    wanted = {"method_means": ["family", "method", "domain", "task"], "task_cliff": ["series", "task"],
              "lora_means": ["series", "domain", "metric"]}
    parts = []
    for section in report.sections:
        for table in section.tables:
            if table.name in wanted and len(table.frame):
                parts += [f"**{section.title}** — {md_text(plain(section.reading))}", "",
                          _markdown_means(table.frame, wanted[table.name]), ""]
    return "\n".join(parts) or "no metric rows yet"


def lineage_markdown(report: Report, limit: int = LINEAGE_LINES) -> str:
    """The distinct links the report's numbers stand on, one line each (stale first, then by asset and partition):
    `asset[partition]`, the version read, and stale (with what changed) or current, as of the build."""
    if report.lineage is None:
        return "no lineage: the report was built without the tables' stamps (`focus trace ID` walks one number)"
    links = sorted(report.lineage["links"].values(),
                   key=lambda link: (not link["stale"], link["asset"], str(link["partition"]), str(link["version"])))
    stale = sum(link["stale"] for link in links)
    lines = [f"{len(report.lineage['metrics'])} numbers stand on {len(links)} links, {stale} stale when the report "
             f"was built; click a number in the page for its chain, or read {LINEAGE_FILE}.", ""]
    for link in links[:limit]:
        state = (f"**stale**: {md_text('; '.join(link['changed']) or 'an input it read is stale')}" if link["stale"]
                 else "current")
        version = f" · version {md_text(link['version'])}" if link.get("version") else ""
        lines.append(f"- {md_text(link['id'])}{version} · {state}")
    if len(links) > limit:
        lines.append(f"- … and {len(links) - limit} more: every link is in {LINEAGE_FILE}")
    return "\n".join(lines)


def _markdown_means(frame: pd.DataFrame, keys: list[str]) -> str:
    lines = ["| " + " | ".join(keys) + " | n | mean (95% CI) | first metric_id |",
             "|" + "---|" * (len(keys) + 3)]
    for row in frame.to_dict("records"):
        ids = str(row["metric_ids"]).split()
        interval = (f" ({format_number(row['ci_low'])}–{format_number(row['ci_high'])})"
                    if not np.isnan(row["ci_low"]) else "")
        lines.append("| " + " | ".join(md_text(row[k]) for k in keys) + f" | {row['configurations']} | "
                     f"{format_number(row['mean'])}{interval} | `{ids[0] if ids else ''}` |")
    return "\n".join(lines)
