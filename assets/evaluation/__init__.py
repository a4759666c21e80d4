"""Evaluation: linear probes, the per-sample predictions table, the metric tables (performance and calibration,
fairness and quality), the cross-dataset matrix and the leaderboard. One module per step, each thin: read, call
the core (focus_dagster/evaluation/), write, describe; whether inputs fit together is decided by
focus_dagster/evaluation/inputs.py."""

import dagster as dg

from assets.evaluation.cross_dataset import cross_dataset_asset
from assets.evaluation.leaderboard import leaderboard_asset, pipeline_checks
from assets.evaluation.metrics import FAIRNESS_WHAT, QUALITY_WHAT, axis_asset, metrics_asset, metrics_metadata
from assets.evaluation.predictions import predictions_asset
from assets.evaluation.probes import probe_asset
from assets.evaluation.shared import EVALUATION_GROUP, VALUE_COLUMNS, MetricsConfig
from assets.partitions import ENCODERS, Registered
from resources import layout

PROBES_JOB = "focus_linear_probes"
ENCODER_JOB = "focus_encoder_outputs"
EVALUATION_JOB = "focus_evaluation"
SUMMARY_JOB = "focus_cross_dataset_and_leaderboard"

__all__ = ["ENCODER_JOB", "EVALUATION_GROUP", "EVALUATION_JOB", "MetricsConfig", "PROBES_JOB", "SUMMARY_JOB",
           "VALUE_COLUMNS", "definitions", "metrics_metadata", "pipeline_checks"]


def definitions(registered: Registered) -> dg.Definitions:
    """Probes (model x dataset), predictions + metrics + fairness and quality (dataset), the cross-dataset matrix
    and the leaderboard."""
    with_encoders = bool(registered.models(ENCODERS))
    assets, jobs = [], []
    if with_encoders:
        encoders = registered.model_partitions(ENCODERS)
        assets.append(probe_asset(encoders))
        jobs.append(dg.define_asset_job(PROBES_JOB, selection=dg.AssetSelection.assets(layout.PROBE_PREDICTIONS),
                                        partitions_def=encoders,
                                        description="Linear probes of every selected encoder (model x dataset)."))
        jobs.append(dg.define_asset_job(
            ENCODER_JOB, selection=dg.AssetSelection.assets(layout.IMAGE_EMBEDDINGS, layout.PROBE_PREDICTIONS),
            partitions_def=encoders,
            description="Embeddings and linear probes of one encoder on one dataset, in one run.",
        ))
    assets += [predictions_asset(registered.datasets, registered.specs, registered.evaluations()),
               metrics_asset(registered.datasets, pipeline_checks(registered.specs)),
               axis_asset(registered.datasets, "fairness", FAIRNESS_WHAT),
               axis_asset(registered.datasets, "quality", QUALITY_WHAT)]
    jobs.append(dg.define_asset_job(
        EVALUATION_JOB, selection=dg.AssetSelection.assets(layout.PREDICTIONS, layout.METRICS_ASSET,
                                                           layout.GROUP_ATTRIBUTES, layout.FAIRNESS_METRICS,
                                                           layout.QUALITY_METRICS),
        partitions_def=registered.datasets,
        description="The per-sample predictions table and the metric tables of one dataset (performance and "
        "calibration; fairness and quality once the group attributes pass their blocking check, the rows of an "
        "attribute below its coverage floor kept without a value).",
    ))
    summary = [layout.CROSS_DATASET_METRICS, layout.LEADERBOARD] if with_encoders else [layout.LEADERBOARD]
    if with_encoders:
        assets.append(cross_dataset_asset(registered.specs, registered.models(ENCODERS), registered.dataset_keys))
    assets.append(leaderboard_asset(with_encoders, pipeline_checks(registered.specs)))
    jobs.append(dg.define_asset_job(SUMMARY_JOB, selection=dg.AssetSelection.assets(*summary),
                                    description="The cross-dataset matrix and the leaderboard over every dataset."))
    return dg.Definitions(assets=assets, jobs=jobs)
