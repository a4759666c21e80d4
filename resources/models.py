"""ModelHub: the selected model specs, and their loading (local weights only, never a download)."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource

from focus_dagster.config import COMPILE_MODES, FocusConfig


class ModelHub(ConfigurableResource):
    """The `models:` entries of focus.yaml, each a mapping with at least an `id` (none: the default models), and
    the folder where the built-in models are written on first use."""

    # Dagster's config has no "string or mapping": a bare id of focus.yaml is held as {id: ...}, which
    # resolve_models reads the same.
    entries: list[dict] | None = None
    cache_dir: str
    compile_mode: str = COMPILE_MODES[0]  # encoders on the device: auto | off | blocks | whole (inference/compiled.py)

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
        from focus_dagster.models.registry import load_model

        return load_model(self.specs()[model_id], interfaces).to(device)


def _as_mapping(entry) -> dict:
    return {"id": entry} if isinstance(entry, str) else dict(entry)
