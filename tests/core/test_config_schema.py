"""The schema of focus.yaml (focus_dagster/config_schema.py): every section refuses unknown keys with their path,
wrong values are named with the value, and `focus config` prints the schema and checks a file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from focus_dagster import config_schema
from focus_dagster.platform.cli import main
from focus_dagster.config import KubernetesSettings, SyntheticSettings, parse_config
from focus_dagster.datasets.registry import register_declared
from focus_dagster.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
GPU = config_schema.GPU_RESOURCE
# Every section written out, as a site would: published roots, a dataset of the user's own, models with
# overrides and of their own, questions, LoRA, Kubernetes, a table store.
FULL_EXAMPLE = """\
datasets:
  brset: data/brset
  idrid: synthetic
  papila: {root: data/papila}
  clinic:
    root: data/clinic
    labels: export.csv
    image: file
    patient: patient_id
    tasks:
      any_dr: {icdr: dr_grade}
      referable_dr: {icdr: dr_grade, edema: dme}
      gon: {vcdr: cdr, threshold: 0.6}
    attributes: {age: age, sex: {column: sex, female: [F], male: [M]}}
    split: {seeded: 0.4}
synthetic: {per_dataset: 40, seed: 3, scale: 0.1}
release: {observe_cron: "0 4 * * *", content_hash: true, refresh_seconds: 30}
splits: {dir: splits, seed: 2}
image_check: full
executor: multiprocess
compile: blocks
models:
  - efficientnet_lite0
  - {id: tiny_clip, path: /weights/clip, preprocess: {size: 224, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5]}}
  - {id: my_vit, family: timm_vit, interface: vm, domain: general, source: local, path: /w/my_vit.safetensors,
     options: {embed_dim: 768, depth: 12}}
questions:
  version: site-1
  tasks: {gon: "Is the optic disc glaucomatous? Answer with yes or no only."}
  datasets: {brset: {any_dr: "The patient is {patient_age} years old. Any diabetic retinopathy? Answer yes or no."}}
lora:
  models: [tiny_llava]
  train_datasets: [brset]
  tasks: [any_dr, referable_dr]
  settings: {learning_rate: 2.0e-5, epochs: 1, micro_batch: 4, accumulation: 4, seed: 0, lr_schedule: constant}
compare: [[my_vit, efficientnet_lite0]]
kubernetes:
  gpu_node_selector: {cloud.google.com/gke-accelerator: nvidia-l4}
  gpu_tolerations:
    - {key: dedicated, operator: Equal, value: gpu, effect: NoExecute, tolerationSeconds: 60}
  gpu_resources: {limits: {nvidia.com/gpu: 2, memory: 48Gi}}
  cpu_resources: {requests: {cpu: 500m, memory: 1Gi}}
