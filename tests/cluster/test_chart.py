"""The chart on a real API server: `helm install` (single-user values, CPU images), `helm test`,
`helm upgrade`, uninstall and reinstall; the GPU values (multi-user) through the server's own
dry-run (no GPU node here, so its pods cannot run).

What this cluster cannot show, and so the install leaves off (not stand-ins: they are not there):
- `pipelineUpload.enabled=false`: no Kubeflow Pipelines backend runs here, so the upload hook has
  nothing to upload to (tests/deploy/test_pipeline_upload.py checks it against the KFP API stand-in).
- `mlflow.backend.type=external` (SQLite in the pod's /tmp): PostgreSQL's image is pulled from
  Docker Hub, and no registry is reachable from this machine.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.cluster import CHART_NAMESPACE as NAMESPACE
from tests.support.cluster import PROFILE_LABELS, RELEASE, install_args
from tests.support.deploy_tools import CHART

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def helm_status(cluster) -> dict:
    return json.loads(cluster.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)


def test_the_chart_installs_and_helm_test_reaches_mlflow_by_its_cluster_name(cluster, release):
    assert helm_status(cluster)["info"]["status"] == "deployed"
    out = cluster.helm("test", RELEASE, "-n", NAMESPACE, "--logs", "--timeout", "5m")
    assert "Phase:          Succeeded" in out.stdout, out.stdout
    assert "MLflow answers http://invfold-mlflow.kubeflow.svc.cluster.local:5000" in out.stdout


def test_the_runtimes_are_accepted_by_trainers_webhook(cluster, release):
    names = {item["metadata"]["name"] for item in cluster.get("clustertrainingruntimes")["items"]}
    assert {
        "invfold-ddp",
        "invfold-deepspeed",
        "invfold-horovod",
        "invfold-deepspeed-single-node",
        "invfold-horovod-single-node",
    } <= names


def test_an_upgrade_rolls_mlflow_and_helm_test_passes_again(cluster, cpu_images, release):
    before = helm_status(cluster)["version"]
    cluster.helm("upgrade", RELEASE, str(CHART), *install_args(cpu_images), "--set", "mlflow.workers=1")
    status = helm_status(cluster)
    assert status["version"] == before + 1 and status["info"]["status"] == "deployed"
    deployment = cluster.get("deployment", "invfold-mlflow", "-n", NAMESPACE)
    assert "--workers=1" in " ".join(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    out = cluster.helm("test", RELEASE, "-n", NAMESPACE, "--logs", "--timeout", "5m")
    assert "Phase:          Succeeded" in out.stdout, out.stdout


def test_uninstall_removes_everything_and_a_reinstall_works(cluster, cpu_images, release):
    try:
        cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m")

        def left() -> list[str]:
            # The pods and Jobs of pipeline runs' TrainJobs carry the runtimes' labels, but they
            # are the runs' (they go with their step pods), not the release's.
            return cluster.kubectl(
                "get", "all,networkpolicies,roles,rolebindings,secrets,configmaps", "-n", NAMESPACE,
                "-l", "app.kubernetes.io/instance=invfold,!jobset.sigs.k8s.io/jobset-name", "-o", "name",
            ).stdout.split()  # fmt: skip

        # helm waits for the Deployment; its pods terminate after it (grace period).
        cluster.wait_for("nothing of the release left", lambda: left() == [], 180, explain=left)
        assert cluster.kubectl("get", "clustertrainingruntime", "invfold-ddp", check=False).returncode != 0
        cluster.helm("install", RELEASE, str(CHART), *install_args(cpu_images))
        assert helm_status(cluster)["version"] == 1
        out = cluster.helm("test", RELEASE, "-n", NAMESPACE, "--logs", "--timeout", "5m")
        assert "Phase:          Succeeded" in out.stdout, out.stdout
    finally:
        # The lane's other modules share the release: a failure here must not take it from them.
        cluster.helm("upgrade", "--install", RELEASE, str(CHART), *install_args(cpu_images), check=False)


def test_the_gpu_values_pass_the_servers_dry_run_in_a_profile_namespace(cluster, cpu_images, release):
    """values-gpu.yaml (multi-user, 8 GPUs a node): every object passes the real API server's
    validation and admission (CRD schemas and CEL of Trainer's runtimes, Trainer's webhook) in a
    profile namespace. The ClusterTrainingRuntimes and PriorityClasses belong to the installed
    release, so runtimes become namespaced TrainingRuntimes here (as a tenant installs them)."""
    ns = cluster.namespace("kubeflow-user-example-com", PROFILE_LABELS)
    out = cluster.helm(
        "install", "invfold-gpu", str(CHART), "-n", ns, "-f", str(CHART / "values-gpu.yaml"),
        "--set", "runtimes.kind=TrainingRuntime", "--set", "priorityClasses.create=false",
        "--set", "images.registry=invfold-test", "--set", f"images.tag={cpu_images.tag}-cpu",
        "--dry-run=server", "-o", "json",
    )  # fmt: skip
    manifest = json.loads(out.stdout)["manifest"]
    kinds = {doc["kind"] for doc in yaml.safe_load_all(manifest) if doc}
    assert {"TrainingRuntime", "Deployment", "ResourceQuota", "NetworkPolicy"} <= kinds
    assert "LimitRange" not in kinds  # it would give every container of the namespace invfold's defaults


def upload_defaults(cluster, cpu_images, *values: str) -> list[dict]:
    """The uploaded pipelines' parameter defaults as a server-side dry run renders them (helm's
    lookup asks the real API server only there or at install)."""
    out = cluster.helm(
        "template", RELEASE, str(CHART), *install_args(cpu_images)[:-3], "--dry-run=server",
        "--set", "pipelineUpload.enabled=true", *values,
    ).stdout  # fmt: skip
    hooks = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Job" and "upload" in d["metadata"]["name"]]
    envs = [{e["name"]: e.get("value") for e in c["env"]} for c in hooks[0]["spec"]["template"]["spec"]["containers"]]
    return [json.loads(env["PIPELINE_DEFAULTS"]) for env in envs]


def test_storage_endpoint_auto_finds_the_store_the_cluster_serves(cluster, cpu_images, release):
    """22.4: `storage.endpoint: auto` names KFP 2.16+'s SeaweedFS where the cluster serves it (here:
    the one `make cluster-up` installs in `kubeflow`), and KFP 2.15's minio-service where only that
    exists (a namespace holding just that Service stands for an older KFP install)."""
    found = upload_defaults(cluster, cpu_images)
    assert {d["storage_endpoint"] for d in found} == {"http://seaweedfs.kubeflow:8333"}
    assert found[0]["storage_root"] == "s3://mlpipeline/private/kubeflow/invfold"
    old = cluster.namespace("kfp-215")
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "minio-service", "namespace": old},
            "spec": {"ports": [{"port": 9000, "targetPort": 9000}]},
        }
    )
    try:
        # (MLflow's auth is "auto": on outside KFP's namespace, which this value moves; off here.)
        moved = ("--set", f"networkPolicies.kfpNamespace={old}", "--set", "mlflow.auth.enabled=false")
        found = upload_defaults(cluster, cpu_images, *moved)
        assert {d["storage_endpoint"] for d in found} == {f"http://minio-service.{old}:9000"}
    finally:
        cluster.delete_namespace(old)
