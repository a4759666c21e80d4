"""Harmonised task labels and the records that did not make it, with the checks that guard them."""

import dagster as dg

from assets.automation import GATED_EAGER
from assets.backfill import SINGLE_RUN, Materialised, each_dataset
from assets.partitions import MLLMS, Registered
from checks.labels import build_label_checks
from focus_dagster import lineage
from focus_dagster.labels import LabelResult, harmonise
from focus_dagster.markup import md_text
from focus_dagster.version import code_version
from resources import DatasetRoots, FocusStorage, layout

LABEL_GROUP = "labels"
DATA_LAYER_JOB = "focus_data_layer"

HARMONISED_DESCRIPTION = (
    "The canonical label table of one dataset: one row per benchmark image with its split, the three "
    "binary tasks (any_dr, referable_dr, gon: 0/1, or null where the dataset does not define the task — "
    "null is never 'negative'), age, sex (F/M), quality, camera, eye, a content hash of the image, and "
    "`label_rule`, the id of the rule that produced the row (rules: focus_dagster/labels/rules.py). "
    "Splits: the published split file when `splits.dir` is configured, else the native split, else a "
    "seeded 60/40 by a keyed hash of each patient (or image), so a changed or added record moves no other "
    f"record between splits. Table: `{layout.LABELS}` (column `dataset`)."
)
REJECTS_DESCRIPTION = (
    "Every record of the dataset that is not in `harmonised_labels`, with the stage that rejected it "
    "(records: quarantined by the reader; labels: outside the benchmark subset, blank or ungradable "
    "label; splits: absent from or contradictory in the split file) and the reason. Records in = "
    f"labels + rejects, exactly. Table: `{layout.LABEL_REJECTS}`."
)


def definitions(registered: Registered) -> dg.Definitions:
    """The labels and their rejects, the label checks, and the data-layer job that reads a dataset end to end."""
    harmonise_labels = _label_assets(registered.datasets)
    # The questions depend on the labels only, so a dataset's data layer renders them too when MLLMs run.
    questions = [layout.YES_NO_QUESTIONS] if registered.models(MLLMS) else []
    data_layer = dg.define_asset_job(
        DATA_LAYER_JOB,
        selection=dg.AssetSelection.assets(layout.DATASET_RECORDS, layout.HARMONISED_LABELS, layout.LABEL_REJECTS_ASSET,
                                           *questions),
        partitions_def=registered.datasets,
        description="Read a dataset from its published layout into native records, then harmonised labels "
        "(and the yes/no questions, when multimodal LLMs are selected).",
    )
    return dg.Definitions(assets=[harmonise_labels], asset_checks=build_label_checks(registered.datasets),
                          jobs=[data_layer])


def _label_assets(partitions: dg.StaticPartitionsDefinition) -> dg.AssetsDefinition:
    @dg.multi_asset(
        specs=[
            dg.AssetSpec(layout.HARMONISED_LABELS, deps=[layout.DATASET_RECORDS], description=HARMONISED_DESCRIPTION,
                         group_name=LABEL_GROUP, kinds={"parquet"}, automation_condition=GATED_EAGER),
            dg.AssetSpec(layout.LABEL_REJECTS_ASSET, deps=[layout.DATASET_RECORDS], description=REJECTS_DESCRIPTION,
                         group_name=LABEL_GROUP, kinds={"parquet"}, automation_condition=GATED_EAGER),
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
    )
    def harmonise_labels(context: dg.AssetExecutionContext, datasets: DatasetRoots, storage: FocusStorage):
        yield from each_dataset(context, lambda key: _harmonise(context, key, datasets, storage))

    return harmonise_labels


def _harmonise(context, key: str, datasets: DatasetRoots, storage: FocusStorage) -> Materialised:
    """One dataset's records harmonised into task labels and rejects, written with their lineage."""
    # The records, their quarantine and the stamp saying which release they were read from, as one snapshot.
    (records, quarantine), read = storage.read_stamped(
        [(layout.records_table(key), None), (layout.QUARANTINE, key)], layout.DATASET_RECORDS, key)
    result = harmonise(
        key, records, quarantine, root=datasets.root(key), splits_dir=datasets.config.splits_dir,
        seed=datasets.config.split_seed,
    )
    stamp = labels_stamp(result, key, context.run_id, read)
    storage.replace_partitions([(layout.LABELS, key, result.labels), (layout.LABEL_REJECTS, key, result.rejects)],
                               stamp=stamp)
    # The GPU steps read this one file (stamp included) rather than the tables.
    export, export_sha = storage.write_parquet(layout.labels_file(key), result.labels, stamp)
    context.log.info(result.accounting_line())
    metadata = labels_metadata(result) | {"export": dg.MetadataValue.path(str(export)), "export_sha256": export_sha,
                                          "labels_version": stamp["version"],
                                          "release_version": lineage.fact(read, "inputs", "release", "version")}
    # The rejects share the labels' commit and inputs; their own content makes their data version.
    rejects_stamp = stamp | {"version": lineage.frame_version(result.rejects)}
    return Materialised({layout.HARMONISED_LABELS: metadata, layout.LABEL_REJECTS_ASSET: rejects_metadata(result)},
                        stamps={layout.HARMONISED_LABELS: stamp, layout.LABEL_REJECTS_ASSET: rejects_stamp})


def labels_stamp(result: LabelResult, dataset: str, run_id: str, records: dict | None) -> dict:
    """The labels' lineage: their content version, the rule and split that made them, the records' stamp."""
    return lineage.stamp(layout.HARMONISED_LABELS, dataset, run_id, lineage.frame_version(result.labels),
                         code_version=code_version(), inputs={"records": records}, label_rule=result.rule.id,
                         split_method=result.split_method, split_source=result.split_source or "",
                         rows_rejected=len(result.rejects))


def labels_metadata(result: LabelResult) -> dict:
    return {
        "dagster/row_count": len(result.labels),
        "dagster/table_name": layout.LABELS.qualified,
        "label_rule": result.rule.id,
        # a declared dataset's rule is described with its own column names and values: escaped
        "rule": dg.MetadataValue.md(f"**{md_text(result.rule.id)}**: {md_text(result.rule.description)}"),
        "split_method": result.split_method,
        "split_source": result.split_source or "",
        "split_report": dg.MetadataValue.json(result.split_report),
        "positives_by_split": dg.MetadataValue.json(result.positives_by_split()),
        "records_in": result.records_in,
        "rows_labelled": len(result.labels),
        "rows_rejected": len(result.rejects),
    }


def rejects_metadata(result: LabelResult) -> dict:
    by_reason = result.rejects.groupby(["stage", "reason_code"]).size()
    return {
        "dagster/row_count": len(result.rejects),
        "dagster/table_name": layout.LABEL_REJECTS.qualified,
        "records_in": result.records_in,
        "reasons": dg.MetadataValue.json({f"{stage}/{code}": int(n) for (stage, code), n in by_reason.items()}),
    }
