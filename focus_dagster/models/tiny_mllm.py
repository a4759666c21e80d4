"""Tiny multimodal LLMs in hub layout, built offline from a config.

Each family (LLaVA-1.5, LLaVA-NeXT llama3-style, Gemma-3/MedGemma, Qwen3-VL) gets its real architecture, image
processor, processor class and chat-template turn format, shrunk to a few hundred kilobytes, with a byte-level BPE
tokenizer trained in-process. The folder loads through `AutoProcessor` / `AutoModelForImageTextToText` with
`local_files_only=True` exactly like a hub checkpoint, so the scoring code path is exercised without a network.

Heavy libraries are imported inside the functions: the platform imports modules lazily to keep its CLI fast.
"""

from __future__ import annotations

from pathlib import Path

TINY_MLLM_FAMILIES = ("llava", "llava_next", "gemma3", "qwen3_vl")

# Turn-format words, so chat prompts are a handful of tokens rather than one per byte.
_TURN_WORDS = ("USER:", "ASSISTANT:", "user", "assistant", "model", "system")
# Answers always seen as whole words. " Yes"/" No" are the switch for single_token_answers: byte-level BPE only
# learns a merge it saw, so leaving them out makes " Yes" split into "Ġ" + "Yes" while "yes" stays one token.
_ANSWERS = ("yes", "Yes", "no", "No", " yes", " no")
_SPACED_CAPITAL_ANSWERS = (" Yes", " No")
# Larger than the corpus can fill, so training runs until every corpus word is a single token.
_BPE_VOCAB_LIMIT = 2000

