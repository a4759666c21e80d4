"""The evaluation graph materialised in-process: predictions, metric tables with lineage, trace, refresh."""

from __future__ import annotations

import json

import dagster as dg
import pandas as pd
import pytest

from assets.datasets import OBSERVE_JOB
from assets.evaluation import EVALUATION_JOB, PROBES_JOB, SUMMARY_JOB
from assets.labels import DATA_LAYER_JOB
from assets.mllm import TOKEN_PROBABILITIES_JOB
from assets.models import EMBEDDINGS_JOB, ZERO_SHOT_JOB
from focus_dagster.degradations.plan import DegradationPlan
from focus_dagster.adapter_plan import LoraPlan
from focus_dagster.definitions import build_definitions
from tests.support.tables import table_views
from tests.support.world import build_world

pytestmark = pytest.mark.heavy(55)  # seconds on a quiet 2-core machine: started first

DATASETS = ("brset", "papila", "idrid")
SELECTION = {"tiny_vit": "vm", "tiny_clip": "vlm", "tiny_llava": "mllm"}  # model -> interface
MODELS = {EMBEDDINGS_JOB: ("tiny_vit", "tiny_clip"), ZERO_SHOT_JOB: ("tiny_clip",),
          TOKEN_PROBABILITIES_JOB: ("tiny_llava",), PROBES_JOB: ("tiny_vit", "tiny_clip")}
# The robustness assets are followed by tests/graph/test_robustness_assets.py and, through the automation, by
# tests/graph/test_refresh.py; here they would only add runs to every build of this world and of test_export's.
NO_DEGRADATIONS = DegradationPlan(types=())
FAST = {"ops": {name: {"config": {"n_resamples": 100}} for name in ("metrics", "fairness_metrics", "quality_metrics")}}


def run_everything(defs, instance, datasets=DATASETS):
    defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance)
    for dataset in datasets:
        defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key=dataset, instance=instance,
                                                                raise_on_error=False)
    for job, models in MODELS.items():
        for model in models:
            for dataset in datasets:
                key = dg.MultiPartitionKey({"model": model, "dataset": dataset})
                defs.resolve_job_def(job).execute_in_process(partition_key=key, instance=instance, raise_on_error=False)
    for dataset in datasets:
        assert defs.resolve_job_def(EVALUATION_JOB).execute_in_process(partition_key=dataset, instance=instance,
                                                                       run_config=FAST).success
    summary = {"ops": {"cross_dataset_metrics": {"config": {"n_resamples": 100}}}}
    assert defs.resolve_job_def(SUMMARY_JOB).execute_in_process(instance=instance, run_config=summary).success


def without_referable_dr_in_train(root) -> None:
    """IDRiD's training labels rewritten without referable DR (grade at most 1, no edema risk): its referable_dr
    probe cannot be fit, as the demo's RFMiD and RFMiD 2.0 cannot (no positive in train), while the test split
    keeps its referable images."""
    from focus_dagster.datasets.idrid import GROUNDTRUTHS, PART, SPLIT_LAYOUTS

    train = next(layout for layout in SPLIT_LAYOUTS if layout.split == "train")
    path = root / PART / GROUNDTRUTHS / train.label_file
    header, *rows = [line for line in path.read_bytes().decode().split("\r\n") if line]
    rewritten = [header]
    for row in rows:
        name, grade, _, *padding = row.split(",")
        rewritten.append(",".join([name, str(min(int(grade), 1)), "0", *padding]))
    path.write_bytes(("\r\n".join(rewritten) + "\r\n").encode())


@pytest.fixture(scope="module")
def world(synth_all, tmp_path_factory):
    # A persistent instance, as `focus demo` uses, for `focus trace`; adapters: tests/graph/test_lora_assets.py.
    config, defs, instance = build_world(synth_all, tmp_path_factory.mktemp("evaluation"), DATASETS, persistent=True,
                                         models=tuple(SELECTION), lora=LoraPlan(models=()),
                                         degradations=NO_DEGRADATIONS)
    without_referable_dr_in_train(config.root_of("idrid"))
    run_everything(defs, instance)
    yield config, defs, instance
    instance.dispose()


