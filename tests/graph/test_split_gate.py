"""A dataset whose split leaves no test image stops at `split_has_test`, in the run and under automation.

A published split file that puts every PAPILA image in train (the reference IDRiD file did much the same:
310 train, 0 test) used to give a dataset with embeddings and probes but no metrics at all, silently. The
blocking check fails instead, and nothing below the labels is computed from them.
"""

from __future__ import annotations

import dagster as dg

from assets.datasets import OBSERVE_JOB
from assets.labels import DATA_LAYER_JOB
from tests.support.automation_driver import drive
from tests.support.events import check_verdict, materialised
from tests.support.world import build_world

DATA_LAYER = {"dataset_records", "harmonised_labels", "label_rejects"}


def all_train_split_file(root, splits_dir) -> None:
    """labels_splits_papila.csv in the reference benchmark's format, naming every PAPILA image, all in train."""
    images = sorted((root / "FundusImages").glob("*.jpg"))
    lines = ["image_path,split"] + [f"/mnt/data/PAPILA/FundusImages/{image.name},train" for image in images]
    splits_dir.mkdir()
    (splits_dir / "labels_splits_papila.csv").write_text("\n".join(lines) + "\n")


def test_a_split_without_test_images_blocks_everything_below_the_labels(synth_all, tmp_path):
    config, defs, instance = build_world(synth_all, tmp_path, ("papila",), models=("tiny_vit",),
                                         splits_dir=tmp_path / "splits")
    all_train_split_file(config.root_of("papila"), config.splits_dir)

    # Within a run: the data-layer job stops at the failed check.
    run = defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="papila", instance=instance,
                                                                   raise_on_error=False)
    verdict = check_verdict(run, "split_has_test")
    assert not verdict.passed and verdict.severity == dg.AssetCheckSeverity.ERROR
    assert verdict.metadata["info"].value["images_per_split"]["test"] == 0
    assert {asset for asset, _ in materialised(run)} <= DATA_LAYER

    # Across automation ticks: nothing below the labels is requested, until the split changes.
    assert defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success
    refresh = drive(defs, instance)
    below = {asset for asset, _ in materialised(refresh.results)} - DATA_LAYER
    assert below == set(), below
    assert not {"image_embeddings", "group_attributes", "predictions", "metrics"} & {
        asset.split(":")[0] for asset in refresh.requested()}
