"""The Kubernetes deployment (deploy/), checked as far as it can be without a cluster.

- the instance (deploy/dagster-k8s.yaml) and the executor config validate against the installed dagster-k8s,
  dagster-postgres and Dagster schemas, a wrong key does not, and the run launcher is the one the Helm chart
  renders from deploy/helm/values.yaml;
- the Job manifest dagster-k8s builds for a GPU step (`image_embeddings`) and a CPU step (`metrics`), from the op
  tags of the real code location, through dagster-k8s's own executor, run launcher and Job builder;
- every key of deploy/helm/values.yaml is one the chart documents, the code location is served as the image
  serves it, and the Dockerfile installs with the lock, serves port 3030 and holds no secret.
"""

from __future__ import annotations

import importlib
import json
import re
import tomllib
import uuid
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import kubernetes
import pytest
import yaml
from dagster._config import process_config
from dagster._core.code_pointer import ModuleCodePointer
from dagster._core.execution.api import create_execution_plan
from dagster._core.instance.config import dagster_instance_config_schema
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
from dagster._core.storage.dagster_run import DagsterRun
from dagster._core.system_config.objects import ResolvedRunConfig
from dagster_k8s import K8sRunLauncher, k8s_job_executor
from dagster_k8s.job import USER_DEFINED_K8S_CONFIG_KEY, construct_dagster_k8s_job
from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

from assets.kubernetes import (K8S_CONFIG_TAG, cpu_step_config, executor_config, gpu_op_tags, gpu_step_config,
                               k8s_executor)
from focus_dagster.config import GPU_RESOURCE, KubernetesSettings, load_config, parse_config
from focus_dagster.definitions import build_definitions
from focus_dagster.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
VALUES = DEPLOY / "helm" / "values.yaml"
INSTANCE = DEPLOY / "dagster-k8s.yaml"
RELEASE, NAMESPACE = "focus", "focus"  # as deploy/README.md installs it
FULLNAME = f"{RELEASE}-dagster"  # the chart's `dagster.fullname` for a release whose name lacks "dagster"
USER_FULLNAME = f"{RELEASE}-dagster-user-deployments"  # the same in its subchart dagster-user-deployments
GPU_ASSETS = {"image_embeddings", "degraded_embeddings", "token_probabilities", "degraded_token_probabilities",
              "lora_adapters", "adapted_token_probabilities"}
SENTINEL = "sentinel-not-a-real-password-7f3a"  # a secret in the environment must never reach a manifest
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_?KEY|ACCESS_KEY|CREDENTIAL", re.IGNORECASE)


