"""Evaluation: linear probes, the per-sample predictions table, metric tables and the leaderboard."""

from dataclasses import dataclass, field

import dagster as dg
import pandas as pd

from assets.automation import GATED_EAGER, data_version
from assets.backfill import SINGLE_RUN, Materialised, each_dataset
from assets.partitions import (
    BY_DATASET,
    DUAL_ENCODERS,
    ENCODERS,
    MLLMS,
    SAME_MODEL_AND_DATASET,
    Registered,
    fan_out,
    model_and_dataset,
)
from focus_dagster import lineage
from focus_dagster.adapter_plan import AdapterKey
from focus_dagster.evaluation.configurations import (
    LORA_METHOD,
    adapted_configurations,
    by_pair,
    cross_dataset_configurations,
    in_domain_configurations,
    methods_of,
    unavailable_frame,
    unavailable_rows,
)
from focus_dagster.evaluation.predictions import (
    CONFIG_COLUMNS,
    Assembled,
    empty_predictions,
    finish,
    finite_scores,
    frame_version,
    train_youden,
    with_labels,
    with_lineage,
)
from focus_dagster.evaluation.leaderboard import cross_matrix_markdown, leaderboard_markdown
from focus_dagster.evaluation.probes import PROBE_METHOD, skipped_frame
from focus_dagster.version import code_version
from resources import FocusStorage, layout

EVALUATION_GROUP = "evaluation"
PROBES_JOB = "focus_linear_probes"
ENCODER_JOB = "focus_encoder_outputs"
EVALUATION_JOB = "focus_evaluation"
SUMMARY_JOB = "focus_cross_dataset_and_leaderboard"

PROBES_DESCRIPTION = (
    "In-domain linear probes of one encoder on one dataset: per task, logistic regression (balanced class weights, "
    "max_iter 1000) on L2-normalised embeddings of the train split, scored on the test split; the Youden threshold "
    f"of the training scores is kept. Probes: `{layout.PROBES.file('<model>', '<dataset>')}`; scores: "
    f"`{layout.PROBE_SCORES.file('<model>', '<dataset>')}`; tasks without a probe (a training split lacking a "
    f"class, no test images) and why: `{layout.PROBE_SKIPPED.file('<model>', '<dataset>')}` (artifact store)."
)
PREDICTIONS_DESCRIPTION = (
    f"One per-sample table for every interface and method on one dataset (DuckDB `{layout.SAMPLES}`): linear "
    "probe, zero-shot and yes/no rows with score, reference-form score, Youden threshold, label, split, and the "
    "lineage of each row (dataset release, labels version, model revision and weights hash, the run that produced "
    "the model output, code version). Rows with non-finite scores are rejected and counted. Every configuration the "
    "selection implies (model x method of its interface x task the labels define) has test-split rows here or a "
    f"row with the reason in `{layout.UNAVAILABLE}`: upstream not materialised or blocked, probe not fit (the "
    "training split lacks a class), no scores for the task, every score rejected."
)
METRICS_DESCRIPTION = (
    f"Performance and calibration of one dataset (DuckDB `{layout.METRICS}`, partition `<dataset>`, one row per "
    "number), each with a 95% stratified bootstrap interval, n, n_pos, a reason where undefined, the lineage of its "
    "predictions, and a stable `metric_id` that `focus trace` resolves. A configuration without predictions has one "
    f"row: its AUROC (axis performance, group empty), null, with the reason recorded in `{layout.UNAVAILABLE}`. "
    "Fairness and quality are `fairness_metrics` and `quality_metrics`, which wait for the attribute coverage check."
)
CROSS_DESCRIPTION = (
    "The cross-dataset matrix: every in-domain probe trained on dataset A scored on the test split of every other "
    f"dataset B that has the task; predictions in `{layout.SAMPLES}` and performance / calibration rows in "
    f"`{layout.METRICS}` (partition '{layout.CROSS_PARTITION}'). A pair without predictions (probe not fit on A, "
    f"outputs not materialised, no test image of B with the task) is a row with the reason in `{layout.UNAVAILABLE}` "
    "and a null AUROC row in the metrics."
)
LEADERBOARD_DESCRIPTION = (
    "The leaderboard: the top configurations per model family and task by test AUROC (with interval, ECE and "
    f"metric ids), over everything in `{layout.METRICS}`. Markdown in the metadata, and `{layout.LEADERBOARD_REPORT}`. "
    "Pipeline checks (the built-in seeded toy models, which test the plumbing) are marked † and ranked after the real "
    "models of each method and task, whatever their AUROC; `pipeline_check_models` lists those shown."
)


