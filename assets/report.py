"""The arena report: the study's figures and tables as one asset of the graph, refreshed with the metric tables."""

import base64
import io

import dagster as dg

from assets.automation import GATED_EAGER
from assets.partitions import ENCODERS, Registered
from assets.robustness import scores_robustness
from focus_dagster.version import code_version
from resources import FocusStorage, layout

REPORT_GROUP = "report"
REPORT_JOB = "focus_arena_report"
PREVIEW_WIDTH = 900  # pixels of the figure previews in the UI (the files keep 150 dpi)

ARENA_DESCRIPTION = (
    "The arena report: one self-contained HTML page (figures embedded, nothing fetched from a network) with a PNG "
    "per figure and a CSV per table, in the artifact store at "
    f"`{layout.ARENA_REPORT_PAGE}`. Spider plots of six configurations per family (the most axes filled, then "
    "AUROC) on AUROC, AUPRC, accuracy, "
    "1 - ECE, fairness, image-quality robustness (every dataset) and the publisher-graded quality gap; method means "
    "per family and task with intervals; general vs ophthalmic vision encoders; the task cliff; multimodal LLMs' "
    "AUROC vs ECE by size and medical vs general; the cross-dataset transfer matrix; reliability diagrams; "
    "robustness curves with the most and least robust configurations; LoRA deltas in-domain vs out-of-domain; "
    "coverage, with "
    "every empty cell's reason and every attribute below its coverage floor, with its figure. Every number "
    "carries its metric_id (`focus trace ID`); means list the ids they "
    "average in their CSV. `manifest.json` names the lineage stamp of every table partition read. "
    "From a terminal: `focus report [--open]`."
)


def definitions(registered: Registered) -> dg.Definitions:
    """arena_report and its job."""
    deps = [layout.METRICS_ASSET, layout.FAIRNESS_METRICS, layout.QUALITY_METRICS]
    if registered.models(ENCODERS):
        deps.append(layout.CROSS_DATASET_METRICS)
    if registered.adapters():
        deps.append(layout.LORA_EFFECTS_ASSET)
    if registered.compare:
        deps.append(layout.MODEL_COMPARISONS)
    if scores_robustness(registered):
        deps.append(layout.ROBUSTNESS_SUMMARY_ASSET)
    job = dg.define_asset_job(REPORT_JOB, selection=dg.AssetSelection.assets(layout.ARENA_REPORT_ASSET),
                              description="Build the arena report from the metric tables as they are now.")
    return dg.Definitions(assets=[_report_asset(deps, registered)], jobs=[job])


