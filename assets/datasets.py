"""The data layer: dataset releases as observed on disk, and the native records read from them."""

import time

import dagster as dg
import pandas as pd

from assets.automation import RELEASE_CHANGED
from assets.backfill import SINGLE_RUN, Materialised, each_dataset
from assets.partitions import Registered
from checks.records import build_record_checks
from focus_dagster import lineage
from focus_dagster.datasets import ReadResult, dataset_info
from focus_dagster.datasets.records import NOTE_COLUMNS
from focus_dagster.markup import md_text
from focus_dagster.version import code_version
from resources import DatasetRoots, FocusStorage, layout

DATA_GROUP = "datasets"
OBSERVE_JOB = "observe_dataset_releases"


def definitions(registered: Registered, observe_cron: str) -> dg.Definitions:
    """The release observations (a job and its schedule), the records and their quarantine check."""
    dataset_release, dataset_records = _dataset_assets(registered.datasets)
    observe = dg.define_asset_job(
        OBSERVE_JOB,
        selection=dg.AssetSelection.assets(dataset_release.key),
        description="Fingerprint every registered dataset on disk (its release version).",
    )
    schedule = dg.ScheduleDefinition(
        name="observe_dataset_releases_schedule",
        job=observe,
        cron_schedule=observe_cron,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Observe the dataset releases on a cron (release.observe_cron in focus.yaml).",
    )
    return dg.Definitions(
        assets=[dataset_release, dataset_records],
        asset_checks=build_record_checks(dataset_records, registered.datasets),
        jobs=[observe],
        schedules=[schedule],
    )


def _dataset_assets(partitions: dg.StaticPartitionsDefinition) -> list:
    """`dataset_release` and `dataset_records`, partitioned by the registered datasets."""

    @dg.observable_source_asset(
        partitions_def=partitions,
        group_name=DATA_GROUP,
        description=(
            "A dataset exactly as its publisher distributes it, on local disk. Observing it computes a "
            "fingerprint of the label files (content) and the image listing (names and sizes; image content "
            "too when `release.content_hash` is on); that fingerprint is the partition's data version, so "
            "a new release, an added label or a removed image marks everything downstream of that dataset "
            "as stale, and nothing else."
        ),
    )
    def dataset_release(context, datasets: DatasetRoots, storage: FocusStorage) -> dg.DataVersionsByPartition:
        keys = [context.partition_key] if context.has_partition_key else partitions.get_partition_keys()
        for key in keys:
            fingerprint = datasets.fingerprint(key)
            # What `focus trace` compares the release each number was read from with (no instance query needed).
            storage.write_artifact(layout.release_file(key), lambda partial: partial.write_text(lineage.dumps(
                _release_stamp(datasets, key, fingerprint, context.run_id) | {"observed_at": time.time()})))
            # Observations are logged here rather than returned so that each partition's event carries its
            # metadata as well as its version (DataVersionsByPartition alone records only the version).
            context.log_event(
                dg.AssetObservation(
                    asset_key=context.asset_key,
                    partition=key,
                    tags={"dagster/data_version": fingerprint.version},
                    metadata=_release_metadata(datasets, key, fingerprint.as_dict()),
                )
            )
            context.log.info(f"{key}: release {fingerprint.version} ({fingerprint.images} images, {fingerprint.seconds}s)")
        return dg.DataVersionsByPartition({})

    @dg.asset(
        partitions_def=partitions,
        deps=[dataset_release],
        group_name=DATA_GROUP,
        kinds={"parquet", "pandas"},
        automation_condition=RELEASE_CHANGED,
        backfill_policy=SINGLE_RUN,
        description=(
            "Native records of one dataset: one row per image with the dataset's own columns (codes "
            "validated and typed), the image path relative to the dataset root, the patient id where the "
            "dataset has one, the native split where it has one, and the label file and row each record "
            "came from. Rows that cannot be trusted (missing or unreadable image, unknown code, conflicting "
            f"duplicate id, path outside the root, also through a link, truncated row) are not dropped: they go to "
            f"`{layout.QUARANTINE}` with their reason, so rows read = rows kept + rows quarantined. Kept images whose "
            f"content is another format than their extension says are listed in `{layout.IMAGE_NOTES}`. "
            f"Table: `{layout.records_table('<dataset>')}`."
        ),
    )
    def dataset_records(context: dg.AssetExecutionContext, datasets: DatasetRoots, storage: FocusStorage):
        yield from each_dataset(context, lambda key: _read_records(context, key, datasets, storage))

    return [dataset_release, dataset_records]


