"""The schema of focus.yaml: one pydantic model per section, unknown keys refused everywhere.

These models say what each key may hold (its type, its range, its choices) and give `focus config --schema`
its JSON Schema, descriptions included, so that an editor completes and checks focus.yaml as it is typed.
What needs more than the file itself stays with the code that knows it: `focus_dagster/config.py` resolves
paths against the file's folder and checks that `splits.dir` exists, `adapter_plan.lora_plan` that LoRA's
training datasets are registered, `degradations.plan.degradation_plan` that the degradations and severities are
the registry's, `questions.question_book` the questions' version and templates, and
`_parse_datasets` (config.py) the `datasets:` section, whose declarations have their own schema
(`focus_dagster/datasets/declaration.py`).

A mistake is reported with its key path and the value it got (`errors.config_validation_error`):

    focus.yaml: kubernetes.gpu_tolerations.0.colour: unknown key; allowed: key, operator, value, effect, tolerationSeconds

A rule of this module (a Kubernetes quantity, a GPU request, a plain name) raises `rule(...)`: its message names
the value itself. Names that end up in file and folder names (model ids, the questions version, the models and
datasets the lists name) are plain names (SAFE_NAME_PATTERN), so that none leads out of the store it names a file
in; a dataset key of the user's own has its own stricter pattern (datasets/declaration.py KEY_PATTERN), since it
also names a table.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Mapping, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    SkipValidation,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    Tag,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from focus_dagster.datasets.declaration import TASK_NAMES, DatasetDeclaration
from focus_dagster.datasets.images import DEFAULT_IMAGE_CHECK, IMAGE_CHECKS
from focus_dagster.datasets.registry import DATASET_KEYS
from focus_dagster.errors import CONFIG_RULE, config_validation_error

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"  # what pydantic's JSON Schema follows
# in_process: every step of a run in the run's own process (fast small steps); multiprocess: one process per
# step (steps of a run in parallel, each paying its own imports); k8s: one Kubernetes Job per step, its pod
# shaped by `kubernetes:` (GPU steps on GPU nodes; assets/kubernetes.py, deploy/README.md).
EXECUTORS = ("in_process", "multiprocess", "k8s")
# How encoders run on the device (focus_dagster/inference/compiled.py): auto = their repeated blocks compiled on CUDA,
# eager on a CPU.
COMPILE_MODES = ("auto", "off", "blocks", "whole")
DEFAULT_OBSERVE_CRON = "0 3 * * *"
DEFAULT_REFRESH_SECONDS = 60  # how often the automation sensor evaluates the graph
# Images per synthetic look-alike. BRSET and mBRSET publish sex, age and quality grades, but the benchmark keeps
# only about half of their images (BRSET's diabetic patients, mBRSET's macula-centred views) and 40% of the
# patients go to test: at 80 images their test splits hold 13 and 21 images, so no sex or graded-quality gap
# reaches its group minimum (fairness 10 images a group, graded quality 5). At 160 both sexes of both, and
# BRSET's inadequate grade, reach it on the default seed; PAPILA's 80 already do.
DEFAULT_IMAGES = {"default": 80, "brset": 160, "mbrset": 160}
LOOKALIKE_DEFAULT = "default"  # the key of `synthetic.per_dataset` for every look-alike not named
# The model layer's choices (focus_dagster/models/spec.py), written here because the models package imports the
# configuration; tests/test_config_schema.py keeps the two the same.
MODEL_INTERFACES = ("vm", "vlm", "mllm")
MODEL_DOMAINS = ("general", "ophthalmic", "medical", "pipeline-check")
RESIZE_POLICIES = ("resize_crop", "squash", "pad_longest")
INTERPOLATIONS = ("bicubic", "bilinear", "nearest")
LR_SCHEDULES = ("linear", "constant")  # focus_dagster/lora/settings.py

GPU_RESOURCE = "nvidia.com/gpu"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The defaults match the label and taint NVIDIA's GPU operator puts on GPU nodes (config.KubernetesSettings).
DEFAULT_GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
DEFAULT_GPU_TOLERATIONS = ({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},)
DEFAULT_GPU_RESOURCES = {"requests": {"cpu": "4", "memory": "16Gi", GPU_RESOURCE: "1"},
                         "limits": {"cpu": "8", "memory": "32Gi", GPU_RESOURCE: "1"}}
DEFAULT_CPU_RESOURCES = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}
# A Kubernetes quantity, as the API server reads it: 2, 0.5, 500m, 16Gi, 1e3.
QUANTITY_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
_QUANTITY = re.compile(QUANTITY_PATTERN)
# A name that becomes part of a file or folder name (model ids, the questions version, names lists refer to):
# letters, digits, _ and -, with single dots inside. So no `/`, `\`, `..`, leading dot, space, control
# character or markup: a name can never lead out of the folder it names something in, nor break a Markdown table.
SAFE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$"
SAFE_NAME_MAX = 100  # with the dataset and task beside it, an adapter's file names stay under 255 characters
_SAFE_NAME = re.compile(SAFE_NAME_PATTERN)


class Section(BaseModel):
    """Every block of focus.yaml: a key it does not know is a mistake, named with its path."""

    model_config = ConfigDict(extra="forbid")


def rule(message: str) -> PydanticCustomError:
    """A broken rule of focus.yaml whose message says all (the value included): reported without `(got ...)`."""
    return PydanticCustomError(CONFIG_RULE, "{message}", {"message": message})


def validated(model: type[BaseModel], raw: Any, where: str, prefix: str) -> BaseModel:
    """`raw` as `model`, or a ConfigError with a line per mistake, each key path starting at `prefix`."""
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise config_validation_error(where, prefix, error, model) from None


# ------------------------------------------------------------------------------------------- value types


def _label_text(value: Any) -> Any:
    """Kubernetes labels and taints hold strings; YAML reads `true` and `1` as other things."""
    if not isinstance(value, str):
        raise rule(f"must be a string, got {value!r} (quote values such as \"true\")")
    return value


def _quantity(value: Any) -> str:
    """A Kubernetes quantity, kept as the string the API server reads (YAML's 4 becomes "4")."""
    text = None if isinstance(value, bool) or not isinstance(value, (int, float, str)) else str(value)
    if text is None or not _QUANTITY.match(text):
        raise rule(f"must be a Kubernetes quantity such as 2, 500m or 16Gi, got {value!r}")
    return text


def _safe_name(value: Any) -> Any:
    """A name that names files and folders: refused, with the pattern, unless it is a plain name."""
    if not isinstance(value, str):
        return value  # the type's own error says what it must be
    if len(value) > SAFE_NAME_MAX or not _SAFE_NAME.fullmatch(value):
        raise rule(f"must be a plain name (letters, digits, _ and -, single dots inside, at most {SAFE_NAME_MAX} "
                   f"characters: {SAFE_NAME_PATTERN}), since it names files and folders; got {value!r}")
    return value


def _images_per_dataset(value: Any) -> Any:
    """One number of images for every look-alike, or a mapping of dataset key (and `default`) to images."""
    def count(number: Any, where: str) -> int:
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise rule(f"{where}must be a whole number of images, at least 1, got {number!r}")
        return number

    if not isinstance(value, Mapping):
        if isinstance(value, int) and not isinstance(value, bool):
            return count(value, "")
        raise rule("must be a whole number of images for every look-alike, or a mapping such as "
                   f"{{default: 80, brset: 160}}, got {value!r}")
    known = (LOOKALIKE_DEFAULT, *DATASET_KEYS)
    unknown = [key for key in value if key not in known]
    if unknown:
        raise rule(f"{', '.join(map(repr, unknown))}: no such look-alike; keys: {', '.join(known)}")
    return {key: count(number, f"{key}: ") for key, number in value.items()}


def _tables_location(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise rule(f"must be a folder or a URL such as s3://bucket/focus/tables, got {value!r}")
    return value


def _question_text(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        raise rule(f"must be a non-empty question, got {value!r}")
    return value


LabelText = Annotated[str, BeforeValidator(_label_text)]
ImagesPerDataset = Annotated[Union[int, dict[str, int]], BeforeValidator(_images_per_dataset), WithJsonSchema({
    "anyOf": [{"type": "integer", "minimum": 1},
              {"type": "object", "propertyNames": {"enum": [LOOKALIKE_DEFAULT, *DATASET_KEYS]},
               "additionalProperties": {"type": "integer", "minimum": 1}}],
    "description": "images per look-alike: one number for all, or dataset key (and default) -> images"})]
Quantity = Annotated[str, BeforeValidator(_quantity), WithJsonSchema({
    "anyOf": [{"type": "string", "pattern": QUANTITY_PATTERN}, {"type": "number"}],
    "description": "a Kubernetes quantity: 2, 0.5, 500m, 16Gi"})]
Name = Annotated[str, StringConstraints(min_length=1)]
SafeName = Annotated[str, AfterValidator(_safe_name), WithJsonSchema({
    "type": "string", "pattern": SAFE_NAME_PATTERN, "maxLength": SAFE_NAME_MAX,
    "description": "a plain name: letters, digits, _ and -, single dots inside"})]
QuestionText = Annotated[str, BeforeValidator(_question_text)]
TablesLocation = Annotated[str, BeforeValidator(_tables_location)]
TaskName = Literal[TASK_NAMES]


# ----------------------------------------------------------------------------- synthetic, release, splits


class SyntheticSection(Section):
    """The embedded look-alikes written for datasets mapped to `synthetic` (or when no dataset is listed)."""

    per_dataset: ImagesPerDataset = Field(
        DEFAULT_IMAGES,  # pydantic copies a mutable default for each file read
        description="images per look-alike: one number for every dataset, or a mapping of dataset key to images "
                    "with `default` for the others")
    seed: StrictInt = Field(0, description="seed of the generated labels and images")
    scale: StrictFloat = Field(0.125, gt=0, le=1, description="fraction of the published image resolution")


class ReleaseSection(Section):
    """When the datasets on disk are fingerprinted, and how often the automation looks for work."""

    observe_cron: str = Field(DEFAULT_OBSERVE_CRON, description="cron schedule of the release observation")
    content_hash: StrictBool = Field(False, description="hash image bytes too (slower; catches edited images)")
    refresh_seconds: StrictInt = Field(DEFAULT_REFRESH_SECONDS, ge=1,
                                       description="seconds between two evaluations of the automation sensor")


class SplitsSection(Section):
    """Published split files, and the seed of the split where no published or native one applies."""

    dir: str | None = Field(None, description="folder of published labels_splits_<dataset>.csv files "
                                              "(relative paths: relative to focus.yaml)")
    seed: StrictInt = Field(0, description="seed of the 60/40 split where no other split applies")


# ------------------------------------------------------------------------------------------------- models


class PreprocessEntry(Section):
    """How images reach the model, field by field over the model's own configuration (timm pretrained_cfg,
    Hugging Face image processor) or the catalog's published settings: keys left out keep those."""

    size: StrictInt | None = Field(None, ge=1, description="input size in pixels")
    resize: Literal[RESIZE_POLICIES] | None = Field(None, description="resize_crop: shorter side to resize_to, "
                                                    "centre crop; squash: straight to size; pad_longest: padded")
    resize_to: StrictInt | None = Field(None, ge=1, description="side the resize aims at before the centre crop")
    crop_pct: float | None = Field(None, gt=0, le=1, description="timm's size / resize_to (instead of resize_to)")
    interpolation: Literal[INTERPOLATIONS] | None = Field(None, description="resampling filter")
    mean: list[float] | None = Field(None, min_length=3, max_length=3, description="per-channel mean (RGB)")
    std: list[float] | None = Field(None, min_length=3, max_length=3, description="per-channel std (RGB)")
    scale_only: StrictBool | None = Field(None, description="divide by 255 only, no mean/std")


class ModelEntry(Section):
    """A catalog model with overrides (path, revision, ...), or a model of your own (then family, interface,
    domain and source are needed); `focus models` lists the catalog."""

    id: SafeName = Field(description="the catalog id, or the id of a model of your own")
    interface: Literal[MODEL_INTERFACES] | None = Field(None, description="vm: image encoder; vlm: image-text; "
                                                        "mllm: multimodal LLM")
    domain: Literal[MODEL_DOMAINS] | None = Field(None, description="what the model was trained on")
    family: str | None = Field(None, description="the loader that reads its checkpoint format")
    source: str | None = Field(None, description="the hub id as published, or a local path")
    revision: str | None = Field(None, description="the hub revision (commit) of the weights")
    path: str | None = Field(None, description="where the weights are on this machine (a file or a folder)")
    preprocess: PreprocessEntry | None = Field(None, description="how images reach the model")
    pooling: str | None = Field(None, description="how an image embedding is read off the backbone (cls, mean, ...)")
    dtype: str | None = Field(None, description="weights' dtype: float32, bfloat16, float16")
    pretrained_on: list[SafeName] | None = Field(None, description="FOCUS datasets the model saw in pretraining")
    trust_remote_code: StrictBool | None = Field(None, description="run the checkpoint's own code (transformers)")
    options: dict[str, Any] | None = Field(None, description="family-specific architecture settings")
    notes: str | None = Field(None, description="free text shown by `focus models`")


def _model_form(value: Any) -> str | None:
    """Which form a `models:` entry is written in (None: neither, one clear error)."""
    if isinstance(value, str):
        return "<id>"
    return "<mapping>" if isinstance(value, (Mapping, ModelEntry)) else None


ModelChoice = Annotated[
    Union[Annotated[SafeName, Tag("<id>")], Annotated[ModelEntry, Tag("<mapping>")]],
    Discriminator(_model_form, custom_error_type="model_form",
                  custom_error_message="a model is a catalog id or a mapping with an `id`"),
]


# ---------------------------------------------------------------------------------------------- questions


class TaskQuestions(Section):
    """One yes/no question per task; placeholders such as {age} fill in per-image metadata."""

    any_dr: QuestionText | None = Field(None, description="asked for any diabetic retinopathy")
    referable_dr: QuestionText | None = Field(None, description="asked for referable diabetic retinopathy")
    gon: QuestionText | None = Field(None, description="asked for glaucomatous optic neuropathy")


class QuestionsSection(Section):
    """Yes/no questions for multimodal LLMs, replacing the registry's (focus_dagster/questions.py)."""

    # `version` is required (the schema says so); question_book checks it, with the reason it is required.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"required": ["version"]})

    version: SafeName | None = Field(None, description="a new name for this wording, so that scores from "
                                                       "different wordings are never mixed")
    tasks: TaskQuestions | None = Field(None, description="questions for every dataset")
    datasets: dict[SafeName, TaskQuestions] | None = Field(None, description="a dataset's own questions, by "
                                                                           "dataset key")


# --------------------------------------------------------------------------------------------------- lora


class LoraSettingsSection(Section):
    """How each adapter is trained (focus_dagster/lora/settings.py); keys left out take the protocol's value."""

    r: StrictInt = Field(8, ge=1, description="LoRA rank")
    alpha: StrictInt = Field(16, ge=1, description="LoRA alpha")
    dropout: StrictFloat = Field(0.05, ge=0, lt=1, description="LoRA dropout")
    target_modules: str = Field("all-linear", description="peft's all-linear, or comma-separated module names")
    save_embeddings: StrictBool = Field(True, description="train lm_head and embed_tokens in full")
    learning_rate: StrictFloat = Field(2e-5, gt=0, description="AdamW learning rate")
    epochs: StrictInt = Field(1, ge=1, description="passes over the training split")
    micro_batch: StrictInt = Field(4, ge=1, description="examples per forward pass")
    accumulation: StrictInt = Field(4, ge=1, description="micro-batches per optimizer step")
    seed: StrictInt = Field(0, ge=0, description="seed of the example order and the LoRA initialisation")
    checkpoint_every: StrictInt = Field(5, ge=0, description="optimizer steps between checkpoints (0: never)")
    max_steps: StrictInt = Field(None, ge=1, description="stop after this many optimizer steps (default: none)")
    weight_decay: StrictFloat = Field(0.0, ge=0, description="AdamW weight decay")
    lr_schedule: Literal[LR_SCHEDULES] = Field("linear", description="linear decay to zero, or constant")
    max_grad_norm: StrictFloat = Field(1.0, ge=0, description="gradient norm clipped per optimizer step")


class LoraSection(Section):
    """Which LoRA adapters are trained (multimodal LLM x training dataset x task), and how."""

    models: list[SafeName] | None = Field(None, description="base multimodal LLMs (default: every selected one; "
                                                            "[]: no adapters)")
    train_datasets: list[SafeName] | None = Field(None, min_length=1, description="registered datasets to train "
                                                                                 "on (default: brset and mbrset)")
    tasks: list[TaskName] | None = Field(None, min_length=1, description="tasks (default: all three)")
    settings: LoraSettingsSection | None = Field(None, description="training settings")


# ------------------------------------------------------------------------------------------- degradations


def _degradation_types_form(value: Any) -> str | None:
    """Which form `types:` is written in (None: neither, one clear error): a single name (`types: haze`) is
    refused, not read as the list it may have meant."""
    if value == "all":
        return "<all>"
    return "<list>" if isinstance(value, list) else None


DegradationTypes = Annotated[
    Union[Annotated[Literal["all"], Tag("<all>")], Annotated[list[Name], Tag("<list>")]],
    Discriminator(_degradation_types_form, custom_error_type="degradation_types_form",
                  custom_error_message="must be `all` or a list of registered degradations such as "
                                       "[defocus_blur, haze]"),
]


class DegradationsSection(Section):
    """Which graded degradations the image-quality axis applies to the test images, and at which severities;
    the names and severities are checked against the registry (focus_dagster/degradations/plan.py)."""

    types: DegradationTypes | None = Field(
        None, description="registered degradations, in the order they run, or `all` (every one but the controls "
                          "such as surround_noise, which only run when named); []: none (default: defocus_blur, "
                          "uneven_illumination)")
    severities: Annotated[list[StrictInt], Field(min_length=1)] | None = Field(
        None, description="severities from 1 (barely visible) to 5 (a grader's \"inadequate\"), each once, in the "
                          "order they run (default: 3)")


def _degradations_input(value: Any) -> Any:
    """`degradations: false` is no degradation at all (as `types: []`); any other non-mapping is refused whole."""
    if value is False:
        return {"types": []}
    if value is None or isinstance(value, Mapping):
        return value
    raise rule(f"must be a mapping such as {{types: [haze], severities: [1, 3]}}, or false for none; got {value!r}")


# --------------------------------------------------------------------------------------------- kubernetes


class Toleration(Section):
    """A toleration of a GPU node's taint, written as in a pod spec."""

    key: LabelText | None = Field(None, description="the taint's key (needed for operator Equal)")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Exists (no value) or Equal (with a value)")
    value: LabelText | None = Field(None, description="the taint's value (operator Equal)")
    effect: Literal[TAINT_EFFECTS] | None = Field(None, description="the taint's effect (none: every effect)")
    tolerationSeconds: StrictInt | None = Field(None, description="how long a NoExecute taint is tolerated")

    @model_validator(mode="after")
    def _operator_fits(self) -> Toleration:
        if self.operator == "Exists" and "value" in self.model_fields_set:
            raise rule(f"operator is Exists (no value) or Equal (with a value), got {self.operator!r} with a value")
        if self.operator == "Equal" and not self.key:
            raise rule("operator Equal needs the taint's key")
        if self.tolerationSeconds is not None and self.effect != "NoExecute":
            raise rule("tolerationSeconds is a whole number, for effect NoExecute only")
        return self


class Resources(Section):
    """What a step's container asks for and may use: Kubernetes quantities by resource name."""

    requests: dict[str, Quantity] = Field(default_factory=dict, description="what the scheduler reserves")
    limits: dict[str, Quantity] = Field(default_factory=dict, description="what the container may use")

    def document(self) -> dict[str, dict[str, str]]:
        """The parts written (or defaulted), as a pod spec reads them."""
        return {part: dict(getattr(self, part)) for part in ("requests", "limits") if part in self.model_fields_set}


class KubernetesSection(Section):
    """What each step's pod asks Kubernetes for under `executor: k8s`; each key replaces its default whole."""

    # Defaults written as data (so the JSON Schema shows them as a pod spec does) and validated like the file.
    gpu_node_selector: dict[Name, LabelText] = Field(
        DEFAULT_GPU_NODE_SELECTOR, validate_default=True, description="node labels a GPU step's node must have")
    gpu_tolerations: list[Toleration] = Field(
        list(DEFAULT_GPU_TOLERATIONS), validate_default=True,
        description="taints of the GPU nodes a GPU step tolerates")
    gpu_resources: Resources = Field(DEFAULT_GPU_RESOURCES, validate_default=True,
                                     description=f"a GPU step's container, {GPU_RESOURCE} included")
    cpu_resources: Resources = Field(DEFAULT_CPU_RESOURCES, validate_default=True,
                                     description="every other step's container (no GPU)")

    @field_validator("gpu_resources")
    @classmethod
    def _asks_for_a_gpu(cls, resources: Resources) -> Resources:
        gpus = resources.limits.get(GPU_RESOURCE)
        if gpus is None or not gpus.isdigit() or int(gpus) < 1:
            raise rule(f"limits must ask for {GPU_RESOURCE} (a whole number >= 1), got {gpus!r}; e.g. limits: "
                       f"{{{GPU_RESOURCE}: 1, cpu: 8, memory: 32Gi}}")
        if resources.requests.get(GPU_RESOURCE, gpus) != gpus:
            raise rule(f"Kubernetes needs the {GPU_RESOURCE} request to equal its limit ({gpus}); drop it from "
                       "requests or make them equal")
        return resources

    @field_validator("cpu_resources")
    @classmethod
    def _asks_for_no_gpu(cls, resources: Resources) -> Resources:
        asked = sorted({name for part in (resources.requests, resources.limits) for name in part
                        if "gpu" in name.lower()})
        if asked:
            raise rule(f"asks for {asked}; CPU steps get no GPU (GPU steps take kubernetes.gpu_resources)")
        return resources


# ---------------------------------------------------------------------------------------------- the file


class PublishedRoot(Section):
    """A published dataset's root, written as a mapping."""

    root: str = Field(description="the folder holding the publisher's files, or `synthetic`")


DatasetEntry = Union[str, PublishedRoot, DatasetDeclaration]


def _off_for_false(value: Any) -> Any:
    """YAML reads an unquoted `off` as false: `compile: off` means off."""
    return "off" if value is False else value


class FocusFile(Section):
    """focus.yaml: where the datasets are, which models run, and how runs execute (FOCUS_CONFIG names it).
    Relative paths are relative to the file."""

    model_config = ConfigDict(extra="forbid", title="focus.yaml")

    # Resolved by config._parse_datasets, which registers the declared datasets; here for the JSON Schema only.
    datasets: Annotated[dict[str, DatasetEntry] | None, SkipValidation] = Field(
        None, description="dataset key -> a published dataset's folder, `synthetic` (its embedded look-alike), "
                          "{root: ...}, or the declaration of a dataset of your own (default: the ten published "
                          "datasets, synthetic)")
    synthetic: SyntheticSection | None = Field(None, description="the embedded look-alikes")
    release: ReleaseSection | None = Field(None, description="release observation and automation")
    splits: SplitsSection | None = Field(None, description="published split files and the split seed")
    image_check: Literal[IMAGE_CHECKS] = Field(DEFAULT_IMAGE_CHECK, description="how images are checked when "
                                               "read: none, header (decode the header) or full (decode the image)")
    executor: Literal[EXECUTORS] = Field(EXECUTORS[0], description="how a run executes its steps: in its own "
                                         "process, one process per step, or one Kubernetes Job per step")
    compile: Annotated[Literal[COMPILE_MODES], BeforeValidator(_off_for_false)] = Field(
        COMPILE_MODES[0], description="how encoders run on the device: auto (blocks on CUDA, eager on a CPU), off, "
                                      "blocks or whole")
    models: Annotated[list[ModelChoice], Field(min_length=1)] | None = Field(
        None, description="the models to run: catalog ids or mappings (default: the pipeline-check models)")
    questions: QuestionsSection | None = Field(None, description="yes/no questions for multimodal LLMs")
    lora: LoraSection | None = Field(None, description="LoRA adapters of the multimodal LLMs")
    compare: list[Annotated[list[SafeName], Field(min_length=2, max_length=2)]] | None = Field(
        None, description="pairs of selected model ids [A, B] that model_comparisons compares on the same test "
                          "images (deltas A - B)")
    degradations: Annotated[DegradationsSection | None, BeforeValidator(
        _degradations_input, json_schema_input_type=DegradationsSection | Literal[False] | None)] = Field(
        None, description="the image-quality axis: degradations x severities applied to the test images, or false "
                          "for none (default: defocus_blur, uneven_illumination at severity 3)")
    kubernetes: KubernetesSection | None = Field(None, description="step pods under executor k8s")
    tables: TablesLocation | None = Field(None, description="where the tables live: a folder or an fsspec URL "
                                                            "such as s3://bucket/focus/tables (default: "
                                                            "$FOCUS_HOME/artifacts/tables)")


def focus_yaml_schema() -> dict:
    """The JSON Schema of focus.yaml (`focus config --schema`), for editors and CI checks."""
    return {"$schema": SCHEMA_DIALECT, **FocusFile.model_json_schema()}
