"""Attribute coverage judged per attribute: the verdict, the rows it withholds, and the gate that blocks.

Shares are counted here with pandas from the labels, not taken from the code's verdict; the rows of a
withheld attribute are compared with the rows the same predictions give when nothing is withheld.
"""

from __future__ import annotations

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from focus_dagster.labels.coverage import (
    ATTRIBUTES,
    COVERAGE_FLOOR,
    axis_notes,
    check_attribute_coverage,
)

FLOOR = "(floor 90%)"


def labels(n_test: int, missing: dict[str, int], n_train: int = 10) -> pd.DataFrame:
    """Test and train rows with every attribute set, then the first `missing[attribute]` test rows without it (and
    as many train rows, which must not count)."""
    n = n_test + n_train
    frame = pd.DataFrame({"image_id": [f"i{k}" for k in range(n)], "split": ["test"] * n_test + ["train"] * n_train,
                          "age": np.linspace(20, 80, n), "sex": [("F", "M")[k % 2] for k in range(n)],
                          "quality": "adequate", "camera": "Canon CR"}).astype({"sex": object})
    for attribute, count in missing.items():
        frame.loc[frame.index[:count], attribute] = None
        frame.loc[frame.index[n_test:n_test + count], attribute] = None
    return frame


def test_each_attribute_is_judged_on_its_own():
    table = labels(58, {"age": 10})
    test = table[table["split"] == "test"]
    share = test["age"].notna().sum() / len(test)  # 48 of 58 test images
    assert f"{share:.1%}" == "82.8%" and (test[["sex", "quality", "camera"]].notna().mean() == 1).all()
    coverage = check_attribute_coverage("brset", table)
    assert coverage.failing == ["age"] and coverage.shares["age"] == pytest.approx(share)
    assert coverage.usable() == {"age": False, "sex": True, "quality": True, "camera": True}
    assert coverage.withheld() == {"age": f"attribute_coverage: age is set on 82.8% of the test images {FLOOR}"}
    assert coverage.fault is None  # sex, quality and camera serve their rows
    message = coverage.failure_message()
    assert "age is set on 82.8%" in message and FLOOR in message and "grouped by sex, quality, camera" in message


def test_no_published_attribute_at_its_floor_is_the_fault_that_blocks():
    coverage = check_attribute_coverage("papila", labels(20, {"age": 20, "sex": 5}))
    assert coverage.failing == ["age", "sex"]
    assert "age is set on 0.0%" in coverage.fault and "sex is set on 75.0%" in coverage.fault
    assert axis_notes(coverage.withheld(), coverage.fault) == {
        "fairness": [f"attributes_usable: {coverage.fault}"], "quality": [f"attributes_usable: {coverage.fault}"]}
    assert check_attribute_coverage("papila", labels(20, {"age": 20})).fault is None  # sex still serves its rows
    nothing_published = check_attribute_coverage("idrid", labels(20, {a: 20 for a in ATTRIBUTES}))
    assert nothing_published.passed and nothing_published.fault is None  # 'not applicable', nothing to fail
    withheld = {"age": "attribute_coverage: age ..."}
    assert axis_notes(withheld, None) == {"fairness": ["attribute_coverage: age ..."], "quality": []}


def test_the_rows_of_a_withheld_attribute_stay_without_values_and_the_others_are_unchanged():
    from focus_dagster.evaluation.tables import Settings, metric_rows

    rng = np.random.default_rng(3)
    n = 120
    y = rng.integers(0, 2, n)
    frame = pd.DataFrame({"dataset": "brset", "image_id": [f"i{k}" for k in range(n)], "task": "any_dr", "model": "m",
                          "interface": "vm", "method": "linear_probe", "train_dataset": "brset",
                          "score": np.clip(0.3 * y + rng.uniform(0, 0.7, n), 0, 1), "score_reference": np.nan,
                          "threshold": 0.5, "label": y, "split": "test"})
    metadata = pd.DataFrame({"image_id": frame["image_id"], "age": np.where(np.arange(n) % 6 == 0, np.nan,
                                                                            np.linspace(30, 80, n)),
                             "sex": [("F", "M")[k % 2] for k in range(n)],
                             "quality": ["adequate"] * 90 + ["inadequate"] * 30, "camera": None})
    grouped = {"age": True, "sex": True, "quality": True}
    settings = Settings(n_resamples=100, seed=0)
    reference = metric_rows(frame, metadata, grouped, settings)
    reason = "attribute_coverage: age is set on 83.3% of the test images (floor 90%)"
    rows = metric_rows(frame, metadata, grouped, settings, withheld={"age": reason})
    assert list(rows["metric_id"]) == list(reference["metric_id"])  # nothing disappears
    age = rows["group"].str.match(r"age_(median|band)\b")
    assert age.sum() > 20 and reference.loc[age, "value"].notna().any()  # they had numbers to withhold
    assert rows.loc[age, ["value", "ci_low", "ci_high"]].isna().all().all()
    assert (rows.loc[age, "reason"] == reason).all()
    assert (rows.loc[age, "n"] == reference.loc[age, "n"]).all()
    pd.testing.assert_frame_equal(rows[~age], reference[~age])  # sex and quality as if nothing were withheld
    assert rows.loc[rows["axis"] == "quality", "value"].notna().any() and \
        rows.loc[rows["group"].str.startswith("sex"), "value"].notna().any()


# ------------------------------------------------------------------------------------ materialised in-process


