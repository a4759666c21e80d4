"""Where things live and which datasets are registered: FOCUS_HOME, FOCUS_CONFIG and focus.yaml.

With no configuration the platform runs on the embedded default: synthetic look-alikes of all ten
datasets, generated on first use under $FOCUS_HOME/synthetic. A `focus.yaml` (pointed to by
FOCUS_CONFIG) maps dataset keys to the local roots of real copies:

    datasets:
      brset: /data/physionet/brset      # the folder holding labels.csv and fundus_photos/
      idrid: synthetic                  # the embedded look-alike for this one
    synthetic: {per_dataset: 80, seed: 0, scale: 0.125}
    release: {observe_cron: "0 3 * * *", content_hash: false, refresh_seconds: 60}
    splits: {dir: /data/focus-splits, seed: 0}   # published labels_splits_<dataset>.csv files (optional)
    models: [efficientnet_lite0, {id: medgemma_4b, path: /weights/medgemma-4b-it}]
    questions: {version: site-1, tasks: {gon: "..."}}   # yes/no questions for multimodal LLMs (optional)
    image_check: header                 # none | header | full
    executor: in_process                # in_process (default) | multiprocess | k8s: how a run executes its steps
    compile: auto                       # auto (blocks on CUDA, eager on a CPU) | off | blocks | whole: encoders
    kubernetes: {gpu_node_selector: {nvidia.com/gpu.present: "true"}}   # step pods under executor k8s (deploy/)
    lora: {train_datasets: [brset], settings: {learning_rate: 2.0e-5}}   # LoRA adapters (focus_dagster/adapter_plan.py)

Only the datasets listed are registered (they become the dataset partitions). Relative paths are
relative to the focus.yaml file.
"""

from __future__ import annotations

import fcntl
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from focus_dagster.datasets.images import DEFAULT_IMAGE_CHECK, IMAGE_CHECKS
from focus_dagster.datasets.registry import DATASET_KEYS
from focus_dagster.errors import ConfigError
from focus_dagster.adapter_plan import LoraPlan, lora_plan

SYNTHETIC = "synthetic"
DEFAULT_HOME = ".focus"
DEFAULT_OBSERVE_CRON = "0 3 * * *"
DEFAULT_REFRESH_SECONDS = 60  # how often the automation sensor evaluates the graph
_TOP_LEVEL_KEYS = {"datasets", "synthetic", "release", "splits", "image_check", "models", "questions", "executor",
                   "lora", "tables", "kubernetes", "compile"}
# in_process: every step of a run in the run's own process (fast small steps); multiprocess: one process per
# step (steps of a run in parallel, each paying its own imports); k8s: one Kubernetes Job per step, its pod
# shaped by `kubernetes:` (GPU steps on GPU nodes; assets/kubernetes.py, deploy/README.md).
EXECUTORS = ("in_process", "multiprocess", "k8s")
# How encoders run on the device (focus_dagster/inference/compiled.py): auto = their repeated blocks compiled on CUDA,
# eager on a CPU.
COMPILE_MODES = ("auto", "off", "blocks", "whole")
_SYNTHETIC_KEYS = {"per_dataset", "seed", "scale"}
_RELEASE_KEYS = {"observe_cron", "content_hash", "refresh_seconds"}
_SPLITS_KEYS = {"dir", "seed"}


@dataclass(frozen=True)
class SyntheticSettings:
    per_dataset: int = 80
    seed: int = 0
    scale: float = 0.125


