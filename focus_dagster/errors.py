"""Errors that tell the user what is wrong, where, and what to do about it."""

from __future__ import annotations


class FocusError(Exception):
    """Base class of every error the platform raises on purpose."""


class ConfigError(FocusError):
    """The configuration (focus.yaml, environment) is unusable."""


class UnknownDatasetError(FocusError, KeyError):
    """A dataset key that is not one of the ten registered datasets."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


class DatasetLayoutError(FocusError):
    """A dataset root does not have the layout its publisher distributes (missing file, folder, column)."""


class LabelFileError(FocusError):
    """A label file exists but cannot be decoded or parsed."""


class EmptyDatasetError(FocusError):
    """A dataset has no records at all, which is never what a user wants to benchmark."""


class NotMaterialisedError(FocusError):
    """A step needs what an upstream asset partition writes, and that partition has not been materialised.

    Raised instead of the bare `FileNotFoundError` of the missing file, so that a step downstream of a
    failure names the upstream step to look at (`asset`, `partition`) and the file it did not find (`path`).
    """

    def __init__(self, asset: str | None, partition: str | None, path: str):
        self.asset, self.partition, self.path = asset, partition, path
        what = f"{asset}[{partition}]" if asset else "the asset that writes it"
        super().__init__(
            f"{what} has not been materialised (its last run failed or never ran, or a blocking check upstream "
            f"stopped it): materialise it first; file {path} is missing."
        )


def missing_columns_error(dataset: str, path: str, expected: list[str], found: list[str]) -> DatasetLayoutError:
    """The error for a label file that lacks columns its reader depends on."""
    missing = [c for c in expected if c not in found]
    return DatasetLayoutError(
        f"[{dataset}] {path} lacks required column(s) {missing}.\n"
        f"  expected (at least): {expected}\n"
        f"  found: {found}\n"
        "  Point the dataset root at the publisher's original files, or fix the header to the published spelling."
    )
