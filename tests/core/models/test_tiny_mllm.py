"""Tiny multimodal LLMs: hub folders of each family's real architecture, loaded offline through the real Auto* path."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from PIL import Image

from focus_dagster.models.tiny_mllm import (
    TINY_MLLM_FAMILIES,
    build_tiny_mllm,
    train_tiny_tokenizer,
)

QUESTIONS = (
    "Does this fundus photograph show any signs of diabetic retinopathy? Answer with yes or no only.",
    "Does this fundus photograph show signs of glaucomatous optic neuropathy? Answer with yes or no only.",
    "Is the optic disc cupped?",
)
# (width, height): deliberately unlike each other, so image token counts differ where the family allows it.
IMAGE_SIZES = ((40, 30), (64, 64), (50, 70))
ANSWER_VARIANTS = ("yes", "Yes", " yes", " Yes", "no", "No", " no", " No")

EXPECTED_CLASSES = {
    "llava": ("LlavaProcessor", "LlavaForConditionalGeneration"),
    "llava_next": ("LlavaNextProcessor", "LlavaNextForConditionalGeneration"),
    "gemma3": ("Gemma3Processor", "Gemma3ForConditionalGeneration"),
    "qwen3_vl": ("Qwen3VLProcessor", "Qwen3VLForConditionalGeneration"),
}

# What one user turn (image + question) must render to, generation prompt included.
EXPECTED_PROMPT = {
    "llava": "USER: <image>\n{q} ASSISTANT:",
    "llava_next": (
        "<|start_header_id|>user<|end_header_id|>\n\n<image>\n{q}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "gemma3": "<bos><start_of_turn>user\n<start_of_image>{q}<end_of_turn>\n<start_of_turn>model\n",
    "qwen3_vl": "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{q}<|im_end|>\n<|im_start|>assistant\n",
}
# How a finished assistant turn saying "Yes" renders.
EXPECTED_ASSISTANT_TURN = {
    "llava": "ASSISTANT: Yes ",
    "llava_next": "<|start_header_id|>assistant<|end_header_id|>\n\nYes<|eot_id|>",
    "gemma3": "<start_of_turn>model\nYes<end_of_turn>\n",
    "qwen3_vl": "<|im_start|>assistant\nYes<|im_end|>\n",
}


def user_turn(question: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]


def prompt_for(processor, question: str) -> str:
    return processor.apply_chat_template(user_turn(question), add_generation_prompt=True, tokenize=False)


def images():
    generator = torch.Generator().manual_seed(0)
    return [
        Image.fromarray((torch.rand(h, w, 3, generator=generator) * 255).to(torch.uint8).numpy(), "RGB")
        for w, h in IMAGE_SIZES
    ]


def load(folder):
    processor = transformers.AutoProcessor.from_pretrained(folder, local_files_only=True)
    model = transformers.AutoModelForImageTextToText.from_pretrained(folder, local_files_only=True).eval()
    return processor, model


@pytest.fixture(scope="module", params=TINY_MLLM_FAMILIES)
def built(request, tmp_path_factory):
    """(family, folder, processor, model) for one family, built and loaded once per module."""
    family = request.param
    folder = build_tiny_mllm(tmp_path_factory.mktemp(family), family)
    processor, model = load(folder)
    return family, folder, processor, model


# --------------------------------------------------------------------------- loading


def test_loads_offline_as_the_family_classes(built):
    family, folder, processor, model = built
    processor_class, model_class = EXPECTED_CLASSES[family]
    assert type(processor).__name__ == processor_class
    assert type(model).__name__ == model_class
    assert model.dtype == torch.float32
    assert (folder / "model.safetensors").is_file()
    assert model.config.get_text_config().vocab_size == len(processor.tokenizer)


# --------------------------------------------------------------------------- chat template


def test_chat_template_renders_the_family_turn_format(built):
    family, _, processor, _ = built
    question = QUESTIONS[0]
    assert prompt_for(processor, question) == EXPECTED_PROMPT[family].format(q=question)


def test_chat_template_renders_assistant_turns_and_string_content(built):
    family, _, processor, _ = built
    conversation = [
        *user_turn("Is this a fundus photograph?"),
        {"role": "assistant", "content": [{"type": "text", "text": "Yes"}]},
        {"role": "user", "content": "And is it referable?"},
    ]
    rendered = processor.apply_chat_template(conversation, add_generation_prompt=False, tokenize=False)
    assert EXPECTED_ASSISTANT_TURN[family] in rendered
    assert "And is it referable?" in rendered
    assert not rendered.endswith(EXPECTED_PROMPT[family].split("{q}")[-1])  # no generation prompt asked for


def test_prompt_tokenizes_with_exactly_one_bos(built):
    """Gemma's template writes <bos> itself, the LLaVA ones rely on the tokenizer: either way exactly one."""
    family, _, processor, _ = built
    tokenizer = processor.tokenizer
    ids = tokenizer(prompt_for(processor, QUESTIONS[0])).input_ids
    if family == "qwen3_vl":
        assert tokenizer.bos_token_id is None  # Qwen has no BOS
    else:
        assert ids[0] == tokenizer.bos_token_id
        assert ids.count(tokenizer.bos_token_id) == 1


