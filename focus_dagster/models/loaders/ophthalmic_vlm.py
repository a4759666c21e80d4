"""Ophthalmic dual encoders from their published checkpoints: FLAIR.

FLAIR (jusiro/FLAIR, `flair_resnet.pth`): a plain state dict of `FLAIRModel` —
`vision_model.model.*` (torchvision ResNet-50 with `fc` replaced by identity),
`vision_model.projection_head_vision.projection.weight` (2048 -> 512, no bias),
`text_model.model.*` (a BERT: Bio_ClinicalBERT), `text_model.projection_head_text.projection.weight`
(768 -> 512, no bias) and `logit_scale`. Each projection head L2-normalises its input, projects, and
L2-normalises again. The text embedding is the mean over tokens of hidden states 1, 2 and the last,
averaged. FLAIR wraps every prompt as "A fundus photograph of [X]" itself: its text tower says so
(`wraps_prompts`), and callers pass bare conditions (see focus_dagster.prompts). Its images are scaled /255
only, longest side to 512 and zero-padded (the spec's preprocess); nothing else is done here.

The checkpoint holds the BERT weights but not its configuration or vocabulary: the tokenizer comes from
a local Bio_ClinicalBERT folder (`options.tokenizer`), or from the offline hub cache.
EyeCLIP and RET-CLIP are not provided by this module yet.
"""

from __future__ import annotations

from pathlib import Path

from focus_dagster.models.audit import (
    file_sha256,
    load_audited,
    read_weights,
    select_state_dict,
)
from focus_dagster.models.base import LoadedEncoder
from focus_dagster.models.loaders.hub_family import TextTower
from focus_dagster.models.spec import ModelSpec, WeightsNotFoundError

FLAIR_CAPTION = "A fundus photograph of [CLS]"
FLAIR_TEXT_SOURCE = "emilyalsentzer/Bio_ClinicalBERT"
# Published architecture (ResNet-50 + Bio_ClinicalBERT, 512-d joint space); tests shrink it via spec.options.
FLAIR_DEFAULTS = {
    "proj_dim": 512,
    "resnet_layers": (3, 4, 6, 3),
    "resnet_width_per_group": 64,
    "text_hidden": 768,
    "text_layers": 12,
    "text_heads": 12,
    "text_intermediate": 3072,
    "text_vocab": 28996,
    "text_max_positions": 512,
    "text_max_length": 77,
}
# FLAIR clamps its log temperature to [0, ln 100] before use.
FLAIR_MAX_LOG_SCALE = 4.6052


def _weights_file(spec: ModelSpec, expected: str) -> Path:
    """The spec's checkpoint file, or an error saying where it was looked for and how to provide it."""
    if not spec.path or not Path(spec.path).expanduser().is_file():
        where = spec.path or "(no `path` set)"
        raise WeightsNotFoundError(
            f"model {spec.id!r}: no checkpoint file at {where}. Nothing is downloaded at run time: obtain "
            f"{expected} (published with {spec.source!r}), copy it to this machine, and set `path:` to that "
            "file for this model in focus.yaml."
        )
    return Path(spec.path).expanduser()


def _tokenizer_folder(spec: ModelSpec, source: str) -> Path:
    """The text tower's tokenizer folder: `options.tokenizer`, or the offline hub cache for `source`."""
    given = spec.options.get("tokenizer")
    if given:
        folder = Path(given).expanduser()
        if folder.is_dir():
            return folder
    else:
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(source, local_files_only=True))
        except (ImportError, OSError, ValueError):  # not cached: reported below
            pass
    raise WeightsNotFoundError(
        f"model {spec.id!r}: no tokenizer for its text tower at {given or f'the local hub cache for {source!r}'}. "
        f"Copy the {source} tokenizer files (vocab.txt, tokenizer_config.json) to a folder and set "
        "`options: {tokenizer: <folder>}` for this model in focus.yaml."
    )