# Per family: named special tokens (tokenizer attributes the processors read), extra special tokens (turn
# markers), whether the tokenizer itself prepends BOS, and the chat-template pieces.
# Gemma's template writes <bos> itself (as the published one does), so its tokenizer must not add another one.
_FAMILY_TOKENS = {
    "llava": {
        "named": {
            "unk_token": "<unk>",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "pad_token": "<pad>",
            "image_token": "<image>",
        },
        "extra": (),
        "add_bos": True,
    },
    "llava_next": {
        "named": {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "pad_token": "<pad>",
            "image_token": "<image>",
        },
        "extra": ("<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>"),
        "add_bos": True,
    },
    "gemma3": {
        # Gemma's vocabulary starts <pad>=0, <eos>=1, <bos>=2, <unk>=3; kept so the text config defaults line up.
        "named": {
            "pad_token": "<pad>",
            "eos_token": "<eos>",
            "bos_token": "<bos>",
            "unk_token": "<unk>",
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
        "extra": ("<start_of_turn>", "<end_of_turn>"),
        "add_bos": False,
    },
    "qwen3_vl": {
        # Qwen has no BOS; <|endoftext|> pads, <|im_end|> ends a turn.
        "named": {
            "pad_token": "<|endoftext|>",
            "eos_token": "<|im_end|>",
            "image_token": "<|image_pad|>",
            "video_token": "<|video_pad|>",
            "vision_start_token": "<|vision_start|>",
            "vision_end_token": "<|vision_end|>",
        },
        "extra": ("<|im_start|>",),
        "add_bos": False,
    },
}

# Chat-template pieces: (prefix, turn opener with ROLE placeholder, image marker, turn closer, generation opener).
# One generic template renders them; content items are rendered in order (image marker, then text).
_TURNS = {
    "llava": ("", "ROLE: ", "<image>\n", " ", "ASSISTANT:"),
    "llava_next": (
        "",
        "<|start_header_id|>ROLE<|end_header_id|>\n\n",
        "<image>\n",
        "<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    "gemma3": ("<bos>", "<start_of_turn>ROLE\n", "<start_of_image>", "<end_of_turn>\n", "<start_of_turn>model\n"),
    "qwen3_vl": (
        "",
        "<|im_start|>ROLE\n",
        "<|vision_start|><|image_pad|><|vision_end|>",
        "<|im_end|>\n",
        "<|im_start|>assistant\n",
    ),
}


def _jinja_literal(text: str) -> str:
    """A Jinja string literal for `text` (newlines escaped so the template stays on one line)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def _chat_template(family: str) -> str:
    """A minimal chat template in the family's published turn format."""
    prefix, opener, image, closer, generation = _TURNS[family]
    head, tail = opener.split("ROLE")
    if family == "llava":
        role = "message['role'] | upper"
    elif family == "gemma3":
        # Gemma calls the assistant "model".
        role = "('model' if message['role'] == 'assistant' else message['role'])"
    else:
        role = "message['role']"
    return (
        f"{{{{ {_jinja_literal(prefix)} }}}}"
        "{% for message in messages %}"
        f"{{{{ {_jinja_literal(head)} + {role} + {_jinja_literal(tail)} }}}}"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for item in message['content'] %}"
        f"{{% if item['type'] == 'image' %}}{{{{ {_jinja_literal(image)} }}}}"
        "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
        "{% endfor %}{% endif %}"
        f"{{{{ {_jinja_literal(closer)} }}}}"
        "{% endfor %}"
        f"{{% if add_generation_prompt %}}{{{{ {_jinja_literal(generation)} }}}}{{% endif %}}"
    )


def _check_family(family: str) -> None:
    if family not in TINY_MLLM_FAMILIES:
        raise ValueError(f"unknown tiny MLLM family {family!r}; expected one of {TINY_MLLM_FAMILIES}")


def train_tiny_tokenizer(family: str, single_token_answers: bool = True):
    """Byte-level BPE trained in-process on a fixed corpus -> PreTrainedTokenizerFast with the family's special
    tokens (image token(s), bos/eos/pad, turn markers) registered as tokenizer attributes.

    With `single_token_answers`, "yes"/"Yes"/" yes"/" Yes" and the four "no" variants are one token each;
    without it " Yes" and " No" split in two (the case where a scorer must not assume one-token answers).
    """
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    from focus_dagster.questions import DEFAULT_QUESTIONS

    _check_family(family)
    spec = _FAMILY_TOKENS[family]
    specials = list(dict.fromkeys([*spec["named"].values(), *spec["extra"]]))
    # The registry's questions: real prompts then tokenize into a handful of tokens.
    corpus = [*DEFAULT_QUESTIONS.values(), *_TURN_WORDS, *_ANSWERS]
    if single_token_answers:
        corpus += _SPACED_CAPITAL_ANSWERS
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_BPE_VOCAB_LIMIT,
        min_frequency=1,
        special_tokens=specials,  # ids 0..n-1, in a fixed order
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any text round-trips, even unseen bytes
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer=trainer)

    named = spec["named"]
    if spec["add_bos"]:
        bos = named["bos_token"]
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, backend.token_to_id(bos))]
        )
    else:
        # An explicit no-op, so transformers does not install its own BOS/EOS template on load.
        backend.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B", special_tokens=[])

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        extra_special_tokens=list(spec["extra"]),
        chat_template=_chat_template(family),
        clean_up_tokenization_spaces=False,
        **named,  # non-standard *_token names become model-specific special tokens (tokenizer.image_token, ...)
    )
    return tokenizer


# Shared tiny sizes: hidden 32, 2 layers, 2 heads. Images are 32 px with 8 px patches (a 4x4 patch grid).
_HIDDEN = 32
_LAYERS = 2
_HEADS = 2
_FFN = 64
_IMAGE = 32
_PATCH = 8
# Larger than the hub default (0.02) so the tiny logits vary visibly across prompts and images; equality checks
# between batched and single runs would pass trivially on near-constant outputs.
_INIT_STD = 0.2
# The transformer sizes every tower shares (vision towers add their image and patch size).
_SIZES = {"hidden_size": _HIDDEN, "intermediate_size": _FFN, "num_hidden_layers": _LAYERS, "num_attention_heads": _HEADS}
_VISION_SIZES = {**_SIZES, "image_size": _IMAGE, "patch_size": _PATCH}


