"""DatasetRoots: where each registered dataset is read from, and the embedded synthetic default."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource

from focus_dagster.config import FocusConfig, SyntheticSettings, ensure_dataset_root
from focus_dagster.datasets import ReadResult, read_dataset
from focus_dagster.datasets.release import ReleaseFingerprint, fingerprint_dataset


class DatasetRoots(ConfigurableResource):
    """Dataset key -> root folder (empty string = the synthetic look-alike under `home`)."""

    home: str
    roots: dict[str, str]
    synthetic_per_dataset: int = 120
    synthetic_seed: int = 0
    synthetic_scale: float = 0.125
    image_check: str = "header"
    content_hash: bool = False
    splits_dir: str = ""
    split_seed: int = 0

    @classmethod
    def from_config(cls, config: FocusConfig) -> DatasetRoots:
        return cls(
            home=str(config.home),
            roots={key: str(root) if root is not None else "" for key, root in config.roots.items()},
            synthetic_per_dataset=config.synthetic.per_dataset,
            synthetic_seed=config.synthetic.seed,
            synthetic_scale=config.synthetic.scale,
            image_check=config.image_check,
            content_hash=config.content_hash,
            splits_dir=str(config.splits_dir or ""),
            split_seed=config.split_seed,
        )

    def focus_config(self) -> FocusConfig:
        return FocusConfig(
            home=Path(self.home),
            roots={key: Path(root) if root else None for key, root in self.roots.items()},
            synthetic=SyntheticSettings(self.synthetic_per_dataset, self.synthetic_seed, self.synthetic_scale),
            image_check=self.image_check,
            content_hash=self.content_hash,
            splits_dir=Path(self.splits_dir) if self.splits_dir else None,
            split_seed=self.split_seed,
        )

    def root(self, key: str) -> Path:
        """The dataset's root, writing the synthetic look-alike first where that is the source."""
        return ensure_dataset_root(self.focus_config(), key)

    def is_synthetic(self, key: str) -> bool:
        return not self.roots.get(key)

    def fingerprint(self, key: str) -> ReleaseFingerprint:
        return fingerprint_dataset(key, self.root(key), content_hash=self.content_hash)

    def splits_folder(self) -> Path | None:
        return Path(self.splits_dir) if self.splits_dir else None

    def read(self, key: str) -> ReadResult:
        return read_dataset(key, self.root(key), image_check=self.image_check)
