"""Where things live and which datasets are registered: FOCUS_HOME, FOCUS_CONFIG and focus.yaml.

With no configuration the platform runs on the embedded default: synthetic look-alikes of all ten
datasets, generated on first use under $FOCUS_HOME/synthetic. A `focus.yaml` (pointed to by
FOCUS_CONFIG) maps dataset keys to the local roots of real copies:

    datasets:
      brset: /data/physionet/brset      # the folder holding labels.csv and fundus_photos/
      idrid: synthetic                  # the embedded look-alike for this one
    synthetic: {per_dataset: {default: 80, brset: 160}, seed: 0, scale: 0.125}   # or per_dataset: 80 for all
    release: {observe_cron: "0 3 * * *", content_hash: false, refresh_seconds: 60}
    splits: {dir: /data/focus-splits, seed: 0}   # published labels_splits_<dataset>.csv files (optional)
    models: [efficientnet_lite0, {id: medgemma_4b, path: /weights/medgemma-4b-it}]
    questions: {version: site-1, tasks: {gon: "..."}}   # yes/no questions for multimodal LLMs (optional)
    image_check: header                 # none | header | full
    executor: in_process                # in_process (default) | multiprocess | k8s: how a run executes its steps
    compile: auto                       # auto (blocks on CUDA, eager on a CPU) | off | blocks | whole: encoders
    kubernetes: {gpu_node_selector: {nvidia.com/gpu.present: "true"}}   # step pods under executor k8s (deploy/)
    lora: {train_datasets: [brset], settings: {learning_rate: 2.0e-5}}   # LoRA adapters (focus_dagster/adapter_plan.py)
    degradations: {types: [defocus_blur, haze], severities: [1, 3, 5]}   # image-quality axis; types: all; false: none

Only the datasets listed are registered (they become the dataset partitions). Relative paths are
relative to the focus.yaml file. Every section has a schema (focus_dagster/config_schema.py): unknown keys and
wrong values are named with their key path; `focus config --schema` prints it as JSON Schema for editors, and
`focus config --check FILE` validates a file and prints it resolved.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from focus_dagster.adapter_plan import LoraPlan, lora_plan
from focus_dagster.config_schema import (  # the constants are part of this module's interface
    COMPILE_MODES,
    DEFAULT_CPU_RESOURCES,
    DEFAULT_GPU_NODE_SELECTOR,
    DEFAULT_GPU_RESOURCES,
    DEFAULT_GPU_TOLERATIONS,
    DEFAULT_IMAGES,
    DEFAULT_OBSERVE_CRON,
    DEFAULT_REFRESH_SECONDS,
    EXECUTORS,
    GPU_RESOURCE,
    FocusFile,
    KubernetesSection,
    ReleaseSection,
    SplitsSection,
    SyntheticSection,
    validated,
)
from focus_dagster.datasets.images import DEFAULT_IMAGE_CHECK
from focus_dagster.datasets.registry import DATASET_KEYS, register_declared
from focus_dagster.degradations.plan import DegradationPlan, degradation_plan
from focus_dagster.errors import ConfigError

SYNTHETIC = "synthetic"
DEFAULT_HOME = ".focus"


@dataclass(frozen=True)
class SyntheticSettings:
    # images per look-alike: one number for all, or dataset key (and "default") -> images (synthetic.images_for)
    per_dataset: int | Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_IMAGES))
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
    compare: tuple[tuple[str, str], ...] = ()  # pairs of model ids (A, B) for model_comparisons, deltas A - B
    # Degradations x severities of the image-quality axis (focus_dagster/degradations/plan.py).
    degradations: DegradationPlan = field(default_factory=DegradationPlan)
    kubernetes: KubernetesSettings = field(default_factory=lambda: KubernetesSettings())  # step pods (executor k8s)
    source: Path | None = None  # the focus.yaml it came from, if any
    # Datasets of the user's own (key -> declaration, root absolute; focus_dagster/datasets/declaration.py).
    declared: Mapping[str, Any] = field(default_factory=dict)
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
            "datasets": {key: (self.declared[key].model_dump(mode="json", exclude_none=True) if key in self.declared
                               else str(root) if root is not None else SYNTHETIC)
                         for key, root in self.roots.items()},
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
        if self.compare:
            document["compare"] = [list(pair) for pair in self.compare]
        if self.degradations != DegradationPlan():
            document["degradations"] = self.degradations.to_document()
        if self.kubernetes != KubernetesSettings():
            document["kubernetes"] = self.kubernetes.to_document()
        if self.tables_url is not None:
            document["tables"] = self.tables_url
        return document


def load_config(environ: Mapping[str, str] | None = None) -> FocusConfig:
    """Resolve FOCUS_HOME and FOCUS_CONFIG from the environment into a `FocusConfig`."""
    env = os.environ if environ is None else environ
    home = Path(env.get("FOCUS_HOME") or DEFAULT_HOME).expanduser().resolve()
    path = env.get("FOCUS_CONFIG")
    if not path:
        register_declared({})
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
    document = validated(FocusFile, dict(raw), where, "")  # every section but `datasets`, all mistakes at once
    base = source.parent if source else Path.cwd()
    roots, declared = _parse_datasets(raw.get("datasets"), base, where)
    register_declared(declared)
    release = document.release or ReleaseSection()
    splits = document.splits or SplitsSection()
    return FocusConfig(
        home=home,
        roots=roots,
        executor=document.executor,
        compile=document.compile,
        synthetic=_synthetic(document.synthetic or SyntheticSection()),
        observe_cron=release.observe_cron,
        content_hash=release.content_hash,
        refresh_seconds=release.refresh_seconds,
        image_check=document.image_check,
        splits_dir=_splits_dir(splits.dir, base, where),
        split_seed=splits.seed,
        models=_models(raw.get("models")),
        questions=_questions(raw.get("questions"), where),
        lora=lora_plan(raw.get("lora"), where, list(roots)),
        compare=_pairs(document.compare, where),
        degradations=degradation_plan(raw.get("degradations"), where),
        kubernetes=_kubernetes(document.kubernetes),
        source=source,
        declared=declared,
        tables_url=_tables_url(document.tables, base),
    )


def _pairs(pairs: list | None, where: str) -> tuple[tuple[str, str], ...]:
    """`compare:` as (A, B) pairs; a model compared with itself, or a pair given twice, is refused."""
    found: list[tuple[str, str]] = []
    for index, (a, b) in enumerate(pairs or ()):
        if a == b:
            raise ConfigError(f"{where}: compare[{index}] compares {a!r} with itself; name two different models.")
        if (a, b) in found:
            raise ConfigError(f"{where}: compare[{index}] [{a}, {b}] is given twice.")
        found.append((a, b))
    return tuple(found)


def _synthetic(section: SyntheticSection) -> SyntheticSettings:
    return SyntheticSettings(per_dataset=section.per_dataset, seed=section.seed, scale=section.scale)


def _splits_dir(folder: str | None, base: Path, where: str) -> Path | None:
    """The published split files' folder, made absolute; it must exist (a typo would silently mean no files)."""
    if not folder:
        return None
    splits_dir = (base / Path(folder).expanduser()).resolve()
    if not splits_dir.is_dir():
        raise ConfigError(f"{where}: splits.dir {splits_dir} is not a folder.")
    return splits_dir


