"""The artifact-store hand-over to TrainJob pods: the `storage_endpoint` pipeline parameter and
KFP's Secret layout reach the pods' environment, and with exactly that environment (resolved the
way the kubelet resolves `env`: values and secretKeyRefs) a pod writes to and reads from a
non-AWS S3 endpoint (moto's server on loopback standing in for KFP's MinIO / SeaweedFS).

Upstream fact: KFP's artifact-store Secret `mlpipeline-minio-artifact` holds the keys `accesskey`
and `secretkey` (kubeflow/pipelines manifests/kustomize/third-party/seaweedfs/base/seaweedfs/
mlpipeline-minio-artifact-secret.yaml; the multi-user profile controller copies it into each
profile namespace), and `minio://mlpipeline/...` artifact URIs are S3 buckets behind that endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from invfold.components.launch import Resources
from invfold.components.launch.trainjob import ClusterOptions, build_trainjob, job_name
from invfold.components.train.config import TrainConfig
from tests.support.paths import REPO as ROOT

KFP_SECRET = {"accesskey": "testing", "secretkey": "testing"}  # moto accepts any keys


def trainjob(**options) -> dict:
    cfg = TrainConfig(
        data="s3://b/prepared",
        out="/tmp/train",
        checkpoint_dir="s3://b/ckpt",
        strategy="ddp",
        preset="tiny",
        max_steps=1,
    )
    return build_trainjob(
        job_name("ddp", "run-1"),
        cfg,
        Resources(nodes=1, procs_per_node=1),
        ClusterOptions(namespace="team-a", storage_root="s3://b/invfold", **options),
        "s3://b/invfold/runs/x",
        environ={},
    )


def kubelet_env(env: list[dict], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """A container's `env` as the kubelet resolves it (value, or valueFrom.secretKeyRef)."""
    out = {}
    for item in env:
        if "value" in item:
            out[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            out[item["name"]] = secrets[ref["name"]][ref["key"]]
    return out


def test_the_endpoint_and_kfp_secret_layout_reach_the_pods():
    env = trainjob(storage_endpoint="http://seaweedfs.kubeflow:8333", storage_secret="mlpipeline-minio-artifact")[
        "spec"
    ]["trainer"]["env"]
    by_name = {e["name"]: e for e in env}
    assert by_name["AWS_ENDPOINT_URL"] == {"name": "AWS_ENDPOINT_URL", "value": "http://seaweedfs.kubeflow:8333"}
    assert by_name["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "mlpipeline-minio-artifact",
        "key": "accesskey",
    }
    assert by_name["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "secretkey"


def test_a_pod_with_that_environment_uses_the_non_aws_store(s3_server, tmp_path):
    bucket = s3_server.new_bucket()
    job = trainjob(storage_endpoint=s3_server.endpoint_url, storage_secret="mlpipeline-minio-artifact")
    env = kubelet_env(job["spec"]["trainer"]["env"], {"mlpipeline-minio-artifact": KFP_SECRET})
    pod_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        **env,
    }
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.json").write_text(json.dumps({"ok": 1}))
    script = (
        "import sys; from invfold import storage as io;"
        "io.upload_folder(sys.argv[1], sys.argv[2]);"
        "print(io.read_bytes(sys.argv[2] + '/summary.json').decode())"
    )
    uri = f"s3://{bucket}/invfold/runs/x"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "out"), uri],
        env=pod_env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == {"ok": 1}
    body = s3_server.client().get_object(Bucket=bucket, Key="invfold/runs/x/summary.json")["Body"].read()
    assert json.loads(body) == {"ok": 1}


def test_the_pipeline_carries_storage_endpoint_to_the_train_step():
    spec, platform = yaml.safe_load_all((ROOT / "pipelines" / "invfold_pipeline.yaml").read_text())
    root = spec["root"]["inputDefinitions"]["parameters"]
    assert root["storage_endpoint"]["defaultValue"] == ""
    assert root["storage_secret"]["defaultValue"] == "mlpipeline-minio-artifact"
    (train,) = [
        c["dag"]["tasks"]["train-op"]["inputs"]["parameters"]
        for c in spec["components"].values()
        if "train-op" in c.get("dag", {}).get("tasks", {})
    ]
    assert train["storage_endpoint"]["componentInputParameter"] == "pipelinechannel--storage_endpoint"
    executor = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train-op"]
    (secret,) = [
        s
        for s in executor["secretAsEnv"]
        if s["secretNameParameter"]["componentInputParameter"].endswith("storage_secret")
    ]
    assert {k["secretKey"]: k["envVar"] for k in secret["keyToEnv"]} == {
        "accesskey": "AWS_ACCESS_KEY_ID",
        "secretkey": "AWS_SECRET_ACCESS_KEY",
    }


def test_a_bad_endpoint_is_refused():
    import pytest

    with pytest.raises(ValueError, match="storage_endpoint"):
        ClusterOptions(storage_endpoint="seaweedfs.kubeflow:8333")
