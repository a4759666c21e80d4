"""probe_predictions: the in-domain linear probes of one encoder on one dataset."""

import dagster as dg

from assets.automation import GATED_EAGER, data_version
from assets.evaluation.shared import EVALUATION_GROUP
from assets.partitions import SAME_MODEL_AND_DATASET, model_and_dataset
from focus_dagster import lineage
from focus_dagster.evaluation.probes import skipped_frame
from focus_dagster.version import code_version
from resources import FocusStorage, layout

PROBES_DESCRIPTION = (
    "In-domain linear probes of one encoder on one dataset: per task, logistic regression (balanced class weights, "
    "max_iter 1000) on L2-normalised embeddings of the train split, scored on the test split; the Youden threshold "
    f"of the training scores is kept. Probes: `{layout.PROBES.file('<model>', '<dataset>')}`; scores: "
    f"`{layout.PROBE_SCORES.file('<model>', '<dataset>')}`; tasks without a probe (a training split lacking a "
    f"class, no test images) and why: `{layout.PROBE_SKIPPED.file('<model>', '<dataset>')}` (artifact store)."
)


def probe_asset(partitions: dg.MultiPartitionsDefinition):
    @dg.asset(
        partitions_def=partitions,
        deps=[dg.AssetDep(layout.IMAGE_EMBEDDINGS, partition_mapping=SAME_MODEL_AND_DATASET)],
        group_name=EVALUATION_GROUP,
        kinds={"scikitlearn", "parquet"},
        automation_condition=GATED_EAGER,
        description=PROBES_DESCRIPTION,
    )
    def probe_predictions(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        from focus_dagster.evaluation.probes import in_domain_probes, save_probes

        model, dataset = model_and_dataset(context)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        embeddings, embeddings_stamp = storage.read_stamped_parquet(layout.EMBEDDINGS.file(model, dataset))
        run = in_domain_probes(dataset, embeddings, labels)
        # The probes, their scores and the tasks skipped carry one stamp: the embeddings and labels they were fit on.
        stamp = lineage.stamp(layout.PROBE_PREDICTIONS, layout.model_dataset_row_key(model, dataset), context.run_id,
                              lineage.frame_version(run.predictions), code_version=code_version(),
                              inputs={"embeddings": embeddings_stamp, "labels": labels_stamp}, skipped=run.skipped)
        storage.write_artifact(layout.PROBES.file(model, dataset),
                               lambda partial: save_probes(partial, run.probes, stamp), suffix=".npz")
        skipped_path, _ = storage.write_parquet(layout.PROBE_SKIPPED.file(model, dataset), skipped_frame(run.skipped),
                                                stamp)
        path, sha = storage.write_parquet(layout.PROBE_SCORES.file(model, dataset), run.predictions, stamp)
        return dg.MaterializeResult(metadata=_probe_metadata(run, skipped_path, path, sha, stamp),
                                    data_version=data_version(stamp))

    return probe_predictions


def _probe_metadata(run, skipped_path, path, sha: str, stamp: dict) -> dict:
    return {
        "dagster/row_count": len(run.predictions),
        "tasks": sorted(run.probes),
        "skipped": dg.MetadataValue.json(run.skipped),
        "skipped_path": dg.MetadataValue.path(str(skipped_path)),
        "youden_thresholds": dg.MetadataValue.json({t: p.threshold for t, p in run.probes.items()}),
        "train_sizes": dg.MetadataValue.json({t: [p.n_train, p.n_train_positive] for t, p in run.probes.items()}),
        "path": dg.MetadataValue.path(str(path)),
        "sha256": sha,
        "lineage_version": stamp["version"],
    }