def table(config, sql: str) -> pd.DataFrame:
    with table_views(config) as con:
        return con.execute(sql).df()


def test_predictions_hold_every_method_with_labels_and_lineage(world):
    config, _, _ = world
    samples = table(config, "SELECT * FROM predictions.samples")
    assert set(samples["method"]) == {"linear_probe", "zero_shot", "yes_no"}
    in_domain = samples[samples["partition"] != "cross"]
    for column in ("release_version", "labels_version", "weights_sha256", "source_run_id", "code_version", "run_id",
                   "predictions_version"):
        assert in_domain[column].notna().all(), column
    yes_no = samples[samples["method"] == "yes_no"]
    assert yes_no["score_reference"].notna().all() and (yes_no["score_reference"] <= 1).all()
    probes = samples[samples["method"] == "linear_probe"]
    assert (probes["split"] == "test").all()
    cross = samples[samples["partition"] == "cross"]
    assert len(cross) and (cross["train_dataset"] != cross["dataset"]).all()


def test_metric_rows_carry_ids_intervals_reasons_and_lineage(world):
    config, _, _ = world
    metrics = table(config, "SELECT * FROM metrics.values")
    assert metrics["metric_id"].is_unique
    assert set(metrics["axis"]) == {"performance", "calibration", "fairness", "quality"}
    defined = metrics[metrics["value"].notna()]
    unbiased = defined[defined["metric"].isin(["auroc", "accuracy@0.5", "sensitivity@0.5", "specificity@0.5", "brier",
                                               "positive_rate", "accuracy", "tpr", "fpr"])]
    assert ((unbiased["ci_low"].isna()) | (unbiased["ci_low"] <= unbiased["value"] + 1e-9)).all()
    assert metrics.loc[metrics["value"].isna(), ["ci_low", "ci_high"]].isna().all().all()  # no interval without a value
    assert metrics.loc[metrics["value"].isna(), "reason"].notna().all()  # nothing undefined without a reason
    no_sex = metrics[(metrics["dataset"] == "idrid") & (metrics["axis"] == "fairness")]
    assert no_sex["reason"].str.startswith("not applicable: idrid does not publish").all()  # no demographics
    assert metrics[metrics["partition"] != "cross"]["weights_sha256"].notna().all()


def test_focus_trace_resolves_a_metric_to_the_files(world, monkeypatch, capsys):
    import hashlib

    from focus_dagster.platform.cli import main

    config, _, instance = world
    monkeypatch.setenv("FOCUS_HOME", str(config.home))
    monkeypatch.setenv("FOCUS_CONFIG", "")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setattr("focus_dagster.config.load_config", lambda environ=None: config)
    row = table(config, "SELECT * FROM metrics.values WHERE method = 'yes_no' AND metric = 'auroc' "
                        "AND dataset = 'brset' AND task = 'any_dr'").iloc[0]
    assert main(["trace", row["metric_id"], "--json", "--runs"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["schema"] == 1 and result["stale"] is False
    links = {link["id"]: link for link in result["links"]}
    assert set(links) == {f"metric:{row['metric_id']}", "predictions[brset]", "token_probabilities[tiny_llava|brset]",
                          "weights[tiny_llava]", "yes_no_questions[brset]", "harmonised_labels[brset]",
                          "dataset_records[brset]", "dataset_release[brset]"}
    # Each link's recorded version and run agree with independent sources: the weights file's own hash, the run
    # the Dagster instance recorded for the model output, the fingerprint the instance observed for the release.
    weights = links["weights[tiny_llava]"]
    assert weights["version"] == row["weights_sha256"] == _sha256_of(weights["recorded"]["weights_path"], hashlib)
    output = links["token_probabilities[tiny_llava|brset]"]
    produced = instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=dg.AssetKey("token_probabilities"),
        asset_partitions=[dg.MultiPartitionKey({"model": "tiny_llava", "dataset": "brset"})]), limit=1).records[0]
    assert output["run"]["run_id"] == produced.run_id == row["source_run_id"]
    assert output["run"]["status"] == "SUCCESS"
    # the preprocessing its images went through, each value with its source (the catalog's 32 px square)
    preprocess = output["recorded"]["preprocess"]
    assert (preprocess["values"]["size"], preprocess["values"]["resize"], preprocess["values"]["scale_only"]) == (
        32, "squash", True)
    assert preprocess["sources"]["size"] == "catalog"
    assert links["harmonised_labels[brset]"]["recorded"]["label_rule"] == "brset.icdr"
    assert links["harmonised_labels[brset]"]["version"] == row["labels_version"]
    release = links["dataset_release[brset]"]
    observed = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("dataset_release"), asset_partitions=["brset"]), limit=1)
    assert release["version"] == row["release_version"] == observed.records[0].asset_observation.tags[
        "dagster/data_version"]
    assert release["recorded"]["root"].endswith("brset")
    assert all(link["changed"] == [] for link in result["links"])
    assert main(["trace", row["metric_id"]]) == 0
    text = capsys.readouterr().out
    assert "<- dataset release: dataset_release[brset]" in text and "STALE" not in text
    assert '"resize": "squash"' in text  # the model output's preprocessing, in the text form too
    assert main(["trace", "m-0000000000000000"]) == 2
    assert "not in metrics.values" in capsys.readouterr().err