def _yaml(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------- the chart's documented keys

ANY = None  # free-form below this key: a Kubernetes object or a map the chart passes through as written
_IMAGE = {"repository": ANY, "tag": ANY, "pullPolicy": ANY}
_POD = {"env": ANY, "envConfigMaps": ANY, "envSecrets": ANY, "annotations": ANY, "nodeSelector": ANY,
        "affinity": ANY, "tolerations": ANY, "podSecurityContext": ANY, "securityContext": ANY, "resources": ANY,
        "livenessProbe": ANY, "readinessProbe": ANY, "startupProbe": ANY, "labels": ANY, "volumeMounts": ANY,
        "volumes": ANY, "schedulerName": ANY}
# The documented values of the `dagster/dagster` chart: the pydantic models of dagster-io/dagster that generate the
# chart's values.schema.json, helm/dagster/schema/schema/charts/dagster/values.py and subschema/{webserver,daemon,
# run_launcher,postgresql,concurrency,telemetry,global_}.py, and charts/dagster_user_deployments/subschema/
# user_deployments.py, as of the chart line 1.13 (dagster 1.13.27). Sections this deployment does not touch are ANY.
CHART_KEYS = {
    "global": {"postgresqlSecretName": ANY, "dagsterHome": ANY, "serviceAccountName": ANY,
               "celeryConfigSecretName": ANY, "dagsterInstanceConfigMap": ANY},
    "dagsterWebserver": {**_POD, "replicaCount": ANY, "image": _IMAGE, "nameOverride": ANY, "pathPrefix": ANY,
                         "service": ANY, "workspace": {"enabled": ANY, "servers": ANY, "externalConfigmap": ANY},
                         "deploymentLabels": ANY, "checkDbReadyInitContainer": ANY, "enableReadOnly": ANY,
                         "dbStatementTimeout": ANY, "dbPoolRecycle": ANY, "dbPoolMaxOverflow": ANY, "logLevel": ANY},
    "dagster-user-deployments": {
        "enabled": ANY, "enableSubchart": ANY, "imagePullSecrets": ANY,
        "deployments": [{**_POD, "name": ANY, "image": _IMAGE, "dagsterApiGrpcArgs": ANY, "codeServerArgs": ANY,
                         "includeConfigInLaunchedRuns": {"enabled": ANY}, "deploymentNamespace": ANY, "port": ANY,
                         "replicaCount": ANY, "initContainers": ANY, "sidecarContainers": ANY,
                         "deploymentStrategy": ANY}],
    },
    "postgresql": {"enabled": ANY, "image": _IMAGE, "postgresqlHost": ANY, "postgresqlUsername": ANY,
                   "postgresqlPassword": ANY, "postgresqlDatabase": ANY, "postgresqlParams": ANY,
                   "postgresqlScheme": ANY, "service": {"port": ANY}},
    "generatePostgresqlPasswordSecret": ANY,
    "generateCeleryConfigSecret": ANY,
    "rabbitmq": ANY, "redis": ANY, "flower": ANY, "ingress": ANY, "imagePullSecrets": ANY,
    "computeLogManager": ANY, "scheduler": ANY, "pythonLogs": ANY, "busybox": ANY, "migrate": ANY,
    "serviceAccount": ANY, "retention": ANY, "additionalInstanceConfig": ANY,
    "telemetry": {"enabled": ANY},
    "runLauncher": {
        "type": ANY,  # CeleryK8sRunLauncher | K8sRunLauncher | CustomRunLauncher
        "config": {
            "k8sRunLauncher": {
                "image": _IMAGE, "imagePullPolicy": ANY, "jobNamespace": ANY, "loadInclusterConfig": ANY,
                "kubeconfigFile": ANY, "envConfigMaps": ANY, "envSecrets": ANY, "envVars": ANY, "volumeMounts": ANY,
                "volumes": ANY, "labels": ANY, "failPodOnRunFailure": ANY, "resources": ANY, "schedulerName": ANY,
                "securityContext": ANY,
                "runK8sConfig": {"containerConfig": ANY, "podSpecConfig": ANY, "podTemplateSpecMetadata": ANY,
                                 "jobSpecConfig": ANY, "jobMetadata": ANY},
            },
            "celeryK8sRunLauncher": ANY, "customRunLauncher": ANY,
        },
    },
    "dagsterDaemon": {
        **_POD, "enabled": ANY, "image": _IMAGE, "runCoordinator": ANY, "heartbeatTolerance": ANY,
        "deploymentLabels": ANY, "checkDbReadyInitContainer": ANY, "sensors": ANY, "schedules": ANY,
        "backfills": ANY, "logFormat": ANY, "initContainerResources": ANY, "extraContainers": ANY,
        "extraPrependedInitContainers": ANY,
        # the keys the chart's instance template renders into run_monitoring / run_retries
        "runMonitoring": {"enabled": ANY, "startTimeoutSeconds": ANY, "pollIntervalSeconds": ANY,
                          "maxResumeRunAttempts": ANY},
        "runRetries": {"enabled": ANY, "maxRetries": ANY, "retryOnAssetOrOpFailure": ANY},
    },
    "concurrency": {"enabled": ANY, "pools": {"defaultLimit": ANY, "granularity": ANY, "opGranularityRunBuffer": ANY},
                    "runs": {"maxConcurrentRuns": ANY, "tagConcurrencyLimits": ANY}},
}


def undocumented(values, keys=CHART_KEYS, path="") -> list[str]:
    """Every key path of `values` that `keys` does not document."""
    if keys is ANY:
        return []
    if isinstance(keys, list):
        return [p for i, item in enumerate(values) for p in undocumented(item, keys[0], f"{path}[{i}]")]
    if not isinstance(values, dict):
        return [f"{path} (a mapping in the chart)"]
    return [p for key, value in values.items()
            for p in ([f"{path}.{key}".lstrip(".")] if key not in keys else undocumented(value, keys[key],
                                                                                           f"{path}.{key}"))]


# --------------------------------------------------------------------------------- the chart's templates, mirrored

def chart_run_launcher(values: dict) -> dict:
    """The K8sRunLauncher config the chart renders from `values` (helm/dagster/templates/helpers/instance/
    _run-launcher.tpl, `dagsterYaml.runLauncher.k8s`)."""
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    glob = values.get("global", {})
    config = {"load_incluster_config": launcher["loadInclusterConfig"],
              "job_namespace": launcher.get("jobNamespace") or NAMESPACE,
              "image_pull_policy": launcher["imagePullPolicy"],
              "service_account_name": glob.get("serviceAccountName") or values.get("serviceAccount", {}).get("name")
              or FULLNAME,
              "dagster_home": glob.get("dagsterHome", "/opt/dagster/dagster_home"),
              "instance_config_map": f"{FULLNAME}-instance",
              "postgres_password_secret": glob.get("postgresqlSecretName", "dagster-postgresql-secret")}
    if values.get("imagePullSecrets"):
        config["image_pull_secrets"] = values["imagePullSecrets"]
    for key, name in [("envConfigMaps", "env_config_maps"), ("envSecrets", "env_secrets")]:
        if launcher.get(key):
            config[name] = [item["name"] for item in launcher[key] if "name" in item]
    for key, name in [("envVars", "env_vars"), ("volumeMounts", "volume_mounts"), ("volumes", "volumes"),
                      ("labels", "labels"), ("resources", "resources"), ("schedulerName", "scheduler_name"),
                      ("securityContext", "security_context")]:
        if launcher.get(key):
            config[name] = launcher[key]
    if launcher.get("failPodOnRunFailure"):
        config["fail_pod_on_run_failure"] = True
    if launcher.get("runK8sConfig"):
        names = {"containerConfig": "container_config", "podSpecConfig": "pod_spec_config",
                 "podTemplateSpecMetadata": "pod_template_spec_metadata", "jobSpecConfig": "job_spec_config",
                 "jobMetadata": "job_metadata"}
        config["run_k8s_config"] = {names[k]: v for k, v in launcher["runK8sConfig"].items() if v}
    return config


def chart_postgres_db(values: dict) -> dict:
    """`dagsterYaml.postgresql.config` (helm/dagster/templates/helpers/instance/_postgresql.tpl)."""
    pg = values["postgresql"]
    db = {"username": pg["postgresqlUsername"], "password": {"env": "DAGSTER_PG_PASSWORD"},
          "hostname": f"{RELEASE}-postgresql" if pg["enabled"] else pg["postgresqlHost"],
          "db_name": pg["postgresqlDatabase"], "port": pg["service"]["port"], "params": pg.get("postgresqlParams", {})}
    return db | ({"scheme": pg["postgresqlScheme"]} if pg.get("postgresqlScheme") else {})


def user_deployment() -> dict:
    (deployment,) = _yaml(VALUES)["dagster-user-deployments"]["deployments"]
    return deployment


def chart_container_context(deployment: dict) -> dict:
    """The container context the code server passes to the runs it launches with includeConfigInLaunchedRuns
    (helm/dagster/charts/dagster-user-deployments/templates/helpers/_helpers.tpl,
    `dagsterUserDeployments.k8sContainerContext`)."""
    k8s = {"image_pull_policy": deployment["image"]["pullPolicy"],
           "env_config_maps": [f"{USER_FULLNAME}-{deployment['name']}-user-env"]
           + [item["name"] for item in deployment.get("envConfigMaps", []) if "name" in item],
           "namespace": NAMESPACE, "service_account_name": f"{USER_FULLNAME}-user-deployments",
           "run_k8s_config": {"pod_spec_config": {"automount_service_account_token": True}}}
    if deployment.get("envSecrets"):
        k8s["env_secrets"] = [item["name"] for item in deployment["envSecrets"] if "name" in item]
    for key, name in [("volumeMounts", "volume_mounts"), ("volumes", "volumes"), ("labels", "labels"),
                      ("resources", "resources"), ("schedulerName", "scheduler_name")]:
        if deployment.get(key):
            k8s[name] = deployment[key]
    if isinstance(deployment.get("env"), list):
        k8s["env"] = deployment["env"]
    return {"k8s": k8s}


# --------------------------------------------------------------------------------- dagster-k8s, without a cluster

@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory) -> Path:
    """A kubeconfig naming an unreachable API server: dagster-k8s loads one, nothing here calls it."""
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "none", "user": {}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}]}))
    return path


