"""The platform built on small look-alikes for an in-process test: its configuration, its Dagster definitions
and an instance to run them on.

Each look-alike is copied into the test's own folder first: tests damage their data (delete images, rewrite
label files), and the session's look-alikes are shared by every test.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Mapping, NamedTuple

import dagster as dg

from focus_dagster.config import FocusConfig
from tests.support.environment import copy_tree


class World(NamedTuple):
    """Unpacks as `config, defs, instance`."""

    config: FocusConfig
    defs: dg.Definitions
    instance: dg.DagsterInstance


def build_world(synth_all, tmp: Path, datasets=("brset",), roots: Mapping[str, Path | None] | None = None,
                persistent: bool = False, **fields) -> World:
    """Private copies of the look-alikes of `datasets` (under `tmp`, named by dataset) as the roots, with
    `roots` added as given (a root the test built, or None for the embedded default), and any other FocusConfig
    field (models, lora, questions, ...). `persistent`: see `world_for`."""
    out, _ = synth_all
    copied = {dataset: copy_tree(out / dataset, tmp / dataset) for dataset in datasets}
    config = FocusConfig(home=tmp / "home", roots={**copied, **(roots or {})}, **fields)
    return world_for(config, persistent=persistent)


def world_for(config: FocusConfig, persistent: bool = False) -> World:
    """The definitions of `config` and an instance: ephemeral, or with `persistent` one kept in the config's
    DAGSTER_HOME with the repository's dagster.yaml, as `focus demo` uses (what `focus trace` reads back). A
    persistent instance is the caller's to dispose of."""
    from focus_dagster.definitions import build_definitions

    return World(config, build_definitions(config), _persistent_instance(config) if persistent
                 else dg.DagsterInstance.ephemeral())


def _persistent_instance(config: FocusConfig) -> dg.DagsterInstance:
    from focus_dagster.platform.instance import REPO_ROOT

    config.dagster_home.mkdir(parents=True)
    shutil.copyfile(REPO_ROOT / "dagster.yaml", config.dagster_home / "dagster.yaml")
    return dg.DagsterInstance.from_config(str(config.dagster_home))
