"""MLflow's artifacts go where KFP's store lets the install write, or the install is refused.

Upstream facts (kubeflow/pipelines):
- 2.16.0 and 2.17.0 manifests/kustomize/third-party/seaweedfs/base/seaweedfs/seaweedfs-deployment.yaml:
  the store's init creates the bucket `mlpipeline` and no other.
- 2.16.0 and 2.17.0 manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py:
  a profile's keys (minted per namespace, `iam.create_access_key`) may write only
  mlpipeline/{artifacts,private-artifacts/<ns>,private/<ns>,shared}/*.
So the default destination is s3://mlpipeline/private/<ns>/mlflow on the steps' store, another
bucket on KFP's store is refused at install, and so is a key of mlpipeline a profile cannot write.
The test cluster's object store creates only what KFP's does (scripts/cluster/cluster.py)."""

from __future__ import annotations

import pytest

from tests.support.deploy_tools import CHART, documents, helm_template, run, tool
from tests.support.paths import REPO


def mlflow_container(*values: str, namespace: str) -> dict:
    (deploy,) = [o for o in documents(helm_template(*values, namespace=namespace)) if o["kind"] == "Deployment"]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    return container


def destination(container: dict) -> str:
    return next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--artifacts-destination="))


def endpoint(container: dict) -> str | None:
    return next((e["value"] for e in container["env"] if e["name"] == "MLFLOW_S3_ENDPOINT_URL"), None)


@pytest.mark.parametrize("namespace", ["kubeflow", "team-a"])
def test_the_default_destination_is_a_key_the_namespace_may_write_in_kfps_bucket(namespace):
    container = mlflow_container(namespace=namespace)
    assert destination(container) == f"s3://mlpipeline/private/{namespace}/mlflow"
    assert endpoint(container) == "http://seaweedfs.kubeflow:8333"  # the steps' store (storage.endpoint auto)


def test_an_own_store_keeps_its_own_bucket():
    values = ("--set", "mlflow.artifacts.destination=s3://team-mlflow/artifacts")
    container = mlflow_container(*values, "--set", "mlflow.artifacts.s3EndpointUrl=", namespace="team-a")
    assert destination(container) == "s3://team-mlflow/artifacts" and endpoint(container) is None  # AWS S3
    other = mlflow_container(*values, "--set", "mlflow.artifacts.s3EndpointUrl=https://s3.example.org", namespace="x")
    assert endpoint(other) == "https://s3.example.org"


@pytest.mark.parametrize(
    ("namespace", "dest", "message"),
    [
        ("kubeflow", "s3://mlflow/artifacts", "has only the bucket mlpipeline"),
        ("team-a", "s3://mlflow/artifacts", "has only the bucket mlpipeline"),
        ("team-a", "s3://mlpipeline/mlflow", "may write only under"),
        ("team-a", "s3://mlpipeline/private/team-b/mlflow", "may write only under"),
    ],
)
def test_a_destination_kfps_store_cannot_take_is_refused_at_install(namespace, dest, message):
    proc = run(
        [tool("helm"), "template", "x", str(CHART), "-n", namespace, "--set", f"mlflow.artifacts.destination={dest}"],
        check=False,
    )
    assert proc.returncode != 0
    assert "mlflow.artifacts.destination" in proc.stderr and message in proc.stderr and dest in proc.stderr


def test_the_test_cluster_creates_only_kfps_bucket():
    """The lane's store must not hold a bucket a real install lacks (it once made `mlflow`, so
    `helm test` passed there and failed on KFP's store)."""
    import ast

    tree = ast.parse((REPO / "scripts" / "cluster" / "cluster.py").read_text())
    (value,) = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "STORE_BUCKETS" for t in node.targets)
    ]
    assert ast.literal_eval(value) == ("mlpipeline",)
