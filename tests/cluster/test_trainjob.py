"""A TrainJob made by the train step's own launcher (KubernetesLauncher: build_trainjob, create,
the watch loop, the fetch of the outputs) runs on the real Kubeflow Trainer v2.3 and JobSet
controllers with the project's CPU runtime image and the chart's `invfold-ddp` runtime: torchrun
across 2 pods (rank 0's address is a pod DNS name, answered by CoreDNS), a few steps of the tiny
model on the bundled sample, checkpoints and outputs in an S3-compatible store.

The store is moto's S3 server on the pod bridge's address (pods reach it as they would KFP's
MinIO / SeaweedFS Service; the data and the keys travel exactly as on a cluster: the
`storage_endpoint` and a Secret of KFP's layout). It runs on the host, not in a pod: its image would
have to be built here, and no registry is reachable."""

from __future__ import annotations

import json
import socket

import pytest

from invfold.components.launch import Resources
from invfold.components.launch.kubernetes import KubernetesLauncher
from invfold.components.launch.trainjob import ClusterOptions, build_trainjob, job_name
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS
from tests.support.cluster import GATEWAY
from tests.support.training import tiny_config

NAMESPACE = "invfold-train"
SECRET = "invfold-storage"
KEYS = {"accesskey": "testing", "secretkey": "testing"}  # moto accepts any keys


@pytest.fixture(scope="module")
def store(cluster):
    """moto's S3 server on the bridge address, with the prepared sample in bucket `invfold`."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind((GATEWAY, 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address=GATEWAY, port=port, verbose=False)
    server.start()
    yield f"http://{GATEWAY}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def prepared(store, tmp_path_factory, monkeypatch_module):
    """The bundled sample, prepared and uploaded as a pipeline's prep step leaves it."""
    import boto3

    monkeypatch_module.setenv("AWS_ENDPOINT_URL", store)
    monkeypatch_module.setenv("AWS_ACCESS_KEY_ID", KEYS["accesskey"])
    monkeypatch_module.setenv("AWS_SECRET_ACCESS_KEY", KEYS["secretkey"])
    monkeypatch_module.setenv("AWS_DEFAULT_REGION", "us-east-1")
    out = tmp_path_factory.mktemp("cluster-sample") / "prepared"
    run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), output=str(out)))
    s3 = boto3.client("s3", endpoint_url=store)
    s3.create_bucket(Bucket="invfold")
    for path in out.rglob("*"):
        if path.is_file():
            s3.upload_file(str(path), "invfold", f"prepared/{path.relative_to(out)}")
    return "s3://invfold/prepared"


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def train_namespace(cluster, release):
    """A namespace that enforces Pod Security `restricted` (what k8s/base and the overlays claim
    for invfold's namespace), with the storage Secret in KFP's layout."""
    ns = cluster.namespace(
        NAMESPACE,
        {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"},
    )
    cluster.apply(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": ns}, "stringData": KEYS}
    )
    yield ns
    cluster.delete_namespace(ns)


def custom_objects(cluster):
    from kubernetes import client, config

    return client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))


def explain(cluster, ns: str) -> str:
    """What the cluster says about the job's pods (for a failure message)."""
    pods = cluster.kubectl("get", "pods,trainjobs,jobsets", "-n", ns, "-o", "wide", check=False).stdout
    events = cluster.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False).stdout[-4000:]
    logs = cluster.kubectl("logs", "-n", ns, "-l", "jobset.sigs.k8s.io/jobset-name", "--tail=40", check=False)
    return f"{pods}\n{events}\n{logs.stdout[-6000:]}{logs.stderr[-1000:]}"


def test_a_two_pod_ddp_trainjob_completes_and_its_outputs_come_back(
    cluster, node_images, release, train_namespace, store, prepared, tmp_path
):
    node_images("runtime")
    cfg = tiny_config(
        prepared,
        tmp_path / "out",
        max_steps=3,
        checkpoint_every=3,
        validate_every=0,
        checkpoint_dir="s3://invfold/checkpoints/ddp",
        dist_timeout_s=300.0,
    )
    options = ClusterOptions(
        namespace=train_namespace,
        storage_root="s3://invfold/jobs",
        storage_secret=SECRET,
        storage_endpoint=store,
        pipeline_run_id="cluster-lane",
        poll_s=3.0,
        timeout_s=900.0,
    )
    launcher = KubernetesLauncher(options, api=custom_objects(cluster))
    try:
        result = launcher.run(cfg, Resources(nodes=2, procs_per_node=1))
    except Exception:
        print(explain(cluster, train_namespace))
        raise
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["world_size"], summary["step"], summary["stop_reason"]) == (2, 3, "finished"), summary
    # DDP kept the ranks' weights identical (one digest per rank, all equal).
    assert len(summary["params_digests"]) == 2 and len(set(summary["params_digests"])) == 1, summary
    assert (tmp_path / "out" / "model.pt").stat().st_size > 0
    pods = cluster.get("pods", "-n", train_namespace, "-l", f"jobset.sigs.k8s.io/jobset-name={result.job_name}")
    assert len(pods["items"]) == 2 and {p["status"]["phase"] for p in pods["items"]} == {"Succeeded"}
    import boto3

    listed = boto3.client("s3", endpoint_url=store).list_objects_v2(Bucket="invfold", Prefix="checkpoints/ddp/")
    assert listed.get("KeyCount", 0) > 0, "no checkpoint was written to the store"


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("strategy", ["ddp", "deepspeed", "horovod"])
def test_trainers_webhook_accepts_every_strategys_trainjob(cluster, release, train_namespace, strategy, nodes):
    """build_trainjob's manifest for each strategy and node count, against the chart's runtimes:
    the TrainJob CRD's schema and CEL rules and Trainer's validating webhook (which checks the
    runtime patches against the referenced runtime) answer on a server-side dry run."""
    cfg = tiny_config("s3://invfold/prepared", "/tmp/train", strategy=strategy, checkpoint_dir="/workspace/ckpt")
    options = ClusterOptions(
        namespace=train_namespace,
        storage_root="s3://invfold/jobs",
        storage_secret=SECRET,
        storage_endpoint="http://seaweedfs.kubeflow:8333",
        node_selector={"kubernetes.io/os": "linux"},
        workspace_pvc="invfold-workspace",
    )
    name = job_name(strategy, "cluster-lane")
    manifest = build_trainjob(name, cfg, Resources(nodes=nodes, procs_per_node=2), options, "s3://invfold/out")
    dry_run = ("create", "--dry-run=server", "-o", "json", "-f", "-")
    out = cluster.kubectl(*dry_run, input=json.dumps(manifest), check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["spec"]["runtimeRef"]["name"] == manifest["spec"]["runtimeRef"]["name"]
    # The server refuses what its schema does not allow: the check can fail.
    bad = {**manifest, "spec": {**manifest["spec"], "trainer": {**manifest["spec"]["trainer"], "numNodes": "two"}}}
    refused = cluster.kubectl(*dry_run, input=json.dumps(bad), check=False)
    assert refused.returncode != 0 and "numNodes" in refused.stderr, refused.stderr
