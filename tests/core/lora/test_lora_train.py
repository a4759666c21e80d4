"""LoRA fine-tuning of the tiny LLaVA: the loss mask, determinism, resuming, out-of-memory, adapter folders."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from focus_dagster.files import file_sha256
from focus_dagster.inference.yes_no import YesNoScorer, last_position_logits, yes_no_scorer
from focus_dagster.lora.batches import IGNORE, answer_loss, load_pixels, training_batch
from focus_dagster.lora.settings import LoraSettings
from focus_dagster.lora.train import (
    AdapterError,
    Example,
    TrainingSetError,
    load_adapted,
    read_manifest,
    train_adapter,
    write_adapter,
)
from focus_dagster.models.catalog import CATALOG
from focus_dagster.models.registry import load_model
from focus_dagster.models.tiny_mllm import build_tiny_mllm
from focus_dagster.questions import DEFAULT_QUESTIONS

# Small steps (4 examples) so a 16-example epoch has 4 of them; a learning rate large enough that a wrong
# resume or a different dropout mask shows in the weights.
SETTINGS = LoraSettings(micro_batch=2, accumulation=2, learning_rate=1e-3, checkpoint_every=0)
# Three wordings, tokenized to different lengths, so batches are left-padded.
QUESTIONS = (DEFAULT_QUESTIONS["any_dr"], DEFAULT_QUESTIONS["gon"], "Glaucoma? Answer with yes or no only.")


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    return build_tiny_mllm(tmp_path_factory.mktemp("tiny_llava") / "model", "llava", seed=0)


def fresh_model(folder: Path):
    """A new load of the tiny LLaVA (loading an adapter changes the model it is loaded onto)."""
    return load_model(replace(CATALOG["tiny_llava"], path=str(folder))).to("cpu")


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> list[Example]:
    """16 noise images of varied sizes (PNG and JPEG), three questions, answers alternating yes/no."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    items = []
    for i in range(16):
        path = folder / f"im{i:02d}.{'png' if i % 3 else 'jpg'}"
        Image.fromarray(rng.integers(0, 256, (30 + i, 40, 3), dtype=np.uint8)).save(path)
        items.append(Example(f"im{i:02d}", path, QUESTIONS[i % 3], "yes" if i % 2 else "no"))
    return items


@pytest.fixture(scope="module")
def reference(model_folder, examples, tmp_path_factory):
    """One uninterrupted run: (its result, its adapter tensors)."""
    trained = train_adapter(fresh_model(model_folder), examples, SETTINGS, tmp_path_factory.mktemp("reference"))
    return trained, load_file(trained.folder / "adapter_model.safetensors")


def assert_same_tensors(left: dict, right: dict) -> None:
    assert left.keys() == right.keys()
    for key in left:
        assert torch.equal(left[key], right[key]), key


def answer_batch(mllm, chosen):
    """The scorer on `mllm`, the examples' pixels, their answer token ids and the training batch of them."""
    scorer = YesNoScorer(mllm.model, mllm.processor, mllm.tokens, [])
    pixels = load_pixels([str(e.image) for e in chosen], mllm.spec.preprocess)
    answers = [mllm.tokens.yes["yes"] if e.answer == "yes" else mllm.tokens.no["no"] for e in chosen]
    return scorer, pixels, answers, training_batch(scorer, pixels, [e.question for e in chosen], answers)


