"""Encoder outputs: frozen image embeddings (vision and dual encoders) and zero-shot scores (dual encoders)."""

import dagster as dg
import pandas as pd

from assets.automation import GATED_EAGER, data_version
from assets.gpu import gpu_asset
from assets.partitions import (
    BY_DATASET,
    DUAL_ENCODERS,
    ENCODERS,
    SAME_MODEL_AND_DATASET,
    Registered,
    model_and_dataset,
)
from checks.models import checkpoint_audit_result
from focus_dagster import lineage
from focus_dagster.inference.pixel_cache import KnownHashes
from focus_dagster.labels import defined_tasks
from focus_dagster.models.preprocessing import preprocess_fingerprint, preprocess_record
from focus_dagster.version import code_version
from resources import DatasetRoots, FocusStorage, ModelHub, layout

MODEL_GROUP = "models"
EMBEDDINGS_JOB = "focus_image_embeddings"
ZERO_SHOT_JOB = "focus_zero_shot_scores"

EMBEDDINGS_DESCRIPTION = (
    "Frozen image embeddings of one model on one dataset: one vector per harmonised image (Parquet in the "
    "artifact store: image_id + embedding, written atomically). Computed in batches on the GPU when there is "
    "one (bf16 autocast; the model's repeated blocks compiled with torch.compile, checked against eager on a "
    "seeded batch, `compile:` in focus.yaml), images decoded in worker processes (JPEGs on the GPU with nvJPEG "
    "when there is one); "
    "each image is decoded once per preprocessing and its pixels kept under `pixels/<dataset>/` by content "
    "hash, so the next model with the same input size reads pixels, not JPEGs. Work is kept in shards, so an "
    "interrupted run resumes and a changed model, revision, preprocessing, decoder or label set recomputes. "
    "Images are preprocessed as the model's own configuration says (timm pretrained_cfg, the Hugging Face image "
    "processor saved with it, or the catalog's published settings; focus.yaml overrides field by field), by "
    "that library's transform; `preprocess` in the metadata gives every value and its source. "
    "Metadata: n, dimension, device, decoder, images/s, images read from the pixel cache vs decoded, weights "
    "hash and the checkpoint audit (matched / missing / unexpected tensors), images that could not be read, "
    "and flags for pipeline-check models and for datasets the model saw in pretraining."
)
ZERO_SHOT_DESCRIPTION = (
    "Zero-shot scores of a dual encoder: for each image and each task the dataset defines, the probability of "
    "the positive prompt (softmax of logit_scale x cosine over the task's negative/positive prompt pair, "
    f"prompts from focus_dagster/prompts.py, versioned). Table: `{layout.ZERO_SHOT}`."
)


def definitions(registered: Registered) -> dg.Definitions:
    """image_embeddings for every VM/VLM x dataset and zero_shot_scores for every VLM x dataset, with a job each."""
    assets, jobs = [], []
    if registered.models(ENCODERS):
        assets.append(_embeddings_asset(registered.model_partitions(ENCODERS), registered))
        jobs.append(_job(EMBEDDINGS_JOB, layout.IMAGE_EMBEDDINGS, registered.model_partitions(ENCODERS),
                         "Image embeddings of every selected encoder (model x dataset)."))
    if registered.models(DUAL_ENCODERS):
        assets.append(_zero_shot_asset(registered.model_partitions(DUAL_ENCODERS)))
        jobs.append(_job(ZERO_SHOT_JOB, layout.ZERO_SHOT_SCORES, registered.model_partitions(DUAL_ENCODERS),
                         "Zero-shot scores of every selected dual encoder (model x dataset)."))
    return dg.Definitions(assets=assets, jobs=jobs)


def _job(name: str, asset: str, partitions, description: str):
    return dg.define_asset_job(name, selection=dg.AssetSelection.assets(asset), partitions_def=partitions,
                               description=description)


def _embeddings_asset(partitions: dg.MultiPartitionsDefinition, registered: Registered):
    @gpu_asset(
        registered,
        partitions_def=partitions,
        kinds={"parquet"},
        deps=[dg.AssetDep(layout.HARMONISED_LABELS, partition_mapping=BY_DATASET)],
        group_name=MODEL_GROUP,
        automation_condition=GATED_EAGER,
        description=EMBEDDINGS_DESCRIPTION,
    )
    def image_embeddings(
        context: dg.AssetExecutionContext, datasets: DatasetRoots, models: ModelHub, storage: FocusStorage
    ):
        from focus_dagster.inference.compiled import compile_encoder
        from focus_dagster.inference.engine import default_batch_size, pick_device, run_fingerprint, run_on_images

        model_id, dataset = model_and_dataset(context)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        device = pick_device()
        encoder = models.load(model_id, device, ENCODERS)  # a refused load fails the checkpoint audit (assets/gpu.py)
        forward = compile_encoder(encoder.embed, encoder.modules, encoder.spec.preprocess, device,
                                  mode=models.compile_mode, batch_size=default_batch_size(device), log=context.log.info)
        items = image_files(datasets, dataset, labels)
        run = run_on_images(
            forward.forward, items, encoder.spec.preprocess,
            work_dir=storage.artifact_path(layout.EMBEDDINGS.shards(model_id, dataset)),
            fingerprint=run_fingerprint(_fingerprint_parts(encoder, forward)),
            device=device, progress=context.log.info, what=f"embeddings {model_id}@{dataset}",
            pixel_cache=storage.artifact_path(layout.pixels_dir(dataset)),
            known_hashes=labelled_hashes(items, labels, storage.artifact_path(layout.labels_file(dataset))),
        )
        frame = pd.DataFrame({"image_id": run.image_ids, "embedding": list(run.outputs)})
        stamp = model_output_stamp(layout.IMAGE_EMBEDDINGS, model_id, dataset, context.run_id, frame, encoder,
                                   labels=labels_stamp, forward=forward.mode)
        path, sha = storage.write_parquet(layout.EMBEDDINGS.file(model_id, dataset), frame, stamp)
        yield dg.MaterializeResult(metadata=_embedding_metadata(encoder, run, dataset, path, sha)
                                   | {"lineage_version": stamp["version"], "forward": forward.mode,
                                      "compile": dg.MetadataValue.json(forward.summary())},
                                   data_version=data_version(stamp))
        yield checkpoint_audit_result(encoder.report)

    return image_embeddings


