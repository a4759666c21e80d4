"""The one place where assets, checks, resources, jobs and schedules are wired into a code location.

Partitions come from the configuration (FOCUS_CONFIG / the embedded default), so registering a dataset
adds a partition, not code.
"""

from __future__ import annotations

import warnings

import dagster as dg

from focus_dagster.config import FocusConfig, load_config

# Partitioned observable sources and partitioned checks are marked beta/preview in Dagster 1.13; they are
# used deliberately, and the warnings would only bury the messages that matter on every load.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

DATA_LAYER_JOB = "focus_data_layer"
EMBEDDINGS_JOB = "focus_image_embeddings"
ZERO_SHOT_JOB = "focus_zero_shot_scores"
TOKEN_PROBABILITIES_JOB = "focus_token_probabilities"
PROBES_JOB = "focus_linear_probes"
ENCODER_JOB = "focus_encoder_outputs"
EVALUATION_JOB = "focus_evaluation"
SUMMARY_JOB = "focus_cross_dataset_and_leaderboard"
OBSERVE_JOB = "observe_dataset_releases"


def build_definitions(config: FocusConfig | None = None) -> dg.Definitions:
    from dagster_duckdb import DuckDBResource

    from assets import (
        build_dataset_assets,
        build_evaluation_assets,
        build_label_assets,
        build_mllm_assets,
        build_model_assets,
    )
    from checks import build_label_checks, build_record_checks
    from focus_dagster.questions import question_book
    from resources import DatasetRoots, FocusStorage, ModelHub

    config = config or load_config()
    datasets = dg.StaticPartitionsDefinition(config.dataset_keys)
    dataset_release, dataset_records = build_dataset_assets(datasets)
    [harmonise_labels] = build_label_assets(datasets, dataset_records)
    model_hub = ModelHub.from_config(config)
    specs = model_hub.specs()
    model_assets = build_model_assets(datasets, specs)
    mllm_assets = build_mllm_assets(datasets, specs, question_book(config.questions, str(config.source or "focus.yaml")))
    evaluation_assets = build_evaluation_assets(datasets, specs)
    data_layer = dg.define_asset_job(
        DATA_LAYER_JOB,
        selection=dg.AssetSelection.assets(dataset_records, harmonise_labels, *mllm_assets[:1]),
        partitions_def=datasets,
        description="Read a dataset from its published layout into native records, then harmonised labels "
        "(and the yes/no questions, when multimodal LLMs are selected).",
    )
    jobs = [data_layer] + [
        dg.define_asset_job(name, selection=dg.AssetSelection.assets(asset), partitions_def=asset.partitions_def,
                            description=description)
        for (name, description), asset in zip(
            [(EMBEDDINGS_JOB, "Image embeddings of every selected encoder (model x dataset)."),
             (ZERO_SHOT_JOB, "Zero-shot scores of every selected dual encoder (model x dataset).")],
            model_assets,
        )
    ]
    if mllm_assets:
        jobs.append(dg.define_asset_job(
            TOKEN_PROBABILITIES_JOB, selection=dg.AssetSelection.assets(mllm_assets[1]),
            partitions_def=mllm_assets[1].partitions_def,
            description="Yes/no token probabilities of every selected multimodal LLM (model x dataset).",
        ))
    jobs += _evaluation_jobs(datasets, evaluation_assets)
    observe = dg.define_asset_job(
        OBSERVE_JOB,
        selection=dg.AssetSelection.assets(dataset_release.key),
        description="Fingerprint every registered dataset on disk (its release version).",
    )
    return dg.Definitions(
        assets=[dataset_release, dataset_records, harmonise_labels, *model_assets, *mllm_assets, *evaluation_assets],
        asset_checks=[*build_record_checks(dataset_records, datasets), *build_label_checks(datasets)],
        jobs=[*jobs, observe],
        schedules=[
            dg.ScheduleDefinition(
                name="observe_dataset_releases_schedule",
                job=observe,
                cron_schedule=config.observe_cron,
                default_status=dg.DefaultScheduleStatus.RUNNING,
                description="Observe the dataset releases on a cron (release.observe_cron in focus.yaml).",
            )
        ],
        sensors=[
            dg.AutomationConditionSensorDefinition(
                "focus_refresh",
                target=dg.AssetSelection.all(),
                default_status=dg.DefaultSensorStatus.RUNNING,
                minimum_interval_seconds=60,
                description="Evaluates the automation conditions: a changed dataset release refreshes its own "
                "records and, once their blocking checks pass, everything below them.",
            )
        ],
        resources={
            "datasets": DatasetRoots.from_config(config),
            "models": model_hub,
            "storage": FocusStorage(
                duckdb=DuckDBResource(database=str(config.database)),
                artifacts_dir=str(config.artifacts),
            ),
        },
    )


def _evaluation_jobs(datasets: dg.StaticPartitionsDefinition, assets: list) -> list:
    """Probes (model x dataset), predictions + metrics (dataset), and the aggregates (unpartitioned)."""
    by_name = {asset.key.to_user_string(): asset for asset in assets}
    jobs = []
    if "probe_predictions" in by_name:
        probes = by_name["probe_predictions"]
        jobs.append(dg.define_asset_job(PROBES_JOB, selection=dg.AssetSelection.assets(probes),
                                        partitions_def=probes.partitions_def,
                                        description="Linear probes of every selected encoder (model x dataset)."))
        jobs.append(dg.define_asset_job(
            ENCODER_JOB, selection=dg.AssetSelection.assets("image_embeddings", probes),
            partitions_def=probes.partitions_def,
            description="Embeddings and linear probes of one encoder on one dataset, in one run.",
        ))
    jobs.append(dg.define_asset_job(
        EVALUATION_JOB, selection=dg.AssetSelection.assets(by_name["predictions"], by_name["metrics"]),
        partitions_def=datasets,
        description="The per-sample predictions table and the metric tables of one dataset.",
    ))
    summary = [by_name[name] for name in ("cross_dataset_metrics", "leaderboard") if name in by_name]
    jobs.append(dg.define_asset_job(SUMMARY_JOB, selection=dg.AssetSelection.assets(*summary),
                                    description="The cross-dataset matrix and the leaderboard over every dataset."))
    return jobs


defs = build_definitions()