tables: s3://bucket/focus/tables
"""
TOP_LEVEL = ("datasets, synthetic, release, splits, image_check, executor, compile, models, questions, lora, "
             "compare, degradations, kubernetes, tables")
MODEL_KEYS = ("id, interface, domain, family, source, revision, path, preprocess, pooling, dtype, pretrained_on, "
              "trust_remote_code, options, notes")
SETTINGS = ("r, alpha, dropout, target_modules, save_embeddings, learning_rate, epochs, micro_batch, accumulation, "
            "seed, checkpoint_every, max_steps, weight_decay, lr_schedule, max_grad_norm")
TASKS = "any_dr, referable_dr, gon"
# One document per section with one unknown key: the path the error names, and the keys it allows there.
UNKNOWN_KEYS = [
    ({"colour": 1}, "colour", TOP_LEVEL),
    ({"synthetic": {"size": 9}}, "synthetic.size", "per_dataset, seed, scale"),
    ({"release": {"cron": "0 * * * *"}}, "release.cron", "observe_cron, content_hash, refresh_seconds"),
    ({"splits": {"folder": "x"}}, "splits.folder", "dir, seed"),
    ({"models": ["efficientnet_lite0", {"id": "x", "weights": "/w"}]}, "models.1.weights", MODEL_KEYS),
    ({"models": [{"id": "x", "preprocess": {"crop": 1}}]}, "models.0.preprocess.crop",
     "size, resize, resize_to, crop_pct, interpolation, mean, std, scale_only"),
    ({"questions": {"version": "v", "wording": {}}}, "questions.wording", "version, tasks, datasets"),
    ({"questions": {"version": "v", "tasks": {"amd": "AMD?"}}}, "questions.tasks.amd", TASKS),
    ({"questions": {"version": "v", "datasets": {"gon": {"amd": "AMD?"}}}}, "questions.datasets.gon.amd", TASKS),
    ({"lora": {"train": ["brset"]}}, "lora.train", "models, train_datasets, tasks, settings"),
    ({"lora": {"settings": {"lr": 0.1}}}, "lora.settings.lr", SETTINGS),
    ({"kubernetes": {"gpu_nodes": {}}}, "kubernetes.gpu_nodes",
     "gpu_node_selector, gpu_tolerations, gpu_resources, cpu_resources"),
    ({"kubernetes": {"gpu_tolerations": [{"key": "k", "operator": "Exists"}, {"key": "x", "colour": "red"}]}},
     "kubernetes.gpu_tolerations.1.colour", "key, operator, value, effect, tolerationSeconds"),
    ({"kubernetes": {"gpu_resources": {"limit": {GPU: 1}}}}, "kubernetes.gpu_resources.limit", "requests, limits"),
    ({"kubernetes": {"cpu_resources": {"requests": {}, "reserve": {}}}}, "kubernetes.cpu_resources.reserve",
     "requests, limits"),
]
# Wrong values: the whole message, key path and value included.
WRONG_VALUES = [
    ({"synthetic": {"per_dataset": "many"}}, "synthetic.per_dataset: must be a whole number of images for every "
     "look-alike, or a mapping such as {default: 80, brset: 160}, got 'many'"),
    ({"synthetic": {"per_dataset": {"default": 80, "brst": 160}}},
     "synthetic.per_dataset: 'brst': no such look-alike; keys: default, brset, mbrset, papila, rfmid, rfmid_2, "
     "idrid, messidor_2, refuge, g1020, jsiec1000"),
    ({"synthetic": {"per_dataset": {"brset": 0}}},
     "synthetic.per_dataset: brset: must be a whole number of images, at least 1, got 0"),
    ({"synthetic": {"per_dataset": {"brset": True}}},
     "synthetic.per_dataset: brset: must be a whole number of images, at least 1, got True"),
    ({"synthetic": {"scale": 2}}, "synthetic.scale: must be <= 1 (got 2)"),
    ({"synthetic": {"seed": True}}, "synthetic.seed: must be a whole number (got True)"),
    ({"release": {"content_hash": "yes"}}, "release.content_hash: must be true or false (got 'yes')"),
    ({"release": {"refresh_seconds": 0.5}}, "release.refresh_seconds: must be a whole number (got 0.5)"),
    ({"release": "daily"}, "release: must be a mapping (got 'daily')"),
    ({"splits": {"dir": 7}}, "splits.dir: must be a string (got 7)"),
    ({"image_check": "thorough"}, "image_check: must be one of 'none', 'header' or 'full' (got 'thorough')"),
    ({"executor": "threads"}, "executor: must be one of 'in_process', 'multiprocess' or 'k8s' (got 'threads')"),
    ({"compile": True}, "compile: must be one of 'auto', 'off', 'blocks' or 'whole' (got True)"),
    ({"models": []}, "models: must not be empty (got [])"),
    ({"models": [3]}, "models.0: a model is a catalog id or a mapping with an `id` (got 3)"),
    ({"models": [{"path": "/w"}]},
     "models.0.id: required key missing (the catalog id, or the id of a model of your own)"),
    ({"models": [{"id": "v", "interface": "cnn"}]}, "models.0.interface: must be one of 'vm', 'vlm' or 'mllm' "
                                                      "(got 'cnn')"),
    ({"questions": {"version": "v", "tasks": {"gon": 5}}}, "questions.tasks.gon: must be a string (got 5)"),
    ({"questions": {"version": "v", "tasks": {"gon": "  "}}}, "questions.tasks.gon: must be a non-empty question, "
                                                               "got '  '"),
    ({"lora": {"settings": {"save_embeddings": 1}}}, "lora.settings.save_embeddings: must be true or false (got 1)"),
    ({"lora": {"settings": {"dropout": 1.0}}}, "lora.settings.dropout: must be < 1 (got 1.0)"),
    ({"lora": {"settings": {"lr_schedule": "cosine"}}},
     "lora.settings.lr_schedule: must be one of 'linear' or 'constant' (got 'cosine')"),
    ({"lora": {"tasks": ["gon", "amd"]}}, "lora.tasks.1: must be one of 'any_dr', 'referable_dr' or 'gon' "
                                          "(got 'amd')"),
    ({"kubernetes": {"gpu_node_selector": {"nvidia.com/gpu.present": True}}},
     "kubernetes.gpu_node_selector.nvidia.com/gpu.present: must be a string, got True (quote values such as "
     "\"true\")"),
    ({"kubernetes": {"gpu_tolerations": [{"key": "x", "effect": "NoExecute", "tolerationSeconds": "60"}]}},
     "kubernetes.gpu_tolerations.0.tolerationSeconds: must be a whole number (got '60')"),
    ({"kubernetes": {"gpu_tolerations": [{"operator": "Equal", "value": "gpu"}]}},
     "kubernetes.gpu_tolerations.0: operator Equal needs the taint's key"),
    ({"kubernetes": {"gpu_resources": {"limits": {GPU: 1, "memory": [32]}}}},
     "kubernetes.gpu_resources.limits.memory: must be a Kubernetes quantity such as 2, 500m or 16Gi, got [32]"),
    ({"tables": ""}, "tables: must be a folder or a URL such as s3://bucket/focus/tables, got ''"),
]


@pytest.fixture(autouse=True)
def no_declared_datasets_left_behind():
    """parse_config registers the declared datasets of the file for the process: unregister them after."""
    yield
    register_declared({})


@pytest.fixture
def full_example(tmp_path) -> Path:
    (tmp_path / "splits").mkdir()
    path = tmp_path / "focus.yaml"
    path.write_text(FULL_EXAMPLE)
    return path


def _refused(document) -> str:
    with pytest.raises(ConfigError) as raised:
        parse_config(document, Path("/tmp/home"))
    return str(raised.value)


def _schema_printed(capsys) -> dict:
    assert main(["config", "--schema"]) == 0
    return json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------------------------------- mistakes


@pytest.mark.parametrize("document, path, allowed", UNKNOWN_KEYS, ids=[case[1] for case in UNKNOWN_KEYS])
def test_an_unknown_key_is_refused_with_its_path_and_the_keys_allowed_there(document, path, allowed):
    assert _refused(document) == f"focus.yaml: {path}: unknown key; allowed: {allowed}"


def test_the_unknown_key_of_a_toleration_reads_as_documented():
    document = {"kubernetes": {"gpu_tolerations": [{"key": "x", "colour": "red"}]}}
    assert _refused(document) == ("focus.yaml: kubernetes.gpu_tolerations.0.colour: unknown key; allowed: key, "
                                  "operator, value, effect, tolerationSeconds")


@pytest.mark.parametrize("document, message", WRONG_VALUES, ids=[m.split(":")[0] for _, m in WRONG_VALUES])
def test_a_wrong_value_is_named_with_its_path_and_the_value(document, message):
    assert _refused(document) == f"focus.yaml: {message}"


def test_every_mistake_of_a_file_is_one_line_of_one_error(tmp_path):
    document = {"synthetic": {"seed": "x"}, "release": {"cron": 1}, "lora": {"settings": {"epochs": 0}}}
    with pytest.raises(ConfigError) as raised:
        parse_config(document, tmp_path, tmp_path / "focus.yaml")
    assert str(raised.value).splitlines() == [
        f"{tmp_path / 'focus.yaml'}:",
        "  synthetic.seed: must be a whole number (got 'x')",
        "  release.cron: unknown key; allowed: observe_cron, content_hash, refresh_seconds",
        "  lora.settings.epochs: must be >= 1 (got 0)",
    ]


def test_an_empty_section_means_its_defaults(tmp_path):
    """`release:` with nothing under it is YAML's null: the defaults, as when the key is left out."""
    empty = {"synthetic": None, "release": None, "splits": None, "kubernetes": None, "lora": None}
    assert parse_config(empty, tmp_path) == parse_config({}, tmp_path)
    assert parse_config({"kubernetes": {}}, tmp_path).kubernetes == KubernetesSettings()


