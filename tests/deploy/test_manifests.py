"""The chart and the kustomize overlays render, and every object they render is checked:
core kinds against Kubernetes' own schemas (kubernetes-validate, strict: unknown fields fail),
Kubeflow Trainer custom resources against the strict schemas in components/launch/schemas/."""

from __future__ import annotations

import json

import jsonschema
import kubernetes_validate
import pytest

from invfold.components.launch.trainjob import runtime_name
from invfold.components.train.strategies import STRATEGIES
from tests.support.deploy_tools import CHART, REPO, documents, helm_template, run, tool

KUBERNETES_VERSION = "1.33"
SCHEMA_DIR = REPO / "components" / "launch" / "schemas"
RENDERINGS = ("chart-default", "chart-gpu", "k8s-cpu-dev", "k8s-gpu-prod", "k8s-tenant")


def custom_resource_schemas() -> dict[str, dict]:
    """Kind -> strict JSON schema, from the launcher's generated schemas (matched by their `kind`).
    A namespaced TrainingRuntime has the very same spec as a ClusterTrainingRuntime in the Trainer
    API (TrainingRuntimeSpec): without a schema of its own it gets that one with its kind."""
    schemas = {}
    for path in sorted(SCHEMA_DIR.glob("*.json")):
        schema = json.loads(path.read_text())
        kind = schema.get("properties", {}).get("kind", {})
        for name in kind.get("enum", []) + ([kind["const"]] if "const" in kind else []):
            schemas[name] = schema
    if "TrainingRuntime" not in schemas and "ClusterTrainingRuntime" in schemas:
        namespaced = json.loads(json.dumps(schemas["ClusterTrainingRuntime"]))
        namespaced["properties"]["kind"] = {"const": "TrainingRuntime"}
        schemas["TrainingRuntime"] = namespaced
    return schemas


@pytest.mark.parametrize("values", ["default", "gpu"])
def test_helm_lint_strict(values):
    extra = [] if values == "default" else ["-f", str(CHART / "values-gpu.yaml")]
    run([tool("helm"), "lint", "--strict", str(CHART), *extra])


@pytest.mark.parametrize("name", RENDERINGS)
def test_every_rendered_object_validates(rendered, name):
    cr_schemas = custom_resource_schemas()
    objects = documents(rendered[name])
    assert objects, f"{name} rendered nothing"
    for obj in objects:
        where = f"{name}: {obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        if obj["apiVersion"].startswith("trainer.kubeflow.org/"):
            schema = cr_schemas.get(obj["kind"])
            assert schema, (
                f"{where}: no strict schema for kind {obj['kind']} in {SCHEMA_DIR.relative_to(REPO)} "
                "(the launcher generates them); a custom resource may not pass unchecked"
            )
            errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(obj), key=str)
            assert not errors, f"{where}: " + "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(f"{where}: no Kubernetes schema ({exc}); every object must be validated")
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where}: {exc.message} at {list(exc.path)}")


def test_custom_resource_check_catches_a_misspelled_field(rendered):
    runtime = next(o for o in documents(rendered["chart-default"]) if o["kind"] == "ClusterTrainingRuntime")
    runtime["spec"]["mlPolicy"]["numNode"] = 2
    schema = custom_resource_schemas()["ClusterTrainingRuntime"]
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(runtime))


def test_validation_catches_a_misspelled_field(rendered):
    """The checks above can fail: a typo in a core object is rejected in strict mode."""
    deployment = next(o for o in documents(rendered["chart-default"]) if o["kind"] == "Deployment")
    deployment["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", RENDERINGS)
def test_runtimes_are_prefixed_and_checkpoint_friendly(rendered, name):
    runtimes = [o for o in documents(rendered[name]) if o["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime")]
    assert sorted(r["metadata"]["name"] for r in runtimes) == sorted(
        {runtime_name(s, nodes=n) for s in STRATEGIES for n in (1, 2)}
    )
    for runtime in runtimes:
        policy = runtime["spec"]["mlPolicy"]
        jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        if runtime["metadata"]["name"] == "invfold-ddp":
            assert "torch" in policy and "mpi" not in policy
        else:
            assert policy["mpi"]["mpiImplementation"] == "OpenMPI"
            assert policy["mpi"]["sshAuthMountPath"] == "/home/invfold/.ssh"
            if not runtime["metadata"]["name"].endswith("-single-node"):  # the launcher alone: no sshd
                node = next(j for j in jobs if j["name"] == "node")["template"]["spec"]["template"]["spec"]
                assert node["containers"][0]["readinessProbe"]["tcpSocket"]["port"] == 2222
        for job in jobs:
            pod = job["template"]["spec"]["template"]["spec"]
            assert pod["terminationGracePeriodSeconds"] >= 300, f"{runtime['metadata']['name']}: no time to checkpoint"
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert job["template"]["spec"]["template"]["metadata"]["labels"]["invfold.dev/role"] == "trainer"


