"""ModelHub: the selected model specs, and their loading (local weights only, never a download)."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource
from pydantic import PrivateAttr

from focus_dagster.config import COMPILE_MODES, FocusConfig


class ModelHub(ConfigurableResource):
    """The `models:` entries of focus.yaml, each a mapping with at least an `id` (none: the default models), and
    the folder where the built-in models are written on first use."""

    # Dagster's config has no "string or mapping": a bare id of focus.yaml is held as {id: ...}, which
    # resolve_models reads the same.
    entries: list[dict] | None = None
    cache_dir: str
    compile_mode: str = COMPILE_MODES[0]  # encoders on the device: auto | off | blocks | whole (inference/compiled.py)
    # The encoder the last step of this run loaded: a run that embeds clean and degraded images (or scores
    # prompts twice) loads its weights once. One at a time, encoders only, and only where they run eager: a
    # compiled encoder has its blocks swapped in place (inference/compiled.py), and LoRA training and adapted
    # scoring change the modules of the multimodal LLM they are given.
    _encoder: dict = PrivateAttr(default_factory=dict)

    @classmethod
    def from_config(cls, config: FocusConfig) -> ModelHub:
        entries = None if config.models is None else [_as_mapping(entry) for entry in config.models]
        return cls(entries=entries, cache_dir=str(config.model_cache), compile_mode=config.compile)

    def specs(self) -> dict:
        from focus_dagster.models.selection import resolve_models

        return resolve_models(self.entries, Path(self.cache_dir))

    def load(self, model_id: str, device: str, interfaces: tuple[str, ...] | None = None):
        """The model as its family loads it (an encoder, or a multimodal LLM), on `device`; `interfaces`: those
        the step can use, any other refused before its weights are read."""
        from focus_dagster.inference.compiled import EAGER, resolve_mode
        from focus_dagster.models.registry import ENCODER_INTERFACES, load_model

        spec = self.specs()[model_id]
        if interfaces != ENCODER_INTERFACES or resolve_mode(self.compile_mode, str(device)) != EAGER:
            return load_model(spec, interfaces).to(device)
        key = (model_id, str(device), repr(spec))  # a changed spec (weights, revision, preprocessing): loaded anew
        if key not in self._encoder:
            self._encoder.clear()  # the previous encoder's memory is freed before the next one loads
            self._encoder[key] = load_model(spec, interfaces).to(device)
        return self._encoder[key]


def _as_mapping(entry) -> dict:
    return {"id": entry} if isinstance(entry, str) else dict(entry)