class MetricsConfig(dg.Config):
    n_resamples: int = 1000
    seed: int = 0


def definitions(registered: Registered) -> dg.Definitions:
    """Probes (model x dataset), predictions + metrics (dataset), the cross-dataset matrix and the leaderboard."""
    with_encoders = bool(registered.models(ENCODERS))
    assets, jobs = [], []
    if with_encoders:
        encoders = registered.model_partitions(ENCODERS)
        assets.append(_probe_asset(encoders))
        jobs.append(dg.define_asset_job(PROBES_JOB, selection=dg.AssetSelection.assets("probe_predictions"),
                                        partitions_def=encoders,
                                        description="Linear probes of every selected encoder (model x dataset)."))
        jobs.append(dg.define_asset_job(
            ENCODER_JOB, selection=dg.AssetSelection.assets("image_embeddings", "probe_predictions"),
            partitions_def=encoders,
            description="Embeddings and linear probes of one encoder on one dataset, in one run.",
        ))
    assets += [_predictions_asset(registered.datasets, registered.specs, registered.evaluations()),
               _metrics_asset(registered.datasets, pipeline_checks(registered.specs))]
    jobs.append(dg.define_asset_job(
        EVALUATION_JOB, selection=dg.AssetSelection.assets("predictions", "metrics", "group_attributes",
                                                           "fairness_metrics", "quality_metrics"),
        partitions_def=registered.datasets,
        description="The per-sample predictions table and the metric tables of one dataset (performance and "
        "calibration; fairness and quality once the group attributes pass their blocking check, the rows of an "
        "attribute below its coverage floor kept without a value).",
    ))
    summary = ["cross_dataset_metrics", "leaderboard"] if with_encoders else ["leaderboard"]
    if with_encoders:
        assets.append(_cross_dataset_asset(registered.specs, registered.models(ENCODERS), registered.dataset_keys))
    assets.append(_leaderboard_asset(with_encoders, pipeline_checks(registered.specs)))
    jobs.append(dg.define_asset_job(SUMMARY_JOB, selection=dg.AssetSelection.assets(*summary),
                                    description="The cross-dataset matrix and the leaderboard over every dataset."))
    return dg.Definitions(assets=assets, jobs=jobs)


# ------------------------------------------------------------------------------------------------ probes


def _probe_asset(partitions: dg.MultiPartitionsDefinition):
    @dg.asset(
        partitions_def=partitions,
        deps=[dg.AssetDep("image_embeddings", partition_mapping=SAME_MODEL_AND_DATASET)],
        group_name=EVALUATION_GROUP,
        kinds={"scikitlearn", "parquet"},
        automation_condition=GATED_EAGER,
        description=PROBES_DESCRIPTION,
    )
    def probe_predictions(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        from focus_dagster.evaluation.probes import in_domain_probes, save_probes

        model, dataset = model_and_dataset(context)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        embeddings, embeddings_stamp = storage.read_stamped_parquet(layout.EMBEDDINGS.file(model, dataset))
        run = in_domain_probes(dataset, embeddings, labels)
        # The probes, their scores and the tasks skipped carry one stamp: the embeddings and labels they were fit on.
        stamp = lineage.stamp("probe_predictions", layout.model_dataset_row_key(model, dataset), context.run_id,
                              lineage.frame_version(run.predictions), code_version=code_version(),
                              inputs={"embeddings": embeddings_stamp, "labels": labels_stamp}, skipped=run.skipped)
        storage.write_artifact(layout.PROBES.file(model, dataset),
                               lambda partial: save_probes(partial, run.probes, stamp), suffix=".npz")
        skipped_path, _ = storage.write_parquet(layout.PROBE_SKIPPED.file(model, dataset), skipped_frame(run.skipped),
                                                stamp)
        path, sha = storage.write_parquet(layout.PROBE_SCORES.file(model, dataset), run.predictions, stamp)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(run.predictions),
            "tasks": sorted(run.probes),
            "skipped": dg.MetadataValue.json(run.skipped),
            "skipped_path": dg.MetadataValue.path(str(skipped_path)),
            "youden_thresholds": dg.MetadataValue.json({t: p.threshold for t, p in run.probes.items()}),
            "train_sizes": dg.MetadataValue.json({t: [p.n_train, p.n_train_positive] for t, p in run.probes.items()}),
            "path": dg.MetadataValue.path(str(path)),
            "sha256": sha,
            "lineage_version": stamp["version"],
        }, data_version=data_version(stamp))

    return probe_predictions


