"""The storage layout: every table, artifact path and partition key the platform writes, named once.

Tables are Parquet files in the table store (resources/tables.py), one per table partition, read through
DuckDB views named `schema.table`; a table shared by many partitions holds the partition each row belongs to in
one column. Heavy outputs are files under the artifact store. Model outputs are partitioned by
model x dataset, which has two spellings: Dagster's `MultiPartitionKey` (dimensions in name order,
`dataset|model`) for the instance, and `model|dataset` in the `partition` column of the tables. Nothing
else in the code spells a table name, a path or a key, and every reference to an asset names its key from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Dagster is imported where a key is built, so that `focus trace` starts without it.
    import dagster as dg


# ------------------------------------------------------------------------------------------ asset keys
# Every asset's key, for whatever refers to an asset (deps, job selections, checks, lineage stamps, readers of
# its outputs). An asset function defines its key by its own name, which must equal the constant here. A key that
# shares its name with a table or a file of its output below ends in _ASSET.

# Datasets and labels
DATASET_RELEASE = "dataset_release"
DATASET_RECORDS = "dataset_records"
HARMONISED_LABELS = "harmonised_labels"
LABEL_REJECTS_ASSET = "label_rejects"
GROUP_ATTRIBUTES = "group_attributes"
# Model outputs (those declared with `gpu_asset` run on the GPU: assets/gpu.py)
IMAGE_EMBEDDINGS = "image_embeddings"
DEGRADED_EMBEDDINGS_ASSET = "degraded_embeddings"
ZERO_SHOT_SCORES = "zero_shot_scores"
YES_NO_QUESTIONS = "yes_no_questions"
TOKEN_PROBABILITIES_ASSET = "token_probabilities"
LORA_ADAPTERS = "lora_adapters"
ADAPTED_TOKEN_PROBABILITIES_ASSET = "adapted_token_probabilities"
# Evaluation and report
PROBE_PREDICTIONS = "probe_predictions"
PREDICTIONS = "predictions"
METRICS_ASSET = "metrics"
FAIRNESS_METRICS = "fairness_metrics"
QUALITY_METRICS = "quality_metrics"
# The asset of each metric axis that has one; its rows in METRICS are under axis_partition(dataset, axis).
AXIS_ASSETS = {"fairness": FAIRNESS_METRICS, "quality": QUALITY_METRICS}
ROBUSTNESS_METRICS = "robustness_metrics"
ZERO_SHOT_ROBUSTNESS = "zero_shot_robustness"
DEGRADED_TOKEN_PROBABILITIES_ASSET = "degraded_token_probabilities"
YES_NO_ROBUSTNESS = "yes_no_robustness"
# The asset that writes each method's rows of the robustness table (ROBUSTNESS).
ROBUSTNESS_ROW_ASSETS = {"linear_probe": ROBUSTNESS_METRICS, "zero_shot": ZERO_SHOT_ROBUSTNESS,
                         "yes_no": YES_NO_ROBUSTNESS}
ROBUSTNESS_SUMMARY_ASSET = "robustness_summary"
CROSS_DATASET_METRICS = "cross_dataset_metrics"
MODEL_COMPARISONS = "model_comparisons"
LORA_EFFECTS_ASSET = "lora_effects"
LEADERBOARD = "leaderboard"
ARENA_REPORT_ASSET = "arena_report"


@dataclass(frozen=True)
class Table:
    """A table of the table store, read as the DuckDB view `schema.name`; `partition_column` holds the partition
    of each row when partitions share the table (each partition is its own Parquet file)."""

    schema: str
    name: str
    partition_column: str | None = None

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def __str__(self) -> str:
        return self.qualified


def records_table(dataset: str) -> Table:
    """Native records: one table per dataset, since every dataset has its own columns."""
    return Table("records", dataset)


QUARANTINE = Table("records", "quarantine", "dataset")
UNLISTED_IMAGES = Table("records", "unlisted_images", "dataset")
# Kept records whose image needs a word (content in another format than its extension names), with the note.
IMAGE_NOTES = Table("records", "image_notes", "dataset")
LABELS = Table("labels", "harmonised", "dataset")
LABEL_REJECTS = Table("labels", "rejects", "dataset")
ZERO_SHOT = Table("predictions", "zero_shot", "partition")
SAMPLES = Table("predictions", "samples", "partition")
# Configurations without predictions, with the reason: in-domain rows under their dataset, cross-dataset pairs
# under CROSS_PARTITION (so the `partition` column, not `dataset`, says which step wrote a row).
UNAVAILABLE = Table("predictions", "unavailable", "partition")
METRICS = Table("metrics", "values", "partition")
# What the LoRA adapters change: adapted vs base per configuration and metric, and the means (lora_effects).
LORA_EFFECTS = Table("metrics", "lora_effects")
LORA_SUMMARY = Table("metrics", "lora_summary")
# Model A against model B on the same test images, for the pairs focus.yaml declares (model_comparisons).
COMPARISONS = Table("metrics", "comparisons")
# Each configuration's metrics on degraded test images against its clean ones (robustness_metrics).
ROBUSTNESS = Table("metrics", "robustness", "partition")
# One row per configuration over its degradations: mean relative AUROC drop, the worst, mCE (robustness_summary).
ROBUSTNESS_SUMMARY = Table("metrics", "robustness_summary")
# The group attributes of each dataset's test images (sex, age, quality, camera) the fairness and quality axes use.
ATTRIBUTES = Table("labels", "attributes", "dataset")
# Lineage (focus_dagster/lineage.py): every stamp written with a table partition, by id, and the stamp of what
# each asset partition holds now, both written in the commit that writes the data (resources/tables.py).
STAMPS = Table("lineage", "stamps")
CURRENT = Table("lineage", "current")
# The stamp of what one asset partition holds now (parameters: asset, partition), for every reader of it.
CURRENT_STAMP_SQL = (f"SELECT s.stamp FROM {CURRENT.qualified} c JOIN {STAMPS.qualified} s USING (stamp_id) "
                     "WHERE c.asset = ? AND c.partition = ?")
TABLES = (QUARANTINE, UNLISTED_IMAGES, IMAGE_NOTES, LABELS, LABEL_REJECTS, ATTRIBUTES, ZERO_SHOT, SAMPLES, UNAVAILABLE, METRICS,
          LORA_EFFECTS, LORA_SUMMARY, COMPARISONS, ROBUSTNESS, ROBUSTNESS_SUMMARY, STAMPS, CURRENT)

# The partition of the cross-dataset rows in SAMPLES and METRICS (not a dataset).
CROSS_PARTITION = "cross"


def axis_partition(dataset: str, axis: str) -> str:
    """The `partition` of a dataset's fairness or quality rows in METRICS (written by their own assets)."""
    return f"{dataset}|{axis}"