@dataclass(frozen=True)
class FocusConfig:
    """The resolved configuration: every path absolute, every dataset key known."""

    home: Path
    roots: Mapping[str, Path | None]  # dataset key -> real root, or None for the synthetic look-alike
    synthetic: SyntheticSettings = field(default_factory=SyntheticSettings)
    observe_cron: str = DEFAULT_OBSERVE_CRON
    refresh_seconds: int = DEFAULT_REFRESH_SECONDS
    executor: str = EXECUTORS[0]
    compile: str = COMPILE_MODES[0]  # how encoders run on the device (focus_dagster/inference/compiled.py)
    content_hash: bool = False
    image_check: str = DEFAULT_IMAGE_CHECK
    splits_dir: Path | None = None  # published split files; None = native or seeded splits
    split_seed: int = 0
    models: tuple | None = None  # model entries of focus.yaml (ids or mappings); None = the default models
    questions: Mapping | None = None  # yes/no questions replacing the registry's (see focus_dagster/questions.py)
    lora: LoraPlan = field(default_factory=LoraPlan)  # which LoRA adapters, trained how
    kubernetes: KubernetesSettings = field(default_factory=lambda: KubernetesSettings())  # step pods (executor k8s)
    source: Path | None = None  # the focus.yaml it came from, if any
    tables_url: str | None = None  # where the tables live: a folder or an fsspec URL (s3://...); None: artifacts/tables

    @property
    def dataset_keys(self) -> list[str]:
        return list(self.roots)

    @property
    def database(self) -> Path:
        return self.home / "focus.duckdb"

    @property
    def artifacts(self) -> Path:
        return self.home / "artifacts"

    @property
    def tables(self) -> str:
        """The table store (resources/tables.py): `tables:` of focus.yaml, by default a folder in the artifacts."""
        return self.tables_url or str(self.artifacts / "tables")

    @property
    def synthetic_dir(self) -> Path:
        return self.home / "synthetic"

    @property
    def model_cache(self) -> Path:
        """Where the built-in pipeline-check models are written on first use."""
        return self.home / "models"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    def is_synthetic(self, key: str) -> bool:
        return self.roots[key] is None

    def root_of(self, key: str) -> Path:
        """Where dataset `key` is read from (the look-alike's folder for synthetic datasets)."""
        if key not in self.roots:
            raise ConfigError(
                f"dataset {key!r} is not registered; registered: {', '.join(self.roots)}. "
                f"Add it under `datasets:` in {self.source or 'focus.yaml (FOCUS_CONFIG)'}."
            )
        root = self.roots[key]
        return root if root is not None else self.synthetic_dir / key

    def to_document(self) -> dict:
        """This configuration as a focus.yaml document, paths absolute: `parse_config(doc, home)` gives it back."""
        document = {
            "datasets": {key: str(root) if root is not None else SYNTHETIC for key, root in self.roots.items()},
            "synthetic": {"per_dataset": self.synthetic.per_dataset, "seed": self.synthetic.seed,
                          "scale": self.synthetic.scale},
            "release": {"observe_cron": self.observe_cron, "content_hash": self.content_hash,
                        "refresh_seconds": self.refresh_seconds},
            "splits": {"seed": self.split_seed, **({"dir": str(self.splits_dir)} if self.splits_dir else {})},
            "image_check": self.image_check,
            "executor": self.executor,
            "compile": self.compile,
        }
        if self.models is not None:
            document["models"] = list(self.models)
        if self.questions is not None:
            document["questions"] = dict(self.questions)
        if self.lora != LoraPlan():
            document["lora"] = self.lora.to_document()
        if self.kubernetes != KubernetesSettings():
            document["kubernetes"] = self.kubernetes.to_document()
        return document


def load_config(environ: Mapping[str, str] | None = None) -> FocusConfig:
    """Resolve FOCUS_HOME and FOCUS_CONFIG from the environment into a `FocusConfig`."""
    env = os.environ if environ is None else environ
    home = Path(env.get("FOCUS_HOME") or DEFAULT_HOME).expanduser().resolve()
    path = env.get("FOCUS_CONFIG")
    if not path:
        return FocusConfig(home=home, roots={key: None for key in DATASET_KEYS})
    config_file = Path(path).expanduser().resolve()
    if not config_file.is_file():
        raise ConfigError(f"FOCUS_CONFIG points to {config_file}, which does not exist. Unset it to use the synthetic default.")
    return parse_config(_read_yaml(config_file), home, config_file)