def _llama_text(vocab_size: int, tokenizer):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        **_SIZES,
        num_key_value_heads=1,  # grouped-query attention, as in the Llama-3 / Vicuna-scale originals
        max_position_embeddings=512,
        initializer_range=_INIT_STD,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def _clip_vision():
    from transformers import CLIPVisionConfig

    return CLIPVisionConfig(
        **_VISION_SIZES,
        projection_dim=_HIDDEN,
        initializer_range=_INIT_STD,
    )


def _build_llava(tokenizer):
    """LLaVA-1.5 layout: CLIP tower (CLS dropped, "default" strategy), Llama text model, USER/ASSISTANT turns."""
    from transformers import (
        CLIPImageProcessor,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    # Center-cropped to one 32x32 view: every image becomes (32/8)^2 = 16 image tokens.
    image_processor = CLIPImageProcessor(size={"shortest_edge": _IMAGE}, crop_size={"height": _IMAGE, "width": _IMAGE})
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=_PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's CLS, which the "default" strategy then drops
        chat_template=tokenizer.chat_template,
    )
    config = LlavaConfig(
        vision_config=_clip_vision(),
        text_config=_llama_text(len(tokenizer), tokenizer),
        image_token_index=tokenizer.image_token_id,
        image_seq_length=(_IMAGE // _PATCH) ** 2,
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
    )
    return processor, config, LlavaForConditionalGeneration


def _build_llava_next(tokenizer):
    """LLaVA-NeXT (llama3-llava-next) layout: any-resolution tiles over a tiny pinpoint grid, Llama-3 headers."""
    from transformers import (
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextImageProcessor,
        LlavaNextProcessor,
    )

    # Tiles of 32 px; the pinpoints decide how many tiles (and so image tokens) each aspect ratio gets.
    pinpoints = [[_IMAGE, _IMAGE], [_IMAGE, 2 * _IMAGE], [2 * _IMAGE, _IMAGE]]
    image_processor = LlavaNextImageProcessor(
        size={"shortest_edge": _IMAGE},
        crop_size={"height": _IMAGE, "width": _IMAGE},
        image_grid_pinpoints=pinpoints,
    )
    processor = LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=_PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=tokenizer.chat_template,
    )
    config = LlavaNextConfig(
        vision_config=_clip_vision(),
        text_config=_llama_text(len(tokenizer), tokenizer),
        image_token_index=tokenizer.image_token_id,
        image_grid_pinpoints=pinpoints,
        image_seq_length=(_IMAGE // _PATCH) ** 2,
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
    )
    return processor, config, LlavaNextForConditionalGeneration


# Gemma-3: the SigLIP 4x4 patch grid is average-pooled to 2x2, i.e. 4 soft tokens per image (a perfect square).
_GEMMA_TOKENS_PER_IMAGE = 4


def _build_gemma3(tokenizer):
    """Gemma-3 / MedGemma layout: SigLIP tower, pooled soft tokens between <start_of_image>/<end_of_image>."""
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessor,
        Gemma3Processor,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )

    image_processor = Gemma3ImageProcessor(
        size={"height": _IMAGE, "width": _IMAGE}, image_mean=[0.5] * 3, image_std=[0.5] * 3, do_pan_and_scan=False
    )
    processor = Gemma3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
        image_seq_length=_GEMMA_TOKENS_PER_IMAGE,
    )
    text_config = Gemma3TextConfig(
        vocab_size=len(tokenizer),
        **_SIZES,
        num_key_value_heads=1,
        head_dim=_HIDDEN // _HEADS,
        query_pre_attn_scalar=_HIDDEN // _HEADS,
        # One local (sliding-window) and one global layer, the two attention kinds Gemma-3 interleaves.
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=64,
        max_position_embeddings=512,
        initializer_range=_INIT_STD,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    vision_config = SiglipVisionConfig(
        **_VISION_SIZES,
        vision_use_head=False,
    )
    config = Gemma3Config(
        text_config=text_config,
        vision_config=vision_config,
        mm_tokens_per_image=_GEMMA_TOKENS_PER_IMAGE,
        boi_token_index=tokenizer.boi_token_id,
        eoi_token_index=tokenizer.eoi_token_id,
        image_token_index=tokenizer.image_token_id,
        initializer_range=_INIT_STD,
    )
    return processor, config, Gemma3ForConditionalGeneration


def _build_qwen3_vl(tokenizer):
    """Qwen3-VL layout: native-resolution patches merged 2x2, M-RoPE, ChatML turns."""
    from transformers import (
        Qwen2VLImageProcessor,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    merge = 2
    factor = _PATCH * merge  # images are resized to multiples of 16 px: one merged token per 16x16 block
    # Pixel budget of 1..9 merged tokens per image, so differently sized images give different prompt lengths.
    size = {"shortest_edge": factor * factor, "longest_edge": 9 * factor * factor}
    shared = {
        "patch_size": _PATCH,
        "temporal_patch_size": 2,
        "merge_size": merge,
        "image_mean": [0.5] * 3,
        "image_std": [0.5] * 3,
    }
    image_processor = Qwen2VLImageProcessor(size=size, **shared)
    # The processor class requires a video processor; it is never used for fundus images but must round-trip.
    video_processor = Qwen3VLVideoProcessor(size=size, **shared)
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=tokenizer.chat_template,
    )
    head_dim = _HIDDEN // _HEADS
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": _HIDDEN,
            "intermediate_size": _FFN,
            "num_hidden_layers": _LAYERS,
            "num_attention_heads": _HEADS,
            "num_key_value_heads": 1,
            "head_dim": head_dim,
            "max_position_embeddings": 512,
            "initializer_range": _INIT_STD,
            "pad_token_id": tokenizer.pad_token_id,
            # M-RoPE splits the head_dim/2 = 8 frequencies between (time, height, width), interleaved.
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            },
        },
        vision_config={
            "depth": _LAYERS,
            "hidden_size": _HIDDEN,
            "intermediate_size": _FFN,
            "num_heads": _HEADS,
            "patch_size": _PATCH,
            "temporal_patch_size": 2,
            "spatial_merge_size": merge,
            "out_hidden_size": _HIDDEN,
            "num_position_embeddings": 64,  # an 8x8 learned grid, interpolated to each image's patch grid
            "deepstack_visual_indexes": [0],  # one DeepStack feature tap, as the real model has several
            "initializer_range": _INIT_STD,
        },
        image_token_id=tokenizer.image_token_id,
        video_token_id=tokenizer.video_token_id,
        vision_start_token_id=tokenizer.vision_start_token_id,
        vision_end_token_id=tokenizer.vision_end_token_id,
        tie_word_embeddings=False,
    )
    return processor, config, Qwen3VLForConditionalGeneration


_BUILDERS = {
    "llava": _build_llava,
    "llava_next": _build_llava_next,
    "gemma3": _build_gemma3,
    "qwen3_vl": _build_qwen3_vl,
}


def build_tiny_mllm(
    folder: Path | str, family: str = "llava", *, seed: int = 0, single_token_answers: bool = True
) -> Path:
    """Write a seeded tiny model of `family` + its processor (image processor, tokenizer, chat template) into
    `folder` in hub layout; return folder."""
    import torch

    from focus_dagster.models.quiet import quiet_transformers

    _check_family(family)
    quiet_transformers()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tiny_tokenizer(family, single_token_answers=single_token_answers)
    processor, config, model_class = _BUILDERS[family](tokenizer)

    torch.manual_seed(seed)
    model = model_class(config).eval()
    # Greedy decoding stops at the turn end and pads with the tokenizer's pad, as the published configs do.
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if tokenizer.bos_token_id is not None:
        model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return folder