# ------------------------------------------------------------------------------------------ artifacts


def labels_file(dataset: str) -> str:
    """A Parquet copy of one dataset's rows of LABELS in the artifact store, for steps (a GPU worker, a step
    process) that read one dataset's labels without resolving the table store."""
    return f"labels/{dataset}.parquet"


def release_file(dataset: str) -> str:
    """The latest observation of a dataset's release (version, root, when), as `dataset_release` recorded it."""
    return f"releases/{dataset}.json"


def pixels_dir(dataset: str) -> str:
    """The decoded pixels of a dataset's images, kept for the next model: one folder per preprocessing, one
    `.npy` per image content hash in it (focus_dagster/inference/pixel_cache.py)."""
    return f"pixels/{dataset}"


def questions_file(dataset: str) -> str:
    """The yes/no questions rendered for every image of a dataset."""
    return f"questions/{dataset}.parquet"


@dataclass(frozen=True)
class ModelOutputFiles:
    """The files of one kind of model x dataset output: `<folder>/<model>/<dataset><suffix>`, the shards of its
    resumable work beside it, and the images it could not read."""

    folder: str
    suffix: str = ".parquet"

    def file(self, model: str, dataset: str) -> str:
        return f"{self.folder}/{model}/{dataset}{self.suffix}"

    def shards(self, model: str, dataset: str) -> str:
        return f"{self.folder}/{model}/{dataset}.shards"

    def quarantine(self, model: str, dataset: str) -> str:
        return f"{self.folder}/{model}/{dataset}.quarantine.parquet"


