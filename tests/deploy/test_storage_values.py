"""The chart's object-store values against upstream's facts: which endpoint KFP serves, which keys
a profile namespace may write, and egress to stores outside the cluster (policy evaluator).

Upstream facts (kubeflow/pipelines):
- 2.16.0 and 2.17.0 ship SeaweedFS alone, Service `seaweedfs` (S3 on 8333, `http-s3-compat` 9000 ->
  8333) and no `minio-service` (2.15.0 still had one): manifests/kustomize/third-party/seaweedfs/
  base/seaweedfs/seaweedfs-service.yaml and kustomization.yaml at each tag.
- in multi-user installs the profile controller gives each namespace keys whose policy allows only
  arn:aws:s3:::mlpipeline/{artifacts/*, private-artifacts/<ns>/*, private/<ns>/*, shared/*}:
  2.16.0 / 2.17.0 manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py."""

from __future__ import annotations

import fnmatch
import json

import pytest

from tests.support.deploy_tools import CHART, REPO, documents, helm_template, run, tool
from tests.support.network_policy import Address, Pod, allowed

NS = "kubeflow-user-example-com"


def profile_key_resources(namespace: str) -> list[str]:
    return [
        "arn:aws:s3:::mlpipeline/artifacts/*",
        f"arn:aws:s3:::mlpipeline/private-artifacts/{namespace}/*",
        f"arn:aws:s3:::mlpipeline/private/{namespace}/*",
        "arn:aws:s3:::mlpipeline/shared/*",
    ]


def pipeline_defaults(*values: str, namespace: str = NS) -> dict:
    (job,) = [
        o
        for o in documents(helm_template(*values, namespace=namespace))
        if o["kind"] == "Job" and o["metadata"]["name"].endswith("-pipeline-upload")
    ]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    return json.loads(env["PIPELINE_DEFAULTS"])


def test_the_default_endpoint_is_kfp_2_16s_seaweedfs():
    """`helm template` has no cluster to ask: the KFP 2.16+ Service (lookup picks minio-service on
    older installs)."""
    assert pipeline_defaults()["storage_endpoint"] == "http://seaweedfs.kubeflow:8333"
    assert pipeline_defaults("--set", "storage.endpoint=https://s3.example.com")["storage_endpoint"] == (
        "https://s3.example.com"
    )
    assert pipeline_defaults("--set", "storage.endpoint=")["storage_endpoint"] == ""


@pytest.mark.parametrize("namespace", [NS, "team-b"])
def test_the_default_root_lies_under_the_profiles_own_keys(namespace):
    root = pipeline_defaults(namespace=namespace)["storage_root"]
    key = "arn:aws:s3:::" + root.removeprefix("s3://") + "/runs/job/model.pt"
    assert any(fnmatch.fnmatchcase(key, r) for r in profile_key_resources(namespace)), root
    assert namespace in root, f"{root}: not namespace-scoped"


def test_a_root_the_profile_cannot_write_is_refused():
    proc = run(
        [tool("helm"), "template", "x", str(CHART), "-n", NS, "--set", "storage.root=s3://mlpipeline/invfold"],
        check=False,
    )
    assert proc.returncode != 0
    assert f"s3://mlpipeline/private/{NS}/" in proc.stderr and "storage.root" in proc.stderr
    # KFP's own namespace (single-user: the store's admin keys) takes any root
    ok = pipeline_defaults("--set", "storage.root=s3://mlpipeline/invfold", namespace="kubeflow")
    assert ok["storage_root"] == "s3://mlpipeline/invfold"


def test_docs_and_help_name_seaweedfs_wherever_they_name_minio_service():
    files = ["docs/deploy.md", "charts/invfold/values.yaml", "charts/invfold/README.md", "pipelines/pipeline.py"]
    for name in files:
        for number, line in enumerate((REPO / name).read_text().splitlines(), 1):
            if "minio-service" in line:
                assert "seaweedfs" in line or "2.15" in line, f"{name}:{number}: {line.strip()}"


def policies(*values: str) -> list[dict]:
    return [o for o in documents(helm_template(*values, namespace=NS)) if o["kind"] == "NetworkPolicy"]


def role(name: str) -> Pod:
    return Pod(NS, {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": name})


S3_ADDRESS = Address("52.216.1.2")  # an address of an external S3 endpoint


def test_object_store_egress_is_a_value():
    closed = policies()
    opened = policies("--set", "networkPolicies.objectStoreEgress[0].cidr=52.216.0.0/15")
    for name in ("step", "launcher", "trainer"):
        assert not allowed(closed, role(name), S3_ADDRESS, 443), name
        assert allowed(opened, role(name), S3_ADDRESS, 443), name
        assert not allowed(opened, role(name), S3_ADDRESS, 80), name
        assert not allowed(opened, role(name), Address("1.1.1.1"), 443), name
    assert not allowed(opened, role("mlflow"), S3_ADDRESS, 443), "MLflow has its own value"


def test_mlflows_artifact_store_egress_is_a_value():
    assert not allowed(policies(), role("mlflow"), S3_ADDRESS, 443), "closed by default"
    opened = policies(
        "--set", "mlflow.artifacts.egress[0].cidr=52.216.0.0/15", "--set", "mlflow.artifacts.egress[0].ports[0]=443"
    )
    assert allowed(opened, role("mlflow"), S3_ADDRESS, 443)
    assert not allowed(opened, role("step"), S3_ADDRESS, 443)