def test_batch_is_the_scoring_prompt_plus_the_answer_and_labels_only_the_answer(model_folder, examples):
    mllm = fresh_model(model_folder)
    chosen = examples[:5]
    scorer, pixels, answers, batch = answer_batch(mllm, chosen)

    # Everything before the answer column is byte for byte what the scorer feeds the model.
    prompts = scorer.inputs(list(pixels), [scorer.prompt(e.question) for e in chosen])
    assert torch.equal(batch["input_ids"][:, :-1], prompts["input_ids"])
    assert torch.equal(batch["attention_mask"][:, :-1], prompts["attention_mask"])
    assert torch.equal(batch["pixel_values"], prompts["pixel_values"])
    assert (batch["attention_mask"][:, -1] == 1).all()
    padded = prompts["attention_mask"] == 0
    assert padded.any(), "the questions differ in length: some rows are left-padded"
    # Labels: -100 everywhere (prompt, image tokens, padding) except the last column, which decodes to the answer.
    labels = batch["labels"]
    assert ((labels != IGNORE).sum(dim=1) == 1).all() and (labels[:, -1] != IGNORE).all()
    decoded = [mllm.processor.tokenizer.decode(row[row != IGNORE]) for row in labels]
    assert decoded == [e.answer for e in chosen]
    read_by_scorer = set(mllm.tokens.yes_ids) | set(mllm.tokens.no_ids)
    assert set(labels[:, -1].tolist()) <= read_by_scorer


def test_loss_is_the_cross_entropy_at_the_position_the_scorer_reads(model_folder, examples):
    mllm = fresh_model(model_folder)
    chosen = examples[:4]
    scorer, pixels, answers, batch = answer_batch(mllm, chosen)
    with torch.no_grad():
        loss_sum, count = answer_loss(mllm.model, batch)
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        full = mllm.model(**inputs).logits  # every position, no logits_to_keep
        scored = last_position_logits(mllm.model, scorer.inputs(list(pixels), [scorer.prompt(e.question) for e in chosen]))
    # The position before the answer is the scorer's first generated position (a causal model: the appended
    # answer does not change it).
    torch.testing.assert_close(full[:, -2], scored, atol=1e-5, rtol=1e-5)
    by_hand = -(full[:, -2] - full[:, -2].logsumexp(dim=-1, keepdim=True))[torch.arange(4), torch.tensor(answers)]
    assert count == 4
    assert loss_sum.item() == pytest.approx(by_hand.sum().item(), rel=1e-5)


def test_same_inputs_give_bit_identical_adapters_and_the_base_model_comes_back(model_folder, examples, reference,
                                                                             tmp_path):
    first, first_tensors = reference
    mllm = fresh_model(model_folder)
    before = {k: v.clone() for k, v in mllm.model.state_dict().items()}
    again = train_adapter(mllm, examples, SETTINGS, tmp_path / "again")
    assert_same_tensors(load_file(again.folder / "adapter_model.safetensors"), first_tensors)
    assert again.losses == first.losses and again.steps == first.steps == 4 and again.examples_seen == 16
    assert again.resumed_from_step is None and again.micro_batch == 2 and again.accumulation == 2
    # The base model is unwrapped: same modules, same weights, nothing left trainable by training.
    after = mllm.model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert type(mllm.model).__name__ == "LlavaForConditionalGeneration" and not mllm.model.training
    # All linear layers carry LoRA (vision tower, projector, language model), the head and embeddings in full.
    keys = list(first_tensors)
    assert any("vision_tower" in k and "lora_A" in k for k in keys) and any("multi_modal_projector" in k for k in keys)
    assert any("language_model.layers.1.mlp.down_proj.lora_B" in k for k in keys)
    assert any(k.endswith("lm_head.weight") for k in keys) and any(k.endswith("embed_tokens.weight") for k in keys)
    assert not any("lm_head.lora" in k for k in keys)


def test_a_run_that_fails_after_step_three_resumes_to_the_uninterrupted_weights(model_folder, examples, reference,
                                                                             tmp_path):
    settings = replace(SETTINGS, checkpoint_every=2)
    mllm = fresh_model(model_folder)
    before = {k: v.clone() for k, v in mllm.model.state_dict().items()}

    def die_after_step_three(line: str) -> None:
        if line.startswith("step 3/"):
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train_adapter(mllm, examples, settings, tmp_path, progress=die_after_step_three)
    assert all(torch.equal(v, before[k]) for k, v in mllm.model.state_dict().items())  # unwrapped on failure too
    assert json.loads((tmp_path / "checkpoint" / "progress.json").read_text())["step"] == 2

    lines: list[str] = []
    resumed = train_adapter(mllm, examples, settings, tmp_path, progress=lines.append)
    assert resumed.resumed_from_step == 2 and lines[0].startswith("resumed from the checkpoint at step 2/4")
    trained, tensors = reference
    assert resumed.losses == trained.losses and resumed.examples_seen == 16
    assert_same_tensors(load_file(resumed.folder / "adapter_model.safetensors"), tensors)
    assert not (tmp_path / "checkpoint").exists()  # removed once the adapter is saved