# ----------------------------------------------------------------------------------------- the schema


def test_focus_config_schema_is_a_json_schema_that_validates_a_full_focus_yaml(capsys, full_example):
    schema = _schema_printed(capsys)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert schema["title"] == "focus.yaml" and schema["$schema"] == config_schema.SCHEMA_DIALECT
    assert list(schema["properties"]) == TOP_LEVEL.split(", ")
    for example in (full_example, REPO / "deploy" / "focus.yaml"):
        assert list(validator.iter_errors(yaml.safe_load(example.read_text()))) == [], example
    assert parse_config(yaml.safe_load(full_example.read_text()), full_example.parent / "home", full_example)


@pytest.mark.parametrize("document", [case[0] for case in UNKNOWN_KEYS] + [case[0] for case in WRONG_VALUES[:12]])
def test_the_json_schema_refuses_what_focus_refuses(capsys, document):
    """An editor using the schema flags the same unknown keys and wrong types as `focus config --check`."""
    validator = jsonschema.Draft202012Validator(_schema_printed(capsys))
    assert list(validator.iter_errors(json.loads(json.dumps(document))))


def test_every_block_of_the_schema_refuses_unknown_keys_and_every_key_is_described(capsys):
    schema = _schema_printed(capsys)
    blocks = {name: block for name, block in schema["$defs"].items() if block.get("type") == "object"}
    assert {"SyntheticSection", "ReleaseSection", "SplitsSection", "ModelEntry", "PreprocessEntry",
            "QuestionsSection", "TaskQuestions", "LoraSection", "LoraSettingsSection", "KubernetesSection",
            "Toleration", "Resources", "PublishedRoot", "DatasetDeclaration"} <= set(blocks)
    assert [name for name, block in blocks.items() if block.get("additionalProperties") is not False] == []
    assert schema["additionalProperties"] is False
    own = [name for name in blocks  # the blocks of config_schema (a dataset declaration has its own module)
           if getattr(getattr(config_schema, name, None), "__module__", None) == config_schema.__name__] + [None]
    undescribed = [f"{name or 'top level'}.{key}" for name in own
                   for key, field in (blocks[name] if name else schema)["properties"].items()
                   if "description" not in field]
    assert undescribed == []