def _sha256_of(path: str, hashlib) -> str:
    """The hash of a weights file, or of a weights folder as the sha256 of its files' (name, hash) list."""
    from pathlib import Path

    root = Path(path)
    if root.is_file():
        return hashlib.sha256(root.read_bytes()).hexdigest()
    from focus_dagster.files import file_sha256

    return file_sha256(root)


def test_a_cross_dataset_trace_holds_both_chains(world):
    from focus_dagster.platform.trace import trace

    config, _, _ = world
    # Any pair will do: one without a number (the probe skipped its task) records its inputs all the same.
    row = table(config, "SELECT * FROM metrics.values WHERE partition = 'cross' AND metric = 'auroc' AND model = "
                        "'tiny_vit' ORDER BY value NULLS LAST, metric_id").iloc[0]
    result = trace(row["metric_id"], config)
    ids = {link["id"] for link in result["links"]}
    for dataset in (row["train_dataset"], row["dataset"]):  # the training dataset's chain and the evaluated one's
        assert {f"harmonised_labels[{dataset}]", f"dataset_records[{dataset}]", f"dataset_release[{dataset}]",
                f"image_embeddings[tiny_vit|{dataset}]"} <= ids
    assert f"probe_predictions[tiny_vit|{row['train_dataset']}]" in ids and not result["stale"]


METHODS = {"vm": ("linear_probe",), "vlm": ("linear_probe", "zero_shot"), "mllm": ("yes_no",)}


def expected_configurations(labels: pd.DataFrame, selection: dict, cross: bool = True) -> set[tuple]:
    """(model, dataset, task, method, train dataset or "") of every configuration the selection implies, written
    here from the protocol: a dataset defines a task when one of its images has a label for it; in-domain, every
    method of every model's interface on every defined task (a probe trains on the dataset itself); cross-dataset,
    every encoder's probe trained on A and scored on B != A, for each task both define."""
    defined = {dataset: {t for t in ("any_dr", "referable_dr", "gon") if rows[t].notna().any()}
               for dataset, rows in labels.groupby("dataset")}
    keys = {(model, dataset, task, method, dataset if method == "linear_probe" else "")
            for model, interface in selection.items() for method in METHODS[interface]
            for dataset, tasks in defined.items() for task in tasks}
    if cross:
        keys |= {(model, b, task, "linear_probe", a) for model, interface in selection.items() if interface != "mllm"
                 for a in defined for b in defined if a != b for task in defined[a] & defined[b]}
    return keys


def configuration_keys(frame: pd.DataFrame) -> list[tuple]:
    return list(zip(frame["model"], frame["dataset"], frame["task"], frame["method"],
                    frame["train_dataset"].fillna("")))


