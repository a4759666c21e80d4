"""Which LoRA adapters the configuration asks for, and what each one is trained on.

An adapter is one base multimodal LLM fine-tuned on one task of one training dataset. The reference study's
grid is every multimodal LLM x {BRSET, mBRSET} x {any_dr, referable_dr, gon}; here the grid is every selected
multimodal LLM x the registered training datasets (BRSET and mBRSET by default) x the tasks that the training
dataset's label rule defines (a dataset without a glaucoma column gets no `gon` adapter, not a failing one).
`lora:` in focus.yaml chooses other models, training datasets, tasks and the training settings:

    lora:
      models: [medgemma_4b]                 # default: every selected multimodal LLM; []: no adapters
      train_datasets: [brset]               # default: brset and mbrset, where registered
      tasks: [any_dr, referable_dr]         # default: all three
      settings: {learning_rate: 2.0e-5, epochs: 1, micro_batch: 4, accumulation: 4, seed: 0}

The training examples of an adapter are the training split's images with a label for its task: the user turn
is the image and the question the yes/no scorer asks of that image (the stored, versioned questions of
`yes_no_questions`), the assistant turn is "yes" or "no" from the harmonised label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from focus_dagster.config_schema import LoraSection, validated
from focus_dagster.errors import ConfigError

DEFAULT_TRAIN_DATASETS = ("brset", "mbrset")
# The training settings focus.yaml may set (LoraSettings' fields), with the type each must have (the schema's
# LoraSettingsSection types them so; tests/test_config_schema.py keeps the two the same).
SETTING_TYPES = {
    "r": int, "alpha": int, "dropout": float, "target_modules": str, "save_embeddings": bool,
    "learning_rate": float, "epochs": int, "micro_batch": int, "accumulation": int, "seed": int,
    "checkpoint_every": int, "max_steps": int, "weight_decay": float, "lr_schedule": str, "max_grad_norm": float,
}
ANSWERS = {1: "yes", 0: "no"}


@dataclass(frozen=True)
class AdapterKey:
    """One adapter: base model x training dataset x task; its partition key is `model.dataset.task`."""

    model: str
    dataset: str
    task: str

    @property
    def key(self) -> str:
        return f"{self.model}.{self.dataset}.{self.task}"

    @classmethod
    def parse(cls, key: str) -> AdapterKey:
        from focus_dagster.labels import TASKS

        model_and_dataset, _, task = key.rpartition(".")
        model, _, dataset = model_and_dataset.rpartition(".")
        if not model or not dataset or task not in TASKS:
            raise ValueError(f"{key!r} is not an adapter key (model.dataset.task, task one of {TASKS}).")
        return cls(model, dataset, task)


@dataclass(frozen=True)
class LoraPlan:
    """What `lora:` asks for (None: the defaults above) and the training settings it overrides."""

    models: tuple[str, ...] | None = None
    train_datasets: tuple[str, ...] | None = None
    tasks: tuple[str, ...] | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def adapters(self, mllms: list[str], datasets: list[str]) -> list[AdapterKey]:
        """The adapters of this plan over the selected multimodal LLMs and the registered datasets."""
        from focus_dagster.labels import TASKS
        from focus_dagster.labels.rule_lookup import rule_for

        models = [m for m in mllms if self.models is None or m in self.models]
        training = [d for d in (self.train_datasets or DEFAULT_TRAIN_DATASETS) if d in datasets]
        tasks = [t for t in TASKS if self.tasks is None or t in self.tasks]
        return [AdapterKey(model, dataset, task) for model in models for dataset in training for task in tasks
                if task in rule_for(dataset).tasks]

    def to_document(self) -> dict:
        document = {"settings": dict(self.settings)}
        for name in ("models", "train_datasets", "tasks"):
            if getattr(self, name) is not None:
                document[name] = list(getattr(self, name))
        return document


def lora_plan(raw: Any, where: str, datasets: list[str]) -> LoraPlan:
    """The `lora:` block validated: known keys, known tasks and typed settings (its schema, LoraSection), and
    training datasets that are registered."""
    if raw is None:
        return LoraPlan()
    section = validated(LoraSection, raw, where, "lora")
    missing = [d for d in section.train_datasets or () if d not in datasets]
    if missing:
        raise ConfigError(f"{where}: lora.train_datasets {missing} are not registered under `datasets` "
                          f"(registered: {', '.join(datasets)}).")
    return LoraPlan(models=_names(section.models), train_datasets=_names(section.train_datasets),
                    tasks=_names(section.tasks),
                    settings=section.settings.model_dump(exclude_unset=True) if section.settings else {})


def _names(value: list[str] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


@dataclass(frozen=True)
class TrainingSet:
    """An adapter's training rows: (image_id, image path, question, answer) and the class counts."""

    rows: list[tuple[str, Path, str, str]]
    positives: int
    negatives: int

    @property
    def one_class_reason(self) -> str | None:
        """Why no adapter can be trained (a single class: there is nothing to tell apart), or None."""
        if self.positives and self.negatives:
            return None
        return (f"the training split has {self.positives} positive and {self.negatives} negative images for this "
                "task: a yes/no adapter needs both answers")


def training_set(labels, asked, task: str, root: Path) -> TrainingSet:
    """The training split's labelled images for `task`, with the question each is asked (`asked`: the rendered
    questions of `yes_no_questions`) and the answer from the harmonised label, in image_id order."""
    train = labels.loc[(labels["split"] == "train") & labels[task].notna(), ["image_id", "image_path", task]]
    questions = asked.loc[asked["task"] == task].set_index("image_id")["question"]
    missing = sorted(set(train["image_id"]) - set(questions.index))
    if missing:
        raise ValueError(f"{len(missing)} training image(s) have no {task} question (e.g. {missing[:3]}): "
                         "materialise yes_no_questions for this dataset first.")
    train = train.sort_values("image_id")
    answers = train[task].astype(int)
    rows = [(image_id, root / path, questions[image_id], ANSWERS[label])
            for image_id, path, label in zip(train["image_id"], train["image_path"], answers)]
    return TrainingSet(rows, positives=int(answers.sum()), negatives=int((answers == 0).sum()))


@dataclass(frozen=True)
class Evaluation:
    """One adapter scored on one dataset that defines its task (partition key `adapter@dataset`): in-domain
    when the dataset is the adapter's training dataset, out-of-domain otherwise."""

    adapter: AdapterKey
    dataset: str

    @property
    def key(self) -> str:
        return f"{self.adapter.key}@{self.dataset}"

    @property
    def in_domain(self) -> bool:
        return self.dataset == self.adapter.dataset

    @classmethod
    def parse(cls, key: str) -> Evaluation:
        adapter, at, dataset = key.rpartition("@")
        if not at or not dataset:
            raise ValueError(f"{key!r} is not an adapter evaluation key (model.dataset.task@dataset).")
        return cls(AdapterKey.parse(adapter), dataset)


def evaluations(adapters: list[AdapterKey], datasets: list[str]) -> list[Evaluation]:
    """Every adapter on every registered dataset whose label rule defines the adapter's task (its own first)."""
    from focus_dagster.labels.rule_lookup import rule_for

    out = []
    for adapter in adapters:
        targets = [adapter.dataset] + [d for d in datasets if d != adapter.dataset]
        out += [Evaluation(adapter, d) for d in targets if d in datasets and adapter.task in rule_for(d).tasks]
    return out
