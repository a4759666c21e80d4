"""The Great Expectations 1.x adapter: validate a pandas frame against expectations, get plain verdicts back.

This is the only module that touches great_expectations, and it imports the library inside its functions, on
first use, so that loading the code location stays quick. One in-memory context per process serves every
validation: nothing is written to disk, nothing is fetched, no progress bars are drawn. What comes back is a
`Verdict` per expectation, in plain JSON types, so callers never handle GX result objects.
"""

from __future__ import annotations

import gc
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

__all__ = ["MAX_EXAMPLES", "Verdict", "context", "expect", "jsonable", "validate"]

# How many offending values and rows a verdict keeps: enough to act on, small enough for asset metadata.
MAX_EXAMPLES = 10
# Ties each GX result back to the expectation that produced it: suite validation reorders by column.
_ORDER_KEY = "focus_order"

_GX_LOCK = threading.Lock()
_IMPORT_LOCK = threading.Lock()  # the first import of GX, which pauses and freezes the collector
_GX_STATE: dict[str, Any] = {}


@dataclass
class Verdict:
    """One expectation's result: the public summary entry and the offending rows GX sampled.

    `entry` holds the expectation's class name, its column(s), success, unexpected_count, the sampled
    unexpected values (`partial_unexpected_list`) and, when GX could not evaluate it, `error`. `rows` holds
    up to MAX_EXAMPLES offending rows as {column: value} for the `key` columns given to `validate` and the
    expectation's own column(s); it stays empty when no key was given.
    """

    entry: dict
    rows: list[dict]

    @property
    def success(self) -> bool:
        return self.entry["success"]

    @property
    def unexpected_count(self) -> int:
        return self.entry["unexpected_count"]


def expect():
    """The namespace of GX expectation classes (ExpectColumnValuesToBeInSet, ...), importing GX if needed."""
    return _great_expectations().expectations


def context():
    """The process-wide in-memory GX context and its pandas data source, built once.

    The stock ephemeral context creates a temporary data-docs folder; configuring the stores in memory and
    no docs sites keeps everything off disk. Progress bars are off (they would flood the run logs) and so
    are usage statistics (through the config and GX_ANALYTICS_ENABLED, for releases that read it).
    """
    with _GX_LOCK:
        if "context" not in _GX_STATE:
            os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
            built = _great_expectations().get_context(project_config=_quiet_config(), mode="ephemeral")
            _GX_STATE["context"] = built
            _GX_STATE["source"] = built.data_sources.add_pandas("focus_labels")
            _GX_STATE["batch_definitions"] = {}
        return _GX_STATE["context"]


def validate(kind: str, frame: pd.DataFrame, expectations: list, key: Sequence[str] = ()) -> list[Verdict]:
    """Run the expectations on `frame` as one suite and return their verdicts in the order given.

    `kind` names the sort of frame (one GX data asset and suite per kind, re-used across calls); `key`
    names the columns that identify an offending row in the sampled results. One suite is about twice as
    fast as the same expectations one by one (the metrics share one pass).
    """
    for order, expectation in enumerate(expectations):
        expectation.meta = {_ORDER_KEY: order}
    suite = _great_expectations().ExpectationSuite(name=f"focus_{kind}", expectations=expectations)
    batch = _batch_definition(kind).get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(suite, result_format=_result_format(key))
    by_order = {r.expectation_config.meta[_ORDER_KEY]: r for r in result.results}
    return [_verdict(by_order[order], type(expectation).__name__) for order, expectation in enumerate(expectations)]