def test_a_checkpoint_of_other_inputs_is_not_resumed(model_folder, examples, tmp_path):
    settings = replace(SETTINGS, checkpoint_every=1, max_steps=2)
    mllm = fresh_model(model_folder)

    def die_after_step_one(line: str) -> None:
        if line.startswith("checkpoint at step 1/"):
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        train_adapter(mllm, examples, settings, tmp_path, progress=die_after_step_one)
    flipped = [replace(e, answer="no" if e.answer == "yes" else "yes") for e in examples]
    lines: list[str] = []
    run = train_adapter(mllm, flipped, settings, tmp_path, progress=lines.append)
    assert run.resumed_from_step is None and "starting afresh" in lines[0] and run.steps == 2


def test_a_killed_training_process_resumes_to_the_uninterrupted_weights(model_folder, examples, reference, tmp_path):
    """A real kill: a training subprocess SIGKILLed once its first checkpoint is written."""
    settings = replace(SETTINGS, checkpoint_every=2)
    spec = {"model": str(model_folder), "examples": [[e.image_id, str(e.image), e.question, e.answer] for e in examples],
            "settings": settings.__dict__, "work_dir": str(tmp_path / "work"), "threads": torch.get_num_threads()}
    (tmp_path / "job.json").write_text(json.dumps(spec))
    script = textwrap.dedent("""
        import json, sys, time
        from dataclasses import replace
        from pathlib import Path
        import torch
        from focus_dagster.lora.settings import LoraSettings
        from focus_dagster.lora.train import Example, train_adapter
        from focus_dagster.models.catalog import CATALOG
        from focus_dagster.models.registry import load_model

        job = json.loads(Path(sys.argv[1]).read_text())
        torch.set_num_threads(job["threads"])
        mllm = load_model(replace(CATALOG["tiny_llava"], path=job["model"])).to("cpu")
        examples = [Example(i, Path(p), q, a) for i, p, q, a in job["examples"]]

        def report(line):
            print(line, flush=True)
            if line.startswith("checkpoint"):
                time.sleep(600)  # wait here to be killed

        train_adapter(mllm, examples, LoraSettings(**job["settings"]), Path(job["work_dir"]), progress=report)
    """)
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "job.json")], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    watchdog = threading.Timer(300, child.kill)  # a child stuck before its checkpoint fails the test, not the suite
    watchdog.start()
    try:
        for line in child.stdout:
            if line.startswith("checkpoint at step 2/"):
                break
        else:
            pytest.fail(f"the training process ended (code {child.wait()}) before its first checkpoint")
        child.send_signal(signal.SIGKILL)
    finally:
        watchdog.cancel()
        child.kill()
        child.wait()

    resumed = train_adapter(fresh_model(model_folder), examples, settings, tmp_path / "work")
    trained, tensors = reference
    assert resumed.resumed_from_step == 2 and resumed.losses == trained.losses
    assert_same_tensors(load_file(resumed.folder / "adapter_model.safetensors"), tensors)