# --------------------------------------------------------------------------- FLAIR


def build_flair(options: dict):
    """An untrained FLAIR module whose state-dict names are the published checkpoint's."""
    import torch
    from torchvision.models.resnet import Bottleneck, ResNet
    from transformers import BertConfig, BertModel

    vision = torch.nn.Module()
    vision.model = ResNet(Bottleneck, list(options["resnet_layers"]), width_per_group=int(options["resnet_width_per_group"]))
    vision.model.fc = torch.nn.Identity()
    vision.projection_head_vision = torch.nn.Module()
    vision.projection_head_vision.projection = torch.nn.Linear(2048, int(options["proj_dim"]), bias=False)

    bert_config = BertConfig(
        vocab_size=int(options["text_vocab"]),
        hidden_size=int(options["text_hidden"]),
        num_hidden_layers=int(options["text_layers"]),
        num_attention_heads=int(options["text_heads"]),
        intermediate_size=int(options["text_intermediate"]),
        max_position_embeddings=int(options["text_max_positions"]),
    )
    text = torch.nn.Module()
    text.model = BertModel(bert_config)
    text.projection_head_text = torch.nn.Module()
    text.projection_head_text.projection = torch.nn.Linear(int(options["text_hidden"]), int(options["proj_dim"]), bias=False)

    model = torch.nn.Module()
    model.vision_model = vision
    model.text_model = text
    model.logit_scale = torch.nn.Parameter(torch.log(torch.tensor(1 / 0.07)))
    return model.eval()


def _project(head, features):
    """FLAIR's projection head: normalise, project, normalise."""
    import torch

    features = torch.nn.functional.normalize(features, dim=-1)
    return torch.nn.functional.normalize(head.projection(features), dim=-1)


def load_flair(spec: ModelSpec) -> LoadedEncoder:
    """FLAIR from its `.pth` state dict (weights_only) and a local Bio_ClinicalBERT tokenizer."""
    import torch
    from transformers import AutoTokenizer

    options = {**FLAIR_DEFAULTS, **spec.options}
    path = _weights_file(spec, "flair_resnet.pth")
    tokenizer = AutoTokenizer.from_pretrained(
        str(_tokenizer_folder(spec, options.get("text_source", FLAIR_TEXT_SOURCE))), local_files_only=True
    )
    model = build_flair(options)
    state = select_state_dict(read_weights(path, spec.id), ("model_state_dict", "state_dict"), spec.id, str(path))
    report = load_audited(model, state, model_id=spec.id, checkpoint=str(path), weights_sha256=file_sha256(path))
    vision, text = model.vision_model, model.text_model
    max_length = int(options["text_max_length"])

    def embed(pixels):
        return _project(vision.projection_head_vision, vision.model(pixels.to(next(vision.parameters()).dtype)))

    def encode_one(sentence: str):
        # One prompt at a time, as FLAIR embeds each class description: its token mean includes padding.
        tokens = tokenizer([sentence], truncation=True, max_length=max_length, return_tensors="pt")
        device = next(text.parameters()).device
        out = text.model(
            input_ids=tokens["input_ids"].to(device),
            attention_mask=tokens["attention_mask"].to(device),
            output_hidden_states=True,
        )
        hidden = torch.stack([out.hidden_states[1], out.hidden_states[2], out.hidden_states[-1]])
        return _project(text.projection_head_text, hidden.permute(1, 0, 2, 3).mean(2).mean(1))

    def encode(conditions):
        return torch.cat([encode_one(FLAIR_CAPTION.replace("[CLS]", c)) for c in conditions])

    scale = float(model.logit_scale.detach().clamp(0, FLAIR_MAX_LOG_SCALE).exp())
    return LoadedEncoder(
        spec=spec,
        embed=embed,
        dim=int(options["proj_dim"]),
        report=report,
        modules=(model,),
        text=TextTower(encode, logit_bias=None, wraps_prompts=True),
        logit_scale=scale,
    )
