"""LoRA adapters of the multimodal LLMs: one per base model x training dataset x task, trained on the training
split with the questions the yes/no scorer asks."""

import json

import dagster as dg

from assets.automation import GATED_EAGER, data_version
from assets.gpu import gpu_asset
from assets.mllm import YesNoOutput, YesNoRunConfig, score_yes_no
from assets.models import MODEL_GROUP
from assets.partitions import MLLMS, Registered, fan_out
from checks.models import checkpoint_audit_result, checkpoint_not_loaded
from focus_dagster import lineage
from focus_dagster.adapter_plan import AdapterKey, Evaluation, TrainingSet, training_set
from focus_dagster.version import code_version
from resources import DatasetRoots, FocusStorage, ModelHub, layout

LORA_ADAPTERS_JOB = "focus_lora_adapters"
LORA_EFFECTS_JOB = "focus_lora_effects"
ADAPTED_SCORES_JOB = "focus_adapted_token_probabilities"

LORA_ADAPTERS_DESCRIPTION = (
    "A LoRA adapter of one multimodal LLM, fine-tuned on one task of one training dataset (partition "
    "`model.dataset.task`). Chat-template SFT on the training split only: the user turn is the image and the "
    "versioned yes/no question of yes_no_questions, the assistant turn is \"yes\" or \"no\" from the harmonised "
    "label, the loss on the answer token only. peft LoRA r=8, alpha=16, dropout 0.05 on every linear layer, lm_head "
    "and embed_tokens saved where the architecture has them; AdamW lr 2e-5, 1 epoch, effective batch 16 (all set by "
    "`lora.settings` in focus.yaml and recorded). Seeded; a killed run resumes from its last checkpoint. Written "
    "atomically to the artifact store (adapter_model.safetensors, adapter_config.json, manifest.json: base model, "
    "revision and weights hash, questions and labels versions, settings, steps, loss curve). A training split with "
    "one class gets no adapter: the reason is recorded beside it."
)


def definitions(registered: Registered) -> dg.Definitions:
    """lora_adapters and adapted_token_probabilities over the adapters focus.yaml asks for (nothing when there
    are none)."""
    adapters = registered.adapters()
    if not adapters:
        return dg.Definitions()
    partitions = dg.StaticPartitionsDefinition([adapter.key for adapter in adapters])
    scored = registered.evaluations()
    scored_partitions = dg.StaticPartitionsDefinition([evaluation.key for evaluation in scored])
    jobs = [
        dg.define_asset_job(LORA_ADAPTERS_JOB, selection=dg.AssetSelection.assets(layout.LORA_ADAPTERS),
                            partitions_def=partitions,
                            description="Train the LoRA adapters (model x training dataset x task)."),
        dg.define_asset_job(ADAPTED_SCORES_JOB,
                            selection=dg.AssetSelection.assets(layout.ADAPTED_TOKEN_PROBABILITIES_ASSET),
                            partitions_def=scored_partitions,
                            description="Score every adapter on every dataset that defines its task."),
        dg.define_asset_job(LORA_EFFECTS_JOB, selection=dg.AssetSelection.assets(layout.LORA_EFFECTS_ASSET),
                            description="Compare every adapted configuration with its base model."),
    ]
    return dg.Definitions(assets=[
        _adapters_asset(partitions, fan_out((a.dataset, a.key) for a in adapters), registered),
        _adapted_asset(scored_partitions, scored, registered),
        _effects_asset(registered.dataset_keys),
    ], jobs=jobs)