def jsonable(value):
    """The same structure in plain JSON types: numpy scalars unwrapped, NaN and NA as None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if hasattr(value, "item"):  # numpy scalar
        return jsonable(value.item())
    if pd.isna(value):
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


# ------------------------------------------------------------------------------------------------ context


def _great_expectations():
    """The great_expectations module, imported on first use so that importing this module stays fast.

    The first import runs with the garbage collector paused and then freezes (`gc.freeze`) what is loaded by
    then: Dagster, the code location and GX with scipy, altair and pydantic, some 400,000 objects that live as
    long as the process. Collected as usual, the import alone triggers three full collections (about 1 s of
    its 3 to 4 s), every later full collection traverses those objects again, and the interpreter's exit
    tears them down one by one (1.5 to 2 s at the end of each launched run; bench/data_layer.py). Frozen, the
    collector skips them and the exit leaves them to the operating system. The import makes about 2,000
    objects of cyclic garbage, which stay frozen with the rest; everything made later is collected as before.
    """
    if not _GX_STATE.get("imported"):
        with _IMPORT_LOCK:
            if not _GX_STATE.get("imported"):
                collecting = gc.isenabled()
                gc.disable()
                try:
                    import great_expectations  # noqa: F401
                finally:
                    gc.freeze()
                    if collecting:
                        gc.enable()
                _GX_STATE["imported"] = True
    import great_expectations

    return great_expectations


def _quiet_config():
    """A context configuration with in-memory stores, no docs sites, no progress bars, no analytics."""
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    return DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )


def _batch_definition(kind: str):
    """The whole-dataframe batch definition for one kind of frame, created on first use and re-used."""
    context()
    with _GX_LOCK:
        definitions = _GX_STATE["batch_definitions"]
        if kind not in definitions:
            asset = _GX_STATE["source"].add_dataframe_asset(kind)
            definitions[kind] = asset.add_batch_definition_whole_dataframe("whole")
        return definitions[kind]


# ------------------------------------------------------------------------------------------------ results


def _result_format(key: Sequence[str]) -> dict:
    result_format = {
        "result_format": "SUMMARY",  # counts plus a sample; COMPLETE would list every offending row
        "partial_unexpected_count": MAX_EXAMPLES,
        "return_unexpected_index_query": False,
    }
    if key:
        result_format["unexpected_index_column_names"] = list(key)
    return result_format


def _verdict(result, expectation_name: str) -> Verdict:
    config = result.expectation_config
    details = result.result or {}
    entry = {
        "expectation": expectation_name,
        "column(s)": _columns_of(config.kwargs),
        "success": bool(result.success),
        "unexpected_count": _unexpected_count(details),
        "partial_unexpected_list": jsonable(_partial_unexpected(details)[:MAX_EXAMPLES]),
    }
    error = _error_message(result.exception_info)
    if error:
        # An expectation that could not be evaluated must not pass.
        entry.update(success=False, error=error)
    rows = details.get("partial_unexpected_index_list") or []
    return Verdict(entry=entry, rows=[jsonable(r) for r in rows[:MAX_EXAMPLES] if isinstance(r, dict)])


def _columns_of(kwargs: dict):
    if "column" in kwargs:
        return kwargs["column"]
    if "column_A" in kwargs:
        return [kwargs["column_A"], kwargs["column_B"]]
    return list(kwargs.get("column_list") or kwargs.get("column_set") or [])


def _unexpected_count(details: dict) -> int:
    if "unexpected_count" in details:
        return int(details["unexpected_count"] or 0)
    # Table-level expectations report mismatched columns instead of rows.
    return len(details.get("details", {}).get("mismatched", {}).get("missing", []))


def _partial_unexpected(details: dict) -> list:
    if "partial_unexpected_list" in details:
        return list(details["partial_unexpected_list"])
    return sorted(details.get("details", {}).get("mismatched", {}).get("missing", []))


def _error_message(exception_info) -> str | None:
    """GX reports exceptions either flat or keyed by metric; return the first message, if any."""
    if not exception_info:
        return None
    infos = [exception_info] if "raised_exception" in exception_info else list(exception_info.values())
    for info in infos:
        if isinstance(info, dict) and info.get("raised_exception", True) and info.get("exception_message"):
            return str(info["exception_message"])
    return None
