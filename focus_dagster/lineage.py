"""Lineage that travels with the data: every step writes, beside what it computed, a stamp of exactly what it read.

A stamp is plain JSON:

    {"asset": "probe_predictions", "partition": "tiny_vit|brset", "run_id": "...", "version": "...",
     "code_version": "...", "facts": {...}, "inputs": {"embeddings": {<stamp>}, "labels": {<stamp>}}}

`version` is a content hash of what the step wrote (the same content gives the same version, whichever run
wrote it); `facts` are what the step knew of its sources that is not itself a stamped input (the release
fingerprint the records were read from, the model id, revision, snapshot, weights hash and file signature,
the label rule); `inputs` nests the stamp *read from* each input, so the whole chain behind an artifact is
in the artifact. A Parquet artifact carries its stamp in the file's key-value metadata (written in the same
atomic rename as the data); a table partition has it in `lineage.stamps`, written in the commit that writes the
rows (resources/tables.py), whose one atomic step makes rows and stamp visible together.
Nothing here asks the Dagster instance what is "latest": a stamp says what was read, when it was read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

PARQUET_KEY = b"focus.lineage"
_SNAPSHOT = re.compile(r"/snapshots/([0-9a-f]{40})(/|$)")


def stamp(asset: str, partition: str | None, run_id: str, version: str, *, code_version: str,
          inputs: dict[str, dict | None] | None = None, **facts) -> dict:
    """The stamp of one step's output (inputs whose stamp is unknown are kept as None: lineage not recorded)."""
    return {"asset": asset, "partition": partition, "run_id": run_id, "version": version,
            "code_version": code_version, "facts": facts, "inputs": dict(inputs or {})}


def stamp_id(value: dict) -> str:
    """A content id of a stamp (the same chain read by the same run gives the same id)."""
    return hashlib.sha256(dumps(value).encode()).hexdigest()[:20]


def data_version(value: dict | None) -> str | None:
    """What a step's output is, as the refresh compares it: the content version of what it wrote and, in turn,
    the data versions of the inputs it read, never the run or the code that wrote it. The same content computed
    from the same inputs has the same data version whichever run wrote it, so materialising unchanged data again
    is no change downstream; a changed record, label, model weight, preprocessing or question changes the content
    of the output it reaches, and so the data version of that output and of everything computed from it. None
    when the stamp is unknown."""
    if value is None:
        return None
    inputs = {name: data_version(read) for name, read in (value.get("inputs") or {}).items()}
    return hashlib.sha256(dumps({"version": value.get("version"), "inputs": inputs}).encode()).hexdigest()[:20]


def dumps(value: dict | None) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def loads(text: str | bytes | None) -> dict | None:
    return json.loads(text) if text else None


def frame_version(frame, columns: list[str] | None = None) -> str:
    """A content hash of a table: its column names, row order and values (array cells by their bytes)."""
    import numpy as np
    import pandas as pd

    part = frame[columns] if columns is not None else frame
    digest = hashlib.sha256(",".join(map(str, part.columns)).encode())
    for name in part.columns:
        column = part[name]
        if len(column) and isinstance(column.iloc[0], np.ndarray):
            digest.update(np.ascontiguousarray(np.stack(column.to_numpy())).tobytes())
        else:
            digest.update(pd.util.hash_pandas_object(column.astype(str), index=False).to_numpy().tobytes())
    return digest.hexdigest()[:20]


def fact(value: dict | None, *path: str):
    """A nested value of a stamp (`fact(s, "inputs", "labels", "version")`), None where the path breaks."""
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def find(value: dict | None, asset: str) -> dict | None:
    """The first stamp of `asset` in a chain (depth first), or None."""
    if not isinstance(value, dict):
        return None
    if value.get("asset") == asset:
        return value
    for child in (value.get("inputs") or {}).values():
        found = find(child, asset)
        if found is not None:
            return found
    return None


# ---------------------------------------------------------------------------------------------- models


def model_facts(spec, report) -> dict:
    """Which weights a model step ran: id, hub id, revision, the snapshot commit when the weights sit in a hub
    cache snapshot, the weights hash, and a cheap signature (bytes, mtime) that `focus trace` compares with the
    file on disk now."""
    path = Path(report.checkpoint)
    return {
        "id": spec.id,
        "source": spec.source,
        "revision": spec.revision,
        "snapshot": snapshot_of(path),
        "weights_sha256": report.weights_sha256,
        "weights_path": str(path),
        **file_signature(path),
        "audit_clean": bool(report.clean),
    }


def snapshot_of(path: Path) -> str | None:
    """The commit of a hub cache snapshot folder the path lies in (`.../snapshots/<40 hex>/...`), else None."""
    found = _SNAPSHOT.search(Path(path).resolve().as_posix() + "/") or _SNAPSHOT.search(Path(path).as_posix() + "/")
    return found.group(1) if found else None


def file_signature(path: Path) -> dict:
    """Total bytes and newest modification time (ns) of a file or of every file under a folder."""
    path = Path(path)
    if not path.exists():
        return {"weights_bytes": None, "weights_mtime_ns": None}
    files = [path] if path.is_file() else [p for p in sorted(path.rglob("*")) if p.is_file()]
    stats = [os.stat(p) for p in files]
    return {"weights_bytes": sum(s.st_size for s in stats),
            "weights_mtime_ns": max((s.st_mtime_ns for s in stats), default=0)}