# ------------------------------------------------------------------------------------------- predictions


def _predictions_asset(datasets: dg.StaticPartitionsDefinition, specs: dict, scored: list):
    deps = [dg.AssetDep("harmonised_labels")]
    interfaces = {s.interface for s in specs.values()}
    if interfaces & set(ENCODERS):
        deps.append(dg.AssetDep("probe_predictions", partition_mapping=BY_DATASET))
    if interfaces & set(DUAL_ENCODERS):
        deps.append(dg.AssetDep("zero_shot_scores", partition_mapping=BY_DATASET))
    if interfaces & set(MLLMS):
        deps.append(dg.AssetDep("token_probabilities", partition_mapping=BY_DATASET))
    if scored:  # adapted scores `adapter@dataset` feed the dataset's table
        deps.append(dg.AssetDep("adapted_token_probabilities", partition_mapping=fan_out((e.key, e.dataset)
                                                                                          for e in scored)))

    @dg.asset(
        partitions_def=datasets,
        deps=deps,
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        backfill_policy=SINGLE_RUN,
        description=PREDICTIONS_DESCRIPTION,
    )
    def predictions(context: dg.AssetExecutionContext, storage: FocusStorage):
        yield from each_dataset(context, lambda dataset: _assemble_predictions(context, dataset, storage,
                                                                               specs, scored))

    return predictions


def _assemble_predictions(context, dataset: str, storage: FocusStorage, specs: dict, scored: list) -> Materialised:
    """One dataset's predictions table: every configuration's test rows from the model outputs it reads."""
    labels, labels_stamp = storage.read_stamped_labels(dataset)
    expected = in_domain_configurations(dataset, labels, {model: spec.interface for model, spec in specs.items()})
    expected += adapted_configurations(dataset, labels, [(e.adapter.model, e.adapter.task, e.adapter.dataset)
                                                         for e in scored if e.dataset == dataset])
    parts, gaps, sources, rejected, examples = [], [], {}, {}, []
    adapted = [e for e in scored if e.dataset == dataset]
    for model, method, adapter, spec, read in _sources(specs, adapted):
        configs = [c for c in expected if _source_key(c.model, c.method, c.train_dataset, c.task)
                   == (model, method, adapter)]
        output = read(storage, model, dataset, labels, labels_stamp)
        part, missing, checked = _method_predictions(context, dataset, model, spec, method, configs, output,
                                                     _row_lineage(labels_stamp, output.stamp))
        parts += part
        gaps += missing
        sources[model, method, adapter] = output.stamp
        rejected.update(checked.rejected)
        examples += checked.rejected_examples
    frame = pd.concat(parts, ignore_index=True) if parts else empty_predictions()
    version = frame_version(frame)
    stamps = {key: lineage.stamp("predictions", dataset, context.run_id, version, code_version=code_version(),
                                 inputs={"labels": labels_stamp, "source": source},
                                 configuration=_configuration(*key))
              for key, source in sources.items()}
    ids = {key: lineage.stamp_id(value) for key, value in stamps.items()}
    # As text even with no rows: an empty column would be typed as numbers in a table created from it.
    frame["lineage_id"] = pd.Series([ids[_source_key(*key)] for key in zip(
        frame["model"], frame["method"], frame["train_dataset"], frame["task"])], index=frame.index, dtype=object)
    frame["predictions_version"] = version
    frame["partition"] = dataset
    gaps = [{**row, "lineage_id": ids[_source_key(row["model"], row["method"], row["train_dataset"], row["task"])]}
            for row in gaps]
    unavailable = unavailable_frame(gaps, predictions_version=version, run_id=context.run_id, partition=dataset)
    partition_stamp = lineage.stamp("predictions", dataset, context.run_id, version, code_version=code_version(),
                                    inputs={"labels": labels_stamp},
                                    sources={_source_name(*key): i for key, i in ids.items()})
    storage.replace_partitions([(layout.SAMPLES, dataset, frame), (layout.UNAVAILABLE, dataset, unavailable)],
                               stamp=partition_stamp, stamps=tuple(stamps.values()))
    return Materialised({"predictions": {
        "dagster/row_count": len(frame),
        "configurations": int(frame.groupby(CONFIG_COLUMNS, dropna=False).ngroups) if len(frame) else 0,
        "expected_configurations": len(expected),
        "rows_by_method": dg.MetadataValue.json(frame["method"].value_counts().to_dict()),
        "rejected_rows": dg.MetadataValue.json(rejected),
        "rejected_examples": dg.MetadataValue.json(examples[:10]),
        "unavailable": dg.MetadataValue.json(_unavailable_summary(gaps)),
        "predictions_version": version,
        "labels_version": labels_stamp["version"] if labels_stamp else "",
    }}, stamps={"predictions": partition_stamp})


