"""DatasetRoots: where each registered dataset is read from, and the embedded synthetic default."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource

from focus_dagster.config import FocusConfig, ensure_dataset_root, parse_config
from focus_dagster.datasets import ReadResult, read_dataset
from focus_dagster.datasets.release import ReleaseFingerprint, fingerprint_dataset


class DatasetRoots(ConfigurableResource):
    """The resolved focus.yaml (every path absolute) and FOCUS_HOME: which datasets are registered,
    where each is read from (a real root, or the synthetic look-alike written under FOCUS_HOME on first use),
    how images are checked and how splits are made."""

    home: str
    document: dict  # the focus.yaml document `parse_config` reads back (FocusConfig.to_document)

    @classmethod
    def from_config(cls, config: FocusConfig) -> DatasetRoots:
        return cls(home=str(config.home), document=config.to_document())

    @property
    def config(self) -> FocusConfig:
        # Parsed on every use (a tenth of a millisecond), which also declares this configuration's datasets again in
        # case another configuration was parsed since (tests build several in one process).
        return parse_config(self.document, Path(self.home))

    def root(self, key: str) -> Path:
        """The dataset's root, writing the synthetic look-alike first where that is the source."""
        return ensure_dataset_root(self.config, key)

    def is_synthetic(self, key: str) -> bool:
        return self.config.is_synthetic(key)

    def fingerprint(self, key: str) -> ReleaseFingerprint:
        return fingerprint_dataset(key, self.root(key), content_hash=self.config.content_hash)

    def read(self, key: str, say=None) -> ReadResult:
        """The dataset's records; `say` gets the progress lines of the image checks."""
        return read_dataset(key, self.root(key), image_check=self.config.image_check, say=say)

