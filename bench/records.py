"""Benchmark: read and fingerprint a BRSET-sized look-alike (16,266 label rows).

Usage: .venv/bin/python bench/records.py [--rows 16266] [--out bench/out]
Writes the look-alike once (small images: reading cost is per row and per file, not per pixel) and then
prints, measured in this one run, rows/s of the reader under each image check and the fingerprint times.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from focus_dagster.datasets import read_dataset
from focus_dagster.datasets.images import IMAGE_CHECKS
from focus_dagster.datasets.release import fingerprint_dataset
from focus_dagster.synthetic import is_synthetic_root, read_manifest, synthesize

SCALE = 0.03  # 64-px-high images: enough for header and decode checks to do real work


def ensure_look_alike(out: Path, rows: int) -> tuple[Path, float]:
    root = out / "brset"
    if is_synthetic_root(root) and read_manifest(root)["label_rows"] == rows:
        return root, 0.0
    started = time.perf_counter()
    synthesize(out, ["brset"], per_dataset=rows, seed=0, scale=SCALE)
    return root, time.perf_counter() - started


def timed(fn, repeat: int = 1):
    best, value = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - started)
    return value, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16266)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args()

    root, synth_seconds = ensure_look_alike(args.out, args.rows)
    print(f"look-alike: {root} ({args.rows} label rows)" + (f", written in {synth_seconds:.1f}s" if synth_seconds else ", reused"))
    for check in IMAGE_CHECKS:
        result, seconds = timed(lambda check=check: read_dataset("brset", root, image_check=check), repeat=2 if check != "full" else 1)
        assert result.rows_read == args.rows, result.accounting_line()
        print(f"read (image_check={check:<6}) {seconds:6.2f}s  {args.rows / seconds:9.0f} rows/s")
    fp, seconds = timed(lambda: fingerprint_dataset("brset", root), repeat=2)
    print(f"fingerprint (listing)        {seconds:6.2f}s  {fp.images} images, version {fp.version}")
    fp, seconds = timed(lambda: fingerprint_dataset("brset", root, content_hash=True))
    print(f"fingerprint (content hash)   {seconds:6.2f}s  {fp.total_bytes / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
