"""The shape the configuration gives the graph: registered datasets and selected models become partitions."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from focus_dagster.config import FocusConfig, KubernetesSettings
from focus_dagster.adapter_plan import LoraPlan, evaluations
from focus_dagster.degradations.plan import DegradationPlan
from focus_dagster.models.registry import ENCODER_INTERFACES, MLLM_INTERFACES
from focus_dagster.questions import QuestionBook, question_book
from resources import ModelHub, layout

ENCODERS = ENCODER_INTERFACES  # interfaces with an image tower whose embeddings feed linear probes
DUAL_ENCODERS = ("vlm",)
MLLMS = MLLM_INTERFACES

# A model x dataset output reads the dataset-partitioned asset of its own dataset ...
BY_DATASET = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name=layout.DATASET)
# ... or the same model x dataset partition of a model output whose models are a superset.
SAME_MODEL_AND_DATASET = dg.MultiPartitionMapping({
    layout.DATASET: dg.DimensionPartitionMapping(layout.DATASET, dg.IdentityPartitionMapping()),
    layout.MODEL: dg.DimensionPartitionMapping(layout.MODEL, dg.IdentityPartitionMapping()),
})


@dataclass(frozen=True)
class Registered:
    """What focus.yaml registers: datasets (the dataset partitions), model specs and the yes/no questions."""

    datasets: dg.StaticPartitionsDefinition
    specs: dict
    questions: QuestionBook
    lora: LoraPlan = LoraPlan()
    kubernetes: KubernetesSettings = KubernetesSettings()  # the pods of GPU and CPU steps (assets/kubernetes.py)
    compare: tuple[tuple[str, str], ...] = ()  # the model pairs of model_comparisons (`compare:` of focus.yaml)
    degradations: DegradationPlan = DegradationPlan()  # the image-quality axis (`degradations:` of focus.yaml)

    @classmethod
    def from_config(cls, config: FocusConfig) -> Registered:
        return cls(
            datasets=dg.StaticPartitionsDefinition(config.dataset_keys),
            specs=ModelHub.from_config(config).specs(),
            questions=question_book(config.questions, str(config.source or "focus.yaml")),
            lora=config.lora,
            kubernetes=config.kubernetes,
            compare=config.compare,
            degradations=config.degradations,
        )

    @property
    def dataset_keys(self) -> list[str]:
        return self.datasets.get_partition_keys()

    def models(self, interfaces: tuple[str, ...]) -> list[str]:
        """The selected models with one of these interfaces, in the order focus.yaml gives."""
        return [model for model, spec in self.specs.items() if spec.interface in interfaces]

    def adapters(self) -> list:
        """The LoRA adapters focus.yaml asks for (`lora:`; focus_dagster/adapter_plan.py), as AdapterKeys."""
        return self.lora.adapters(self.models(MLLMS), self.dataset_keys)

    def evaluations(self) -> list:
        """Every adapter on every registered dataset that defines its task (focus_dagster/adapter_plan.py)."""
        return evaluations(self.adapters(), self.dataset_keys)

    def model_partitions(self, interfaces: tuple[str, ...]) -> dg.MultiPartitionsDefinition:
        """model x dataset over the selected models with one of these interfaces."""
        return dg.MultiPartitionsDefinition({
            layout.DATASET: self.datasets,
            layout.MODEL: dg.StaticPartitionsDefinition(self.models(interfaces)),
        })


def fan_out(pairs) -> dg.StaticPartitionMapping:
    """Each upstream partition key to every downstream key paired with it (`pairs`: (upstream, downstream))."""
    keys: dict[str, set[str]] = {}
    for upstream, downstream in pairs:
        keys.setdefault(upstream, set()).add(downstream)
    return dg.StaticPartitionMapping(keys)


def model_and_dataset(context) -> tuple[str, str]:
    """(model, dataset) of the partition a model-output step runs for."""
    return layout.model_and_dataset(context.partition_key)
