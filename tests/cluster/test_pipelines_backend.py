"""Kubeflow Pipelines 2.17 on the test cluster, as `INVFOLD_CLUSTER_KFP=1 make cluster-up` installs
it: upstream's own kustomize manifests (manifests/kustomize/env/platform-agnostic of KFP's source at
the tag, its MySQL served by Debian's MariaDB), with the images built here from KFP's, Argo's and ML
Metadata's sources (scripts/cluster/build.sh), and a pipeline submitted through `kfp.Client`, run by
the API server, Argo, KFP's v2 driver and launcher, ML Metadata and SeaweedFS, watched to Succeeded.

The pipeline is compiled here from two container components on the cluster's own small image (a
shell): the orchestration alone (driver and launcher pods, an artifact passed through the store,
its metadata), without the minutes invfold's steps take.

No `from __future__ import annotations` here: KFP reads the components' annotations as objects."""

import time

import pytest
from kfp import compiler, dsl
from kfp.client import Client

from tests.support.cluster import KFP_NAMESPACE, step_states, stored, wait_for_run

pytestmark = [pytest.mark.cluster, pytest.mark.kfp, pytest.mark.slow]

# What a submitted run and the UI need (scripts/cluster/cluster.py KFP_SERVING); the rest of KFP's
# manifests is installed with no replicas.
SERVING = (
    "ml-pipeline",
    "ml-pipeline-persistenceagent",
    "workflow-controller",
    "metadata-grpc-deployment",
    "mysql",
    "seaweedfs",
    "metadata-envoy-deployment",
    "ml-pipeline-ui",
)
IMAGE_PREFIX = "invfold.test/"  # scripts/cluster/versions.sh KFP_IMAGE_PREFIX
SHELL_IMAGE = "invfold.test/waiter:1"  # scripts/cluster/images/waiter: Debian with a shell
GREETING = "hello from a pod"


def test_kfps_deployments_are_available_and_run_only_images_built_here(cluster, kfp_host):
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
def write_greeting(greeting: dsl.Output[dsl.Artifact]):
    return dsl.ContainerSpec(
        image=SHELL_IMAGE,
        command=["sh", "-c", f'mkdir -p "$(dirname "$0")" && echo "{GREETING}" > "$0"'],
        args=[greeting.path],
    )


@dsl.container_component
def check_greeting(greeting: dsl.Input[dsl.Artifact], checked: dsl.Output[dsl.Artifact]):
    return dsl.ContainerSpec(
        image=SHELL_IMAGE,
        command=["sh", "-c", f'grep -q "{GREETING}" "$0" && mkdir -p "$(dirname "$1")" && cp "$0" "$1"'],
        args=[greeting.path, checked.path],
    )


@dsl.pipeline(name="invfold-cluster-orchestration")
def orchestration():
    first = write_greeting().set_caching_options(False)
    check_greeting(greeting=first.outputs["greeting"]).set_caching_options(False)


def test_a_submitted_pipeline_runs_through_the_driver_and_launcher_to_succeeded(cluster, kfp_host, tmp_path):
    package = tmp_path / "orchestration.yaml"
    compiler.Compiler().compile(orchestration, str(package))
    client = Client(host=kfp_host)
    started = time.monotonic()
    run = client.create_run_from_pipeline_package(str(package), arguments={}, run_name="orchestration")
    result = wait_for_run(client, run.run_id, timeout=900)
    tasks = step_states(result)
    pods = cluster.kubectl("get", "pods", "-n", KFP_NAMESPACE, "-o", "wide").stdout
    assert result["state"] == "SUCCEEDED", (result["state"], result.get("error"), tasks, pods)
    assert tasks.get("write-greeting") == "SUCCEEDED" and tasks.get("check-greeting") == "SUCCEEDED", tasks
    # Each output went through KFP's store: the launcher uploaded it under the run's prefix.
    objects = stored(cluster, f"v2/artifacts/invfold-cluster-orchestration/{run.run_id}/")
    found = {key.split("/")[-3] + "/" + key.split("/")[-1]: body for key, body in objects.items()}
    assert found.get("write-greeting/greeting") == f"{GREETING}\n".encode(), sorted(found)
    assert found.get("check-greeting/checked") == f"{GREETING}\n".encode(), sorted(found)
    print(f"run {run.run_id} succeeded in {time.monotonic() - started:.0f} s")