def accounted_for(config, expected: set[tuple]) -> dict[tuple, str]:
    """Assert that each expected configuration has predictions or an unavailable row with a reason, that each has
    its AUROC metric row, and that an unavailable one's row is null with the same reason; returns the reasons."""
    samples = set(configuration_keys(table(config, "SELECT DISTINCT model, dataset, task, method, train_dataset "
                                                   "FROM predictions.samples")))
    unavailable = table(config, "SELECT * FROM predictions.unavailable")
    reasons = dict(zip(configuration_keys(unavailable), unavailable["reason"]))
    assert len(reasons) == len(unavailable)  # one row per configuration
    assert set(reasons) <= expected
    auroc = table(config, """SELECT * FROM metrics.values WHERE metric = 'auroc' AND "group" = ''""")
    metric = dict(zip(configuration_keys(auroc), zip(auroc["value"], auroc["reason"])))
    for key in sorted(expected):
        assert key in samples or reasons.get(key), f"{key}: neither predictions nor a reason"
        assert key in metric, f"{key}: no AUROC row"
    for key, reason in reasons.items():
        value, why = metric[key]
        assert pd.isna(value) and why == reason, key
    return reasons


def test_every_configuration_the_selection_implies_has_predictions_or_a_reason(world):
    config, _, _ = world
    labels = table(config, "SELECT * FROM labels.harmonised")
    reasons = accounted_for(config, expected_configurations(labels, SELECTION))
    for model in ("tiny_vit", "tiny_clip"):  # IDRiD's training split has no referable DR: no probe, and why
        assert "train split has 0 positive" in reasons[(model, "idrid", "referable_dr", "linear_probe", "idrid")]
        assert "train split has 0 positive" in reasons[(model, "brset", "referable_dr", "linear_probe", "idrid")]
    assert ("tiny_clip", "idrid", "referable_dr", "zero_shot", "") not in reasons  # other methods do not need train


def test_focus_trace_resolves_an_unavailable_configuration(world):
    from focus_dagster.platform.trace import trace

    config, _, _ = world
    row = table(config, "SELECT metric_id, reason FROM metrics.values WHERE model = 'tiny_vit' AND dataset = 'idrid' "
                        "AND task = 'referable_dr' AND partition = 'idrid' AND metric = 'auroc'")
    result = trace(row["metric_id"].iloc[0], config)
    assert result["value"] is None and result["reason"] == row["reason"].iloc[0]
    ids = {link["id"] for link in result["links"]}
    assert {"predictions[idrid]", "probe_predictions[tiny_vit|idrid]", "harmonised_labels[idrid]",
            "dataset_release[idrid]"} <= ids and not result["stale"]