def _zero_shot_asset(partitions: dg.MultiPartitionsDefinition):
    @dg.asset(
        partitions_def=partitions,
        deps=[dg.AssetDep(layout.IMAGE_EMBEDDINGS, partition_mapping=SAME_MODEL_AND_DATASET)],
        group_name=MODEL_GROUP,
        kinds={"pytorch", "parquet"},
        automation_condition=GATED_EAGER,
        description=ZERO_SHOT_DESCRIPTION,
    )
    def zero_shot_scores(
        context: dg.AssetExecutionContext, models: ModelHub, storage: FocusStorage
    ) -> dg.MaterializeResult:
        from focus_dagster.inference.zero_shot import zero_shot_frame
        from focus_dagster.prompts import PROMPTS_VERSION

        model_id, dataset = model_and_dataset(context)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        embeddings, embeddings_stamp = storage.read_stamped_parquet(layout.EMBEDDINGS.file(model_id, dataset))
        encoder = models.load(model_id, "cpu", ENCODERS)
        frame = zero_shot_frame(encoder, embeddings, defined_tasks(labels), dataset)
        key = layout.model_dataset_row_key(model_id, dataset)
        stamp = model_output_stamp(layout.ZERO_SHOT_SCORES, model_id, dataset, context.run_id, frame, encoder,
                                   labels=labels_stamp, embeddings=embeddings_stamp, prompts_version=PROMPTS_VERSION)
        storage.replace_partition(layout.ZERO_SHOT, key, frame.assign(partition=key), stamp=stamp)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(frame),
            "tasks": sorted(frame["task"].unique().tolist()) if len(frame) else [],
            "prompts_version": PROMPTS_VERSION,
            "pipeline_check_model": encoder.spec.is_pipeline_check,
            "in_pretraining_data": encoder.spec.contamination(dataset),
        }, data_version=data_version(stamp))

    return zero_shot_scores


def model_output_stamp(asset: str, model_id: str, dataset: str, run_id: str, frame: pd.DataFrame, loaded,
                       **inputs) -> dict:
    """The lineage of a model output: its content version, the model that computed it (id, revision, snapshot,
    weights hash and file signature, audit), and the stamps of the inputs it read (keyword arguments that are
    not stamps, such as a prompts version, are kept as facts), and the preprocessing its images went through."""
    stamps = {name: value for name, value in inputs.items() if isinstance(value, dict) or value is None}
    facts = {name: value for name, value in inputs.items() if name not in stamps}
    return lineage.stamp(asset, layout.model_dataset_row_key(model_id, dataset), run_id, lineage.frame_version(frame),
                         code_version=code_version(), inputs=stamps,
                         model=lineage.model_facts(loaded.spec, loaded.report),
                         preprocess=preprocess_record(loaded.spec.preprocess), **facts)


def image_files(datasets: DatasetRoots, dataset: str, labels: pd.DataFrame) -> list[tuple[str, str]]:
    """(image_id, absolute path) of every harmonised image of a dataset."""
    root = datasets.root(dataset)
    return [(image_id, str(root / path)) for image_id, path in zip(labels["image_id"], labels["image_path"])]


def labelled_hashes(items: list[tuple[str, str]], labels: pd.DataFrame, labels_path) -> KnownHashes | None:
    """The content hash harmonised_labels took of each image (by absolute path), valid for files not modified
    since the labels file was written; None when the labels carry no hashes (every file is then hashed)."""
    if "content_hash" not in labels.columns:
        return None
    hashes = {path: digest for (_, path), digest in zip(items, labels["content_hash"]) if isinstance(digest, str)}
    return KnownHashes(hashes, labels_path.stat().st_mtime_ns) if hashes else None


def _fingerprint_parts(encoder, forward) -> dict:
    """Everything that decides the numbers; a compiled forward rounds differently from eager, so its shards are
    its own (eager runs keep the key they had before compiling existed)."""
    from focus_dagster import __version__

    spec = encoder.spec
    parts = {"model": spec.id, "revision": spec.revision, "weights": encoder.report.weights_sha256,
             "preprocess": preprocess_fingerprint(spec.preprocess), "pooling": spec.pooling, "family": spec.family, "code": __version__}
    return parts | ({"forward": forward.mode} if forward.is_compiled else {})


def _embedding_metadata(encoder, run, dataset: str, path, sha: str) -> dict:
    return {
        "dagster/row_count": len(run.image_ids),
        "path": dg.MetadataValue.path(str(path)),
        "sha256": sha,
        "dimension": int(run.outputs.shape[1]) if run.outputs.size else 0,
        "dtype": "float32",
        "decoder": run.decoder,
        "preprocess": dg.MetadataValue.json(preprocess_record(encoder.spec.preprocess)),
        "pixels_from_cache": run.pixels_from_cache,
        "pixels_decoded": run.pixels_decoded,
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
