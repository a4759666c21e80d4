"""Multimodal-LLM outputs: the yes/no questions each dataset is asked, and the token probabilities of the answers."""

import hashlib
import json
from dataclasses import dataclass

import dagster as dg
import pandas as pd
from pydantic import Field

from assets.automation import GATED_EAGER, data_version
from assets.backfill import SINGLE_RUN, Materialised, each_dataset
from assets.gpu import gpu_asset
from assets.models import MODEL_GROUP, image_files, model_output_stamp, model_run_metadata
from assets.partitions import BY_DATASET, MLLMS, Registered, model_and_dataset
from checks.models import checkpoint_audit_result
from checks.questions import no_label_leak_result, no_label_leak_spec
from focus_dagster import lineage
from focus_dagster.evaluation.inputs import asked_tasks, questions_refusal
from focus_dagster.labels import TASKS, defined_tasks
from focus_dagster.labels.rule_lookup import rule_for
from focus_dagster.markup import md_text
from focus_dagster.models.preprocessing import preprocess_fingerprint
from focus_dagster.questions import QuestionBook, find_leaks, unknown_fields
from focus_dagster.version import code_version
from resources import DatasetRoots, FocusStorage, ModelHub, layout

TOKEN_PROBABILITIES_JOB = "focus_token_probabilities"

QUESTIONS_DESCRIPTION = (
    "The yes/no question asked of multimodal LLMs for each task this dataset defines, rendered per image "
    "(Parquet in the artifact store: image_id, task, question_id, question). Questions come from one versioned "
    "registry (focus_dagster/questions.py, or `questions:` in focus.yaml). The blocking check `no_label_leak` "
    "fails when a question shows the model a label-defining column, a file name, or context whose values decide "
    "the label (the reference benchmark's BRSET prompts did): token probabilities are then not computed."
)
TOKEN_PROBABILITIES_DESCRIPTION = (
    "Yes/no answers of one multimodal LLM on one dataset, all applicable tasks in one pass over the images: per "
    "image and task, p_yes and p_no (probability mass of the single-token yes/no variants at the first generated "
    "token, softmax over the whole vocabulary), score = p_yes / (p_yes + p_no), the reference benchmark's "
    "p_yes_reference (max over variants, raw), the parsed greedy answer (yes / no / unparseable) and the most "
    "likely first token. Batched single forward passes, left padding, bf16 on a GPU; work kept in shards so an "
    "interrupted run resumes. Parquet in the artifact store, sorted by image_id and task; unreadable images in a "
    "quarantine file beside it, counted in the metadata."
)


class YesNoRunConfig(dg.Config):
    answer_tokens: int = Field(
        default=4,
        description="Greedy answer tokens generated to record the parsed answer (0: first-token probabilities only).",
    )


def definitions(registered: Registered) -> dg.Definitions:
    """yes_no_questions per dataset and token_probabilities per MLLM x dataset (nothing when no MLLM is selected)."""
    if not registered.models(MLLMS):
        return dg.Definitions()
    partitions = registered.model_partitions(MLLMS)
    scores = dg.define_asset_job(
        TOKEN_PROBABILITIES_JOB, selection=dg.AssetSelection.assets(layout.TOKEN_PROBABILITIES_ASSET),
        partitions_def=partitions,
        description="Yes/no token probabilities of every selected multimodal LLM (model x dataset).",
    )
    return dg.Definitions(
        assets=[_questions_asset(registered.datasets, registered.questions),
                _token_probabilities_asset(partitions, registered)],
        jobs=[scores],
    )


def _questions_asset(datasets: dg.StaticPartitionsDefinition, book: QuestionBook):
    @dg.asset(
        partitions_def=datasets,
        deps=[layout.HARMONISED_LABELS],
        group_name=MODEL_GROUP,
        kinds={"parquet"},
        automation_condition=GATED_EAGER,
        backfill_policy=SINGLE_RUN,
        description=QUESTIONS_DESCRIPTION,
        check_specs=[no_label_leak_spec(datasets)],
    )
    def yes_no_questions(context: dg.AssetExecutionContext, storage: FocusStorage):
        yield from each_dataset(context, lambda dataset: _render_questions(context, dataset, book, storage))

    return yes_no_questions