def test_two_models_compared_on_the_same_images_by_the_asset_the_cli_trace_and_report(world, monkeypatch, capsys,
                                                                                         tmp_path):
    """`compare: [[tiny_clip, tiny_vit]]`: model_comparisons holds A - B of both linear probes on every dataset,
    each AUROC equal to scikit-learn's on the predictions table; zero-shot (tiny_clip only) is a row with the reason;
    `focus compare` gives the same deltas; `focus trace` reaches both models' weights; the report has the section."""
    import dataclasses

    from sklearn.metrics import roc_auc_score

    from assets.report import report_inputs
    from assets.partitions import Registered
    from focus_dagster.platform.cli import main
    from focus_dagster.report.build import build_report

    config, _, instance = world
    compared = dataclasses.replace(config, compare=(("tiny_clip", "tiny_vit"),))
    defs = build_definitions(compared)
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("model_comparisons")],
                                  run_config={"ops": {"model_comparisons": {"config": {"n_resamples": 100}}}}).success
    rows = table(config, "SELECT * FROM metrics.comparisons")
    samples = table(config, "SELECT * FROM predictions.samples WHERE split = 'test' AND partition != 'cross'")
    auroc = rows[(rows["metric"] == "auroc") & (rows["group"] == "") & (rows["method"] == "linear_probe")]
    probed = samples[samples["method"] == "linear_probe"]
    assert set(auroc["dataset"]) == set(probed["dataset"]) and len(auroc) == probed.groupby(["dataset", "task"]).ngroups
    for row in auroc[auroc["delta"].notna()].itertuples():
        sides = []
        for model in ("tiny_clip", "tiny_vit"):
            mine = samples[(samples["model"] == model) & (samples["dataset"] == row.dataset) &
                           (samples["task"] == row.task) & (samples["method"] == "linear_probe")]
            sides.append(roc_auc_score(mine["label"], mine["score"]))
            assert len(mine) == row.n
        assert (row.a, row.b, row.delta) == pytest.approx((sides[0], sides[1], sides[0] - sides[1]), abs=1e-9)
        assert row.ci_low <= row.delta <= row.ci_high
    zero_shot = rows[rows["method"] == "zero_shot"]
    assert len(zero_shot) and zero_shot["delta"].isna().all()
    assert zero_shot["reason"].str.startswith("no test predictions of tiny_vit").all()
    assert rows["metric_id"].is_unique and rows["q_value"].notna().sum() == rows["p_value"].notna().sum()

    monkeypatch.setattr("focus_dagster.config.load_config", lambda environ=None: compared)
    out = tmp_path / "papila.csv"
    assert main(["compare", "tiny_clip", "tiny_vit", "--dataset", "papila", "--method", "linear_probe",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "tiny_clip (A) vs tiny_vit (B)" in printed and "papila · gon · linear_probe" in printed
    again = pd.read_csv(out, keep_default_na=True)
    stored = rows[(rows["dataset"] == "papila") & (rows["method"] == "linear_probe")]
    merged = stored.merge(again, on="metric_id", suffixes=("", "_cli"))
    assert len(merged) == len(stored) == len(again)
    assert merged["delta"].fillna(9).to_numpy() == pytest.approx(merged["delta_cli"].fillna(9).to_numpy())
    assert main(["compare", "tiny_clip", "tiny_clip"]) == 2
    assert "not 'tiny_clip' with itself" in capsys.readouterr().err

    first = auroc[auroc["delta"].notna()].iloc[0]
    assert main(["trace", first["metric_id"], "--json"]) == 0
    links = {link["id"] for link in json.loads(capsys.readouterr().out)["links"]}
    assert {f"predictions[{first['dataset']}]", f"probe_predictions[tiny_clip|{first['dataset']}]",
            f"probe_predictions[tiny_vit|{first['dataset']}]", "weights[tiny_clip]", "weights[tiny_vit]"} <= links
    gap = rows[(rows["group"] == "sex:max-min") & rows["attributes_lineage_id"].notna()].iloc[0]
    assert main(["trace", gap["metric_id"], "--json"]) == 0
    assert f"group_attributes[{gap['dataset']}]" in {link["id"] for link in json.loads(capsys.readouterr().out)["links"]}

    report = build_report(report_inputs(defs.resources["storage"], Registered.from_config(compared)))
    section = next(s for s in report.sections if s.name == "comparisons")
    assert len(section.tables[0].frame) == len(rows) and "tiny_clip vs tiny_vit: mean Δ AUROC" in str(section.reading)


def test_a_blocked_upstream_gives_no_rows_and_a_reason(synth_all, tmp_path):
    """Leaking questions block token_probabilities for brset: no yes/no rows, the reason is recorded."""
    leaky = {"version": "leaky-1", "datasets": {"brset": {"gon": "macular_edema {macular_edema}: glaucoma?"}}}
    config, defs, instance = build_world(synth_all, tmp_path, models=("tiny_llava",), questions=leaky,
                                         lora=LoraPlan(models=()))
    defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance,
                                                            raise_on_error=False)
    key = dg.MultiPartitionKey({"model": "tiny_llava", "dataset": "brset"})
    assert not defs.resolve_job_def(TOKEN_PROBABILITIES_JOB).execute_in_process(
        partition_key=key, instance=instance, raise_on_error=False).success
    assert defs.resolve_job_def(EVALUATION_JOB).execute_in_process(partition_key="brset", instance=instance,
                                                                   run_config=FAST).success
    unavailable = table(config, "SELECT * FROM predictions.unavailable")
    assert set(map(tuple, unavailable[["model", "method"]].values.tolist())) == {("tiny_llava", "yes_no")}
    assert unavailable["reason"].str.contains("not materialised").all()
    expected = expected_configurations(table(config, "SELECT * FROM labels.harmonised"), {"tiny_llava": "mllm"},
                                       cross=False)
    assert set(accounted_for(config, expected)) == expected and len(expected) == 3  # BRSET defines all three tasks
    assert table(config, "SELECT count(*) AS n FROM metrics.values WHERE value IS NOT NULL")["n"].iloc[0] == 0


def test_changing_one_dataset_refreshes_only_its_partitions_and_the_aggregates(world):
    """Edit PAPILA's label file, then tick the automation and run what it asks for until it asks for nothing:
    every request is a papila partition or an aggregate, and the chain reaches the metrics."""
    config, defs, instance = world
    cursor = dg.evaluate_automation_conditions(defs=defs, instance=instance).cursor
    images = sorted((config.root_of("papila") / "FundusImages").glob("*.jpg"))
    (images[0].parent / "RET999OD.jpg").write_bytes(images[0].read_bytes())  # a new image: a new release
    defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance)
    job = defs.resolve_implicit_global_asset_job_def()
    requested: dict[str, set] = {}
    for _ in range(12):
        result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
        cursor = result.cursor
        asks = {key: result.get_requested_partitions(key) for key in defs.resolve_all_asset_keys()
                if result.get_num_requested(key)}
        if not asks:
            break
        by_partition: dict = {}
        for key, partitions in asks.items():
            requested.setdefault(key.to_user_string(), set()).update(str(p) for p in partitions)
            for partition in partitions:
                shape = repr(defs.resolve_assets_def(key).partitions_def)
                by_partition.setdefault((shape, partition), []).append(key)
        for (_, partition), keys in by_partition.items():  # a multi-asset's outputs run together
            job.execute_in_process(instance=instance, asset_selection=keys, partition_key=partition,
                                   raise_on_error=False, run_config=_fast_config(keys))
    aggregates = {"cross_dataset_metrics", "leaderboard", "arena_report"}
    for asset, partitions in requested.items():
        if asset not in aggregates:
            assert all("papila" in p for p in partitions), (asset, partitions)
    assert {"dataset_records", "harmonised_labels", "image_embeddings", "predictions", "metrics"} <= set(requested)
    assert aggregates <= set(requested)