# --------------------------------------------------------------------------- batched scoring


@pytest.mark.parametrize("layout", ["flat", "nested"])
def test_left_padded_batch_matches_single_runs(built, layout):
    """Last-position logits of each row equal that prompt+image run alone: padding and masks are handled."""
    family, _, processor, model = built
    processor.tokenizer.padding_side = "left"
    prompts = [prompt_for(processor, q) for q in QUESTIONS]
    pictures = images()
    batch_images = [[image] for image in pictures] if layout == "nested" else pictures
    if family == "gemma3" and layout == "flat":
        # Gemma3Processor reads a flat image list as ONE sample with three images; batches must be nested per prompt.
        with pytest.raises(ValueError, match="number of"):
            processor(text=prompts, images=batch_images, padding=True, return_tensors="pt")
        return

    inputs = processor(text=prompts, images=batch_images, padding=True, return_tensors="pt")
    lengths = inputs["attention_mask"].sum(dim=1)
    assert len(set(lengths.tolist())) > 1, "rows should need padding"
    assert (inputs["attention_mask"][:, -1] == 1).all(), "padding must be on the left"
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (3, inputs["input_ids"].shape[1], len(processor.tokenizer))

    last = logits[:, -1]
    for row, (prompt, image) in enumerate(zip(prompts, pictures, strict=True)):
        alone = processor(text=[prompt], images=[image], padding=True, return_tensors="pt")
        assert alone["input_ids"].shape[1] == lengths[row]
        with torch.no_grad():
            single = model(**alone).logits[0, -1]
        torch.testing.assert_close(last[row], single, atol=1e-4, rtol=0)
    # The rows really differ, so the equality above is not met by near-constant outputs.
    assert (last[0] - last[1]).abs().max() > 0.1
    assert (last[1] - last[2]).abs().max() > 0.1


def test_generate_runs_greedy(built):
    _, _, processor, model = built
    processor.tokenizer.padding_side = "left"
    prompts = [prompt_for(processor, q) for q in QUESTIONS]
    inputs = processor(text=prompts, images=[[image] for image in images()], padding=True, return_tensors="pt")
    with torch.no_grad():
        first = model(**inputs).logits[:, -1].argmax(dim=-1)
        out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    prompt_length = inputs["input_ids"].shape[1]
    assert out.shape[0] == 3
    assert prompt_length < out.shape[1] <= prompt_length + 3
    assert torch.equal(out[:, prompt_length], first)  # greedy's first token is the scored position's argmax


# --------------------------------------------------------------------------- tokenizer