def test_the_schemas_defaults_are_the_configurations_defaults(capsys, tmp_path):
    from focus_dagster.lora.settings import LoraSettings

    defs = _schema_printed(capsys)["$defs"]
    default = parse_config({}, tmp_path).to_document()

    def defaults(block):
        return {key: field.get("default") for key, field in defs[block]["properties"].items()}

    assert defaults("SyntheticSection") == default["synthetic"] == dataclasses.asdict(SyntheticSettings())
    assert defaults("ReleaseSection") == default["release"]
    assert defaults("KubernetesSection") == KubernetesSettings().to_document()
    assert defaults("LoraSettingsSection") == dataclasses.asdict(LoraSettings())


def test_the_schema_knows_the_choices_of_the_code_it_describes():
    """Choices written in the schema (the packages that own them import the configuration) stay the code's."""
    from focus_dagster.adapter_plan import SETTING_TYPES
    from focus_dagster.labels import TASKS
    from focus_dagster.lora.settings import LR_SCHEDULES, LoraSettings
    from focus_dagster.models import spec

    settings = config_schema.LoraSettingsSection.model_json_schema()["properties"]
    json_types = {int: "integer", float: "number", bool: "boolean", str: "string"}
    assert {name: settings[name]["type"] for name in settings} == {
        name: json_types[kind] for name, kind in SETTING_TYPES.items()}
    assert set(settings) == {f.name for f in dataclasses.fields(LoraSettings)}
    assert config_schema.LR_SCHEDULES == LR_SCHEDULES
    assert set(config_schema.ModelEntry.model_fields) == {f.name for f in dataclasses.fields(spec.ModelSpec)}
    # the processor folder and the sources are found, never written
    assert set(config_schema.PreprocessEntry.model_fields) == {
        f.name for f in dataclasses.fields(spec.Preprocess)} - {"processor", "sources"}
    assert (config_schema.MODEL_INTERFACES, config_schema.MODEL_DOMAINS, config_schema.RESIZE_POLICIES) == (
        spec.INTERFACES, spec.DOMAINS, spec.RESIZE_POLICIES)
    assert tuple(config_schema.TaskQuestions.model_fields) == tuple(TASKS)