def _sources(specs: dict, adapted: list):
    """(model, method, adapter key, spec, reader) of every model output the predictions of a dataset read: each
    model's methods (adapter key ""), then each adapter scored on it (one output per adapter)."""
    for model, spec in specs.items():
        for method in methods_of(spec.interface):
            yield model, method, "", spec, _SOURCES[method]
    for evaluation in adapted:
        adapter = evaluation.adapter
        yield (adapter.model, LORA_METHOD, adapter.key, specs[adapter.model],
               lambda storage, model, dataset, labels, labels_stamp, adapter=adapter:
               _adapted_source(storage, adapter, dataset, labels, labels_stamp))


def _source_key(model: str, method: str, train_dataset, task: str) -> tuple[str, str, str]:
    """The output a configuration's rows come from: (model, method, adapter key; "" for the methods without an
    adapter, whose one output covers every task and, for a probe, has the evaluated dataset as train dataset)."""
    adapter = AdapterKey(model, train_dataset, task).key if method == LORA_METHOD else ""
    return model, method, adapter


def _configuration(model: str, method: str, adapter: str) -> dict:
    return {"model": model, "method": method, **({"adapter": adapter} if adapter else {})}


def _source_name(model: str, method: str, adapter: str) -> str:
    return f"{model}/{method}" + (f"/{adapter}" if adapter else "")


@dataclass
class _Output:
    """A model output read for the predictions table (with labels attached) and the lineage stamp written with it,
    or the reason it cannot be used."""

    stamp: dict | None = None
    frame: pd.DataFrame | None = None
    reason: str | None = None
    skipped: dict = field(default_factory=dict)  # task -> why no probe was fit (probes only)


def _method_predictions(context, dataset, model, spec, method, configs, output: _Output, row_lineage: dict):
    """One model x method on one dataset: its finished rows, the unavailable rows of its configurations without
    test predictions (with the lineage the output recorded), and the rows rejected as non-finite."""
    if output.frame is None:
        return [], [{**c.unavailable(output.reason), **row_lineage} for c in configs], Assembled(pd.DataFrame())
    source = f"{output.stamp['asset']} {model}/{dataset}"
    checked = finite_scores(output.frame, f"{method} {model}/{dataset}")
    missing = unavailable_rows(configs, output.frame, checked.frame, source, output.skipped)
    part = finish(checked.frame, dataset=dataset, model=model, interface=spec.interface, method=method,
                  **row_lineage, run_id=context.run_id)
    return [part], [{**row, **row_lineage} for row in missing], checked


def _probe_source(storage, model, dataset, labels, labels_stamp) -> _Output:
    scores, stamp, reason = _stamped_output(storage, "probe_predictions", layout.PROBE_SCORES, model, dataset,
                                            labels_stamp)
    if reason:
        return _Output(stamp, reason=reason)
    return _Output(stamp, with_labels(scores, labels, f"probe_predictions {model}/{dataset}"),
                   skipped=lineage.fact(stamp, "facts", "skipped") or {})


def _stamped_output(storage, asset: str, files, model: str, dataset: str, labels_stamp):
    """A model output file and its stamp, or why it cannot be used with the labels read now."""
    path = files.file(model, dataset)
    if not storage.artifact_path(path).exists():
        return None, None, _not_materialised(asset, model, dataset)
    scores, stamp = storage.read_stamped_parquet(path)
    return scores, stamp, _unusable(stamp, labels_stamp, asset, model, dataset)


def _zero_shot_source(storage, model, dataset, labels, labels_stamp) -> _Output:
    key = layout.model_dataset_row_key(model, dataset)
    (scores,), stamp = storage.read_stamped([(layout.ZERO_SHOT, key)], "zero_shot_scores", key)
    if stamp is None and scores.empty:
        return _Output(reason=_not_materialised("zero_shot_scores", model, dataset))
    reason = _unusable(stamp, labels_stamp, "zero_shot_scores", model, dataset)
    if reason:
        return _Output(stamp, reason=reason)
    frame = train_youden(with_labels(scores[["image_id", "task", "score"]], labels, f"zero_shot_scores {model}/{dataset}"))
    return _Output(stamp, frame.assign(train_dataset=None))


