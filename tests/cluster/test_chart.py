"""The chart on a real API server: `helm install` (single-user values, CPU images), `helm test`,
`helm upgrade`, uninstall and reinstall; each rendering's runtimes through Trainer's webhook; the
GPU values (multi-user, walk-through M) through the server's own dry-run (no GPU node here, so its
pods cannot run).

What the lane's install leaves off (not stand-ins: they are not there):
- `pipelineUpload.enabled=false` here: tests/cluster/test_pipeline_upload.py turns the hook on
  against KFP's API server.
- Nothing of MLflow: it runs as the chart's defaults run it, on the chart's own PostgreSQL
  (Debian's, built with KFP's images: the official image cannot be pulled here) with basic-auth.
"""

from __future__ import annotations

import copy
import json
import uuid

import pytest
import yaml

from tests.support.cluster import CHART_NAMESPACE as NAMESPACE
from tests.support.cluster import PROFILE_LABELS, RELEASE, mlflow_as_admin, no_provisioner_class
from tests.support.deploy_tools import CHART

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def helm_status(cluster) -> dict:
    return json.loads(cluster.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)


def test_the_chart_installs_and_helm_test_reaches_mlflow_by_its_cluster_name(cluster, release):
    assert helm_status(cluster)["info"]["status"] == "deployed"
    out = cluster.helm("test", RELEASE, "-n", NAMESPACE, "--logs", "--timeout", "5m")
    assert "Phase:          Succeeded" in out.stdout, out.stdout
    assert "MLflow answers http://invfold-mlflow.kubeflow.svc.cluster.local:5000" in out.stdout


RUNTIMES = {
    "invfold-ddp",
    "invfold-deepspeed",
    "invfold-horovod",
    "invfold-deepspeed-single-node",
    "invfold-horovod-single-node",
}


def dry_run_replace(cluster, objects: list[dict]):
    """The objects in place of the installed ones, whole (a server-side apply would merge them with
    what helm owns), through the real API server's schema, CEL rules and admission webhooks,
    persisting nothing."""
    items = {"apiVersion": "v1", "kind": "List", "items": objects}
    return cluster.kubectl("replace", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(items), check=False)


def without_trainer_container(runtime: dict) -> dict:
    """The runtime with its trainer step's container renamed: Trainer's webhook wants the
    container `node` in the job labelled trainjob-ancestor-step=trainer
    (trainer v2.3.0 pkg/webhooks/trainingruntime_webhook.go, validateReplicatedJobs)."""
    broken = copy.deepcopy(runtime)
    for job in broken["spec"]["template"]["spec"]["replicatedJobs"]:
        if job["template"].get("metadata", {}).get("labels", {}).get("trainer.kubeflow.org/trainjob-ancestor-step"):
            job["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    return broken


@pytest.mark.parametrize("values", ["lane", "gpu"])
def test_the_rendered_runtimes_pass_trainers_webhook_and_a_broken_one_is_refused(cluster, cpu_images, release, values):
    """Each rendering's ClusterTrainingRuntimes (the lane's install values; values-gpu.yaml's GPU
    runtimes) go to the API server as an update of the installed ones: CRD schema, CEL and
    Trainer's validating webhook answer (it validates cluster runtimes on update too). The same
    runtime without the container Trainer needs is refused, so the check can fail."""
    if values == "lane":
        args = list(release.args[:-3])  # without --wait and its timeout
    else:
        args = ["-f", str(CHART / "values-gpu.yaml"), "--set", "images.registry=invfold-test"]
    out = cluster.helm("template", RELEASE, str(CHART), *args, "--set", f"images.tag={cpu_images.tag}-cpu").stdout
    runtimes = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "ClusterTrainingRuntime"]
    assert {r["metadata"]["name"] for r in runtimes} == RUNTIMES
    accepted = dry_run_replace(cluster, runtimes)
    assert accepted.returncode == 0, accepted.stderr
    assert len(accepted.stdout.split()) == len(runtimes), accepted.stdout
    refused = dry_run_replace(cluster, [without_trainer_container(runtimes[0])])
    assert refused.returncode != 0, refused.stdout
    assert "must contain the required container for the ancestor: trainer" in refused.stderr, refused.stderr