def _tables_url(value: str | None, base: Path) -> str | None:
    """`tables:` as the table store sees it: a URL with a protocol as written, a folder made absolute."""
    if value is None:
        return None
    if "://" in value:
        return value
    return str((base / Path(value).expanduser()).resolve())


def _parse_datasets(datasets: Any, base: Path, where: str) -> tuple[dict[str, Path | None], dict]:
    """Roots of the registered datasets (published ones in registry order, then the user's own in the file's
    order) and the declarations of the user's own."""
    if datasets is None:
        return {key: None for key in DATASET_KEYS}, {}
    _expect_mapping(datasets, where, "datasets")
    if not datasets:
        raise ConfigError(f"{where}: `datasets` is empty; list at least one dataset or remove the key for the default.")
    roots: dict[str, Path | None] = {}
    for key in DATASET_KEYS:  # registry order, whatever the file's order
        if key in datasets:
            roots[key] = _published_root(key, datasets[key], base, where)
    declared = {}
    for key, value in datasets.items():
        if key not in DATASET_KEYS:
            declared[key] = _declaration(str(key), value, base, where)
            roots[key] = Path(declared[key].root)
    return roots, declared


def _published_root(key: str, value: Any, base: Path, where: str) -> Path | None:
    """A published dataset's entry: its root (a path, `synthetic`, or `{root: ...}`, nothing else)."""
    if isinstance(value, Mapping):
        extra = sorted(set(value) - {"root"})
        if extra:
            raise ConfigError(f"{where}: datasets.{key}.{extra[0]}: unknown key; allowed: root ({key} is a published "
                              "dataset read by its own reader; a dataset of your own takes a key of its own, see "
                              "README \"Your own dataset\").")
        value = value.get("root")
    if value == SYNTHETIC:
        return None
    if isinstance(value, str) and value:
        return (base / Path(value).expanduser()).resolve()
    raise ConfigError(f"{where}: datasets.{key} must be a folder path or 'synthetic', got {value!r}.")


