"""Dataset readers (one per published layout), the registry, and release fingerprints."""

from focus_dagster.datasets.base import ReadResult
from focus_dagster.datasets.registry import DATASET_KEYS, DATASETS, get_reader

__all__ = ["DATASETS", "DATASET_KEYS", "ReadResult", "get_reader", "read_dataset"]


def read_dataset(key: str, root, *, image_check: str = "header") -> ReadResult:
    """Read dataset `key` from its published layout under `root` (the one code path for real and synthetic data)."""
    return get_reader(key).read(root, image_check=image_check)