@pytest.fixture(scope="module")
def launcher(kubeconfig) -> K8sRunLauncher:
    """The run launcher of deploy/dagster-k8s.yaml, as the instance builds it (outside a cluster)."""
    processed = process_config(K8sRunLauncher.config_type(), _yaml(INSTANCE)["run_launcher"]["config"])
    assert processed.success, processed.errors
    return K8sRunLauncher(**{**processed.value, "load_incluster_config": False, "kubeconfig_file": str(kubeconfig)})


@pytest.fixture(scope="module")
def defs(tmp_path_factory) -> dg.Definitions:
    """The code location with the default `kubernetes:` (deploy/focus.yaml's, less `executor: k8s`)."""
    return build_definitions(parse_config(None, tmp_path_factory.mktemp("home")))


def step_tags(definitions: dg.Definitions, asset: str) -> dict[str, str]:
    """The tags of `asset`'s step as the executor sees them: from the execution plan of the UI's asset job."""
    job = definitions.resolve_implicit_global_asset_job_def().get_subset(asset_selection={dg.AssetKey(asset)})
    (step,) = create_execution_plan(job).steps
    return dict(step.tags)


@dg.asset
def probe() -> None:
    """An asset to resolve an executor's config with."""


def executor_engine_config(executor_def: dg.ExecutorDefinition) -> dict:
    """What the executor is created with for a run: its config resolved the way a run resolves it."""
    job = dg.Definitions(assets=[probe], executor=executor_def).resolve_implicit_global_asset_job_def()
    return ResolvedRunConfig.build(job, {}).execution.execution_engine_config