@pytest.fixture(scope="module")
def brset_with_ages_lost(tmp_path_factory):
    """A BRSET look-alike whose label file lost the age of every sixth test image, evaluated with one encoder:
    the data layer once to learn the split, the ages blanked, then the data layer, the encoder and the
    evaluation (one run: group_attributes, its checks and the metric tables)."""
    from assets.datasets import OBSERVE_JOB
    from assets.evaluation import ENCODER_JOB, EVALUATION_JOB
    from assets.labels import DATA_LAYER_JOB
    from focus_dagster.adapter_plan import LoraPlan
    from focus_dagster.config import FocusConfig
    from focus_dagster.synthetic import synthesize
    from tests.support.world import world_for

    tmp = tmp_path_factory.mktemp("coverage")
    # 144 images: about 30 in test, so that each sex group reaches the 10 images a fairness group needs.
    synthesize(tmp / "synth", datasets=["brset"], per_dataset=144, seed=7, scale=0.05, workers=1)
    config, defs, instance = world_for(FocusConfig(home=tmp / "home", roots={"brset": tmp / "synth" / "brset"},
                                                   models=("tiny_vit",), lora=LoraPlan(models=())))
    storage = defs.resources["storage"]

    def data_layer():
        assert defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success
        assert defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance).success

    data_layer()
    first = storage.read_labels("brset")
    blank_ages(config.root_of("brset") / "labels.csv", sorted(first.loc[first["split"] == "test", "image_id"])[::6])
    data_layer()
    key = dg.MultiPartitionKey({"model": "tiny_vit", "dataset": "brset"})
    assert defs.resolve_job_def(ENCODER_JOB).execute_in_process(partition_key=key, instance=instance).success
    fast = {"ops": {name: {"config": {"n_resamples": 50}}
                    for name in ("metrics", "fairness_metrics", "quality_metrics")}}
    run = defs.resolve_job_def(EVALUATION_JOB).execute_in_process(partition_key="brset", instance=instance,
                                                                  run_config=fast)
    return config, defs, storage.read_labels("brset"), run


def blank_ages(path, image_ids) -> None:
    """The label file with patient_age emptied on the rows of `image_ids` (the rest byte for byte)."""
    text = path.read_bytes().decode("utf-8-sig")
    lines = text.split("\n")
    column = lines[0].split(",").index("patient_age")
    wanted = set(image_ids)
    for k, line in enumerate(lines[1:], start=1):
        cells = line.split(",")
        if cells[0] in wanted:
            cells[column] = ""
            lines[k] = ",".join(cells)
    path.write_bytes(("\ufeff" + "\n".join(lines)).encode())


def test_one_attribute_below_its_floor_withholds_its_rows_and_the_others_flow(brset_with_ages_lost):
    from assets.partitions import Registered
    from assets.report import report_inputs
    from focus_dagster.platform.demo import _failed_checks
    from focus_dagster.report import arena
    from tests.support.events import check_verdict, materialised
    from tests.support.tables import query

    config, defs, harmonised, run = brset_with_ages_lost
    test = harmonised[harmonised["split"] == "test"]
    share = test["age"].notna().mean()
    assert 0.8 <= share < COVERAGE_FLOOR and (test[["sex", "quality", "camera"]].notna().mean() == 1).all()
    reason = f"attribute_coverage: age is set on {share:.1%} of the test images {FLOOR}"

    coverage, usable = check_verdict(run, "attribute_coverage"), check_verdict(run, "attributes_usable")
    assert not coverage.passed and coverage.severity == dg.AssetCheckSeverity.WARN
    assert f"age is set on {share:.1%}" in coverage.description and FLOOR in coverage.description
    below = coverage.metadata["below_floor"].value
    assert below.keys() == {"age"} and below["age"]["coverage"] == pytest.approx(share)
    assert below["age"]["floor"] == COVERAGE_FLOOR
    assert usable.passed  # nothing blocks: the run goes on
    done = {asset for asset, _ in materialised(run)}
    assert {"group_attributes", "fairness_metrics", "quality_metrics", "metrics"} <= done

    rows = query(config, "SELECT * FROM metrics.values WHERE dataset = 'brset' AND axis IN ('fairness', 'quality')")
    age = rows["group"].str.match(r"age_(median|band)\b")
    assert rows.loc[age, "value"].isna().all() and (rows.loc[age, "reason"] == reason).all()
    ages = test["age"].dropna()
    bands = {"<50": ages < 50, "50-64": (ages >= 50) & (ages < 65), ">=65": ages >= 65}
    expected = {"age_median=below", "age_median=above"} | {f"age_band={b}" for b, inside in bands.items()
                                                            if inside.any()}
    assert set(rows.loc[age & rows["group"].str.contains("="), "group"]) == expected  # every group, kept
    sex = rows["group"].str.startswith("sex")
    assert rows.loc[sex, "value"].notna().any() and not rows.loc[sex, "reason"].eq(reason).any()
    assert rows.loc[rows["axis"] == "quality", "value"].notna().any()

    # What the demo prints and the report's coverage section says: the attribute, its figure and the floor.
    assert [(check, text) for check, text in _failed_checks(run, blocked=False)] == [
        ("attribute_coverage", coverage.description)]
    inputs = report_inputs(defs.resources["storage"], Registered.from_config(config))
    assert inputs.attribute_notes["brset"] == {"fairness": [reason], "quality": []}
    cells = arena.coverage(arena.with_families(inputs.metrics, inputs.models), None, ["brset"],
                           inputs.attribute_notes).set_index("axis")
    assert cells.loc["fairness", "covered"] == "yes" and cells.loc["fairness", "reason"] == reason
    assert cells.loc["quality", "covered"] == "yes" and cells.loc["quality", "reason"] == ""
