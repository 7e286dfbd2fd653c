"""Kubeflow Pipelines 2.17 on the test cluster, as `make cluster-up` installs it: upstream's own
kustomize manifests (manifests/kustomize/env/platform-agnostic-postgresql of KFP's source at the
tag), with the images built here from KFP's, Argo's and ML Metadata's sources
(scripts/cluster/build.sh), and a pipeline submitted through `kfp.Client` run by the API server,
Argo, KFP's v2 driver and launcher, ML Metadata and SeaweedFS, watched to Succeeded.

The pipeline here is compiled in the test from a container component on the cluster's own small
image (a shell): it shows the orchestration alone (driver and launcher pods, artifact passing
through the store, metadata), without the minutes invfold's steps take."""

from __future__ import annotations

import time

import pytest
from kfp import compiler, dsl
from kfp.client import Client

from tests.support.cluster import RUN

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

KFP_NAMESPACE = "kubeflow"
# What a submitted run needs; the rest of KFP's manifests is installed with no replicas.
SERVING = (
    "ml-pipeline",
    "ml-pipeline-persistenceagent",
    "workflow-controller",
    "metadata-grpc-deployment",
    "metadata-postgres-db",
    "postgres",
    "seaweedfs",
)
IMAGE_PREFIX = "invfold.test/"  # scripts/cluster/versions.sh KFP_IMAGE_PREFIX
SHELL_IMAGE = "invfold.test/waiter:1"  # scripts/cluster/images/waiter: Debian with a shell


@pytest.fixture(scope="module")
def kfp_host(cluster) -> str:
    """The API server's Service, which this machine reaches through kube-proxy's rules."""
    address = cluster.get("service", "ml-pipeline", "-n", KFP_NAMESPACE)["spec"]["clusterIP"]
    return f"http://{address}:8888"


def test_kfps_deployments_are_available_and_run_only_images_built_here(cluster):
    deployments = {d["metadata"]["name"]: d for d in cluster.get("deployments", "-n", KFP_NAMESPACE)["items"]}
    assert set(SERVING) <= set(deployments), sorted(deployments)
    for name in SERVING:
        status = deployments[name]["status"]
        assert status.get("availableReplicas") == 1, (name, status)
        pod = deployments[name]["spec"]["template"]["spec"]
        images = [c["image"] for c in pod.get("initContainers", []) + pod["containers"]]
        assert all(image.startswith(IMAGE_PREFIX) for image in images), (name, images)
    api = deployments["ml-pipeline"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in api["env"]}
    assert env["V2_DRIVER_IMAGE"].startswith(IMAGE_PREFIX) and env["V2_LAUNCHER_IMAGE"].startswith(IMAGE_PREFIX)


@dsl.container_component
def write_greeting(greeting: dsl.OutputPath(str)):
    return dsl.ContainerSpec(
        image=SHELL_IMAGE,
        command=["sh", "-c", 'mkdir -p "$(dirname "$0")" && echo "hello from a pod" > "$0"'],
        args=[greeting],
    )


@dsl.container_component
def check_greeting(greeting: dsl.InputPath(str), checked: dsl.OutputPath(str)):
    return dsl.ContainerSpec(
        image=SHELL_IMAGE,
        command=["sh", "-c", 'grep -q "hello from a pod" "$0" && mkdir -p "$(dirname "$1")" && cp "$0" "$1"'],
        args=[greeting, checked],
    )


@dsl.pipeline(name="invfold-cluster-orchestration")
def orchestration():
    first = write_greeting().set_caching_options(False)
    check_greeting(greeting=first.outputs["greeting"]).set_caching_options(False)


def wait_for_run(client: Client, run_id: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        run = client.get_run(run_id).to_dict()
        if run["state"] in ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED") or time.monotonic() > deadline:
            return run
        time.sleep(5)


def test_a_submitted_pipeline_runs_through_the_driver_and_launcher_to_succeeded(cluster, kfp_host, tmp_path):
    package = tmp_path / "orchestration.yaml"
    compiler.Compiler().compile(orchestration, str(package))
    client = Client(host=kfp_host)
    started = time.monotonic()
    run = client.create_run_from_pipeline_package(str(package), arguments={}, run_name="orchestration")
    result = wait_for_run(client, run.run_id, timeout=900)
    wall = time.monotonic() - started
    tasks = {t["display_name"]: t["state"] for t in result["run_details"]["task_details"]}
    pods = cluster.kubectl("get", "pods", "-n", KFP_NAMESPACE, "-o", "wide").stdout
    assert result["state"] == "SUCCEEDED", (result["state"], result.get("error"), tasks, pods)
    assert tasks.get("write-greeting") == "SUCCEEDED" and tasks.get("check-greeting") == "SUCCEEDED", tasks
    (RUN / "logs" / "kfp-orchestration-run.txt").write_text(f"{run.run_id} succeeded in {wall:.0f} s\n")