def parse_config(raw: Any, home: Path, source: Path | None = None) -> FocusConfig:
    """Validate a focus.yaml document; every mistake is reported with the file and the key."""
    where = str(source) if source else "focus.yaml"
    raw = raw or {}
    _expect_mapping(raw, where, "the top level")
    _reject_unknown(raw, _TOP_LEVEL_KEYS, where, "the top level")
    base = source.parent if source else Path.cwd()
    roots = _parse_datasets(raw.get("datasets"), base, where)
    synthetic = _parse_synthetic(raw.get("synthetic") or {}, where)
    release = raw.get("release") or {}
    _expect_mapping(release, where, "release")
    _reject_unknown(release, _RELEASE_KEYS, where, "release")
    splits = raw.get("splits") or {}
    _expect_mapping(splits, where, "splits")
    _reject_unknown(splits, _SPLITS_KEYS, where, "splits")
    splits_dir = (base / Path(str(splits["dir"])).expanduser()).resolve() if splits.get("dir") else None
    if splits_dir is not None and not splits_dir.is_dir():
        raise ConfigError(f"{where}: splits.dir {splits_dir} is not a folder.")
    image_check = raw.get("image_check", DEFAULT_IMAGE_CHECK)
    if image_check not in IMAGE_CHECKS:
        raise ConfigError(f"{where}: image_check must be one of {list(IMAGE_CHECKS)}, got {image_check!r}.")
    executor = raw.get("executor", EXECUTORS[0])
    if executor not in EXECUTORS:
        raise ConfigError(f"{where}: executor must be one of {list(EXECUTORS)}, got {executor!r}.")
    compile_mode = raw.get("compile", COMPILE_MODES[0])
    if compile_mode not in COMPILE_MODES:
        raise ConfigError(f"{where}: compile must be one of {list(COMPILE_MODES)}, got {compile_mode!r}.")
    return FocusConfig(
        home=home,
        roots=roots,
        executor=executor,
        compile=compile_mode,
        synthetic=synthetic,
        observe_cron=str(release.get("observe_cron", DEFAULT_OBSERVE_CRON)),
        content_hash=bool(release.get("content_hash", False)),
        refresh_seconds=_refresh_seconds(release.get("refresh_seconds", DEFAULT_REFRESH_SECONDS), where),
        image_check=image_check,
        splits_dir=splits_dir,
        split_seed=int(splits.get("seed", 0)),
        models=_parse_models(raw.get("models"), where),
        questions=_parse_questions(raw.get("questions"), where),
        lora=lora_plan(raw.get("lora"), where, list(roots)),
        kubernetes=parse_kubernetes(raw.get("kubernetes"), where),
        source=source,
        tables_url=_tables_url(raw.get("tables"), base, where),
    )


