"""Encoder outputs: frozen image embeddings (vision and dual encoders) and zero-shot scores (dual encoders)."""

import dagster as dg
import numpy as np
import pandas as pd

from assets.automation import GATED_EAGER
from assets.labels import labels_export
from focus_dagster.inference.engine import embed_images, pick_device, run_fingerprint
from focus_dagster.labels import TASKS
from focus_dagster.models.spec import CheckpointError
from resources import DatasetRoots, FocusStorage, ModelHub

MODEL_GROUP = "models"
ZERO_SHOT_SCHEMA, ZERO_SHOT_TABLE = "predictions", "zero_shot"

EMBEDDINGS_DESCRIPTION = (
    "Frozen image embeddings of one model on one dataset: one vector per harmonised image (Parquet in the "
    "artifact store: image_id + embedding, written atomically). Computed in batches on the GPU when there is "
    "one (bf16 autocast), images decoded in worker processes; work is kept in shards, so an interrupted run "
    "resumes and a changed model, revision, preprocessing or label set recomputes. Metadata: n, dimension, "
    "device, images/s, weights hash and the checkpoint audit (matched / missing / unexpected tensors), images "
    "that could not be read, and flags for pipeline-check models and for datasets the model saw in pretraining."
)
ZERO_SHOT_DESCRIPTION = (
    "Zero-shot scores of a dual encoder: for each image and each task the dataset defines, the probability of "
    "the positive prompt (softmax of logit_scale x cosine over the task's negative/positive prompt pair, "
    "prompts from focus_dagster/prompts.py, versioned). Table: `predictions.zero_shot`."
)


def model_partitions(model_ids: list[str], datasets: dg.StaticPartitionsDefinition) -> dg.MultiPartitionsDefinition:
    return dg.MultiPartitionsDefinition({"dataset": datasets, "model": dg.StaticPartitionsDefinition(model_ids)})


def build_model_assets(datasets: dg.StaticPartitionsDefinition, specs: dict) -> list:
    """image_embeddings for every VM/VLM x dataset, zero_shot_scores for every VLM x dataset."""
    encoders = [m for m, s in specs.items() if s.interface in ("vm", "vlm")]
    dual = [m for m, s in specs.items() if s.interface == "vlm"]
    if not encoders:
        return []
    by_dataset = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="dataset")

    @dg.asset(
        partitions_def=model_partitions(encoders, datasets),
        deps=[dg.AssetDep("harmonised_labels", partition_mapping=by_dataset)],
        group_name=MODEL_GROUP,
        pool="gpu",
        kinds={"pytorch", "parquet"},
        automation_condition=GATED_EAGER,
        description=EMBEDDINGS_DESCRIPTION,
        check_specs=[checkpoint_audit_spec("image_embeddings")],
    )
    def image_embeddings(
        context: dg.AssetExecutionContext, datasets: DatasetRoots, models: ModelHub, storage: FocusStorage
    ):
        model_id, dataset = model_keys(context)
        labels = pd.read_parquet(storage.artifact_path(labels_export(dataset)))
        root = datasets.root(dataset)
        device = pick_device()
        try:
            encoder = models.load(model_id, device)
        except CheckpointError as exc:
            yield dg.AssetCheckResult(check_name="checkpoint_audit", passed=False, metadata={"error": str(exc)})
            raise
        items = [(i, str(root / p)) for i, p in zip(labels["image_id"], labels["image_path"])]
        run = embed_images(
            encoder.embed, items, encoder.spec.preprocess,
            work_dir=storage.artifact_path(f"embeddings/{model_id}/{dataset}.shards"),
            fingerprint=run_fingerprint(_fingerprint_parts(encoder)),
            device=device, progress=context.log.info,
        )
        frame = pd.DataFrame({"image_id": run.image_ids, "embedding": list(run.embeddings)})
        path, sha = storage.write_parquet(embeddings_path(model_id, dataset), frame)
        yield dg.MaterializeResult(metadata=_embedding_metadata(encoder, run, dataset, path, sha))
        yield checkpoint_audit_result(encoder.report)

    assets = [image_embeddings]
    if dual:
        assets.append(_zero_shot_asset(model_partitions(dual, datasets)))
    return assets


def same_model_and_dataset() -> dg.MultiPartitionMapping:
    """model x dataset -> the same model x dataset of an upstream whose models are a superset."""
    return dg.MultiPartitionMapping({
        "dataset": dg.DimensionPartitionMapping("dataset", dg.IdentityPartitionMapping()),
        "model": dg.DimensionPartitionMapping("model", dg.IdentityPartitionMapping()),
    })