def _fast_config(keys):
    names = {key.to_user_string() for key in keys} & {"metrics", "cross_dataset_metrics", "fairness_metrics",
                                                      "quality_metrics"}
    return {"ops": {name: {"config": {"n_resamples": 100}} for name in names}}


# ------------------------------------------------------------------------- stale flags, upstream by upstream


def _metric(config, **where) -> str:
    clause = " AND ".join(f"{k} = '{v}'" for k, v in where.items())
    return table(config, f"SELECT metric_id FROM metrics.values WHERE {clause} AND metric = 'auroc' AND \"group\" = '' "
                         "ORDER BY value NULLS LAST, metric_id")["metric_id"].iloc[0]


def _stale_links(config, metric_id: str) -> set[str]:
    from focus_dagster.platform.trace import trace

    result = trace(metric_id, config)
    stale = {link["id"] for link in result["links"] if link["stale"]}
    assert result["stale"] == bool(stale)
    return {("metric" if link_id.startswith("metric:") else link_id) for link_id in stale}


def test_trace_marks_stale_exactly_the_links_an_upstream_change_reaches(world):
    """Refresh one upstream at a time, without recomputing what depends on it, and trace numbers on both sides:
    a new weights file, a new release observed, a label file changed and its data layer rematerialised."""
    from safetensors.torch import load_file, save_file

    from focus_dagster.platform.trace import trace

    config, defs, instance = world
    probe_brset = _metric(config, model="tiny_vit", dataset="brset", partition="brset", method="linear_probe")
    zero_shot_idrid = _metric(config, model="tiny_clip", dataset="idrid", method="zero_shot")
    yes_no_brset = _metric(config, model="tiny_llava", dataset="brset", method="yes_no")
    yes_no_papila = _metric(config, model="tiny_llava", dataset="papila", method="yes_no")
    for metric_id in (probe_brset, zero_shot_idrid, yes_no_brset, yes_no_papila):
        assert _stale_links(config, metric_id) == set()

    # 1. New weights for tiny_vit (every tensor nudged), nothing recomputed.
    weights = next(config.model_cache.rglob("tiny_vit-*.safetensors"))
    tensors = load_file(weights)
    save_file({name: tensor + 0.01 for name, tensor in tensors.items()}, weights)
    assert _stale_links(config, probe_brset) == {"metric", "predictions[brset]", "probe_predictions[tiny_vit|brset]",
                                                 "image_embeddings[tiny_vit|brset]"}
    assert _stale_links(config, zero_shot_idrid) == set()

    # 2. A new IDRiD image on disk, observed (a new release), nothing rematerialised.
    images = sorted(config.root_of("idrid").rglob("*.jpg"))
    images[0].with_name("IDRiD_999.jpg").write_bytes(images[0].read_bytes())
    defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance)
    assert _stale_links(config, zero_shot_idrid) == {
        "metric", "predictions[idrid]", "zero_shot_scores[tiny_clip|idrid]", "image_embeddings[tiny_clip|idrid]",
        "harmonised_labels[idrid]", "dataset_records[idrid]"}
    assert _stale_links(config, yes_no_brset) == set()

    # 3. BRSET's label file changed (one patient's age), observed, and its data layer rematerialised.
    label_file = config.root_of("brset") / "labels.csv"
    rows = pd.read_csv(label_file, dtype=str, keep_default_na=False)
    rows.loc[0, "patient_age"] = str(int(float(rows.loc[0, "patient_age"] or 50)) + 1)
    rows.to_csv(label_file, index=False)
    defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance)
    defs.resolve_job_def(DATA_LAYER_JOB).execute_in_process(partition_key="brset", instance=instance,
                                                            raise_on_error=False)
    assert _stale_links(config, yes_no_brset) == {
        "metric", "predictions[brset]", "token_probabilities[tiny_llava|brset]", "yes_no_questions[brset]",
        "harmonised_labels[brset]", "dataset_records[brset]"}
    changed = {link["id"]: link["changed"] for link in trace(yes_no_brset, config)["links"]}
    assert any("dataset_records[brset] was rewritten" in c for c in changed["harmonised_labels[brset]"])
    assert any("dataset_release[brset] was observed" in c for c in changed["dataset_records[brset]"])
    assert any("harmonised_labels[brset] was rewritten" in c for c in changed["token_probabilities[tiny_llava|brset]"])
    assert _stale_links(config, yes_no_papila) == set()  # nothing upstream of PAPILA's numbers changed


