"""Every step that reads or writes object storage (a user URI: the data, the split file, init_from,
the design structures; or the TrainJob's outputs) gets the same storage credentials and endpoint,
in both compiled pipelines: the keys from the `storage_secret` Secret (KFP's layout, `accesskey` /
`secretkey`) as AWS_* env, and the pipeline's `storage_endpoint` as the step's input, which the
step hands to its S3 client (invfold.storage.use_endpoint -> AWS_ENDPOINT_URL).

Upstream facts: KFP's artifact-store Secret `mlpipeline-minio-artifact` holds `accesskey` /
`secretkey` (kubeflow/pipelines 2.17.0 manifests/kustomize/third-party/seaweedfs/base/seaweedfs/
mlpipeline-minio-artifact-secret.yaml); KFP 2.16+ serves the store as Service `seaweedfs`
(S3 on 8333, 9000 -> 8333) and no longer ships `minio-service`
(.../seaweedfs/base/seaweedfs/seaweedfs-service.yaml and kustomization.yaml of 2.16.0 / 2.17.0)."""

from __future__ import annotations

import os

import pytest
import yaml

from invfold import storage
from invfold.errors import ConfigError
from tests.support.paths import REPO as ROOT

# Inputs through which a step touches object storage.
STORAGE_INPUTS = {"data_uri", "split_file", "init_from", "structures", "storage_root"}
PIPELINES = ("invfold_pipeline.yaml", "design_pipeline.yaml")


def storage_steps(name: str):
    """(task name, its inputs, its executor's kubernetes config) of every task touching storage."""
    spec, platform = yaml.safe_load_all((ROOT / "pipelines" / name).read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
    for dag in dags:
        for task_name, task in dag["tasks"].items():
            component = spec["components"][task["componentRef"]["name"]]
            inputs = set((component.get("inputDefinitions") or {}).get("parameters") or {})
            if inputs & STORAGE_INPUTS:
                executor = executors.get(component.get("executorLabel", ""), {})
                yield task_name, task["inputs"]["parameters"], executor


@pytest.mark.parametrize("name", PIPELINES)
def test_every_step_touching_storage_gets_the_secret_and_the_endpoint(name):
    found = {task: (inputs, executor) for task, inputs, executor in storage_steps(name)}
    expected = {"fingerprint-op", "prep-op", "train-op", "compare-op"}
    if name == "design_pipeline.yaml":
        expected = {"plan-shards-op", "design-shard-op"}
    assert expected <= set(found), sorted(found)
    for task, (inputs, executor) in found.items():
        endpoint = inputs.get("storage_endpoint", {})
        assert endpoint.get("componentInputParameter", "").endswith("storage_endpoint"), f"{name}: {task}"
        secrets = [
            s
            for s in executor.get("secretAsEnv") or []
            if s["secretNameParameter"]["componentInputParameter"].endswith("storage_secret")
        ]
        assert len(secrets) == 1, f"{name}: {task} gets no storage Secret"
        assert {k["secretKey"]: k["envVar"] for k in secrets[0]["keyToEnv"]} == {
            "accesskey": "AWS_ACCESS_KEY_ID",
            "secretkey": "AWS_SECRET_ACCESS_KEY",
        }, f"{name}: {task}"
        assert secrets[0].get("optional") is True, (
            f"{name}: {task}: a missing Secret (workload identity) must not block"
        )


@pytest.mark.parametrize("name", PIPELINES)
def test_the_endpoint_help_names_seaweedfs(name):
    spec = next(yaml.safe_load_all((ROOT / "pipelines" / name).read_text()))
    help_text = spec["root"]["inputDefinitions"]["parameters"]["storage_endpoint"]["description"]
    assert "http://seaweedfs.kubeflow:8333" in help_text and "2.16" in help_text


def test_a_step_hands_the_endpoint_to_its_s3_client(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    storage.use_endpoint("")
    assert "AWS_ENDPOINT_URL" not in os.environ
    storage.use_endpoint("http://seaweedfs.kubeflow:8333")
    assert os.environ["AWS_ENDPOINT_URL"] == "http://seaweedfs.kubeflow:8333"
    with pytest.raises(ConfigError, match=r"storage_endpoint: .*seaweedfs\.kubeflow:8333"):
        storage.use_endpoint("minio-service.kubeflow:9000")


def test_a_new_endpoint_is_not_served_by_a_client_made_for_the_old_one(s3_server, monkeypatch):
    """fsspec hands back one cached s3fs filesystem per set of arguments, and its client keeps the
    endpoint it was made with: without use_endpoint dropping it, the read goes to the old store."""
    uri = s3_server.put(s3_server.new_bucket(), "k", b"x")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on discard
    stale, _ = storage.filesystem(uri)
    stale.connect()
    storage.use_endpoint(s3_server.endpoint_url)
    fs, path = storage.filesystem(uri)
    assert fs is not stale
    assert fs.cat(path) == b"x"


def test_prep_reads_s3_data_through_the_endpoint_it_is_given(s3_server, monkeypatch, tmp_path):
    """The prep step with only the pod's keys and its storage_endpoint input (no AWS_ENDPOINT_URL
    in the pod's env, as KFP starts it) reads an s3:// protein set from a non-AWS store."""
    from invfold.components.fingerprint.step import fingerprint
    from invfold.components.prep.step import prep_step
    from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS

    bucket = s3_server.new_bucket()
    data = s3_server.put(bucket, "cath/chain_set.jsonl.gz", SAMPLE_CHAIN_SET.read_bytes())
    splits = s3_server.put(bucket, "cath/splits.json", SAMPLE_SPLITS.read_bytes())
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    import fsspec

    fsspec.config.conf.clear()
    storage.use_endpoint(s3_server.endpoint_url)
    digest = fingerprint([data, splits])
    meta = prep_step(
        data,
        splits,
        digest,
        str(tmp_path / "prepared"),
        str(tmp_path / "card.md"),
        storage_endpoint=s3_server.endpoint_url,
    )
    assert {"train", "validation", "test"} <= set(meta["datasets"])
