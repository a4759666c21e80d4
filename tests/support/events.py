"""What an in-process run recorded (Dagster's ExecuteInProcessResult), read as plain values: the metadata of
its materialisations, the assets it materialised and the verdicts of its asset checks.

Every reader takes one run or a list of runs (as the automation driver's ticks leave them). A reader that
expects exactly one thing fails with what the runs did record, so that a wrong count reads as what happened
rather than as an unpacking error.
"""

from __future__ import annotations

import dagster as dg
from dagster import AssetCheckEvaluation, AssetMaterialization


def materialisation_metadata(results, asset: str | None = None, partition: str | None = None) -> dict:
    """The metadata of the one materialisation of `asset` (any asset when None) on `partition` (any partition
    when None), each value as a plain Python value."""
    found = _materialisations(results, asset, partition)
    if len(found) != 1:
        raise AssertionError(f"expected one materialisation{_of(asset, partition)}, found {len(found)}: "
                             f"{sorted(_named(m) for m in found)}")
    return _plain(found[0].metadata)


def metadata_by_partition(results, asset: str) -> dict[str | None, dict]:
    """The metadata of each partition's materialisation of `asset`, by partition: one per partition expected."""
    found: dict[str | None, dict] = {}
    for materialization in _materialisations(results, asset, None):
        if materialization.partition in found:
            raise AssertionError(f"{_named(materialization)} materialised twice")
        found[materialization.partition] = _plain(materialization.metadata)
    return found


def materialised(results) -> set[tuple[str, str]]:
    """(asset, partition) of every materialisation, the partition as a string ('None' when unpartitioned)."""
    return {(m.asset_key.to_user_string(), str(m.partition)) for m in _materialisations(results, None, None)}


def check_evaluations(results) -> list[AssetCheckEvaluation]:
    """Every check evaluation, in the order the runs recorded them."""
    return [evaluation for result in _runs(results) for evaluation in result.get_asset_check_evaluations()]


def check_verdict(results, name: str, partition: str | None = None) -> AssetCheckEvaluation:
    """The one evaluation of the check called `name` (on `partition`, any when None): .passed, .severity,
    .metadata, .description."""
    found = [e for e in check_evaluations(results)
             if e.check_name == name and (partition is None or e.partition == partition)]
    if len(found) != 1:
        every = sorted(f"{e.asset_key.to_user_string()}:{e.check_name}[{e.partition}]"
                       for e in check_evaluations(results))
        raise AssertionError(f"expected one evaluation of {name}{_on(partition)}, found {len(found)} "
                             f"among {every}")
    return found[0]


def check_verdicts(results) -> dict[tuple[str, str, str | None], bool]:
    """(asset, check, partition) -> passed, for every check evaluated (partition None when the run had none)."""
    return {(e.asset_key.to_user_string(), e.check_name, e.partition): e.passed for e in check_evaluations(results)}


def _runs(results) -> list:
    return [results] if hasattr(results, "all_events") else list(results)


def _materialisations(results, asset: str | None, partition: str | None) -> list[AssetMaterialization]:
    wanted = dg.AssetKey.from_user_string(asset) if asset else None
    every = [event.event_specific_data.materialization
             for result in _runs(results) for event in result.get_asset_materialization_events()]
    return [m for m in every
            if (wanted is None or m.asset_key == wanted) and (partition is None or m.partition == partition)]


def _plain(metadata) -> dict:
    return {key: value.value for key, value in metadata.items()}


def _named(materialization: AssetMaterialization) -> str:
    return f"{materialization.asset_key.to_user_string()}[{materialization.partition}]"


def _of(asset: str | None, partition: str | None) -> str:
    return (f" of {asset}" if asset else "") + _on(partition)


def _on(partition: str | None) -> str:
    return f" on {partition}" if partition is not None else ""