def _yes_no_source(storage, model, dataset, labels, labels_stamp) -> _Output:
    scores, stamp, reason = _stamped_output(storage, "token_probabilities", layout.TOKEN_PROBABILITIES, model,
                                            dataset, labels_stamp)
    if reason:
        return _Output(stamp, reason=reason)
    scores = scores.rename(columns={"p_yes_reference": "score_reference"})[["image_id", "task", "score",
                                                                            "score_reference"]]
    frame = train_youden(with_labels(scores, labels, f"token_probabilities {model}/{dataset}"))
    return _Output(stamp, frame.assign(train_dataset=None))


def _adapted_source(storage, adapter, dataset, labels, labels_stamp) -> _Output:
    """The scores of `adapter` on `dataset` (adapted_token_probabilities), or why there are none: no adapter was
    trained (the reason recorded by lora_adapters), not materialised, or computed from other labels."""
    skipped = storage.adapter_skipped_reason(adapter.key)
    if skipped:
        return _Output(reason=f"no LoRA adapter {adapter.key}: {skipped}")
    scores, stamp, reason = _stamped_output(storage, "adapted_token_probabilities", layout.ADAPTED_TOKEN_PROBABILITIES,
                                            adapter.key, dataset, labels_stamp)
    if reason:
        return _Output(stamp, reason=reason)
    scores = scores.rename(columns={"p_yes_reference": "score_reference"})[["image_id", "task", "score",
                                                                            "score_reference"]]
    frame = train_youden(with_labels(scores, labels, f"adapted_token_probabilities {adapter.key}@{dataset}"))
    return _Output(stamp, frame.assign(train_dataset=adapter.dataset))


# The reader of each method's model output (the methods of an interface: configurations.METHODS).
_SOURCES = {PROBE_METHOD: _probe_source, "zero_shot": _zero_shot_source, "yes_no": _yes_no_source}


def _not_materialised(asset: str, model: str, dataset: str) -> str:
    return (f"{asset} {model}/{dataset} is not materialised (its run failed or a blocking check upstream stopped "
            "it: see the asset in the UI)")


def _unusable(stamp: dict | None, labels_stamp: dict | None, asset: str, model: str, dataset: str) -> str | None:
    """Why a model output must not be combined with the labels read now: written without lineage, computed from
    other labels (a refresh has not reached it yet), or by weights whose checkpoint audit failed."""
    name = f"{asset} {model}/{dataset}"
    if stamp is None:
        return f"{name} was written without lineage (by an earlier version): rematerialise it"
    used = _labels_version_used(stamp)
    current = (labels_stamp or {}).get("version")
    if used != current:
        return (f"{name} was computed from labels version {used} of {dataset}, but the labels are now version "
                f"{current}: rematerialise {asset} (the refresh sensor does so once its upstream is current)")
    model_facts = _model_of(stamp) or {}
    if model_facts.get("audit_clean") is False:
        return f"{name} was computed by weights whose checkpoint audit failed ({model_facts.get('weights_path')})"
    return None


def _labels_version_used(stamp: dict) -> str | None:
    """The labels version a model output rests on (probes and zero-shot scores: their own labels input, which
    must match the embeddings' too, else None)."""
    versions = {lineage.fact(stamp, "inputs", "labels", "version")}
    below = lineage.fact(stamp, "inputs", "embeddings")
    if below is not None:
        versions.add(lineage.fact(below, "inputs", "labels", "version"))
    return versions.pop() if len(versions) == 1 else None


def _model_of(stamp: dict | None) -> dict | None:
    """The model facts of a model output (probes: those of the embeddings they were fit on)."""
    if stamp is None:
        return None
    return lineage.fact(stamp, "facts", "model") or _model_of(lineage.fact(stamp, "inputs", "embeddings"))


def _row_lineage(labels_stamp: dict | None, source: dict | None, train_labels: dict | None = None) -> dict:
    """The lineage columns of a configuration's rows, from the stamps the step read."""
    model = _model_of(source) or {}
    return {
        "release_version": lineage.fact(labels_stamp, "inputs", "records", "inputs", "release", "version"),
        "labels_version": lineage.fact(labels_stamp, "version"),
        "model_revision": model.get("revision"),
        "model_snapshot": model.get("snapshot"),
        "weights_sha256": model.get("weights_sha256"),
        "source_asset": lineage.fact(source, "asset"),
        "source_run_id": lineage.fact(source, "run_id"),
        "train_labels_version": lineage.fact(train_labels, "version"),
        "code_version": code_version(),
    }