@pytest.mark.parametrize("family", TINY_MLLM_FAMILIES)
def test_answer_variants_are_single_distinct_tokens(family):
    tokenizer = train_tiny_tokenizer(family)
    ids = [tokenizer.encode(word, add_special_tokens=False) for word in ANSWER_VARIANTS]
    assert all(len(one) == 1 for one in ids), dict(zip(ANSWER_VARIANTS, ids, strict=True))
    assert len({one[0] for one in ids}) == len(ANSWER_VARIANTS)


@pytest.mark.parametrize("family", TINY_MLLM_FAMILIES)
def test_multi_token_answers_variant(family):
    tokenizer = train_tiny_tokenizer(family, single_token_answers=False)
    assert len(tokenizer.encode(" Yes", add_special_tokens=False)) > 1
    assert len(tokenizer.encode(" No", add_special_tokens=False)) > 1
    assert len(tokenizer.encode("yes", add_special_tokens=False)) == 1
    assert len(tokenizer.encode("Yes", add_special_tokens=False)) == 1


@pytest.mark.parametrize("family", TINY_MLLM_FAMILIES)
def test_tokenizer_round_trips_text_and_knows_its_special_tokens(family):
    tokenizer = train_tiny_tokenizer(family)
    for text in ("Does this image show glaucoma?", "Cup-to-disc ratio 0.7; fovea — intact (ü)."):
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text
    image_id = tokenizer.image_token_id
    assert tokenizer.encode(tokenizer.image_token, add_special_tokens=False) == [image_id]
    assert tokenizer.convert_ids_to_tokens(image_id) == tokenizer.image_token
    if family == "gemma3":
        for name in ("boi_token", "eoi_token"):
            token = getattr(tokenizer, name)
            assert tokenizer.encode(token, add_special_tokens=False) == [getattr(tokenizer, f"{name}_id")]


def test_multi_token_build_loads_and_scores(tmp_path):
    folder = build_tiny_mllm(tmp_path / "qwen", "qwen3_vl", single_token_answers=False)
    processor, model = load(folder)
    assert len(processor.tokenizer.encode(" Yes", add_special_tokens=False)) > 1
    inputs = processor(text=[prompt_for(processor, QUESTIONS[0])], images=images()[:1], return_tensors="pt")
    with torch.no_grad():
        assert model(**inputs).logits.shape[-1] == len(processor.tokenizer)


# --------------------------------------------------------------------------- determinism, size, speed


@pytest.mark.parametrize("family", TINY_MLLM_FAMILIES)
def test_builds_are_deterministic_per_seed(family, tmp_path):
    first = build_tiny_mllm(tmp_path / "a", family, seed=0)
    again = build_tiny_mllm(tmp_path / "b", family, seed=0)
    other = build_tiny_mllm(tmp_path / "c", family, seed=1)
    weights = "model.safetensors"
    assert (first / weights).read_bytes() == (again / weights).read_bytes()
    assert (first / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()
    assert (first / weights).read_bytes() != (other / weights).read_bytes()
    assert (first / "tokenizer.json").read_bytes() == (other / "tokenizer.json").read_bytes()  # seed is weights only


def test_small_on_disk(built, tmp_path):
    """A pipeline-check model stays a small artifact (how long it takes to build and load is bench/mllm.py's)."""
    family, _, _, _ = built
    folder = build_tiny_mllm(tmp_path / family, family)
    load(folder)
    size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    assert size < 2 * 1024 * 1024, f"{family}: {size} bytes on disk"


def test_unknown_family_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown tiny MLLM family"):
        build_tiny_mllm(tmp_path, "blip2")
    with pytest.raises(ValueError, match="unknown tiny MLLM family"):
        train_tiny_tokenizer("blip2")


def test_module_import_is_light():
    """The CLI imports modules lazily; this one must not pull torch/transformers/tokenizers in at import time."""
    code = (
        "import sys, focus_dagster.models.tiny_mllm; "
        "print(','.join(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