def _zero_shot_asset(partitions: dg.MultiPartitionsDefinition):
    @dg.asset(
        partitions_def=partitions,
        deps=[dg.AssetDep("image_embeddings", partition_mapping=same_model_and_dataset())],
        group_name=MODEL_GROUP,
        pool="duckdb",
        kinds={"pytorch", "duckdb"},
        automation_condition=GATED_EAGER,
        description=ZERO_SHOT_DESCRIPTION,
    )
    def zero_shot_scores(
        context: dg.AssetExecutionContext, models: ModelHub, storage: FocusStorage
    ) -> dg.MaterializeResult:
        import torch

        from focus_dagster.prompts import (
            PROMPTS_VERSION,
            prompt_pair,
            zero_shot_probability,
        )

        model_id, dataset = model_keys(context)
        labels = pd.read_parquet(storage.artifact_path(labels_export(dataset)))
        embeddings = pd.read_parquet(storage.artifact_path(embeddings_path(model_id, dataset)))
        encoder = models.load(model_id, "cpu")
        image = torch.from_numpy(np.stack(embeddings["embedding"].to_numpy()).astype(np.float32))
        rows = []
        for task in [t for t in TASKS if labels[t].notna().any()]:
            negative, positive = prompt_pair(task)
            with torch.inference_mode():
                text = encoder.text([negative, positive]).float()
            scores = zero_shot_probability(image, text[0], text[1], encoder.logit_scale).numpy()
            rows.append(pd.DataFrame({"model": model_id, "dataset": dataset, "image_id": embeddings["image_id"],
                                      "task": task, "score": scores.astype(float), "prompts": PROMPTS_VERSION,
                                      "pipeline_check_model": encoder.spec.is_pipeline_check,
                                      "in_pretraining_data": encoder.spec.contamination(dataset)}))
        frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
        key = f"{model_id}|{dataset}"
        storage.replace_rows(ZERO_SHOT_SCHEMA, ZERO_SHOT_TABLE, frame.assign(partition=key), "partition", key)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(frame),
            "tasks": sorted(frame["task"].unique().tolist()) if len(frame) else [],
            "prompts_version": PROMPTS_VERSION,
            "pipeline_check_model": encoder.spec.is_pipeline_check,
            "in_pretraining_data": encoder.spec.contamination(dataset),
        })

    return zero_shot_scores


def checkpoint_audit_spec(asset: str) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        "checkpoint_audit", asset=asset, blocking=True,
        description="Every tensor of the model was filled from its checkpoint (matched / missing / unexpected "
        "counts in the metadata). A partial load fails here and blocks everything downstream.",
    )


def checkpoint_audit_result(report) -> dg.AssetCheckResult:
    audit = report.summary()
    return dg.AssetCheckResult(
        check_name="checkpoint_audit", passed=report.clean,
        metadata={k: audit[k] for k in ("matched", "model_tensors", "missing_count", "unexpected_count",
                                        "ignored_missing_count", "weights_sha256", "checkpoint")},
    )


def embeddings_path(model_id: str, dataset: str) -> str:
    return f"embeddings/{model_id}/{dataset}.parquet"


def model_keys(context) -> tuple[str, str]:
    keys = context.partition_key.keys_by_dimension
    return keys["model"], keys["dataset"]


def _fingerprint_parts(encoder) -> dict:
    from focus_dagster import __version__

    spec = encoder.spec
    return {"model": spec.id, "revision": spec.revision, "weights": encoder.report.weights_sha256,
            "preprocess": spec.preprocess, "pooling": spec.pooling, "family": spec.family, "code": __version__}


def _embedding_metadata(encoder, run, dataset: str, path, sha: str) -> dict:
    return {
        "dagster/row_count": len(run.image_ids),
        "path": dg.MetadataValue.path(str(path)),
        "sha256": sha,
        "dimension": int(run.embeddings.shape[1]) if run.embeddings.size else 0,
        "dtype": "float32",
        **model_run_metadata(encoder, run, dataset),
    }


def model_run_metadata(loaded, run, dataset: str) -> dict:
    """What every model step reports: where and how fast it ran, what it could not read, which weights."""
    spec = loaded.spec
    return {
        "device": run.device,
        "images_per_second": round(run.images_per_second, 2),
        "batch_size": run.batch_size,
        "shards_reused": run.shards_reused,
        "images_unreadable": len(run.failed),
        "unreadable_examples": dg.MetadataValue.json(dict(list(run.failed.items())[:10])),
        "weights_sha256": loaded.report.weights_sha256,
        "checkpoint_audit": dg.MetadataValue.json(loaded.report.summary()),
        "pipeline_check_model": spec.is_pipeline_check,
        "in_pretraining_data": spec.contamination(dataset),
        "model_source": spec.source,
    }