def _adapters_asset(partitions: dg.StaticPartitionsDefinition, by_training: dg.PartitionMapping,
                    registered: Registered):
    @gpu_asset(
        registered,
        partitions_def=partitions,
        kinds={"safetensors"},
        deps=[dg.AssetDep(layout.HARMONISED_LABELS, partition_mapping=by_training),
              dg.AssetDep(layout.YES_NO_QUESTIONS, partition_mapping=by_training)],
        group_name=MODEL_GROUP,
        automation_condition=GATED_EAGER,
        description=LORA_ADAPTERS_DESCRIPTION,
    )
    def lora_adapters(context: dg.AssetExecutionContext, datasets: DatasetRoots, models: ModelHub,
                      storage: FocusStorage):
        from focus_dagster.inference.engine import pick_device
        from focus_dagster.lora.settings import LoraSettings

        adapter = AdapterKey.parse(context.partition_key)
        labels, labels_stamp = storage.read_stamped_labels(adapter.dataset)
        asked, questions_stamp = storage.read_stamped_parquet(layout.questions_file(adapter.dataset))
        examples = training_set(labels, asked, adapter.task, datasets.root(adapter.dataset))
        settings = LoraSettings(**registered.lora.settings)
        inputs = {"labels": labels_stamp, "questions": questions_stamp}
        if examples.one_class_reason:
            yield from _no_adapter(context, storage, adapter, examples, settings, inputs)
            return
        device = pick_device()
        mllm = models.load(adapter.model, device, MLLMS)  # a refused load fails the checkpoint audit (assets/gpu.py)
        yield from _train(context, storage, adapter, examples, settings, inputs, mllm, device,
                          registered.questions.version)
        yield checkpoint_audit_result(mllm.report)

    return lora_adapters


def _train(context, storage: FocusStorage, adapter: AdapterKey, examples: TrainingSet, settings, inputs: dict, mllm,
           device: str, questions_version: str):
    from focus_dagster.files import file_sha256
    from focus_dagster.lora.adapters import ADAPTER_WEIGHTS
    from focus_dagster.lora.train import Example, train_adapter, write_adapter

    trained = train_adapter(
        mllm, [Example(image_id, path, question, answer) for image_id, path, question, answer in examples.rows],
        settings, storage.artifact_path(layout.ADAPTERS.work(adapter.key)), device=device, progress=context.log.info,
    )
    version = file_sha256(trained.folder / ADAPTER_WEIGHTS)  # the adapter's identity
    stamp = lineage.stamp(layout.LORA_ADAPTERS, adapter.key, context.run_id, version, code_version=code_version(),
                          inputs=inputs, model=lineage.model_facts(mllm.spec, mllm.report))
    manifest = _manifest(adapter, examples, settings, trained, mllm, questions_version, stamp)
    destination = storage.artifact_path(layout.ADAPTERS.adapter(adapter.key))
    sha = write_adapter(trained, destination, manifest, sha256=version)
    storage.artifact_path(layout.ADAPTERS.skipped(adapter.key)).unlink(missing_ok=True)
    yield dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(destination)), "sha256": sha, "base_model": adapter.model,
        "training_dataset": adapter.dataset, "task": adapter.task, "examples": len(examples.rows),
        "positives": examples.positives, "negatives": examples.negatives, "steps": trained.steps,
        "loss_first": round(trained.losses[0], 4) if trained.losses else None,
        "loss_last": round(trained.losses[-1], 4) if trained.losses else None,
        "loss_curve": dg.MetadataValue.md(_loss_table(trained.losses)),
        "examples_per_second": round(trained.examples_per_second, 2), "seconds": round(trained.seconds, 1),
        "device": trained.device, "micro_batch": trained.micro_batch, "accumulation": trained.accumulation,
        "resumed_from_step": trained.resumed_from_step, "settings": dg.MetadataValue.json(settings.as_dict()),
    }, data_version=data_version(stamp))


def _manifest(adapter: AdapterKey, examples: TrainingSet, settings, trained, mllm, questions_version: str,
              stamp: dict) -> dict:
    """What an adapter is: its base model (id, revision, weights hash), training data and settings, how training
    went, and its lineage stamp (what the step read)."""
    return {
        "adapter": adapter.key, "base_model": adapter.model, "base_revision": mllm.spec.revision,
        "base_weights_sha256": mllm.report.weights_sha256, "training_dataset": adapter.dataset, "task": adapter.task,
        "questions_version": questions_version,
        "labels_version": lineage.fact(stamp, "inputs", "labels", "version"),
        "examples": len(examples.rows), "positives": examples.positives, "negatives": examples.negatives,
        "settings": settings.as_dict(), "seed": settings.seed, "steps": trained.steps, "losses": trained.losses,
        "micro_batch": trained.micro_batch, "accumulation": trained.accumulation, "device": trained.device,
        "seconds": trained.seconds, "lineage": stamp,
    }