def _unavailable_summary(rows: list[dict]) -> list[dict]:
    """The unavailable configurations as the UI shows them (the table has their lineage too)."""
    keys = ("model", "method", "task", "train_dataset", "dataset", "reason")
    return [{k: row[k] for k in keys} for row in rows]


# ----------------------------------------------------------------------------------------------- metrics


def _metrics_asset(datasets: dg.StaticPartitionsDefinition, checks: frozenset[str]):
    @dg.asset(
        partitions_def=datasets,
        deps=["predictions", "harmonised_labels"],
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        backfill_policy=SINGLE_RUN,
        description=METRICS_DESCRIPTION,
    )
    def metrics(context: dg.AssetExecutionContext, config: MetricsConfig, storage: FocusStorage):
        yield from each_dataset(context, lambda dataset: _dataset_metrics(context, dataset, config, storage, checks))

    return metrics


def _dataset_metrics(context, dataset: str, config: MetricsConfig, storage: FocusStorage,
                     checks: frozenset[str] = frozenset()) -> Materialised:
    """One dataset's performance and calibration rows, from its predictions and labels of one snapshot."""
    from focus_dagster.evaluation.tables import Settings, metric_rows, with_unavailable

    labels, labels_stamp = storage.read_stamped_labels(dataset)
    (samples, unavailable), predictions_stamp = storage.read_stamped(
        [(layout.SAMPLES, dataset), (layout.UNAVAILABLE, dataset)], "predictions", dataset)
    _same_labels(predictions_stamp, labels_stamp, dataset)
    rows = metric_rows(samples, labels[["image_id"]], {}, Settings(config.n_resamples, config.seed),
                       axes=("performance", "calibration"), say=context.log.info, what=f"metrics {dataset}")
    table = with_unavailable(with_lineage(rows, samples, context.run_id), unavailable, context.run_id)
    table = table.assign(partition=dataset)
    stamp = lineage.stamp("metrics", dataset, context.run_id, lineage.frame_version(table, VALUE_COLUMNS),
                          code_version=code_version(), inputs={"predictions": predictions_stamp})
    storage.replace_partition(layout.METRICS, dataset, table, stamp=stamp)
    return Materialised({"metrics": metrics_metadata(table, len(unavailable), checks)}, stamps={"metrics": stamp})


# What a metric table's version covers: the numbers, not the run that computed them.
VALUE_COLUMNS = ["metric_id", "value", "ci_low", "ci_high", "n", "n_pos", "reason"]


def _same_labels(predictions_stamp: dict | None, labels_stamp: dict | None, dataset: str) -> None:
    """Metrics combine the predictions with the labels' metadata (sex, age, quality): both must rest on the same
    labels, or a refresh is half-way and the numbers would mix two releases."""
    assembled = lineage.fact(predictions_stamp, "inputs", "labels", "version")
    current = lineage.fact(labels_stamp, "version")
    if predictions_stamp is not None and assembled != current:
        raise dg.Failure(f"the predictions of {dataset} were assembled from labels version {assembled}, but the labels "
                         f"are now version {current}: materialise predictions[{dataset}] first (the refresh sensor "
                         "does so on its own).")


def metrics_metadata(table: pd.DataFrame, unavailable: int, checks: frozenset[str] = frozenset()) -> dict:
    defined = table["value"].notna()
    return {
        "dagster/row_count": len(table),
        "rows_by_axis": dg.MetadataValue.json(table["axis"].value_counts().to_dict()),
        "undefined_rows": int((~defined).sum()),
        "unavailable_configurations": unavailable,
        "leaderboard": dg.MetadataValue.md(leaderboard_markdown(table, pipeline_checks=checks)),
    }


# ------------------------------------------------------------------------------------------ cross-dataset