def _tables_url(value, base: Path, where: str) -> str | None:
    """`tables:` as the table store sees it: a URL with a protocol as written, a folder made absolute."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: tables must be a folder or a URL such as s3://bucket/focus/tables, got {value!r}.")
    if "://" in value:
        return value
    return str((base / Path(value).expanduser()).resolve())


def _parse_datasets(datasets: Any, base: Path, where: str) -> dict[str, Path | None]:
    if datasets is None:
        return {key: None for key in DATASET_KEYS}
    _expect_mapping(datasets, where, "datasets")
    unknown = [k for k in datasets if k not in DATASET_KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown dataset key(s) {unknown} under `datasets`; known: {', '.join(DATASET_KEYS)}.")
    if not datasets:
        raise ConfigError(f"{where}: `datasets` is empty; list at least one dataset or remove the key for the default.")
    roots: dict[str, Path | None] = {}
    for key in DATASET_KEYS:  # registry order, whatever the file's order
        if key not in datasets:
            continue
        value = datasets[key]
        if isinstance(value, Mapping):
            value = value.get("root")
        if value == SYNTHETIC:
            roots[key] = None
        elif isinstance(value, str) and value:
            roots[key] = (base / Path(value).expanduser()).resolve()
        else:
            raise ConfigError(f"{where}: datasets.{key} must be a folder path or 'synthetic', got {value!r}.")
    return roots


def _refresh_seconds(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{where}: release.refresh_seconds must be a whole number of seconds >= 1, got {value!r}.")
    return value


def _parse_models(models: Any, where: str) -> tuple | None:
    """Model entries as written (a catalog id, or a mapping with `id` and overrides); resolved by the
    models layer, which knows the catalog."""
    if models is None:
        return None
    if not isinstance(models, list) or not models:
        raise ConfigError(f"{where}: `models` must be a non-empty list of model ids or mappings.")
    for entry in models:
        if not (isinstance(entry, str) or (isinstance(entry, Mapping) and isinstance(entry.get("id"), str))):
            raise ConfigError(f"{where}: each entry of `models` is a catalog id or a mapping with an `id`; got {entry!r}.")
    return tuple(entry if isinstance(entry, str) else dict(entry) for entry in models)


def _parse_questions(questions: Any, where: str) -> Mapping | None:
    """The `questions:` block, validated by the question registry (which knows the tasks)."""
    if questions is None:
        return None
    from focus_dagster.questions import question_book

    question_book(questions, where)
    return dict(questions)


def _parse_synthetic(raw: Any, where: str) -> SyntheticSettings:
    _expect_mapping(raw, where, "synthetic")
    _reject_unknown(raw, _SYNTHETIC_KEYS, where, "synthetic")
    try:
        settings = SyntheticSettings(
            per_dataset=int(raw.get("per_dataset", SyntheticSettings.per_dataset)),
            seed=int(raw.get("seed", SyntheticSettings.seed)),
            scale=float(raw.get("scale", SyntheticSettings.scale)),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: synthetic settings must be numbers ({exc}).") from exc
    if settings.per_dataset < 1 or not 0 < settings.scale <= 1:
        raise ConfigError(f"{where}: synthetic.per_dataset must be >= 1 and 0 < synthetic.scale <= 1.")
    return settings


def _read_yaml(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc


def _expect_mapping(value: Any, where: str, what: str) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: {what} must be a mapping, got {type(value).__name__}.")


def _reject_unknown(value: Mapping, allowed: set[str], where: str, what: str) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} in {what}; allowed: {sorted(allowed)}.")


# --------------------------------------------------------------------------------- kubernetes:

GPU_RESOURCE = "nvidia.com/gpu"
_KUBERNETES_KEYS = {"gpu_node_selector", "gpu_tolerations", "gpu_resources", "cpu_resources"}
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# A Kubernetes quantity, as the API server reads it: 2, 0.5, 500m, 16Gi, 1e3.
_QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")


@dataclass(frozen=True)
class KubernetesSettings:
    """What each step's pod asks Kubernetes for under `executor: k8s` (assets/kubernetes.py turns it into pods).

    A GPU step (the `gpu` pool) asks for `gpu_resources`, a GPU included, on a node matching `gpu_node_selector`,
    tolerating `gpu_tolerations`; every other step asks for `cpu_resources` only, so the GPU nodes' taint keeps
    it off them. The defaults match the label and taint NVIDIA's GPU operator puts on GPU nodes. Each key of
    `kubernetes:` replaces its default whole; tolerations are written as in a pod spec.
    """

    gpu_node_selector: Mapping[str, str] = field(default_factory=lambda: {"nvidia.com/gpu.present": "true"})
    gpu_tolerations: tuple = field(
        default_factory=lambda: ({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},))
    gpu_resources: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: {
        "requests": {"cpu": "4", "memory": "16Gi", GPU_RESOURCE: "1"},
        "limits": {"cpu": "8", "memory": "32Gi", GPU_RESOURCE: "1"}})
    cpu_resources: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: {
        "requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}})

    def to_document(self) -> dict:
        return {"gpu_node_selector": dict(self.gpu_node_selector),
                "gpu_tolerations": [dict(toleration) for toleration in self.gpu_tolerations],
                "gpu_resources": {part: dict(amounts) for part, amounts in self.gpu_resources.items()},
                "cpu_resources": {part: dict(amounts) for part, amounts in self.cpu_resources.items()}}


def parse_kubernetes(raw: Any, where: str) -> KubernetesSettings:
    """The `kubernetes:` block of focus.yaml (optional): plain data, checked the way the API server would."""
    default = KubernetesSettings()
    if raw is None:
        return default
    _expect_mapping(raw, where, "kubernetes")
    _reject_unknown(raw, _KUBERNETES_KEYS, where, "kubernetes")
    selector = raw.get("gpu_node_selector", default.gpu_node_selector)
    _expect_mapping(selector, where, "kubernetes.gpu_node_selector")
    for label, value in selector.items():
        if not isinstance(label, str) or not label or not isinstance(value, str):
            raise ConfigError(f"{where}: kubernetes.gpu_node_selector maps node labels to strings; got {label!r}: "
                              f"{value!r} (quote values such as \"true\").")
    gpu = _resources(raw.get("gpu_resources", default.gpu_resources), where, "kubernetes.gpu_resources")
    cpu = _resources(raw.get("cpu_resources", default.cpu_resources), where, "kubernetes.cpu_resources")
    gpus = gpu.get("limits", {}).get(GPU_RESOURCE)
    if gpus is None or not gpus.isdigit() or int(gpus) < 1:
        raise ConfigError(f"{where}: kubernetes.gpu_resources.limits must ask for {GPU_RESOURCE} (a whole number "
                          f">= 1), got {gpus!r}; e.g. limits: {{{GPU_RESOURCE}: 1, cpu: 8, memory: 32Gi}}.")
    if gpu.get("requests", {}).get(GPU_RESOURCE, gpus) != gpus:
        raise ConfigError(f"{where}: kubernetes.gpu_resources: Kubernetes needs the {GPU_RESOURCE} request to equal "
                          f"its limit ({gpus}); drop it from requests or make them equal.")
    asked = sorted({name for amounts in cpu.values() for name in amounts if "gpu" in name.lower()})
    if asked:
        raise ConfigError(f"{where}: kubernetes.cpu_resources asks for {asked}; CPU steps get no GPU (GPU steps "
                          "take kubernetes.gpu_resources).")
    return KubernetesSettings(gpu_node_selector=dict(selector), gpu_resources=gpu, cpu_resources=cpu,
                              gpu_tolerations=_tolerations(raw.get("gpu_tolerations", default.gpu_tolerations),
                                                           where))


def _resources(raw: Any, where: str, what: str) -> dict[str, dict[str, str]]:
    """`{requests: {...}, limits: {...}}`, every amount a Kubernetes quantity (kept as a string)."""
    _expect_mapping(raw, where, what)
    _reject_unknown(raw, {"requests", "limits"}, where, what)
    parsed: dict[str, dict[str, str]] = {}
    for part in ("requests", "limits"):
        if part not in raw:
            continue
        _expect_mapping(raw[part], where, f"{what}.{part}")
        parsed[part] = {}
        for name, amount in raw[part].items():
            text = None if isinstance(amount, bool) or not isinstance(amount, (int, float, str)) else str(amount)
            if not isinstance(name, str) or text is None or not _QUANTITY.match(text):
                raise ConfigError(f"{where}: {what}.{part}.{name} must be a Kubernetes quantity such as 2, 500m or "
                                  f"16Gi, got {amount!r}.")
            parsed[part][name] = text
    return parsed


def _tolerations(raw: Any, where: str) -> tuple:
    what = "kubernetes.gpu_tolerations"
    if not isinstance(raw, (list, tuple)):
        raise ConfigError(f"{where}: {what} must be a list such as [{{key: {GPU_RESOURCE}, operator: Exists, "
                          f"effect: NoSchedule}}], got {raw!r}.")
    for index, toleration in enumerate(raw):
        item = f"{what}[{index}]"
        _expect_mapping(toleration, where, item)
        _reject_unknown(toleration, _TOLERATION_KEYS, where, item)
        operator, effect = toleration.get("operator", "Equal"), toleration.get("effect")
        if operator not in ("Exists", "Equal") or (operator == "Exists" and "value" in toleration):
            raise ConfigError(f"{where}: {item}: operator is Exists (no value) or Equal (with a value), got "
                              f"{operator!r}.")
        if operator == "Equal" and not toleration.get("key"):
            raise ConfigError(f"{where}: {item}: operator Equal needs the taint's key.")
        if not all(isinstance(toleration.get(name, ""), str) for name in ("key", "value")):
            raise ConfigError(f"{where}: {item}: key and value are strings (quote values such as \"true\").")
        if effect is not None and effect not in _TAINT_EFFECTS:
            raise ConfigError(f"{where}: {item}: effect must be one of {list(_TAINT_EFFECTS)}, got {effect!r}.")
        seconds = toleration.get("tolerationSeconds")
        if seconds is not None and (effect != "NoExecute" or not isinstance(seconds, int) or isinstance(seconds, bool)):
            raise ConfigError(f"{where}: {item}: tolerationSeconds is a whole number, for effect NoExecute only.")
    return tuple(dict(toleration) for toleration in raw)


# --------------------------------------------------------------------------------- the embedded default


def ensure_dataset_root(config: FocusConfig, key: str) -> Path:
    """The root to read `key` from, writing the synthetic look-alike first if it is missing or stale."""
    root = config.root_of(key)
    if not config.is_synthetic(key):
        return root
    from focus_dagster.synthetic import is_synthetic_root, read_manifest, synthesize

    settings = config.synthetic
    wanted = {"seed": settings.seed, "per_dataset": settings.per_dataset, "scale": settings.scale}
    with _lock(config.synthetic_dir / f".{key}.lock"):
        if is_synthetic_root(root) and all(read_manifest(root).get(k) == v for k, v in wanted.items()):
            return root
        synthesize(config.synthetic_dir, [key], **wanted)
    return root


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive file lock, so that two run processes never write the same look-alike at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