def _no_adapter(context, storage: FocusStorage, adapter: AdapterKey, examples: TrainingSet, settings, inputs: dict):
    """A training split with one class: no adapter, and the reason recorded where the adapter would be."""
    import shutil

    reason = examples.one_class_reason
    record = {"adapter": adapter.key, "reason": reason, "positives": examples.positives,
              "negatives": examples.negatives, "settings": settings.as_dict(),
              "lineage": lineage.stamp(layout.LORA_ADAPTERS, adapter.key, context.run_id, "no-adapter",
                                       code_version=code_version(), inputs=inputs)}
    path, _ = storage.write_artifact(layout.ADAPTERS.skipped(adapter.key),
                                     lambda partial: partial.write_text(json.dumps(record, indent=2, default=str)))
    # An adapter trained on earlier labels no longer describes this training split.
    shutil.rmtree(storage.artifact_path(layout.ADAPTERS.adapter(adapter.key)), ignore_errors=True)
    context.log.warning(f"{adapter.key}: no adapter: {reason}")
    yield dg.MaterializeResult(metadata={"adapter": "none", "reason": reason, "path": dg.MetadataValue.path(str(path)),
                                         "positives": examples.positives, "negatives": examples.negatives},
                               data_version=data_version(record["lineage"]))
    yield checkpoint_not_loaded("nothing to train on")


def _loss_table(losses: list[float], rows: int = 12) -> str:
    """The loss curve as a Markdown table (every step, or `rows` evenly spaced ones)."""
    if not losses:
        return "no optimizer step"
    picked = sorted({round(i * (len(losses) - 1) / max(rows - 1, 1)) for i in range(min(rows, len(losses)))})
    return "\n".join(["| step | loss |", "|---|---|", *(f"| {i + 1} | {losses[i]:.4f} |" for i in picked)])


ADAPTED_DESCRIPTION = (
    "Yes/no answers of one adapted multimodal LLM (a lora_adapters partition applied to its base model) on one "
    "dataset that defines the adapter's task (partition `adapter@dataset`: in-domain on the adapter's training "
    "dataset, out-of-domain elsewhere), through the same batched first-token path, questions and columns as "
    "token_probabilities, for every image of the dataset. The base model's weights must be those the adapter was "
    "trained on (weights hash in its manifest), else nothing is scored. The adapter's hash and lineage travel with "
    "the scores."
)


def _adapted_asset(partitions: dg.StaticPartitionsDefinition, scored: list[Evaluation], registered: Registered):
    # No checkpoint audit of its own: the adapter is checked against the hash in its manifest when it is applied.
    @gpu_asset(
        registered,
        partitions_def=partitions,
        kinds={"parquet"},
        audited=False,
        deps=[dg.AssetDep(layout.LORA_ADAPTERS, partition_mapping=fan_out((e.adapter.key, e.key) for e in scored)),
              dg.AssetDep(layout.YES_NO_QUESTIONS, partition_mapping=fan_out((e.dataset, e.key) for e in scored)),
              dg.AssetDep(layout.HARMONISED_LABELS, partition_mapping=fan_out((e.dataset, e.key) for e in scored))],
        group_name=MODEL_GROUP,
        automation_condition=GATED_EAGER,
        description=ADAPTED_DESCRIPTION,
    )
    def adapted_token_probabilities(context: dg.AssetExecutionContext, config: YesNoRunConfig,
                                    datasets: DatasetRoots, models: ModelHub, storage: FocusStorage):
        from focus_dagster.inference.engine import pick_device
        from focus_dagster.lora.train import load_adapted, read_manifest

        evaluation = Evaluation.parse(context.partition_key)
        adapter, dataset = evaluation.adapter, evaluation.dataset
        reason = storage.adapter_skipped_reason(adapter.key)
        output = YesNoOutput(layout.ADAPTED_TOKEN_PROBABILITIES_ASSET, layout.ADAPTED_TOKEN_PROBABILITIES, adapter.key,
                             dataset)
        if reason:
            storage.artifact_path(output.files.file(adapter.key, dataset)).unlink(missing_ok=True)
            context.log.warning(f"{evaluation.key}: nothing to score, no adapter was trained: {reason}")
            return dg.MaterializeResult(metadata={"adapter": "none", "reason": reason})
        folder = storage.artifact_path(layout.ADAPTERS.adapter(adapter.key))
        manifest = read_manifest(folder)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        asked, questions_stamp = storage.read_stamped_parquet(layout.questions_file(dataset))
        device = pick_device()
        mllm = load_adapted(models.load(adapter.model, device, MLLMS), folder)
        adapter_sha = manifest["adapter_model_sha256"]  # load_adapted checked the file against it
        metadata, stamp = score_yes_no(
            context, output, mllm, datasets, storage, registered.questions, labels, asked, [adapter.task], device,
            config.answer_tokens, inputs={"labels": labels_stamp, "questions": questions_stamp,
                                          "adapter": manifest["lineage"]},
            fingerprint={"adapter": adapter_sha}, facts={"adapter_sha256": adapter_sha, "in_domain": evaluation.in_domain,
                                                         "training_dataset": adapter.dataset})
        return dg.MaterializeResult(metadata={**metadata, "adapter": adapter.key, "adapter_sha256": adapter_sha,
                                              "in_domain": evaluation.in_domain,
                                              "training_dataset": adapter.dataset},
                                    data_version=data_version(stamp))

    return adapted_token_probabilities