def _cross_dataset_asset(specs: dict, encoders: list[str], registered: list[str]):
    @dg.asset(
        deps=["probe_predictions", "image_embeddings", "harmonised_labels"],
        group_name=EVALUATION_GROUP,
        kinds={"scikitlearn", "parquet"},
        automation_condition=GATED_EAGER,
        description=CROSS_DESCRIPTION,
    )
    def cross_dataset_metrics(context: dg.AssetExecutionContext, config: MetricsConfig, storage: FocusStorage):
        from focus_dagster.evaluation.tables import Settings, metric_rows, with_unavailable

        datasets = [d for d in registered if storage.has_labels(d)]
        read = {d: storage.read_stamped_labels(d) for d in datasets}
        labels = {d: frame for d, (frame, _) in read.items()}
        parts, gaps, pairs, trained = [], [], {}, {}
        for (model, source, target), configs in by_pair(cross_dataset_configurations(encoders, labels)):
            if (model, source) not in trained:
                trained[model, source] = _trained_probes(storage, model, source)
            part, missing, pairs[model, source, target] = _cross_pair(
                context, storage, specs[model], configs, trained[model, source], read[target])
            parts += part
            gaps += missing
        samples = pd.concat(parts, ignore_index=True) if parts else empty_predictions()
        version = frame_version(samples)
        stamps = {key: lineage.stamp("cross_dataset_metrics", layout.CROSS_PARTITION, context.run_id, version,
                                     code_version=code_version(), inputs=inputs,
                                     configuration={"model": key[0], "train_dataset": key[1], "dataset": key[2]})
                  for key, inputs in pairs.items()}
        ids = {key: lineage.stamp_id(value) for key, value in stamps.items()}
        samples["lineage_id"] = pd.Series(
            [ids[key] for key in zip(samples["model"], samples["train_dataset"], samples["dataset"])],
            index=samples.index, dtype=object)
        samples["predictions_version"] = version
        samples["partition"] = layout.CROSS_PARTITION
        gaps = [{**row, "lineage_id": ids[row["model"], row["train_dataset"], row["dataset"]]} for row in gaps]
        unavailable = unavailable_frame(gaps, predictions_version=version, run_id=context.run_id,
                                        partition=layout.CROSS_PARTITION)
        rows = metric_rows(samples, pd.DataFrame({"image_id": samples["image_id"].unique()}), {},
                           Settings(config.n_resamples, config.seed), say=context.log.info,
                           what="cross-dataset metrics")
        table = with_unavailable(with_lineage(rows, samples, context.run_id), unavailable, context.run_id)
        table = table.assign(partition=layout.CROSS_PARTITION)
        stamp = lineage.stamp("cross_dataset_metrics", layout.CROSS_PARTITION, context.run_id, version,
                              code_version=code_version(), pairs=len(ids))
        storage.replace_partitions([(layout.SAMPLES, layout.CROSS_PARTITION, samples),
                                    (layout.UNAVAILABLE, layout.CROSS_PARTITION, unavailable),
                                    (layout.METRICS, layout.CROSS_PARTITION, table)], stamp=stamp,
                                   stamps=tuple(stamps.values()))
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(table),
            "predictions": len(samples),
            "pairs": int(samples.groupby(["model", "train_dataset", "dataset", "task"]).ngroups) if len(samples) else 0,
            "unavailable": dg.MetadataValue.json(_unavailable_summary(gaps)),
            "matrix": dg.MetadataValue.md(cross_matrix_markdown(table)),
        })

    return cross_dataset_metrics


@dataclass
class _Trained:
    """The in-domain probes of one encoder on one dataset with their stamp, or the reason there are none."""

    stamp: dict | None = None
    probes: dict = field(default_factory=dict)  # task -> Probe
    skipped: dict = field(default_factory=dict)  # task -> why no probe was fit
    reason: str | None = None


def _trained_probes(storage, model: str, source: str) -> _Trained:
    from focus_dagster.evaluation.probes import load_stamped_probes

    path = storage.artifact_path(layout.PROBES.file(model, source))
    if not path.exists():
        return _Trained(reason=_not_materialised("probe_predictions", model, source))
    probes, stamp = load_stamped_probes(path)
    if stamp is None:
        return _Trained(reason=f"probe_predictions {model}/{source} was written without lineage (by an earlier "
                               "version): rematerialise it")
    return _Trained(stamp, probes, lineage.fact(stamp, "facts", "skipped") or {})


