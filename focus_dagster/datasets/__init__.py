"""Dataset readers (one per published layout), the registry, and release fingerprints.

Importing the package loads no data library: readers load when a dataset is read.
"""

from focus_dagster.datasets.images import DEFAULT_IMAGE_CHECK
from focus_dagster.datasets.records import ReadResult
from focus_dagster.datasets.registry import DATASET_KEYS, DATASETS, dataset_info, get_reader

__all__ = ["DATASETS", "DATASET_KEYS", "ReadResult", "dataset_info", "get_reader", "read_dataset"]


def read_dataset(key: str, root, *, image_check: str = DEFAULT_IMAGE_CHECK, say=None) -> ReadResult:
    """Read dataset `key` from its published layout under `root` (the one code path for real and synthetic data);
    `say` gets the progress lines of the image checks."""
    return get_reader(key).read(root, image_check=image_check, say=say)