def step_job(launcher: K8sRunLauncher, settings: KubernetesSettings, tags: dict[str, str], step: str) -> dict:
    """The Job dagster-k8s's k8s_job_executor creates for `step`: its step handler merges the run launcher, the
    code server's container context, the executor config and the step's tags (K8sStepHandler.launch_step), and
    dagster-k8s's builder makes the Job; only the API call is left out."""
    executor = k8s_job_executor.executor_creation_fn(SimpleNamespace(
        instance=SimpleNamespace(run_launcher=launcher),
        executor_config=executor_engine_config(k8s_executor(settings))))
    image = f"{user_deployment()['image']['repository']}:{user_deployment()['image']['tag']}"
    origin = JobPythonOrigin("__ASSET_JOB", RepositoryPythonOrigin(
        executable_path="/usr/local/bin/python", code_pointer=ModuleCodePointer("focus_dagster.definitions", "defs",
                                                                                working_directory=None),
        container_image=image, container_context=chart_container_context(user_deployment())))
    run = DagsterRun(job_name="__ASSET_JOB", run_id=str(uuid.uuid4()), job_code_origin=origin)
    context = SimpleNamespace(execute_step_args=SimpleNamespace(step_keys_to_execute=[step]), dagster_run=run,
                              instance=SimpleNamespace(run_launcher=launcher), step_tags={step: tags},
                              get_step_context=lambda key: SimpleNamespace(step=SimpleNamespace(op_name=key)))
    container_context = executor._step_handler._get_container_context(context)  # noqa: SLF001
    job_config = container_context.get_k8s_job_config(None, launcher).with_image(image)
    job = construct_dagster_k8s_job(
        job_config=job_config, args=["dagster", "api", "execute_step"], job_name=f"dagster-step-{step[:20]}",
        component="step_worker", user_defined_k8s_config=container_context.run_k8s_config,
        labels={"dagster/op": step, "dagster/run-id": run.run_id},
        env_vars=[{"name": "DAGSTER_RUN_JOB_NAME", "value": run.job_name},
                  {"name": "DAGSTER_RUN_STEP_KEY", "value": step}])
    assert container_context.namespace == NAMESPACE
    return kubernetes.client.ApiClient().sanitize_for_serialization(job)


def _container(manifest: dict) -> dict:
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    return container


def _assert_secrets_by_reference(manifest: dict) -> None:
    assert SENTINEL not in json.dumps(manifest)
    container = _container(manifest)
    for variable in container["env"]:
        if SECRET_NAME.search(variable["name"]):
            assert "value" not in variable and "secretKeyRef" in variable["valueFrom"], variable
    env = {variable["name"]: variable for variable in container["env"]}
    assert env["DAGSTER_PG_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "focus-postgresql",
                                                                      "key": "postgresql-password"}
    assert {"secretRef": {"name": "focus-env"}} in container["envFrom"]