def _declaration(key: str, value: Any, base: Path, where: str):
    """A dataset of the user's own, validated, its root made absolute."""
    from pydantic import ValidationError

    from focus_dagster.datasets.declaration import DatasetDeclaration, check_key
    from focus_dagster.errors import config_validation_error

    try:
        check_key(key)
    except ValueError as error:
        raise ConfigError(f"{where}: datasets.{key}: {error}.") from None
    if not isinstance(value, Mapping):
        import difflib

        near = difflib.get_close_matches(key, DATASET_KEYS, n=1)
        hint = f" (did you mean the published {near[0]!r}?)" if near else ""
        raise ConfigError(
            f"{where}: datasets.{key} is not a published dataset ({', '.join(DATASET_KEYS)}){hint}, so it is "
            f"declared: a mapping with root, labels, image and tasks (README \"Your own dataset\"); got {value!r}.")
    try:
        declaration = DatasetDeclaration.model_validate(dict(value))
    except ValidationError as error:
        raise config_validation_error(where, f"datasets.{key}", error, DatasetDeclaration) from None
    return declaration.model_copy(update={"root": str((base / Path(declaration.root).expanduser()).resolve())})


def _models(models: list | None) -> tuple | None:
    """Model entries as written (a catalog id, or a mapping with `id` and overrides; their shape checked by the
    schema); resolved by the models layer, which knows the catalog."""
    if models is None:
        return None
    return tuple(entry if isinstance(entry, str) else dict(entry) for entry in models)


def _questions(questions: Any, where: str) -> Mapping | None:
    """The `questions:` block as written, validated by the question registry (which knows the tasks)."""
    if questions is None:
        return None
    from focus_dagster.questions import question_book

    question_book(questions, where)
    return dict(questions)


def _read_yaml(path: Path) -> Any:
    """focus.yaml as yaml.safe_load reads it, except that a key given twice in one mapping is refused: YAML keeps
    the last one without a word, and the first may be the one the user meant."""
    import yaml

    loader = yaml.SafeLoader(path.read_text(encoding="utf-8"))
    try:
        node = loader.get_single_node()
        if node is None:  # an empty file
            return None
        _refuse_duplicate_keys(node, path)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    finally:
        loader.dispose()