def test_numbers_recomputed_half_way_through_a_refresh_say_what_they_stand_on(world):
    """Continues from the state the previous test left: BRSET's labels are new but its model outputs are not;
    IDRiD has a new release observed but its records were not read again. Recompute both datasets' numbers."""
    config, defs, instance = world
    for dataset in ("brset", "idrid"):
        assert defs.resolve_job_def(EVALUATION_JOB).execute_in_process(partition_key=dataset, instance=instance,
                                                                       run_config=FAST).success
    # BRSET: no prediction comes from a model output computed from the old labels; each such configuration says so.
    unavailable = table(config, "SELECT * FROM predictions.unavailable WHERE partition = 'brset'")
    stale_outputs = unavailable[unavailable["reason"].str.contains("was computed from labels version")]
    assert {("tiny_llava", "yes_no"), ("tiny_vit", "linear_probe"), ("tiny_clip", "zero_shot")} <= set(
        zip(stale_outputs["model"], stale_outputs["method"]))
    used = table(config, "SELECT DISTINCT labels_version FROM predictions.samples WHERE partition = 'brset'")
    assert len(used) <= 1  # whatever rows remain rest on one labels version
    # IDRiD: the rows name the release its records were read from, not the newer one observed since.
    observed = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("dataset_release"), asset_partitions=["idrid"]), limit=20).records
    versions = list(dict.fromkeys(record.asset_observation.tags["dagster/data_version"] for record in observed))
    newest, previous = versions[:2]  # newest first: the release with the new image, then the one read
    releases = table(config, "SELECT DISTINCT release_version FROM metrics.values WHERE partition = 'idrid' "
                             "AND release_version IS NOT NULL")["release_version"].tolist()
    assert releases == [previous]