def _cross_pair(context, storage, spec, configs, trained: _Trained, target: tuple):
    """The predictions of one encoder's probes trained on dataset A for dataset B, an unavailable row (with the
    reason) for each of the pair's tasks without test predictions, and the stamps of what the pair read: the
    probes (the training dataset's chain), B's embeddings and B's labels."""
    from focus_dagster.evaluation.probes import cross_dataset_scores

    model, source, dataset = configs[0].model, configs[0].train_dataset, configs[0].dataset
    target_labels, labels_stamp = target
    embeddings = layout.EMBEDDINGS.file(model, dataset)
    present = storage.artifact_path(embeddings).exists()
    vectors, embeddings_stamp = storage.read_stamped_parquet(embeddings) if present else (None, None)
    inputs = {"probes": trained.stamp, "embeddings": embeddings_stamp, "labels": labels_stamp}
    row_lineage = {**_row_lineage(labels_stamp, trained.stamp, lineage.fact(trained.stamp, "inputs", "labels")),
                   "source_asset": "probe_predictions"}
    reason = trained.reason or _cross_unusable(model, source, dataset, trained.stamp, embeddings_stamp, labels_stamp,
                                               present)
    if reason:
        return [], [{**c.unavailable(reason), **row_lineage} for c in configs], inputs
    frames = [cross_dataset_scores(trained.probes[c.task], source, vectors, target_labels)
              for c in configs if c.task in trained.probes]
    scored = with_labels(pd.concat([f for f in frames if len(f)] or [_no_scores()], ignore_index=True),
                         target_labels, f"probe {model}/{source} on {dataset}")
    checked = finite_scores(scored, f"probe {model}/{source} on {dataset}")
    missing = unavailable_rows(configs, scored, checked.frame, f"probe_predictions {model}/{source} on {dataset}",
                               trained.skipped)
    part = finish(checked.frame, dataset=dataset, model=model, interface=spec.interface, method=PROBE_METHOD,
                  **row_lineage, run_id=context.run_id)
    return ([part] if len(part) else []), [{**row, **row_lineage} for row in missing], inputs


def _cross_unusable(model, source, dataset, probes, embeddings, labels_stamp, present: bool) -> str | None:
    """Why B's embeddings cannot be scored by A's probes: not materialised, from other labels than B's current
    ones, or from other weights than those the probes were fit on."""
    name = f"image_embeddings {model}/{dataset}"
    if not present:
        return _not_materialised("image_embeddings", model, dataset)
    if embeddings is None:
        return f"{name} was written without lineage (by an earlier version): rematerialise it"
    used, current = lineage.fact(embeddings, "inputs", "labels", "version"), lineage.fact(labels_stamp, "version")
    if used != current:
        return (f"{name} was computed from labels version {used}, but the labels of {dataset} are now version "
                f"{current}: rematerialise it")
    fit_on = (_model_of(probes) or {}).get("weights_sha256")
    scored_with = (_model_of(embeddings) or {}).get("weights_sha256")
    if fit_on != scored_with:
        return (f"the probes of {model} on {source} were fit on embeddings of weights {fit_on}, {name} comes from "
                f"weights {scored_with}: rematerialise the older of the two")
    return None


def _no_scores() -> pd.DataFrame:
    from focus_dagster.evaluation.probes import PROBE_COLUMNS

    return pd.DataFrame({c: pd.Series(dtype=float if c in ("score", "threshold") else object) for c in PROBE_COLUMNS})


# ------------------------------------------------------------------------------------------- leaderboard


def pipeline_checks(specs: dict) -> frozenset[str]:
    """The models whose numbers test the plumbing only (`domain: pipeline-check`): the selected ones and the
    catalog's, since a metric row can outlive its model's place in focus.yaml."""
    from focus_dagster.models.catalog import CATALOG

    return frozenset(model for model, spec in {**CATALOG, **specs}.items() if spec.is_pipeline_check)


def _leaderboard_asset(with_cross: bool, checks: frozenset[str]):
    deps = ["metrics"] + (["cross_dataset_metrics"] if with_cross else [])

    @dg.asset(
        deps=deps,
        group_name=EVALUATION_GROUP,
        kinds={"parquet", "markdown"},
        automation_condition=GATED_EAGER,
        description=LEADERBOARD_DESCRIPTION,
    )
    def leaderboard(context: dg.AssetExecutionContext, storage: FocusStorage) -> dg.MaterializeResult:
        table = storage.read_table(layout.METRICS)
        text = leaderboard_markdown(table, top=5, pipeline_checks=checks)
        path, _ = storage.write_artifact(layout.LEADERBOARD_REPORT, lambda partial: partial.write_text(text + "\n"))
        shown = sorted(checks & set(table["model"].dropna()))
        return dg.MaterializeResult(metadata={"leaderboard": dg.MetadataValue.md(text),
                                              "path": dg.MetadataValue.path(str(path)), "metric_rows": len(table),
                                              "pipeline_check_models": dg.MetadataValue.json(shown)})

    return leaderboard