def _report_asset(deps: list[str], registered: Registered):
    @dg.asset(
        deps=deps,
        group_name=REPORT_GROUP,
        kinds={"html", "csv"},
        automation_condition=GATED_EAGER,
        description=ARENA_DESCRIPTION,
    )
    def arena_report(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        from focus_dagster.report.build import build_report, headline_markdown, lineage_markdown, write_report

        inputs = report_inputs(storage, registered)
        report = build_report(inputs, say=context.log.info)
        folder = write_report(report, storage.artifact_path(layout.ARENA_REPORT),
                              {"run_id": context.run_id, "code_version": code_version()})
        page = folder / "index.html"
        metadata = {
            "path": dg.MetadataValue.path(str(page)),
            "open": dg.MetadataValue.url(page.as_uri()),
            "headline": dg.MetadataValue.md(headline_markdown(report)),
            "metric_ids_cited": len(report.metric_ids()),
            "figures": dg.MetadataValue.json([f"figures/{s.name}.png" for s in report.sections if s.figure]),
            "tables": dg.MetadataValue.json([f"tables/{t.name}.csv" for t in report.tables]),
            "sources": dg.MetadataValue.json(report.sources),
            "lineage": dg.MetadataValue.md(lineage_markdown(report)),
        }
        for section in report.sections:  # the figures, viewable on the asset's page
            if section.figure is not None:
                metadata[f"figure: {section.name}"] = dg.MetadataValue.md(_preview(section))
        return dg.MaterializeResult(metadata=metadata)

    return arena_report


def report_inputs(storage: FocusStorage, registered: Registered):
    """What the report reads, from the tables as they are now (with the lineage stamp ids of what was read)."""
    import pandas as pd

    from focus_dagster.models.catalog import CATALOG
    from focus_dagster.report.arena import ModelInfo, size_from_source
    from focus_dagster.report.build import ReportInputs

    (metrics, unavailable, effects, comparisons, robustness, summary), current = storage.read_tables_with_lineage(
        [layout.METRICS, layout.UNAVAILABLE, layout.LORA_EFFECTS, layout.COMPARISONS, layout.ROBUSTNESS,
         layout.ROBUSTNESS_SUMMARY])
    if metrics is None:
        raise dg.Failure(f"no metric table yet ({layout.METRICS}): materialise `metrics` for at least one dataset "
                         "first (the demo does, or select it in the UI).")
    sources = _sources(current)
    models = {model: ModelInfo(spec.interface, spec.domain, size_from_source(spec.source), own=model not in CATALOG)
              for model, spec in registered.specs.items()}

    def read_samples(datasets: list[str]) -> pd.DataFrame:
        frames = [storage.read_partition(layout.SAMPLES, dataset) for dataset in datasets]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    header = [f"code {code_version()} · metric rows {len(metrics)} · tables {storage.tables_url} · "
              f"lineage stamps read: {len(sources)} (manifest.json)"]
    notes = {dataset: _attribute_notes(storage.current_stamp(layout.GROUP_ATTRIBUTES, dataset))
             for dataset in registered.dataset_keys}
    declared = set(registered.compare)
    if comparisons is not None:  # pairs no longer declared stay in the table until it is rewritten: not shown
        comparisons = comparisons[[pair in declared for pair in zip(comparisons["model_a"], comparisons["model_b"])]]
    if not scores_robustness(registered):  # rows of an earlier configuration stay in the tables: not shown
        robustness = summary = None
    read = [(layout.METRICS, metrics), (layout.LORA_EFFECTS, effects), (layout.COMPARISONS, comparisons),
            (layout.ROBUSTNESS, robustness), (layout.ROBUSTNESS_SUMMARY, summary)]
    return ReportInputs(metrics, unavailable if unavailable is not None else pd.DataFrame(), effects, models,
                        list(registered.dataset_keys), read_samples, sources, header, comparisons, notes,
                        robustness, summary, chains=lambda ids: chains_of_rows(storage, read, ids))


def chains_of_rows(storage: FocusStorage, read: list, metric_ids: list[str]) -> dict:
    """The lineage of the cited numbers (platform/trace.py `chains`) from the rows the report read (`read`: each
    traced table with its frame, or None): each row's own facts and lineage stamp ids as read, the stamps by id,
    each link compared once with what the tables and artifacts hold now. An id in no frame read is left out (the
    page then names `focus trace ID`)."""
    from focus_dagster.platform.trace import chains, traced_row

    wanted, rows = set(metric_ids), {}
    for table, frame in read:  # in the order `focus trace` looks an id up
        if frame is None or frame.empty:
            continue
        for row in frame[frame["metric_id"].isin(wanted)].to_dict("records"):
            rows.setdefault(row["metric_id"], traced_row(table, row))
    with storage.views() as con:
        return chains({metric_id: rows[metric_id] for metric_id in sorted(rows)}, con, storage.artifacts_dir)


def _attribute_notes(stamp: dict | None) -> dict[str, list[str]]:
    """Per axis, what the coverage checks recorded with a dataset's group_attributes say of its rows."""
    from focus_dagster import lineage
    from focus_dagster.labels.coverage import axis_notes

    return axis_notes(lineage.fact(stamp, "facts", "withheld"), lineage.fact(stamp, "facts", "fault"))


# The assets whose table partitions the report reads (their lineage stamps go into its manifest); of
# group_attributes, the coverage verdicts its stamps record (the coverage section names withheld attributes).
READ_ASSETS = (layout.METRICS_ASSET, layout.FAIRNESS_METRICS, layout.QUALITY_METRICS, layout.CROSS_DATASET_METRICS,
               layout.LORA_EFFECTS_ASSET, layout.PREDICTIONS, layout.MODEL_COMPARISONS, layout.GROUP_ATTRIBUTES,
               *layout.ROBUSTNESS_ROW_ASSETS.values(), layout.ROBUSTNESS_SUMMARY_ASSET)


def _sources(current: dict[str, str]) -> dict[str, str]:
    """The current stamp ids (`asset[partition]` -> id) of the table partitions the report reads."""
    return {key: stamp for key, stamp in current.items() if key.split("[")[0] in READ_ASSETS}


def _preview(section) -> str:
    """The figure as a Markdown image the UI shows (a PNG scaled to PREVIEW_WIDTH, inlined)."""
    from PIL import Image

    image = Image.open(io.BytesIO(section.figure.png))
    if image.width > PREVIEW_WIDTH:
        image = image.resize((PREVIEW_WIDTH, round(image.height * PREVIEW_WIDTH / image.width)), Image.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    data = base64.b64encode(buffer.getvalue()).decode()
    return f"**{section.title}**\n\n![{section.name}](data:image/png;base64,{data})"


def stale_reason(storage: FocusStorage) -> str | None:
    """Why the report on disk is not the report of the tables as they are now (None: it is): missing, built by
    other code, or built from other table partitions than the current ones."""
    import json

    manifest_path = storage.artifact_path(layout.ARENA_REPORT) / "manifest.json"
    if not manifest_path.exists():
        return "no report yet"
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("code_version") != code_version():
        return f"built by code {manifest.get('code_version')}, this is {code_version()}"
    _, current = storage.read_tables_with_lineage([])
    now, then = _sources(current), manifest.get("sources", {})
    changed = sorted(key for key in set(now) | set(then) if now.get(key) != then.get(key))
    if changed:
        return f"{len(changed)} table partition(s) changed since it was built (e.g. {changed[0]})"
    return None
