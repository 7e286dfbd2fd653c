"""TrainJobs made by the train step's own build_trainjob, for each strategy and node count, against
the real Kubeflow Trainer v2.3 webhooks and TrainJob CRD with the chart's runtimes installed.

Not run here yet: a TrainJob executing on the node. It needs the 6.2 GB CPU runtime image in the
node's containerd (about 12 GB of disk while it is imported), more than the shared disk of the
machine this was written on had free (2-8 GB during the session)."""

from __future__ import annotations

import json

import pytest

from invfold.components.launch import Resources
from invfold.components.launch.trainjob import ClusterOptions, build_trainjob, job_name
from tests.support.training import tiny_config

NAMESPACE = "invfold-train"
SECRET = "invfold-storage"
KEYS = {"accesskey": "testing", "secretkey": "testing"}  # only dry runs read it


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
