"""The TrainJobs the launcher generates: shaped as Trainer v2 expects, strictly valid, and free
of credentials; the strict schema rejects what the typed models would silently drop."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from invfold.components.launch import Resources
from invfold.components.launch.schema import ManifestError, validate
from invfold.components.launch.trainjob import ClusterOptions, build_trainjob, job_name, runtime_name
from invfold.components.train.config import TrainConfig
from invfold.components.train.strategies import STRATEGIES
from tests.support.credentials import literal_credentials
from tests.support.deploy_tools import documents, kustomize

ROOT = Path(__file__).resolve().parents[2]
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def manifest(strategy: str = "ddp", gpus: int = 4, out: str = "/tmp/train", **option_overrides) -> dict:
    checkpoints = "/workspace/ckpt/run-1" if strategy == "deepspeed" else "s3://bucket/ckpt/run-1"
    cfg = TrainConfig(
        data="s3://bucket/prepared",
        out=out,
        checkpoint_dir=checkpoints,
        strategy=strategy,
        preset="tiny",
        max_steps=10,
    )
    options = dict(
        namespace="team-a",
        storage_root="s3://bucket/invfold",
        storage_secret="invfold-storage",
        storage_endpoint="http://minio.kubeflow:9000",
        node_selector={"pool": "gpu-a100"},
        tolerations=[GPU_TOLERATION],
        owner_pod_name="invfold-train-pod",
        owner_pod_uid="1234-abcd",
        pipeline_run_id="run-1",
        workspace_pvc="invfold-workspace" if strategy == "deepspeed" else None,
    )
    options.update(option_overrides)
    environ = {
        "MLFLOW_TRACKING_URI": "http://mlflow.invfold:5000",
        "MLFLOW_EXPERIMENT_NAME": "invfold",
        "MLFLOW_TRACKING_PASSWORD": "hunter2-very-secret",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
        "HOME": "/root",
    }
    return build_trainjob(
        job_name(strategy, "run-1"),
        cfg,
        Resources(nodes=2, procs_per_node=gpus or 2, gpus_per_node=gpus),
        ClusterOptions(**options),
        "s3://bucket/invfold/runs/x",
        environ=environ,
    )


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_generated_trainjobs_validate_and_reference_the_strategy_runtime(strategy):
    job = manifest(strategy)
    validate(job)
    spec = job["spec"]
    assert spec["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": f"invfold-{strategy}",
    }
    trainer = spec["trainer"]
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == 4
    assert trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": "4"}
    assert trainer["command"] == ["torchrun" if strategy == "ddp" else "mpirun"]
    assert "invfold.components.launch.trainjob_entry" in trainer["args"]  # both set: the runtime's args go
    replicated = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [r["name"] for r in replicated] == (["node"] if strategy == "ddp" else ["node", "launcher"])
    for r in replicated:
        pod = r["template"]["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"pool": "gpu-a100"} and pod["tolerations"] == [GPU_TOLERATION]
        if strategy == "deepspeed":  # checkpoints on a shared volume
            assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "invfold-workspace"}
            assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == "/workspace"
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", "invfold-train-pod", "1234-abcd")
    assert len(job["metadata"]["name"]) <= 63
    if strategy != "ddp":  # ranks meet at rank 0: mpirun's own pod, the launcher
        name = job["metadata"]["name"]
        assert f"MASTER_ADDR={name}-launcher-0-0.{name}" in trainer["args"]
        assert "MASTER_PORT=29500" in trainer["args"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_jobs_ranks_write_into_their_own_tmp_whatever_the_steps_output_path(strategy):
    """The step's output path is a path of the step's pod: under KFP, the launcher's local mirror of
    the artifact store (`/minio/mlpipeline/v2/artifacts/...`, `/s3/...`, `/gcs/...`), which the
    job's pods (read-only root filesystem) cannot create: seen on Kubeflow Pipelines 2.17, every
    rank died at `os.makedirs(cfg.out)` with EROFS. The ranks write into their /tmp emptyDir and
    rank 0 copies that to the job's output URI, from where the step fetches it to its own path."""
    step_out = "/minio/mlpipeline/v2/artifacts/invfold/run-1/train-op/abc/model"
    args = manifest(strategy, out=step_out)["spec"]["trainer"]["args"]
    config = json.loads(args[args.index("--config-json") + 1])
    assert config["out"].startswith("/tmp/"), config["out"]
    assert args[args.index("--output") + 1] == "s3://bucket/invfold/runs/x"
    assert step_out not in json.dumps(args)