# ------------------------------------------------------------------------------------- focus config --check


def test_focus_config_check_prints_the_resolved_configuration(capsys, full_example, monkeypatch):
    monkeypatch.setenv("FOCUS_HOME", str(full_example.parent / "home"))
    assert main(["config", "--check", str(full_example)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"# {full_example}: valid")
    printed = yaml.safe_load(out)
    config = parse_config(yaml.safe_load(full_example.read_text()), full_example.parent / "home", full_example)
    assert printed == config.to_document()
    assert parse_config(printed, full_example.parent / "home") == dataclasses.replace(config, source=None)
    # resolved: paths absolute, quantities as the API server reads them, defaults written out
    assert printed["datasets"]["brset"] == str(full_example.parent / "data" / "brset")
    assert printed["datasets"]["clinic"]["root"] == str(full_example.parent / "data" / "clinic")
    assert printed["splits"] == {"seed": 2, "dir": str(full_example.parent / "splits")}
    assert printed["kubernetes"]["gpu_resources"] == {"limits": {GPU: "2", "memory": "48Gi"}}
    assert printed["kubernetes"]["cpu_resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}}
    assert printed["lora"]["settings"] == {"learning_rate": 2e-5, "epochs": 1, "micro_batch": 4, "accumulation": 4,
                                           "seed": 0, "lr_schedule": "constant"}
    assert printed["tables"] == "s3://bucket/focus/tables"
    assert printed["compile"] == "blocks" and printed["release"]["refresh_seconds"] == 30


def test_focus_config_check_reads_focus_config_by_default_and_names_every_mistake(capsys, tmp_path, monkeypatch):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("executor: k8s\n")
    bad.write_text("kubernetes:\n  gpu_tolerations:\n    - {key: x, colour: red}\nsynthetic: {scale: 0}\n")
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FOCUS_CONFIG", str(good))
    assert main(["config", "--check"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["executor"] == "k8s"
    assert main(["config", "--check", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"error: {bad}:",
        "  synthetic.scale: must be > 0 (got 0)",
        "  kubernetes.gpu_tolerations.0.colour: unknown key; allowed: key, operator, value, effect, tolerationSeconds",
    ]
    assert main(["config", "--check", str(tmp_path / "nope.yaml")]) == 2
    assert f"{tmp_path / 'nope.yaml'} is not a file" in capsys.readouterr().err
    monkeypatch.delenv("FOCUS_CONFIG")
    assert main(["config", "--check"]) == 2
    assert "name a focus.yaml, or set FOCUS_CONFIG" in capsys.readouterr().err


def test_a_union_members_name_is_not_part_of_the_key_path():
    """pydantic names the member of a union it tried (`EdemaFlag`); the file has no such key."""
    clinic = {"root": "x", "labels": "e.csv", "image": "f",
              "tasks": {"referable_dr": {"icdr": "g", "edema": {"column": "dme", "colour": "red"}}}}
    message = _refused({"datasets": {"clinic": clinic}})
    assert ("datasets.clinic.tasks.referable_dr.edema.colour: unknown key; allowed: column, positive, negative"
            in [line.strip() for line in message.splitlines()[1:]])
    assert "EdemaFlag" not in message and "<icdr>" not in message


def test_an_unquoted_yaml_off_means_compile_off(tmp_path):
    """YAML 1.1 reads `compile: off` as false; the file means the mode `off`."""
    import yaml

    assert parse_config(yaml.safe_load("compile: off"), tmp_path).compile == "off"