def _refuse_duplicate_keys(node, path: Path, keys: tuple[str, ...] = (), walked: set[int] | None = None) -> None:
    """Walk the parsed YAML nodes; a key given twice in one mapping is a ConfigError naming its key path (as the
    schema's errors name keys) and both lines. A merge (`<<: *anchor`) may repeat a key: that is its purpose."""
    import yaml

    walked = set() if walked is None else walked
    if id(node) in walked:  # an alias of a node already walked
        return
    walked.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _refuse_duplicate_keys(item, path, (*keys, str(index)), walked)
    if not isinstance(node, yaml.MappingNode):
        return
    first_line: dict[str, int] = {}
    for key, value in node.value:
        if key.tag == "tag:yaml.org,2002:merge" or not isinstance(key, yaml.ScalarNode):
            continue
        line = key.start_mark.line + 1
        if key.value in first_line:
            raise ConfigError(f"{path}: key {'.'.join((*keys, key.value))} is given twice, on lines "
                              f"{first_line[key.value]} and {line}; YAML would keep the last one silently. Keep one "
                              "of them.")
        first_line[key.value] = line
        _refuse_duplicate_keys(value, path, (*keys, key.value), walked)


def _expect_mapping(value: Any, where: str, what: str) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: {what} must be a mapping, got {type(value).__name__}.")


# --------------------------------------------------------------------------------- kubernetes:


@dataclass(frozen=True)
class KubernetesSettings:
    """What each step's pod asks Kubernetes for under `executor: k8s` (assets/kubernetes.py turns it into pods).

    A GPU step (the `gpu` pool) asks for `gpu_resources`, a GPU included, on a node matching `gpu_node_selector`,
    tolerating `gpu_tolerations`; every other step asks for `cpu_resources` only, so the GPU nodes' taint keeps
    it off them. The defaults match the label and taint NVIDIA's GPU operator puts on GPU nodes. Each key of
    `kubernetes:` replaces its default whole; tolerations are written as in a pod spec.
    """

    gpu_node_selector: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_GPU_NODE_SELECTOR))
    gpu_tolerations: tuple = field(
        default_factory=lambda: tuple(dict(toleration) for toleration in DEFAULT_GPU_TOLERATIONS))
    gpu_resources: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: {part: dict(amounts) for part, amounts in DEFAULT_GPU_RESOURCES.items()})
    cpu_resources: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: {part: dict(amounts) for part, amounts in DEFAULT_CPU_RESOURCES.items()})

    def to_document(self) -> dict:
        return {"gpu_node_selector": dict(self.gpu_node_selector),
                "gpu_tolerations": [dict(toleration) for toleration in self.gpu_tolerations],
                "gpu_resources": {part: dict(amounts) for part, amounts in self.gpu_resources.items()},
                "cpu_resources": {part: dict(amounts) for part, amounts in self.cpu_resources.items()}}


def _kubernetes(section: KubernetesSection | None) -> KubernetesSettings:
    """The `kubernetes:` block (checked by its schema the way the API server would) as plain pod-spec data;
    tolerations keep only the keys written, as a pod spec does."""
    if section is None:
        return KubernetesSettings()
    return KubernetesSettings(
        gpu_node_selector=dict(section.gpu_node_selector),
        gpu_tolerations=tuple(toleration.model_dump(exclude_unset=True) for toleration in section.gpu_tolerations),
        gpu_resources=section.gpu_resources.document(),
        cpu_resources=section.cpu_resources.document())


# --------------------------------------------------------------------------------- the embedded default


def ensure_dataset_root(config: FocusConfig, key: str) -> Path:
    """The root to read `key` from, writing the synthetic look-alike first if it is missing or stale."""
    root = config.root_of(key)
    if not config.is_synthetic(key):
        return root
    from focus_dagster.synthetic import images_for, is_synthetic_root, read_manifest, synthesize

    settings = config.synthetic
    wanted = {"seed": settings.seed, "per_dataset": images_for(settings.per_dataset, key), "scale": settings.scale}
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