def _read_records(context, key: str, datasets: DatasetRoots, storage: FocusStorage) -> Materialised:
    """One dataset read from its published layout into records, quarantine, unlisted images and image notes."""
    release = datasets.fingerprint(key)
    result = datasets.read(key, say=context.log.info)
    stamp = lineage.stamp(
        layout.DATASET_RECORDS, key, context.run_id, lineage.frame_version(result.records), code_version=code_version(),
        inputs={"release": _release_stamp(datasets, key, release, context.run_id)},
        rows_quarantined=len(result.quarantine),
        # The label files this read parsed, relative to the release's root: where a number's labels came from.
        label_files=list(result.label_files), root=str(result.root),
    )
    # The records, their quarantine, the unlisted images and the lineage of all three change together.
    table, *_ = storage.replace_partitions([(layout.records_table(key), None, result.records),
                                            (layout.QUARANTINE, key, result.quarantine),
                                            (layout.UNLISTED_IMAGES, key, _unlisted_frame(result)),
                                            (layout.IMAGE_NOTES, key, _notes_frame(result))], stamp=stamp)
    context.log.info(result.accounting_line())
    return Materialised({layout.DATASET_RECORDS: _records_metadata(result, table, release.version)
                         | {"lineage_version": stamp["version"]}}, stamps={layout.DATASET_RECORDS: stamp})


def _release_stamp(datasets: DatasetRoots, key: str, fingerprint, run_id: str) -> dict:
    """The release as fingerprinted on disk by this run (an observation, or a read of the records)."""
    values = fingerprint.as_dict()
    return lineage.stamp(layout.DATASET_RELEASE, key, run_id, fingerprint.version, code_version=code_version(),
                         root=str(datasets.root(key)), images=values["images"], label_files=values["label_files"],
                         total_bytes=values["total_bytes"], content_hash=values["content_hash"])


def _release_metadata(datasets: DatasetRoots, key: str, fingerprint: dict) -> dict:
    return {
        "dataset": dataset_info(key).title,
        "root": dg.MetadataValue.path(str(datasets.root(key))),
        "source": "synthetic look-alike" if datasets.is_synthetic(key) else dataset_info(key).source,
        "label_files": fingerprint["label_files"],
        "images": fingerprint["images"],
        "total_bytes": fingerprint["total_bytes"],
        "content_hash": fingerprint["content_hash"],
        "fingerprint_seconds": fingerprint["seconds"],
    }


def _records_metadata(result: ReadResult, table: str, release_version: str) -> dict:
    summary = result.summary()
    columns = [dg.TableColumn(name, str(dtype)) for name, dtype in result.records.dtypes.items()]
    return {
        "dagster/row_count": summary["rows_kept"],
        "dagster/table_name": table,
        "dagster/column_schema": dg.TableSchema(columns=columns),
        "release_version": release_version,
        "root": dg.MetadataValue.path(str(result.root)),
        "rows_read": summary["rows_read"],
        "rows_kept": summary["rows_kept"],
        "rows_quarantined": summary["rows_quarantined"],
        "quarantine_reasons": dg.MetadataValue.json(summary["quarantine_reasons"]),
        "unlisted_images": summary["unlisted_images"],
        "image_notes": dg.MetadataValue.json(summary["image_notes"]),
        "label_files": dg.MetadataValue.json(summary["label_files"]),
        "preview": dg.MetadataValue.md(_preview(result.records)),
    }


def _notes_frame(result: ReadResult) -> pd.DataFrame:
    """The image notes of the kept records, typed even when there are none (the table keeps its schema)."""
    notes = result.image_notes if result.image_notes is not None else pd.DataFrame(columns=NOTE_COLUMNS)
    frame = notes.reindex(columns=NOTE_COLUMNS).astype(object)
    return frame.assign(source_row=pd.to_numeric(frame["source_row"]).astype("Int64"))


def _unlisted_frame(result: ReadResult) -> pd.DataFrame:
    return pd.DataFrame({"dataset": result.dataset, "image_path": pd.Series(result.unlisted_images, dtype=str)})


def _preview(records: pd.DataFrame, rows: int = 5, columns: int = 10) -> str:
    """The first rows as a Markdown table; names and values come from the user's files, so each is escaped (a
    camera value or a column name shows as written in any Markdown viewer, never as markup)."""
    head = records.iloc[:rows, :columns].astype(str)
    lines = ["| " + " | ".join(md_text(name) for name in head.columns) + " |", "|" + "---|" * len(head.columns)]
    lines += ["| " + " | ".join(md_text(value) for value in row) + " |" for row in head.itertuples(index=False)]
    return "\n".join(lines)