def test_cuda_out_of_memory_halves_the_micro_batch_and_redoes_the_step(model_folder, examples, tmp_path):
    mllm = fresh_model(model_folder)

    def out_of_memory_above_two(_module, _args, kwargs):
        if kwargs["input_ids"].shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

    hook = mllm.model.register_forward_pre_hook(out_of_memory_above_two, with_kwargs=True)
    settings = replace(SETTINGS, micro_batch=4, accumulation=2, max_steps=1)
    lines: list[str] = []
    try:
        run = train_adapter(mllm, examples, settings, tmp_path / "oom", progress=lines.append)
    finally:
        hook.remove()
    assert (run.micro_batch, run.accumulation, run.steps, run.examples_seen) == (2, 4, 1, 8)
    assert [line for line in lines if "out of memory" in line] == [
        "CUDA out of memory at step 1 with micro-batch 4 x 2: redoing it with 2 x 4"]
    # The redone step is the step a run with micro-batches of 2 takes from the start.
    planned = train_adapter(mllm, examples, replace(settings, micro_batch=2, accumulation=4), tmp_path / "planned")
    assert run.losses == planned.losses
    assert_same_tensors(load_file(run.folder / "adapter_model.safetensors"),
                        load_file(planned.folder / "adapter_model.safetensors"))


def test_a_half_precision_base_trains_float32_weights_under_autocast(model_folder, examples, tmp_path):
    """As on a GPU, where models load in bf16: the trained weights stay float32 (a small step on a bf16 weight
    rounds away), the base comes back in bf16, unchanged."""
    mllm = fresh_model(model_folder)
    mllm.model.to(dtype=torch.bfloat16)
    before = {k: v.clone() for k, v in mllm.model.state_dict().items()}
    run = train_adapter(mllm, examples, replace(SETTINGS, max_steps=2), tmp_path)
    tensors = load_file(run.folder / "adapter_model.safetensors")
    assert {t.dtype for t in tensors.values()} == {torch.float32} and all(np.isfinite(run.losses))
    after = mllm.model.state_dict()
    assert all(after[k].dtype == torch.bfloat16 and torch.equal(after[k], v) for k, v in before.items())


def test_a_training_set_with_one_answer_is_refused_with_the_counts(model_folder, examples, tmp_path):
    mllm = fresh_model(model_folder)
    all_yes = [replace(e, answer="yes") for e in examples]
    with pytest.raises(TrainingSetError, match="16 'yes' and 0 'no'"):
        train_adapter(mllm, all_yes, SETTINGS, tmp_path)
    with pytest.raises(ValueError, match="other than 'yes' or 'no'.*im00: 'maybe'"):
        train_adapter(mllm, [replace(examples[0], answer="maybe"), *examples[1:]], SETTINGS, tmp_path)
    with pytest.raises(TrainingSetError, match="do not exist.*im01"):
        train_adapter(mllm, [examples[0], replace(examples[1], image=tmp_path / "gone.png"), *examples[2:]],
                      SETTINGS, tmp_path)


def test_a_written_adapter_loads_onto_its_base_and_changes_its_scores(model_folder, reference, tmp_path):
    trained, tensors = reference
    destination = tmp_path / "store" / "adapter"
    sha = write_adapter(trained, destination, {"dataset": "brset", "task": "any_dr"})
    assert sorted(p.name for p in destination.iterdir() if p.suffix != ".md") == [
        "adapter_config.json", "adapter_model.safetensors", "manifest.json"]
    assert sha == file_sha256(destination / "adapter_model.safetensors")
    manifest = read_manifest(destination)
    base = fresh_model(model_folder)
    assert manifest["base_weights_sha256"] == base.report.weights_sha256 and manifest["adapter_model_sha256"] == sha
    assert manifest["dataset"] == "brset" and manifest["settings"]["effective_batch"] == 4
    assert manifest["losses"] == trained.losses and manifest["answer_counts"] == {"yes": 8, "no": 8}

    pixels = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    before = yes_no_scorer(base, QUESTIONS)(pixels)
    adapted = load_adapted(fresh_model(model_folder), destination)
    after = yes_no_scorer(adapted, QUESTIONS)(pixels)
    merged = yes_no_scorer(load_adapted(fresh_model(model_folder), destination, merge=True), QUESTIONS)(pixels)
    assert not adapted.model.training and type(adapted.model).__name__ == "PeftModel"
    assert (after[:, 0] - before[:, 0]).abs().max() > 1e-4
    torch.testing.assert_close(merged, after, atol=1e-5, rtol=1e-4, equal_nan=True)