@pytest.mark.parametrize("name", ["chart-gpu", "k8s-gpu-prod"])
def test_gpu_production_has_the_shared_workspace_the_deepspeed_checkpoints_need(rendered, name):
    from invfold.components.launch.trainjob import ClusterOptions

    claims = [o for o in documents(rendered[name]) if o["kind"] == "PersistentVolumeClaim"]
    (claim,) = [c for c in claims if c["metadata"]["name"] == "invfold-workspace"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # every node of a job writes its shards
    assert ClusterOptions(workspace_pvc="invfold-workspace").workspace_mount == "/workspace"
    # The claim is group-writable for the images' gid in every trainer pod, and re-owned only when
    # its root is not yet (a recursive chown of a large shared volume at each pod start).
    for runtime in [o for o in documents(rendered[name]) if o["kind"].endswith("TrainingRuntime")]:
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            context = job["template"]["spec"]["template"]["spec"]["securityContext"]
            assert (context["fsGroup"], context["runAsGroup"]) == (10001, 10001), runtime["metadata"]["name"]
            assert context["fsGroupChangePolicy"] == "OnRootMismatch", runtime["metadata"]["name"]
    deploy = (REPO / "docs" / "deploy.md").read_text()
    assert "ReadWriteMany" in deploy and "fsGroup: 10001" in deploy and "OnRootMismatch" in deploy


@pytest.mark.parametrize("name", ["chart-gpu", "k8s-gpu-prod"])
def test_gpu_values_schedule_trainers_on_gpu_nodes(rendered, name):
    runtimes = [o for o in documents(rendered[name]) if o["kind"] == "ClusterTrainingRuntime"]
    for runtime in runtimes:
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            pod = job["template"]["spec"]["template"]["spec"]
            # neutral: no node label (GKE's managed drivers set no nvidia.com/gpu.present, the GPU
            # Operator no cloud.google.com/gke-accelerator): the GPU request places the pod
            assert not pod.get("nodeSelector"), pod.get("nodeSelector")
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
            assert int(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) >= 1


@pytest.mark.parametrize("name", ["chart-default", "k8s-cpu-dev", "k8s-gpu-prod", "k8s-tenant"])
def test_role_allows_trainjobs_only(rendered, name):
    objects = documents(rendered[name])
    role = next(o for o in objects if o["kind"] == "Role")
    assert role["rules"][0] == {
        "apiGroups": ["trainer.kubeflow.org"],
        "resources": ["trainjobs"],
        "verbs": ["create", "get", "list", "watch", "delete"],
    }
    # beside TrainJobs only reading pods: the train step reports a pod the scheduler cannot place
    others = [rule for rule in role["rules"] if rule["apiGroups"] != ["trainer.kubeflow.org"]]
    assert others == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    binding = next(o for o in objects if o["kind"] == "RoleBinding")
    expected = "pipeline-runner" if name in ("chart-default", "k8s-cpu-dev") else "default-editor"
    assert binding["subjects"][0]["name"] == expected
    assert binding["subjects"][0]["namespace"] == role["metadata"]["namespace"]


def test_tenant_overlay_is_namespaced_only(rendered):
    objects = documents(rendered["k8s-tenant"])
    kinds = {o["kind"] for o in objects}
    assert "TrainingRuntime" in kinds
    assert not kinds & {"ClusterTrainingRuntime", "PriorityClass", "Namespace", "ClusterRole"}
    assert all(o["metadata"].get("namespace") == "kubeflow-user-example-com" for o in objects)


def test_chart_renders_namespaced_runtimes_on_request():
    objects = documents(
        helm_template("--set", "runtimes.kind=TrainingRuntime", "--set", "priorityClasses.create=false")
    )
    runtimes = [o for o in objects if o["kind"] == "TrainingRuntime"]
    assert len(runtimes) == 5 and all(r["metadata"]["namespace"] == "invfold" for r in runtimes)
    assert not [o for o in objects if o["kind"] == "PriorityClass"]


def test_pipeline_upload_hook_carries_the_compiled_pipeline(rendered):
    objects = documents(rendered["chart-default"])
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-pipelines"))
    compiled = (REPO / "pipelines" / "invfold_pipeline.yaml").read_text()
    assert config["data"]["invfold_pipeline.yaml"].strip() == compiled.strip()
    # The release's own (helm removes it on uninstall), not a hook's (which would outlive it).
    assert "helm.sh/hook" not in config["metadata"].get("annotations", {})
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("-pipeline-upload"))
    assert "post-install" in job["metadata"]["annotations"]["helm.sh/hook"]
    test_pod = next(o for o in objects if o["kind"] == "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    # a tracked endpoint (MLflow exempts /health from its Host check) under the in-cluster name
    container = test_pod["spec"]["containers"][0]
    assert "/api/2.0/mlflow/experiments/search" in container["args"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MLFLOW_TRACKING_URI"] == "http://invfold-mlflow.invfold.svc.cluster.local:5000"


BAD_VALUES = [
    (["--set", "mlflow.workers=0"], "/mlflow/workers"),
    (["--set", "unknownKey=1"], "unknownKey"),
    (["--set", "runtimes.kind=PyTorchJob"], "/runtimes/kind"),
    (["--set", "runtimes.terminationGracePeriodSeconds=5"], "terminationGracePeriodSeconds"),
    (["--set", "mlflow.artifacts.destination=/local/path"], "/mlflow/artifacts/destination"),
    (["--set", "networkPolicies.kubeApiCidrs[0]=everywhere"], "/networkPolicies/kubeApiCidrs/0"),
    (["--set", "securityContext.runAsUser=0"], "/securityContext/runAsUser"),
    (["--set", "pipelineServiceAccount=Bad_Name"], "/pipelineServiceAccount"),
    (["--set", "workspace.size=lots"], "/workspace/size"),
]


@pytest.mark.parametrize(("args", "where"), BAD_VALUES, ids=[w for _, w in BAD_VALUES])
def test_values_schema_rejects_bad_values(args, where):
    proc = run([tool("helm"), "template", "invfold", str(CHART), *args], check=False)
    assert proc.returncode != 0, f"{args} was accepted"
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert where in proc.stderr, proc.stderr


def test_every_value_is_documented_in_the_chart_readme():
    import yaml

    readme = (CHART / "README.md").read_text()

    def leaves(prefix: str, value) -> list[str]:
        opaque = prefix.endswith(("resources", "annotations", "nodeSelector", "hard"))
        if isinstance(value, dict) and value and not opaque:
            return [k for key, v in value.items() for k in leaves(f"{prefix}.{key}" if prefix else key, v)]
        return [prefix]

    keys = leaves("", yaml.safe_load((CHART / "values.yaml").read_text()))
    assert [k for k in keys if f"| `{k}` |" not in readme] == []


def test_helm_test_sends_the_steps_credentials_when_auth_is_on(rendered):
    pod = next(o for o in documents(rendered["chart-gpu"]) if o["kind"] == "Pod")
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    ref = env["MLFLOW_TRACKING_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "invfold-mlflow-auth", "key": "MLFLOW_TRACKING_PASSWORD"}


def test_each_image_takes_its_own_digest():
    """images.digests pins each image apart (one shared tag cannot: the three trainer images and
    MLflow's differ), and PostgreSQL's digest too; a malformed digest is refused by the schema."""
    digest = {
        name: "sha256:" + f"{i:x}" * 64 for i, name in enumerate(("runtime", "deepspeed", "horovod", "mlflow"), 1)
    }
    args = [arg for name, value in digest.items() for arg in ("--set", f"images.digests.{name}={value}")]
    args += ["--set", "postgresql.image.digest=sha256:" + "e" * 64]
    images = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("image"), str):
                images.add(node["image"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for obj in documents(helm_template(*args)):
        walk(obj)
    for image in images:
        name = image.split("/")[-1].split(":")[0].removeprefix("invfold-")
        expected = digest.get(name, "sha256:" + "e" * 64 if name == "postgres" else None)
        assert expected and image.endswith("@" + expected), image
    proc = run([tool("helm"), "template", "x", str(CHART), "--set", "images.digests.runtime=latest"], check=False)
    assert proc.returncode != 0 and "/images/digests/runtime" in proc.stderr
