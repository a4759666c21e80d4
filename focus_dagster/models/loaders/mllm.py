"""Multimodal LLMs in hub format: `AutoProcessor` + `AutoModelForImageTextToText`, offline, audited.

Families differ in what their processor returns and the model needs (Gemma-3 / MedGemma: token type ids
marking image tokens; Qwen3-VL: dynamic-resolution patches with an image grid; LLaVA-NeXT: image sizes for
its tiling); all of it travels from the processor to the model as is. What the platform fixes is the
rest: left padding (so the first generated position is the last column of every row), the chat template
with one user turn (image + question) and the assistant turn opened, bf16 on a GPU and float32 on a CPU,
and the yes/no answer tokens resolved once per tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from focus_dagster.models.answer_tokens import AnswerTokens, resolve_answer_tokens
from focus_dagster.models.audit import LoadReport
from focus_dagster.models.loaders.hub_family import (
    load_pretrained,
    read_model_type,
    resolve_folder,
)
from focus_dagster.models.spec import ModelSpec, WeightsNotFoundError

# model_type (config.json) -> the family name shown in metadata.
MLLM_MODEL_TYPES = {
    "gemma3": "Gemma-3 / MedGemma",
    "qwen3_vl": "Qwen3-VL",
    "llava_next": "LLaVA-NeXT",
    "llava": "LLaVA",
}


@dataclass
class LoadedMLLM:
    """A multimodal LLM ready for yes/no scoring: model, processor, checkpoint audit and answer tokens.

    Scoring itself lives in focus_dagster.inference.yes_no (`yes_no_scorer(mllm, questions, ...)`).
    """

    spec: ModelSpec
    model: object
    processor: object
    report: LoadReport
    model_type: str
    tokens: AnswerTokens

    @property
    def family_name(self) -> str:
        return MLLM_MODEL_TYPES[self.model_type]

    def to(self, device: str) -> LoadedMLLM:
        """On a GPU in the spec's dtype (bf16 by default); on a CPU in float32 (bf16 matmuls there are slow)."""
        import torch

        dtype = getattr(torch, self.spec.dtype) if str(device).startswith("cuda") else torch.float32
        self.model.to(device=device, dtype=dtype).eval()
        return self


def load_hf_mllm(spec: ModelSpec) -> LoadedMLLM:
    """Load a hub-format image-text-to-text model and its processor from local files only."""
    from transformers import AutoModelForImageTextToText

    folder = resolve_folder(spec)
    model_type = read_model_type(folder, spec, tuple(MLLM_MODEL_TYPES))
    processor = _processor(spec, folder)
    model, report = load_pretrained(AutoModelForImageTextToText, spec, folder)
    return _ready(spec, model, processor, report, model_type)


def load_tiny_llava(spec: ModelSpec) -> LoadedMLLM:
    """The pipeline-check MLLM: a seeded tiny LLaVA written into `spec.path` on first use, then loaded like
    any hub checkpoint (processor, chat template, tokenizer and all)."""
    from focus_dagster.models.tiny_mllm import build_tiny_mllm

    folder = Path(spec.path).expanduser()
    if not (folder / "config.json").is_file() or not any(folder.glob("*.safetensors")):
        build_tiny_mllm(folder, "llava", seed=int(spec.options.get("seed", 0)))
    loaded = load_hf_mllm(replace(spec, family="hf_mllm", trust_remote_code=False))
    loaded.spec = spec
    return loaded


def _processor(spec: ModelSpec, folder: Path):
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(
            str(folder), local_files_only=True, trust_remote_code=bool(spec.trust_remote_code)
        )
    except (OSError, ValueError) as exc:
        raise WeightsNotFoundError(
            f"model {spec.id!r}: no usable processor in {folder} ({exc}). Copy the model's processor and tokenizer "
            "files (processor_config.json / preprocessor_config.json, tokenizer files, chat_template) into it."
        ) from exc
    if getattr(processor, "chat_template", None) is None and getattr(processor.tokenizer, "chat_template", None) is None:
        raise WeightsNotFoundError(
            f"model {spec.id!r}: {folder} has no chat template (chat_template.jinja or chat_template.json); the "
            "question must be asked in the model's own turn format. Copy the instruct model's template into it."
        )
    return processor


def _ready(spec: ModelSpec, model, processor, report: LoadReport, model_type: str) -> LoadedMLLM:
    tokens = resolve_answer_tokens(processor.tokenizer, spec.id)
    return LoadedMLLM(spec=spec, model=model, processor=processor, report=report, model_type=model_type, tokens=tokens)