def test_an_incomplete_adapter_folder_names_the_missing_file(model_folder, reference, tmp_path):
    trained, _ = reference
    write_adapter(trained, tmp_path / "adapter", {})
    for name in ("adapter_config.json", "adapter_model.safetensors", "manifest.json"):
        broken = tmp_path / f"without-{name}"
        shutil.copytree(tmp_path / "adapter", broken)
        (broken / name).unlink()
        with pytest.raises(AdapterError, match=f"{re.escape(str(broken))} lacks {name}.*Re-materialise lora_adapters"):
            load_adapted(fresh_model(model_folder), broken)


def test_an_adapter_of_other_base_weights_is_refused_with_both_hashes(model_folder, reference, tmp_path):
    trained, _ = reference
    write_adapter(trained, tmp_path / "adapter", {})
    other = fresh_model(model_folder)
    other.report = replace(other.report, weights_sha256="f" * 64)
    with pytest.raises(AdapterError, match=f"trained on base weights {trained.base_weights_sha256} .* weights {'f' * 64}"):
        load_adapted(other, tmp_path / "adapter")


def test_a_model_that_an_adapter_was_applied_to_is_no_base_to_train_on(model_folder, examples, reference, tmp_path):
    trained, _ = reference
    write_adapter(trained, tmp_path / "adapter", {})
    base = fresh_model(model_folder)
    load_adapted(base, tmp_path / "adapter")  # injects into base.model, as documented
    with pytest.raises(AdapterError, match="already carries an adapter .* fresh load of the base model"):
        train_adapter(base, examples, SETTINGS, tmp_path / "work")


@pytest.mark.parametrize("family", ["gemma3", "qwen3_vl"])
def test_other_families_train_on_the_position_their_scorer_reads(family, examples, tmp_path):
    """The families whose inputs differ most from LLaVA's: Gemma-3 (token type ids marking image tokens, tied
    embeddings) and Qwen3-VL (an image grid and M-RoPE positions computed from the token sequence)."""
    folder = build_tiny_mllm(tmp_path / "model", family, seed=3)
    spec = replace(CATALOG["tiny_llava"], id=f"tiny-{family}", family="hf_mllm", path=str(folder))
    mllm = load_model(spec).to("cpu")
    chosen = examples[:3]
    scorer, pixels, answers, batch = answer_batch(mllm, chosen)
    with torch.no_grad():
        loss_sum, _ = answer_loss(mllm.model, batch)
        scored = last_position_logits(mllm.model, scorer.inputs(list(pixels), [scorer.prompt(e.question) for e in chosen]))
    by_hand = -(scored - scored.logsumexp(dim=-1, keepdim=True))[torch.arange(3), torch.tensor(answers)]
    assert loss_sum.item() == pytest.approx(by_hand.sum().item(), rel=1e-4)

    tied = mllm.model.get_output_embeddings().weight is mllm.model.get_input_embeddings().weight
    before = {k: v.clone() for k, v in mllm.model.state_dict().items()}
    run = train_adapter(mllm, examples[:8], replace(SETTINGS, max_steps=1), tmp_path / "work")
    assert np.isfinite(run.losses).all()
    assert all(torch.equal(v, before[k]) for k, v in mllm.model.state_dict().items())
    assert (mllm.model.get_output_embeddings().weight is mllm.model.get_input_embeddings().weight) == tied
    write_adapter(run, tmp_path / "adapter", {})
    adapted = load_adapted(load_model(spec).to("cpu"), tmp_path / "adapter")
    assert torch.isfinite(yes_no_scorer(adapted, QUESTIONS[:1])(pixels)[:, :2]).all()
