"""cross_dataset_metrics: every in-domain probe scored on every other dataset that has its task."""

import dagster as dg

from assets.automation import GATED_EAGER
from assets.evaluation.shared import EVALUATION_GROUP, MetricsConfig
from focus_dagster import lineage
from focus_dagster.evaluation.assembly import Pair, Trained, cross_dataset_tables, pairs_count, unavailable_summary
from focus_dagster.evaluation.configurations import by_pair, cross_dataset_configurations
from focus_dagster.evaluation.inputs import not_materialised
from focus_dagster.evaluation.leaderboard import cross_matrix_markdown
from resources import FocusStorage, layout

CROSS_DESCRIPTION = (
    "The cross-dataset matrix: every in-domain probe trained on dataset A scored on the test split of every other "
    f"dataset B that has the task; predictions in `{layout.SAMPLES}` and performance / calibration rows in "
    f"`{layout.METRICS}` (partition '{layout.CROSS_PARTITION}'). A pair without predictions (probe not fit on A, "
    f"outputs not materialised, no test image of B with the task) is a row with the reason in `{layout.UNAVAILABLE}` "
    "and a null AUROC row in the metrics."
)


def cross_dataset_asset(specs: dict, encoders: list[str], registered: list[str]):
    @dg.asset(
        deps=[layout.PROBE_PREDICTIONS, layout.IMAGE_EMBEDDINGS, layout.HARMONISED_LABELS],
        group_name=EVALUATION_GROUP,
        kinds={"scikitlearn", "parquet"},
        automation_condition=GATED_EAGER,
        description=CROSS_DESCRIPTION,
    )
    def cross_dataset_metrics(context: dg.AssetExecutionContext, config: MetricsConfig, storage: FocusStorage):
        from focus_dagster.evaluation.tables import Settings

        tables = cross_dataset_tables(_pairs(storage, specs, encoders, registered), layout.CROSS_PARTITION,
                                      context.run_id, Settings(config.n_resamples, config.seed), say=context.log.info)
        storage.replace_partitions([(layout.SAMPLES, layout.CROSS_PARTITION, tables.samples),
                                    (layout.UNAVAILABLE, layout.CROSS_PARTITION, tables.unavailable),
                                    (layout.METRICS, layout.CROSS_PARTITION, tables.metrics)], stamp=tables.stamp,
                                   stamps=tables.stamps)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(tables.metrics),
            "predictions": len(tables.samples),
            "pairs": pairs_count(tables.samples),
            "unavailable": dg.MetadataValue.json(unavailable_summary(tables.gaps)),
            "matrix": dg.MetadataValue.md(cross_matrix_markdown(tables.metrics)),
        })

    return cross_dataset_metrics


def _pairs(storage: FocusStorage, specs: dict, encoders: list[str], registered: list[str]):
    """What each (encoder, A -> B) pair reads, one pair at a time: A's probes (read once per A), B's labels and
    B's embeddings."""
    datasets = [d for d in registered if storage.has_labels(d)]
    read = {d: storage.read_stamped_labels(d) for d in datasets}
    labels = {d: frame for d, (frame, _) in read.items()}
    trained = {}
    for (model, source, target), configs in by_pair(cross_dataset_configurations(encoders, labels)):
        if (model, source) not in trained:
            trained[model, source] = _trained_probes(storage, model, source)
        embeddings = layout.EMBEDDINGS.file(model, target)
        present = storage.artifact_path(embeddings).exists()
        vectors, embeddings_stamp = storage.read_stamped_parquet(embeddings) if present else (None, None)
        target_labels, labels_stamp = read[target]
        yield Pair(configs, specs[model].interface, trained[model, source], target_labels, labels_stamp, present,
                   vectors, embeddings_stamp)


def _trained_probes(storage: FocusStorage, model: str, source: str) -> Trained:
    from focus_dagster.evaluation.probes import load_stamped_probes

    path = storage.artifact_path(layout.PROBES.file(model, source))
    if not path.exists():
        return Trained(reason=not_materialised(layout.PROBE_PREDICTIONS, model, source))
    probes, stamp = load_stamped_probes(path)
    if stamp is None:
        return Trained(reason=f"probe_predictions {model}/{source} was written without lineage (by an earlier "
                              "version): rematerialise it")
    return Trained(stamp, probes, lineage.fact(stamp, "facts", "skipped") or {})