def _render_questions(context, dataset: str, book: QuestionBook, storage: FocusStorage) -> Materialised:
    """One dataset's questions rendered per image, with the verdict of the label-leak check."""
    labels, labels_stamp = storage.read_stamped_labels(dataset)
    questions = book.for_dataset(dataset, defined_tasks(labels))
    rows = _context_rows(storage, dataset, labels, questions)
    leaks = [leak for q in questions for leak in find_leaks(q, rule_for(dataset), rows)]
    verdict = {q.id: "; ".join(leak.detail for leak in leaks if leak.question_id == q.id) for q in questions}
    rendered = pd.DataFrame([
        {"image_id": image_id, "task": q.task, "question_id": q.id, "question": q.render(row), "leak": verdict[q.id]}
        for image_id, row in zip(rows["image_id"], rows.to_dict("records")) for q in questions
    ], columns=["image_id", "task", "question_id", "question", "leak"])
    # The verdict travels with the questions: token_probabilities refuses a file that records a leak.
    stamp = lineage.stamp(layout.YES_NO_QUESTIONS, dataset, context.run_id, lineage.frame_version(rendered),
                          code_version=code_version(), inputs={"labels": labels_stamp},
                          questions_version=book.version, leaks=len(leaks))
    path, sha = storage.write_parquet(layout.questions_file(dataset), rendered, stamp)
    metadata = {
        "dagster/row_count": len(rendered),
        "questions_version": book.version,
        "questions": dg.MetadataValue.md(_questions_table(questions)),
        "path": dg.MetadataValue.path(str(path)),
        "sha256": sha,
    }
    leak_check = no_label_leak_result(leaks, len(questions), list(rule_for(dataset).label_columns))
    return Materialised({layout.YES_NO_QUESTIONS: metadata}, (leak_check,), stamps={layout.YES_NO_QUESTIONS: stamp})


def _context_rows(storage: FocusStorage, dataset: str, labels: pd.DataFrame, questions) -> pd.DataFrame:
    """The labels, joined with the dataset's native records when a question has per-image placeholders."""
    if not any(q.fields for q in questions):
        return labels
    records = storage.read_records(dataset)
    native = records.drop(columns=[c for c in records.columns if c in labels.columns and c != "image_id"])
    rows = labels.merge(native, on="image_id", how="left")
    for q in questions:
        missing = unknown_fields(q, rows.columns)
        if missing:
            raise dg.Failure(
                f"question {q.id!r} ({q.text!r}) names {missing}, which {dataset} has neither as metadata nor in its "
                f"label file; available: {sorted(set(rows.columns) - set(TASKS))}. Fix `questions:` in focus.yaml."
            )
    return rows


def _questions_table(questions) -> str:
    """The questions asked, as Markdown; their text comes from focus.yaml, so it is escaped."""
    lines = ["| task | id | question |", "|---|---|---|"]
    lines += [f"| {md_text(q.task)} | `{q.id}` | {md_text(q.text)} |" for q in questions]
    return "\n".join(lines)


def yes_no_inputs() -> list[dg.AssetDep]:
    """What a yes/no scoring step reads: its dataset's questions and labels."""
    return [dg.AssetDep(layout.YES_NO_QUESTIONS, partition_mapping=BY_DATASET),
            dg.AssetDep(layout.HARMONISED_LABELS, partition_mapping=BY_DATASET)]


def _token_probabilities_asset(partitions: dg.MultiPartitionsDefinition, registered: Registered):
    book = registered.questions

    @gpu_asset(
        registered,
        partitions_def=partitions,
        kinds={"parquet"},
        deps=yes_no_inputs(),
        group_name=MODEL_GROUP,
        automation_condition=GATED_EAGER,
        description=TOKEN_PROBABILITIES_DESCRIPTION,
    )
    def token_probabilities(
        context: dg.AssetExecutionContext, config: YesNoRunConfig, datasets: DatasetRoots, models: ModelHub,
        storage: FocusStorage,
    ):
        from focus_dagster.inference.engine import pick_device

        model_id, dataset = model_and_dataset(context)
        labels, labels_stamp = storage.read_stamped_labels(dataset)
        asked, questions_stamp = storage.read_stamped_parquet(layout.questions_file(dataset))
        tasks = checked_tasks(asked, dataset, book)
        device = pick_device()
        mllm = models.load(model_id, device, MLLMS)  # a refused load fails the checkpoint audit (assets/gpu.py)
        output = YesNoOutput(layout.TOKEN_PROBABILITIES_ASSET, layout.TOKEN_PROBABILITIES, model_id, dataset)
        metadata, stamp = score_yes_no(
            context, output, mllm, datasets, storage, book, labels, asked, tasks, device, config.answer_tokens,
            inputs={"labels": labels_stamp, "questions": questions_stamp})
        yield dg.MaterializeResult(metadata=metadata, data_version=data_version(stamp))
        yield checkpoint_audit_result(mllm.report)

    return token_probabilities


@dataclass(frozen=True)
class YesNoOutput:
    """Where one yes/no scoring step writes: its asset, its files, and the key (a model, or an adapter) and
    dataset that name them."""

    asset: str
    files: layout.ModelOutputFiles
    key: str
    dataset: str