def _assert_platform_environment(manifest: dict) -> None:
    container = _container(manifest)
    env = {variable["name"]: variable.get("value") for variable in container["env"]}
    assert env["DAGSTER_DISABLE_TELEMETRY"] == "1"
    assert env["FOCUS_HOME"] == "/var/lib/focus" and env["FOCUS_CONFIG"] == "/etc/focus/focus.yaml"
    assert {"name": "focus-home", "mountPath": "/var/lib/focus"} in container["volumeMounts"]
    assert {"name": "focus-home", "persistentVolumeClaim": {"claimName": "focus-home"}} in \
        manifest["spec"]["template"]["spec"]["volumes"]
    assert manifest["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 1000


# --------------------------------------------------------------------------------- the instance and the executor

def test_instance_validates_against_the_installed_dagster_k8s_and_postgres(monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", SENTINEL)  # what the Secret gives each pod
    instance = _yaml(INSTANCE)
    checked = process_config(dg.Shape(dagster_instance_config_schema()), instance)
    assert checked.success, checked.errors
    assert (instance["run_launcher"]["module"], instance["run_launcher"]["class"]) == ("dagster_k8s", "K8sRunLauncher")
    launcher = process_config(K8sRunLauncher.config_type(), instance["run_launcher"]["config"])
    assert launcher.success, launcher.errors
    for section, storage in [("run_storage", PostgresRunStorage), ("event_log_storage", PostgresEventLogStorage),
                             ("schedule_storage", PostgresScheduleStorage)]:
        assert getattr(importlib.import_module(instance[section]["module"]), instance[section]["class"]) is storage
        processed = process_config(storage.config_type(), instance[section]["config"])
        assert processed.success, (section, processed.errors)
        assert instance[section]["config"]["postgres_db"]["password"] == {"env": "DAGSTER_PG_PASSWORD"}


@pytest.mark.parametrize("mistake", [{"gpu_node_selector": {"a": "b"}},  # not a K8sRunLauncher key
                                     {"env_secrets": "focus-env"},  # a list of Secret names
                                     {"instance_config_map": None}])  # required
def test_a_wrong_run_launcher_config_fails_validation(mistake):
    config = {**_yaml(INSTANCE)["run_launcher"]["config"], **mistake}
    config = {key: value for key, value in config.items() if value is not None}
    assert not process_config(K8sRunLauncher.config_type(), config).success


def test_the_chart_renders_this_instance_from_the_values():
    values, instance = _yaml(VALUES), _yaml(INSTANCE)
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert chart_run_launcher(values) == instance["run_launcher"]["config"]
    for section in ("run_storage", "event_log_storage", "schedule_storage"):
        assert instance[section]["config"]["postgres_db"] == chart_postgres_db(values)
    assert instance["concurrency"]["pools"] == {"granularity": values["concurrency"]["pools"]["granularity"],
                                                "default_limit": values["concurrency"]["pools"]["defaultLimit"]}
    monitoring = values["dagsterDaemon"]["runMonitoring"]
    assert instance["run_monitoring"] == {"enabled": True, "start_timeout_seconds": monitoring["startTimeoutSeconds"],
                                          "poll_interval_seconds": monitoring["pollIntervalSeconds"]}
    assert instance["telemetry"] == values["telemetry"] == {"enabled": False}


def test_executor_config_validates_against_k8s_job_executor():
    schema = k8s_job_executor.config_schema.config_type
    config = executor_config(KubernetesSettings())
    checked = process_config(schema, config)
    assert checked.success, checked.errors
    resolved = executor_engine_config(k8s_executor(KubernetesSettings()))
    assert resolved["step_k8s_config"]["container_config"] == cpu_step_config(KubernetesSettings())["container_config"]
    assert not process_config(schema, {**config, "gpu_resources": {}}).success
    assert not process_config(schema, {"step_k8s_config": {"container": {"resources": {}}}}).success
    assert not process_config(schema, {"max_concurrent": "four"}).success


def test_the_code_location_runs_steps_as_k8s_jobs_when_focus_yaml_says_so(tmp_path):
    """Needs focus_dagster/definitions.py to use assets.kubernetes.k8s_executor for `executor: k8s`."""
    settings = parse_config({"kubernetes": {"cpu_resources": {"requests": {"cpu": "3", "memory": "5Gi"}}}},
                            tmp_path).kubernetes
    config = parse_config({"executor": "k8s", "kubernetes": settings.to_document()}, tmp_path / "home")
    job = build_definitions(config).resolve_implicit_global_asset_job_def()
    assert job.executor_def.name == "k8s"
    resolved = executor_engine_config(job.executor_def)
    assert resolved["step_k8s_config"]["container_config"]["resources"] == {"requests": {"cpu": "3", "memory": "5Gi"}}


# --------------------------------------------------------------------------------- the steps' Jobs

def test_gpu_step_job_asks_for_a_gpu_on_a_gpu_node(defs, launcher, monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", SENTINEL)
    tags = step_tags(defs, "image_embeddings")
    manifest = step_job(launcher, KubernetesSettings(), tags, "image_embeddings")
    resources = _container(manifest)["resources"]
    assert resources["limits"][GPU_RESOURCE] == "1" and resources["requests"][GPU_RESOURCE] == "1"
    assert resources == KubernetesSettings().gpu_resources
    pod = manifest["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    _assert_platform_environment(manifest)
    _assert_secrets_by_reference(manifest)
    assert manifest["metadata"]["labels"]["app.kubernetes.io/component"] == "step_worker"


def test_cpu_step_job_asks_for_no_gpu_and_no_gpu_node(defs, launcher, monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", SENTINEL)
    tags = step_tags(defs, "metrics")
    assert K8S_CONFIG_TAG not in tags
    manifest = step_job(launcher, KubernetesSettings(), tags, "metrics")
    resources = _container(manifest)["resources"]
    assert resources == KubernetesSettings().cpu_resources
    assert not any("gpu" in name for amounts in resources.values() for name in amounts)
    pod = manifest["spec"]["template"]["spec"]
    assert not pod.get("nodeSelector") and not pod.get("tolerations")
    _assert_platform_environment(manifest)
    _assert_secrets_by_reference(manifest)


def test_exactly_the_gpu_pool_assets_ask_for_a_gpu(defs):
    graph = defs.resolve_asset_graph()
    asking = set()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        if node.is_external or not node.is_materializable:
            continue
        tags = graph.assets_def_for_key(key).op.tags
        config = json.loads(tags[K8S_CONFIG_TAG]) if K8S_CONFIG_TAG in tags else {}
        if GPU_RESOURCE in config.get("container_config", {}).get("resources", {}).get("limits", {}):
            asking.add(key.to_user_string())
        assert (K8S_CONFIG_TAG in tags) == ("gpu" in (node.pools or set())), key
    assert asking == GPU_ASSETS
    assert "zero_shot_scores" not in asking  # text prompts scored on the CPU (assets/models.py)


def test_gpu_tags_follow_focus_yaml_and_are_deterministic(tmp_path, monkeypatch):
    document = {"kubernetes": {
        "gpu_node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
        "gpu_tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute",
                             "tolerationSeconds": 60}],
        "gpu_resources": {"limits": {GPU_RESOURCE: 2, "memory": "48Gi"}}}}
    path = tmp_path / "focus.yaml"
    path.write_text(yaml.safe_dump(document))
    monkeypatch.setenv("FOCUS_CONFIG", str(path))
    monkeypatch.setenv("FOCUS_HOME", str(tmp_path / "home"))
    config = load_config()
    tags = step_tags(build_definitions(config), "image_embeddings")
    assert tags == gpu_op_tags(SimpleNamespace(kubernetes=config.kubernetes))
    assert tags[USER_DEFINED_K8S_CONFIG_KEY] == json.dumps(gpu_step_config(config.kubernetes), sort_keys=True)
    pod = json.loads(tags[K8S_CONFIG_TAG])
    assert pod["pod_spec_config"] == {"node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                                      "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                                       "effect": "NoExecute", "toleration_seconds": 60}]}
    assert pod["container_config"]["resources"] == {"limits": {GPU_RESOURCE: "2", "memory": "48Gi"}}


# --------------------------------------------------------------------------------- focus.yaml's `kubernetes:`

def test_deploy_focus_yaml_runs_steps_on_kubernetes_with_the_defaults(tmp_path):
    config = parse_config(_yaml(DEPLOY / "focus.yaml"), tmp_path, DEPLOY / "focus.yaml")
    assert config.executor == "k8s"
    assert config.kubernetes == KubernetesSettings() == parse_config(None, tmp_path).kubernetes
    assert parse_config(config.to_document(), tmp_path).kubernetes == config.kubernetes
    custom = parse_config({"kubernetes": {"gpu_node_selector": {}}}, tmp_path)
    assert parse_config(custom.to_document(), tmp_path).kubernetes == custom.kubernetes


@pytest.mark.parametrize(("section", "words"), [
    ({"gpu_nodes": {}}, "kubernetes.gpu_nodes: unknown key; allowed: gpu_node_selector, "),
    ({"gpu_node_selector": {"nvidia.com/gpu.present": True}}, 'quote values such as "true"'),
    ({"gpu_node_selector": ["a"]}, "kubernetes.gpu_node_selector: must be a mapping"),
    ({"gpu_tolerations": {"key": "x"}}, "kubernetes.gpu_tolerations: must be a list"),
    ({"gpu_tolerations": [{"key": "x", "operator": "Exists", "value": "y"}]}, "operator is Exists (no value)"),
    ({"gpu_tolerations": [{"key": "x", "effect": "NoRun", "value": "y"}]}, "effect: must be one of"),
    ({"gpu_tolerations": [{"key": "x", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]},
     "for effect NoExecute only"),
    ({"gpu_tolerations": [{"keys": "x"}]}, "kubernetes.gpu_tolerations.0.keys: unknown key; allowed: key, "),
    ({"gpu_resources": {"limits": {"memory": "32Gi"}}}, "must ask for nvidia.com/gpu"),
    ({"gpu_resources": {"limits": {GPU_RESOURCE: "0.5"}}}, "a whole number >= 1"),
    ({"gpu_resources": {"requests": {GPU_RESOURCE: 2}, "limits": {GPU_RESOURCE: 1}}}, "to equal its limit"),
    ({"gpu_resources": {"limit": {GPU_RESOURCE: 1}}}, "kubernetes.gpu_resources.limit: unknown key; allowed: requests, limits"),
    ({"cpu_resources": {"limits": {"memory": "lots"}}}, "kubernetes.cpu_resources.limits.memory: must be a Kubernetes"),
    ({"cpu_resources": {"limits": {GPU_RESOURCE: 1}}}, "CPU steps get no GPU"),
    ({"cpu_resources": {"requests": {"cpu": True}}}, "must be a Kubernetes quantity"),
])
def test_a_bad_kubernetes_section_names_the_key(section, words, tmp_path):
    with pytest.raises(ConfigError) as raised:
        parse_config({"kubernetes": section}, tmp_path, tmp_path / "focus.yaml")
    assert words in str(raised.value) and str(tmp_path / "focus.yaml") in str(raised.value)


def test_executor_k8s_is_accepted_and_others_are_named(tmp_path):
    assert parse_config({"executor": "k8s"}, tmp_path).executor == "k8s"
    with pytest.raises(ConfigError, match="'k8s'"):
        parse_config({"executor": "kubernetes"}, tmp_path)


# --------------------------------------------------------------------------------- the Helm values

def test_helm_values_use_only_the_charts_documented_keys():
    values = _yaml(VALUES)
    assert undocumented(values) == []
    # the check itself: a misspelt or invented key is caught wherever it is
    broken = yaml.safe_load(VALUES.read_text())
    broken["runLauncher"]["config"]["k8sRunLauncher"]["nodeSelector"] = {"a": "b"}
    broken["dagster-user-deployments"]["deployments"][0]["codeServerArg"] = []
    broken["dagsterDaemon"]["runMonitoring"]["startTimeout"] = 1
    assert sorted(undocumented(broken)) == ["dagster-user-deployments.deployments[0].codeServerArg",
                                            "dagsterDaemon.runMonitoring.startTimeout",
                                            "runLauncher.config.k8sRunLauncher.nodeSelector"]


def test_helm_values_kubernetes_objects_are_valid_kubernetes():
    values, deployment = _yaml(VALUES), user_deployment()
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    objects = [(kubernetes.client.V1ResourceRequirements, section["resources"])
               for section in (launcher, deployment, values["dagsterWebserver"], values["dagsterDaemon"])]
    objects += [(kubernetes.client.V1Volume, volume) for volume in deployment["volumes"]]
    objects += [(kubernetes.client.V1VolumeMount, mount) for mount in deployment["volumeMounts"]]
    objects += [(kubernetes.client.V1EnvVar, variable) for variable in deployment["env"]]
    objects += [(kubernetes.client.V1PodSecurityContext, deployment["podSecurityContext"]),
                (kubernetes.client.V1PodSpec, {"containers": [], **launcher["runK8sConfig"]["podSpecConfig"]})]
    for model, value in objects:
        k8s_model_from_dict(model, k8s_snake_case_dict(model, value))
    with pytest.raises(Exception, match="Unexpected keys"):
        k8s_snake_case_dict(kubernetes.client.V1VolumeMount, {"name": "x", "mountpath": "/x"})


def test_the_user_deployment_serves_the_code_location_the_image_serves():
    deployment, values = user_deployment(), _yaml(VALUES)
    assert values["dagster-user-deployments"]["enabled"] is True
    assert deployment["codeServerArgs"] == ["-m", "focus_dagster.definitions"]
    assert deployment["port"] == 3030
    assert deployment["includeConfigInLaunchedRuns"] == {"enabled": True}
    import focus_dagster.definitions

    assert isinstance(focus_dagster.definitions.defs, dg.Definitions)
    env = {variable["name"]: variable["value"] for variable in deployment["env"]}
    assert env["DAGSTER_DISABLE_TELEMETRY"] == "1"
    mounts = {mount["name"]: mount["mountPath"] for mount in deployment["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in deployment["volumes"]}
    assert env["FOCUS_HOME"] == mounts["focus-home"]
    pvc = _yaml(DEPLOY / "focus-home-pvc.yaml")
    assert volumes["focus-home"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert env["FOCUS_CONFIG"] == f"{mounts['focus-config']}/focus.yaml"
    assert volumes["focus-config"]["configMap"]["name"] == "focus-config"
    # the PostgreSQL password and the pods' credentials are Secrets named, never written
    assert values["global"]["postgresqlSecretName"] == "focus-postgresql"
    assert values["generatePostgresqlPasswordSecret"] is False and "postgresqlPassword" not in values["postgresql"]
    assert values["runLauncher"]["config"]["k8sRunLauncher"]["envSecrets"] == [{"name": "focus-env"}]


def _walk(value, path=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")
    else:
        yield path, value


@pytest.mark.parametrize("name", ["helm/values.yaml", "dagster-k8s.yaml", "focus.yaml", "focus-home-pvc.yaml"])
def test_deploy_yaml_holds_no_secret(name):
    """A secret-looking key holds an env-var reference or a Secret's name, never a value."""
    for path, value in _walk(_yaml(DEPLOY / name)):
        leaf = path.rsplit(".", 1)[-1]
        if re.search(r"password|token|credential|access_?key", path, re.IGNORECASE):
            assert (path.endswith(".password.env") or leaf == "postgres_password_secret"
                    or (leaf == "generatePostgresqlPasswordSecret" and value is False)), (name, path, value)


# --------------------------------------------------------------------------------- the image

def _dockerfile() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_dockerfile_installs_with_the_lock_and_serves_port_3030():
    lines = _dockerfile()
    assert lines[0] == "FROM python:3.11-slim"
    assert [line for line in lines if line.startswith("FROM")] == [lines[0]]
    runs = " ".join(line for line in lines if line.startswith("RUN"))
    assert "pip install -c requirements.lock '.[s3]'" in runs  # s3fs: the tables may live on S3
    assert "pip install -c requirements.lock -r dependencies.txt" in runs
    assert "EXPOSE 3030" in lines
    (cmd,) = [json.loads(line[len("CMD"):]) for line in lines if line.startswith("CMD")]
    assert cmd == ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", "3030", "-m", "focus_dagster.definitions"]
    # the chart and dagster-k8s start pods with `args`: an ENTRYPOINT would run in front of them
    assert not any(line.startswith("ENTRYPOINT") for line in lines)
    assert [line for line in lines if line.startswith("USER")] == ["USER 1000:1000"]
    assert "DAGSTER_DISABLE_TELEMETRY=1" in " ".join(line for line in lines if line.startswith("ENV"))
    # it copies the packages pyproject.toml installs, and the context lets exactly those in
    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {pattern.rstrip("*") for pattern in find["include"]}
    copied = {source for line in lines if line.startswith("COPY") for source in line.split()[1:-1]}
    assert copied == packages | {"pyproject.toml", "requirements.lock", "README.md"}
    allowed = {line[1:].rstrip("/") for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
               if line.startswith("!")}
    assert allowed == copied


def test_dockerfile_holds_no_secret():
    text = (DEPLOY / "Dockerfile").read_text()
    for line in _dockerfile():
        if line.startswith(("ENV", "ARG", "LABEL")):
            assert not SECRET_NAME.search(line), line
    assert not re.search(r"--from-literal|BEGIN [A-Z ]*PRIVATE KEY|AKIA[0-9A-Z]{16}|ghp_[0-9A-Za-z]{20,}", text)
    assert not re.search(r"(password|token|secret)\s*[=:]\s*\S", text, re.IGNORECASE)