def test_tenants_reference_their_namespaced_runtime():
    job = manifest("horovod", runtime_kind="TrainingRuntime")
    validate(job)
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
        "name": "invfold-horovod",
    }
    kinds = {(d["kind"], d["metadata"]["name"]) for d in documents(kustomize("tenant"))}
    assert ("TrainingRuntime", "invfold-horovod") in kinds


def test_runtimes_named_by_the_launcher_exist_in_k8s_and_validate():
    runtimes = [d for d in yaml.safe_load_all((ROOT / "k8s/base/runtimes.yaml").read_text()) if d]
    for runtime in runtimes:
        validate(runtime, source=runtime["metadata"]["name"])
    names = {r["metadata"]["name"] for r in runtimes}
    assert {runtime_name(s, nodes=n) for s in STRATEGIES for n in (1, 2)} <= names


def test_credentials_are_referenced_never_copied():
    job = manifest()
    env = {e["name"]: e for e in job["spec"]["trainer"]["env"]}
    assert env["AWS_ACCESS_KEY_ID"] == {
        "name": "AWS_ACCESS_KEY_ID",
        "valueFrom": {"secretKeyRef": {"name": "invfold-storage", "key": "accesskey"}},
    }
    assert "value" not in env["AWS_SECRET_ACCESS_KEY"]
    assert env["MLFLOW_TRACKING_URI"]["value"] == "http://mlflow.invfold:5000"
    assert "MLFLOW_TRACKING_PASSWORD" not in env  # credentials of the step are not forwarded as values
    text = json.dumps(job)
    assert "hunter2" not in text and "wJalrXUtnFEMI" not in text
    assert literal_credentials(text) == []


def _set(doc: dict, path: str, value) -> dict:
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(
    "path, value, expected",
    [
        ("spec.trainer.numNode", 2, "'numNode' was unexpected"),
        ("spec.runtimeRef.nmae", "invfold-ddp", "'nmae' was unexpected"),
        (
            "spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs.0.template.spec.template.spec.nodeSelecter",
            {"a": "b"},
            "'nodeSelecter' was unexpected",
        ),
        ("apiVersion", "kubeflow.org/v1", "'trainer.kubeflow.org/v1alpha1' was expected"),
        ("apiVersion", "trainer.kubeflow.org/v2", "'trainer.kubeflow.org/v1alpha1' was expected"),
        ("kind", "PyTorchJob", "kind: expected one of"),
        ("spec.runtimeRef", KeyError, "'runtimeRef' is a required property"),
        ("spec.runtimeRef.name", KeyError, "'name' is a required property"),
        ("spec.trainer.numNodes", "2", "'2' is not of type 'integer'"),
        ("metadata.name", "Invfold_Job", "does not match"),
    ],
)
def test_strict_schema_rejects_what_the_typed_models_would_drop(path, value, expected):
    broken = _set(manifest(), path, value)
    with pytest.raises(ManifestError, match=re.escape(expected)):
        validate(broken)


def test_typed_models_silently_drop_a_misspelled_field():
    """Why the strict schema exists: the models accept the typo and lose it."""
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

    broken = _set(manifest(), "spec.trainer.numNode", 2)
    assert "numNode" not in TrainerV1alpha1TrainJob.from_dict(broken).to_dict()["spec"]["trainer"]


def test_committed_schemas_are_generated_from_the_installed_models():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/generate_schemas.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(storage_root="bucket/prefix"), "storage_root"),
        (dict(timeout_s=0), "timeout_s"),
        (dict(node_selector={"pool": 1}), "node_selector"),
        (dict(runtime_kind="PyTorchJob"), "runtime_kind"),
    ],
)
def test_cluster_options_are_validated(options, message):
    with pytest.raises(ValueError, match=message):
        ClusterOptions(**options)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(nodes=0), "nodes"),
        (dict(procs_per_node=0), "procs_per_node"),
        (dict(gpus_per_node=-1), "gpus_per_node"),
        (dict(procs_per_node=4, gpus_per_node=2), "need as many GPUs"),
    ],
)
def test_resources_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Resources(**kwargs)