EFFECTS_DESCRIPTION = (
    "What the LoRA adapters change: every adapted configuration (yes_no_lora) against its base model's yes/no "
    "scores on the same test images, by a paired bootstrap (the same resamples for both): deltas of AUROC, accuracy "
    "at 0.5 and at the Youden threshold, ECE and Brier, each with a 95% interval and a two-sided p-value, "
    "Benjamini-Hochberg q-values per metric within in-domain and within out-of-domain (DuckDB `"
    + str(layout.LORA_EFFECTS) + "`), and the mean delta per metric, in-domain vs out-of-domain, per model and "
    "overall, with sign-flip p and q (`" + str(layout.LORA_SUMMARY) + "`). A configuration without adapted or base "
    "scores is a row with the reason. Every row has a metric_id that `focus trace` follows to the adapter, its "
    "training data and both score sets."
)


def _effects_asset(datasets: list[str]):
    from assets.evaluation import EVALUATION_GROUP, MetricsConfig

    @dg.asset(
        deps=[layout.PREDICTIONS],
        group_name=EVALUATION_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        description=EFFECTS_DESCRIPTION,
    )
    def lora_effects(context: dg.AssetExecutionContext, config: MetricsConfig, storage: FocusStorage):
        import pandas as pd

        from focus_dagster.evaluation.adapter_effects import effect_rows

        samples, unavailable, read = [], [], {}
        for dataset in datasets:
            (rows, missing), stamp = storage.read_stamped([(layout.SAMPLES, dataset), (layout.UNAVAILABLE, dataset)],
                                                          layout.PREDICTIONS, dataset)
            samples.append(rows)
            unavailable.append(missing)
            read[f"predictions[{dataset}]"] = stamp
        table, summary = effect_rows(pd.concat(samples, ignore_index=True), pd.concat(unavailable, ignore_index=True),
                                     config.n_resamples, config.seed)
        stamp = lineage.stamp(layout.LORA_EFFECTS_ASSET, None, context.run_id, lineage.frame_version(table),
                              code_version=code_version(), inputs=read)
        storage.replace_partitions([(layout.LORA_EFFECTS, None, table.assign(run_id=context.run_id)),
                                    (layout.LORA_SUMMARY, None, summary.assign(run_id=context.run_id))], stamp=stamp)
        defined = table["delta"].notna()
        return dg.MaterializeResult(metadata={
            "dagster/row_count": len(table), "defined_rows": int(defined.sum()),
            "comparisons": int(table.loc[defined].groupby(["model", "dataset", "task", "train_dataset"]).ngroups),
            "summary": dg.MetadataValue.md(_summary_markdown(summary)),
        })

    return lora_effects


def _summary_markdown(summary) -> str:
    """The overall means as a Markdown table (what the reference reports: in-domain vs out-of-domain)."""
    overall = summary[summary["model"] == "all"]
    if overall.empty:
        return "no comparison yet: no adapted configuration has both adapted and base scores"
    lines = ["| domain | metric | n | mean delta | p | q |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.domain} | {r.metric} | {r.n} | {_number(r.mean_delta, '+.4f')} | {_number(r.p_value, '.3g')} | "
              f"{_number(r.q_value, '.3g')} |" for r in overall.itertuples()]
    return "\n".join(lines)


def _number(value, spec: str) -> str:
    return "–" if value is None or value != value else format(value, spec)
