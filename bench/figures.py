"""What every benchmark script does with its figures besides printing them."""

from __future__ import annotations

import json
from pathlib import Path


def save(path: Path | None, figures: dict) -> None:
    """Write the figures as indented JSON to `path` (its folder created), when a path is given (`--json`)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2) + "\n")
