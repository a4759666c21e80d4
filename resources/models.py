"""ModelHub: the selected model specs, and their loading (local weights only, never a download)."""

from __future__ import annotations

import json
from pathlib import Path

from dagster import ConfigurableResource

from focus_dagster.config import COMPILE_MODES, FocusConfig


class ModelHub(ConfigurableResource):
    """Model entries of focus.yaml (JSON; empty = the default models) and the cache of built-in models."""

    entries_json: str = ""
    cache_dir: str
    compile_mode: str = COMPILE_MODES[0]  # encoders on the device: auto | off | blocks | whole (inference/compiled.py)

    @classmethod
    def from_config(cls, config: FocusConfig) -> ModelHub:
        return cls(entries_json=json.dumps(list(config.models)) if config.models else "",
                   cache_dir=str(config.model_cache), compile_mode=config.compile)

    def specs(self) -> dict:
        from focus_dagster.models.selection import resolve_models

        entries = json.loads(self.entries_json) if self.entries_json else None
        return resolve_models(entries, Path(self.cache_dir))

    def load(self, model_id: str, device: str):
        from focus_dagster.models.registry import load_encoder

        return load_encoder(self.specs()[model_id]).to(device)

    def load_mllm(self, model_id: str, device: str):
        from focus_dagster.models.loaders.mllm import load_mllm

        return load_mllm(self.specs()[model_id]).to(device)
