"""Our MPI runtimes against upstream's shipped one, and what the launcher asks of them.

Upstream facts (kubeflow/trainer v2.3):
- manifests/base/runtimes/deepspeed_distributed.yaml lists the `node` replicated job first and
  gives `launcher` `dependsOn: [{name: node, status: Ready}]` (mpirun starts once every sshd is up);
  runLauncherAsNode: true, the launcher carries `trainjob-ancestor-step: trainer`.
- pkg/runtime/framework/plugins/mpi/mpi.go: with runLauncherAsNode the node count is
  max(numNodes - 1, 1) (a one-node job still starts one node pod), and the hostfile lists the
  endpoints of the pod sets in the runtime's order (node pods first, so rank 0 is node-0-0)."""

from __future__ import annotations

import pytest
from invfold.components.launch import Resources
from invfold.components.launch.trainjob import ClusterOptions, build_trainjob, job_name
from invfold.components.train.config import TrainConfig

from tests.deploy.tools import CHART, documents, helm_template, kustomize

VALUES = {"chart-default": (), "chart-gpu": ("-f", str(CHART / "values-gpu.yaml"))}

MPI = ("invfold-deepspeed", "invfold-horovod")


def mpi_runtimes(text: str) -> list[dict]:
    return [o for o in documents(text) if o["kind"].endswith("TrainingRuntime") and o["metadata"]["name"] in MPI]


@pytest.mark.parametrize("name", ["chart-default", "chart-gpu", "k8s-cpu-dev", "k8s-gpu-prod", "k8s-tenant"])
def test_node_first_and_the_launcher_waits_for_ready_nodes(name):
    runtimes = mpi_runtimes(helm_template(*VALUES[name]) if name.startswith("chart") else kustomize(name[4:]))
    assert len(runtimes) == 2
    for runtime in runtimes:
        jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        assert [j["name"] for j in jobs] == ["node", "launcher"], runtime["metadata"]["name"]
        assert jobs[1]["dependsOn"] == [{"name": "node", "status": "Ready"}]
        assert jobs[1]["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
        assert runtime["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] is True
        node = jobs[0]["template"]["spec"]["template"]["spec"]["containers"][0]
        assert node["readinessProbe"]["tcpSocket"]["port"] == 2222  # what `Ready` waits for


def trainjob(strategy: str, nodes: int, gpus: int = 8, image: str | None = "registry.example.com/invfold/x:1") -> dict:
    cfg = TrainConfig(data="s3://b/p", out="/tmp/o", checkpoint_dir="/workspace/c", strategy=strategy, max_steps=1)
    return build_trainjob(
        job_name(strategy, "run"),
        cfg,
        Resources(nodes=nodes, procs_per_node=gpus, gpus_per_node=gpus),
        ClusterOptions(namespace="ns", storage_root="s3://b/r", image=image, workspace_pvc="ws"),
        "s3://b/r/x",
        environ={},
    )


@pytest.mark.parametrize("strategy", ["deepspeed", "horovod"])
def test_several_nodes_meet_at_node_0(strategy):
    job = trainjob(strategy, nodes=2)
    name, args = job["metadata"]["name"], job["spec"]["trainer"]["args"]
    assert f"MASTER_ADDR={name}-node-0-0.{name}" in args
    assert args[args.index("--hostfile") + 1] == "/etc/mpi/hostfile"


@pytest.mark.parametrize("strategy", ["deepspeed", "horovod"])
def test_one_node_runs_every_rank_on_the_launcher(strategy):
    job = trainjob(strategy, nodes=1)
    args = job["spec"]["trainer"]["args"]
    assert "--hostfile" not in args and args[args.index("--host") + 1] == "localhost:8"
    assert "MASTER_ADDR=127.0.0.1" in args