def score_yes_no(context, output: YesNoOutput, mllm, datasets: DatasetRoots, storage: FocusStorage,
                 book: QuestionBook, labels: pd.DataFrame, asked: pd.DataFrame, tasks: list[str], device: str,
                 answer_tokens: int, inputs: dict, fingerprint: dict | None = None, facts: dict | None = None
                 ) -> tuple[dict, dict]:
    """Score every image of `labels` with `mllm` on `tasks` (the batched first-token path), write the
    probabilities with their lineage (`inputs`: the stamps read; `facts`: what else identifies the scores) and
    the unreadable images beside them; returns the materialisation metadata and the stamp written."""
    if mllm.tokens.excluded:
        context.log.warning(f"{output.key}: answer variants left out (not single tokens): {mllm.tokens.excluded}")
    frame, run = yes_no_run(context, mllm, datasets, book, labels, asked, tasks, device, answer_tokens,
                            storage.artifact_path(output.files.shards(output.key, output.dataset)), output.dataset,
                            what=f"yes/no scores {output.key}@{output.dataset}", fingerprint=fingerprint,
                            pixel_cache=storage.artifact_path(layout.pixels_dir(output.dataset)))
    stamp = model_output_stamp(output.asset, output.key, output.dataset, context.run_id, frame, mllm, **inputs,
                               answer_tokens=answer_tokens, **(facts or {}))
    path, sha = storage.write_parquet(output.files.file(output.key, output.dataset), frame, stamp)
    quarantine = pd.DataFrame(sorted(run.failed.items()), columns=["image_id", "reason"])
    storage.write_parquet(output.files.quarantine(output.key, output.dataset), quarantine)
    return _probability_metadata(mllm, run, frame, output.dataset, book, path, sha), stamp


def yes_no_run(context, mllm, datasets: DatasetRoots, book: QuestionBook, labels: pd.DataFrame, asked: pd.DataFrame,
               tasks: list[str], device: str, answer_tokens: int, work_dir, dataset: str, what: str,
               fingerprint: dict | None = None, alteration=None, pixel_cache=None):
    """The batched first-token path over the images of `labels` that have questions: (probabilities frame, run).
    `alteration` (a degradation) changes each image's pixels on the model's grid; its shards are then keyed by it
    as well. `pixel_cache` keeps the pixels for the next run with the same preprocessing (the degradations)."""
    from focus_dagster.inference.engine import run_fingerprint, run_on_images
    from focus_dagster.inference.yes_no import probabilities_frame, yes_no_scorer

    per_image = _questions_by_image(asked, tasks)
    scorer = yes_no_scorer(mllm, [book.question(t, dataset).text for t in tasks], answer_tokens, per_image)
    items = [item for item in image_files(datasets, dataset, labels) if item[0] in per_image]
    run = run_on_images(
        scorer, items, mllm.spec.preprocess, work_dir=work_dir,
        fingerprint=run_fingerprint({**_fingerprint_parts(mllm, asked.loc[asked["task"].isin(tasks)], answer_tokens),
                                     **(fingerprint or {})}),
        device=device, progress=context.log.info, pass_ids=True, alteration=alteration, pixel_cache=pixel_cache,
        what=f"{what} ({len(tasks)} questions per image)",
    )
    return probabilities_frame(run.image_ids, run.outputs, tasks, asked, mllm.processor.tokenizer), run


def checked_tasks(asked: pd.DataFrame, dataset: str, book: QuestionBook) -> list[str]:
    """The tasks asked, after making sure the stored questions are the registry's and none leaks (again)."""
    refusal = questions_refusal(asked, dataset, book)
    if refusal:
        raise dg.Failure(refusal)
    return asked_tasks(asked)


def _questions_by_image(asked: pd.DataFrame, tasks: list[str]) -> dict[str, tuple[str, ...]]:
    table = asked.pivot(index="image_id", columns="task", values="question")[tasks]
    return {image_id: tuple(row) for image_id, row in zip(table.index, table.to_numpy())}


def _fingerprint_parts(mllm, asked: pd.DataFrame, answer_tokens: int) -> dict:
    from focus_dagster import __version__

    spec = mllm.spec
    questions = hashlib.sha256(asked.to_csv(index=False).encode()).hexdigest()
    return {"model": spec.id, "revision": spec.revision, "weights": mllm.report.weights_sha256,
            "preprocess": preprocess_fingerprint(spec.preprocess), "family": spec.family, "code": __version__,
            "questions": questions,
            "answer_tokens": answer_tokens, "tokens": json.dumps(mllm.tokens.summary(), sort_keys=True)}


def _probability_metadata(mllm, run, frame: pd.DataFrame, dataset: str, book: QuestionBook, path, sha: str) -> dict:
    answers = frame["answer"].value_counts().to_dict()
    return {
        "dagster/row_count": len(frame),
        "path": dg.MetadataValue.path(str(path)),
        "sha256": sha,
        "images": len(run.image_ids),
        "tasks": sorted(frame["task"].unique().tolist()),
        "questions_version": book.version,
        "question_ids": sorted(frame["question_id"].dropna().unique().tolist()),
        "answers": dg.MetadataValue.json({str(k): int(v) for k, v in answers.items()}),
        "answer_tokens": dg.MetadataValue.json(mllm.tokens.summary()),
        "mean_score_by_task": dg.MetadataValue.json(
            {t: round(float(s), 4) for t, s in frame.groupby("task")["score"].mean().items()}),
        "model_family": mllm.family_name,
        **model_run_metadata(mllm, run, dataset),
    }