EMBEDDINGS = ModelOutputFiles("embeddings")
TOKEN_PROBABILITIES = ModelOutputFiles("token_probabilities")
PROBES = ModelOutputFiles("probes", ".npz")
PROBE_SCORES = ModelOutputFiles("probe_predictions")
# Beside the probe scores: the tasks a probe step could not fit and why (task, reason), for the predictions step.
PROBE_SKIPPED = ModelOutputFiles("probe_predictions", ".skipped.parquet")
# The test images' embeddings under each degradation and severity (image_id, degradation, severity, embedding).
DEGRADED_EMBEDDINGS = ModelOutputFiles("degraded_embeddings")
# A multimodal LLM's yes/no probabilities on the degraded test images (token_probabilities' columns, degradation,
# severity).
DEGRADED_TOKEN_PROBABILITIES = ModelOutputFiles("degraded_token_probabilities")



@dataclass(frozen=True)
class AdapterFiles:
    """The files of one LoRA adapter (partition key `model.dataset.task`): the adapter folder (peft weights and
    config, manifest.json), its resumable training work beside it, and the record of why none was trained."""

    folder: str = "adapters"

    def adapter(self, adapter_key: str) -> str:
        return f"{self.folder}/{adapter_key}"

    def work(self, adapter_key: str) -> str:
        return f"{self.folder}/{adapter_key}.work"

    def skipped(self, adapter_key: str) -> str:
        return f"{self.folder}/{adapter_key}.skipped.json"


ADAPTERS = AdapterFiles()
# Scores of an adapted model on one dataset: `adapted_token_probabilities/<adapter>/<dataset>.parquet`.
ADAPTED_TOKEN_PROBABILITIES = ModelOutputFiles("adapted_token_probabilities")

LEADERBOARD_REPORT = "reports/leaderboard.md"
# The arena report: one folder (index.html, figures/<section>.png, tables/<table>.csv, manifest.json).
ARENA_REPORT = "reports/arena"
ARENA_REPORT_PAGE = f"{ARENA_REPORT}/index.html"
ARTIFACTS = (
    labels_file("<dataset>"), questions_file("<dataset>"),
    *(files.file("<model>", "<dataset>")
      for files in (EMBEDDINGS, DEGRADED_EMBEDDINGS, TOKEN_PROBABILITIES, DEGRADED_TOKEN_PROBABILITIES, PROBES,
                    PROBE_SCORES, PROBE_SKIPPED)),
    ADAPTERS.adapter("<model>.<dataset>.<task>"), ADAPTERS.skipped("<model>.<dataset>.<task>"),
    ADAPTED_TOKEN_PROBABILITIES.file("<model>.<dataset>.<task>", "<dataset>"),
    LEADERBOARD_REPORT, ARENA_REPORT_PAGE,
)

# ------------------------------------------------------------------------------------- partition keys

MODEL, DATASET = "model", "dataset"


def model_dataset_key(model: str, dataset: str) -> dg.MultiPartitionKey:
    """The instance's key of a model output partition."""
    import dagster as dg

    return dg.MultiPartitionKey({MODEL: model, DATASET: dataset})


def method_robustness_key(model: str, dataset: str, method: str) -> str:
    """The `partition` of a model's zero-shot or yes/no robustness rows in the robustness table (its probe rows
    have `model_dataset_row_key`)."""
    return f"{model}|{dataset}|{method}"


def model_dataset_row_key(model: str, dataset: str) -> str:
    """The `partition` column value of a model output's rows in a shared table."""
    return f"{model}|{dataset}"


def model_and_dataset(key: dg.MultiPartitionKey) -> tuple[str, str]:
    """(model, dataset) of a model output partition key."""
    dimensions = key.keys_by_dimension
    return dimensions[MODEL], dimensions[DATASET]