def test_an_upgrade_rolls_mlflow_and_helm_test_passes_again(cluster, release):
    before = helm_status(cluster)["version"]
    cluster.helm("upgrade", RELEASE, str(CHART), *release.args, "--set", "mlflow.workers=1")
    status = helm_status(cluster)
    assert status["version"] == before + 1 and status["info"]["status"] == "deployed"
    deployment = cluster.get("deployment", "invfold-mlflow", "-n", NAMESPACE)
    assert "--workers=1" in " ".join(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    out = cluster.helm("test", RELEASE, "-n", NAMESPACE, "--logs", "--timeout", "5m")
    assert "Phase:          Succeeded" in out.stdout, out.stdout


# An experiment made (or found) by name, as MLflow's admin inside its pod: its id.
KEPT_EXPERIMENT = """
import sys
from mlflow import MlflowClient
client = MlflowClient()
found = client.get_experiment_by_name(sys.argv[1])
print(found.experiment_id if found else client.create_experiment(sys.argv[1]))
"""


def test_uninstall_removes_everything_and_a_reinstall_works(cluster, release):
    """Uninstall leaves nothing of the release but its data: the reinstall's MLflow finds an
    experiment made before (the database's claim and the generated passwords outlive the release)."""
    name = f"lane-kept-{uuid.uuid4().hex[:8]}"
    made = mlflow_as_admin(cluster, NAMESPACE, KEPT_EXPERIMENT, name) if release.auth else None
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
        cluster.helm("install", RELEASE, str(CHART), *release.args)
        assert helm_status(cluster)["version"] == 1
        out = cluster.helm("test", RELEASE, "-n", NAMESPACE, "--logs", "--timeout", "5m")
        assert "Phase:          Succeeded" in out.stdout, out.stdout
        if release.auth:  # on SQLite (a cluster without KFP's parts) the runs live in the pod
            assert mlflow_as_admin(cluster, NAMESPACE, KEPT_EXPERIMENT, name) == made
    finally:
        # The lane's other modules share the release: a failure here must not take it from them.
        cluster.helm("upgrade", "--install", RELEASE, str(CHART), *release.args, check=False)


WALKTHROUGH_M_CLASSES = {
    "workspace.storageClassName": "standard-rwx",
    "postgresql.storage.storageClassName": "standard-rwo",
}


def test_walkthrough_m_passes_the_servers_dry_run_as_a_further_profile(cluster, cpu_images, release):
    """docs/deploy.md's walk-through M (values-gpu.yaml, multi-user, 8 GPUs a node) into a profile
    namespace, as a further profile installs it (`clusterScoped=false`: the lane's release owns the
    cluster-wide runtimes and PriorityClasses; tests/cluster/test_more_profiles.py). Every object
    passes the real API server's validation and admission, and the chart asks the cluster (lookup):
    its StorageClass check refuses the walk-through's classes until the cluster has them (the same
    gate turns on Trainer's version check and the store lookup; no GPU node here, so nothing runs)."""
    ns = cluster.namespace("kubeflow-user-example-com", PROFILE_LABELS)
    classes = [x for pair in WALKTHROUGH_M_CLASSES.items() for x in ("--set", "=".join(pair))]
    walkthrough = [
        "install", RELEASE, str(CHART), "-n", ns, "-f", str(CHART / "values-gpu.yaml"), "--set", "clusterScoped=false",
        "--set", "images.registry=invfold-test", "--set", f"images.tag={cpu_images.tag}-cpu", *classes,
        "--dry-run=server", "-o", "json",
    ]  # fmt: skip
    refused = cluster.helm(*walkthrough, check=False)
    assert refused.returncode != 0
    assert "standard-rwo: this cluster has no such StorageClass (kubectl get storageclass" in refused.stderr, (
        refused.stderr
    )
    for name in WALKTHROUGH_M_CLASSES.values():
        cluster.apply(no_provisioner_class(name))
    try:
        out = cluster.helm(*walkthrough)
    finally:
        cluster.kubectl("delete", "storageclass", *WALKTHROUGH_M_CLASSES.values(), "--ignore-not-found")
    objects = [doc for doc in yaml.safe_load_all(json.loads(out.stdout)["manifest"]) if doc]
    kinds = {doc["kind"] for doc in objects}
    assert {"Deployment", "StatefulSet", "PersistentVolumeClaim", "ResourceQuota", "NetworkPolicy"} <= kinds, kinds
    assert not kinds & {"ClusterTrainingRuntime", "PriorityClass", "LimitRange"}, kinds
    claims = [d["spec"] for d in objects if d["kind"] == "PersistentVolumeClaim"]
    claims += [c["spec"] for d in objects if d["kind"] == "StatefulSet" for c in d["spec"]["volumeClaimTemplates"]]
    assert sorted(c.get("storageClassName") for c in claims) == sorted(WALKTHROUGH_M_CLASSES.values()), claims


def upload_defaults(cluster, release, *values: str) -> list[dict]:
    """The uploaded pipelines' parameter defaults as a server-side dry run renders them (helm's
    lookup asks the real API server only there or at install)."""
    out = cluster.helm(
        "template", RELEASE, str(CHART), *release.args[:-3], "--dry-run=server",
        "--set", "pipelineUpload.enabled=true", *values,
    ).stdout  # fmt: skip
    hooks = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Job" and "upload" in d["metadata"]["name"]]
    envs = [{e["name"]: e.get("value") for e in c["env"]} for c in hooks[0]["spec"]["template"]["spec"]["containers"]]
    return [json.loads(env["PIPELINE_DEFAULTS"]) for env in envs]


def test_storage_endpoint_auto_finds_the_store_the_cluster_serves(cluster, release):
    """`storage.endpoint: auto` names KFP 2.16+'s SeaweedFS where the cluster serves it (here:
    the one `make cluster-up` installs in `kubeflow`), and KFP 2.15's minio-service where only that
    exists (a namespace holding just that Service stands for an older KFP install)."""
    found = upload_defaults(cluster, release)
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
        found = upload_defaults(cluster, release, "--set", f"networkPolicies.kfpNamespace={old}")
        assert {d["storage_endpoint"] for d in found} == {f"http://minio-service.{old}:9000"}
    finally:
        cluster.delete_namespace(old)
