"""Our MPI runtimes against upstream's shipped one, and what the launcher asks of them.

Upstream facts (kubeflow/trainer v2.3):
- manifests/base/runtimes/deepspeed_distributed.yaml lists the `node` replicated job first and
  gives `launcher` `dependsOn: [{name: node, status: Ready}]` (mpirun starts once every sshd is up);
  runLauncherAsNode: true, the launcher carries `trainjob-ancestor-step: trainer`.
- pkg/runtime/framework/plugins/mpi/mpi.go: with runLauncherAsNode the node count is
  max(numNodes - 1, 1) (a one-node job still starts one node pod), and the hostfile lists the
  endpoints of the pod sets in the runtime's order (node pods first). OpenMPI still starts rank 0
  on the launcher, the host mpirun runs on (tests/cluster/test_trainjob.py saw it on a real cluster).
  Without a node job, Validate accepts numNodes 1 only: one-node jobs use the launcher-only
  `-single-node` runtimes.
- What Trainer then starts is re-implemented in trainer_pods.py (each rule with its upstream file):
  every pod that holds GPUs must run ranks, and trainer.image must reach every pod that runs them."""

from __future__ import annotations

import pytest

from invfold.components.launch import Resources
from invfold.components.launch.trainjob import ClusterOptions, build_trainjob, job_name
from invfold.components.train.config import TrainConfig
from invfold.errors import ConfigError
from tests.support.deploy_tools import CHART, documents, helm_template, kustomize
from tests.support.trainer_pods import Invalid, Pod, render

VALUES = {"chart-default": (), "chart-gpu": ("-f", str(CHART / "values-gpu.yaml"))}

MPI = ("invfold-deepspeed", "invfold-horovod")
SINGLE = tuple(f"{name}-single-node" for name in MPI)
RENDERINGS = ["chart-default", "chart-gpu", "k8s-cpu-dev", "k8s-gpu-prod", "k8s-tenant", "k8s-single-user"]
IMAGE = "registry.example.com/invfold/x:1"
# kubeflow/trainer v2.3.0 manifests/base/runtimes/deepspeed_distributed.yaml, the parts that decide
# its pods (names, order, ancestor label, MPI policy); its image, sshd command and GPU-free resources.
UPSTREAM_DEEPSPEED = {
    "metadata": {"name": "deepspeed-distributed"},
    "spec": {
        "mlPolicy": {
            "numNodes": 1,
            "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI", "runLauncherAsNode": True},
        },
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "node",
                                                "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime",
                                                "command": ["/usr/sbin/sshd"],
                                            }
                                        ]
                                    }
                                }
                            }
                        },
                    },
                    {
                        "name": "launcher",
                        "dependsOn": [{"name": "node", "status": "Ready"}],
                        "template": {
                            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {"name": "node", "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime"}
                                        ]
                                    }
                                }
                            },
                        },
                    },
                ]
            }
        },
    },
}


def rendering(name: str) -> str:
    return helm_template(*VALUES[name]) if name.startswith("chart") else kustomize(name[4:])


@pytest.fixture(scope="module")
def runtimes_by_rendering() -> dict[str, dict[str, dict]]:
    out = {}
    for name in RENDERINGS:
        docs = documents(rendering(name))
        out[name] = {o["metadata"]["name"]: o for o in docs if o["kind"].endswith("TrainingRuntime")}
    return out


def mpi_runtimes(text: str) -> list[dict]:
    return [o for o in documents(text) if o["kind"].endswith("TrainingRuntime") and o["metadata"]["name"] in MPI]


@pytest.mark.parametrize("name", ["chart-default", "chart-gpu", "k8s-cpu-dev", "k8s-gpu-prod", "k8s-tenant"])
def test_node_first_and_the_launcher_waits_for_ready_nodes(name):
    runtimes = mpi_runtimes(rendering(name))
    assert len(runtimes) == 2
    for runtime in runtimes:
        jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        assert [j["name"] for j in jobs] == ["node", "launcher"], runtime["metadata"]["name"]
        assert jobs[1]["dependsOn"] == [{"name": "node", "status": "Ready"}]
        assert jobs[1]["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
        assert runtime["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] is True
        node = jobs[0]["template"]["spec"]["template"]["spec"]["containers"][0]
        assert node["readinessProbe"]["tcpSocket"]["port"] == 2222  # what `Ready` waits for


def trainjob(strategy: str, nodes: int, gpus: int = 8, image: str | None = IMAGE) -> dict:
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
def test_several_nodes_meet_at_the_launcher_where_rank_0_runs(strategy):
    job = trainjob(strategy, nodes=2, image=None)
    name, args = job["metadata"]["name"], job["spec"]["trainer"]["args"]
    assert f"MASTER_ADDR={name}-launcher-0-0.{name}" in args
    assert args[args.index("--hostfile") + 1] == "/etc/mpi/hostfile"


@pytest.mark.parametrize("strategy", ["deepspeed", "horovod"])
def test_one_node_runs_every_rank_on_the_launcher(strategy):
    job = trainjob(strategy, nodes=1)
    args = job["spec"]["trainer"]["args"]
    assert "--hostfile" not in args and args[args.index("--host") + 1] == "localhost:8"
    assert "MASTER_ADDR=127.0.0.1" in args


def rank_pods(job: dict, pods: list[Pod], hostfile: list[str]) -> list[Pod]:
    """The pods that run ranks: torchrun on every pod; mpirun on the hostfile's hosts, or on the
    launcher alone when it is given `--host localhost:N`."""
    args = job["spec"]["trainer"]["args"]
    if job["spec"]["trainer"]["command"] == ["torchrun"]:
        return pods
    if "--hostfile" in args:
        hosts = {line.split()[0] for line in hostfile}
        return [p for p in pods if p.hostname in hosts]
    assert args[args.index("--host") + 1].startswith("localhost:")
    return [p for p in pods if p.command == ["mpirun"]]


@pytest.mark.parametrize("name", RENDERINGS)
@pytest.mark.parametrize("strategy", ["ddp", "deepspeed", "horovod"])
@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_every_pod_holding_gpus_runs_ranks_on_the_trainjob_image(runtimes_by_rendering, name, strategy, nodes):
    image = IMAGE if strategy == "ddp" or nodes == 1 else None  # several-node MPI: refused (below)
    job = trainjob(strategy, nodes, image=image)
    runtime = runtimes_by_rendering[name][job["spec"]["runtimeRef"]["name"]]
    pods, hostfile = render(runtime, job)
    ranks = rank_pods(job, pods, hostfile)
    assert {p.hostname for p in pods if p.gpus} <= {p.hostname for p in ranks}, "a pod holds GPUs and runs no rank"
    assert len({p.hostname for p in ranks}) == nodes and all(p.gpus == 8 for p in ranks)
    args = job["spec"]["trainer"]["args"]
    if strategy != "ddp":
        assert args[args.index("-np") + 1] == str(nodes * 8)
    if image:
        assert {p.image for p in pods} == {image}
    else:  # the runtime's image on every pod: launcher and nodes agree
        assert len({p.image for p in pods}) == 1
    assert len(pods) == nodes


@pytest.mark.parametrize("name", RENDERINGS)
def test_single_node_runtimes_are_the_launcher_alone(runtimes_by_rendering, name):
    for runtime_name, multi in zip(SINGLE, MPI, strict=True):
        runtime = runtimes_by_rendering[name][runtime_name]
        jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        assert [j["name"] for j in jobs] == ["launcher"] and "dependsOn" not in jobs[0]
        assert jobs[0]["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
        assert runtime["spec"]["mlPolicy"] == runtimes_by_rendering[name][multi]["spec"]["mlPolicy"]
        launcher = runtimes_by_rendering[name][multi]["spec"]["template"]["spec"]["replicatedJobs"][1]
        assert jobs[0]["template"]["spec"] == launcher["template"]["spec"]  # the same pod as the launcher
        # Trainer's MPI plugin refuses a launcher-only runtime for more than one node
        with pytest.raises(Invalid, match="numNodes"):
            render(runtime, trainjob(multi.removeprefix("invfold-"), nodes=2, image=None))


@pytest.mark.parametrize("strategy", ["deepspeed", "horovod"])
def test_a_one_node_job_on_the_several_node_runtime_would_idle_a_gpu_pod(runtimes_by_rendering, strategy):
    """Why the single-node runtimes exist: upstream's shipped runtime, and ours for several nodes,
    start a node pod beside the launcher for numNodes 1, with the job's GPUs."""
    job = trainjob(strategy, nodes=1)
    for runtime in (UPSTREAM_DEEPSPEED, runtimes_by_rendering["chart-gpu"][f"invfold-{strategy}"]):
        patched = {**job, "spec": {**job["spec"], "runtimePatches": []}}
        pods, hostfile = render(runtime, patched)
        assert [p.job for p in pods] == ["node", "launcher"]
        assert all(p.gpus == 8 for p in pods)
        assert len(rank_pods(job, pods, hostfile)) == 1  # the node pod idles with 8 GPUs


@pytest.mark.parametrize("strategy", ["deepspeed", "horovod"])
def test_several_node_mpi_jobs_refuse_an_image_trainer_would_give_the_launcher_only(runtimes_by_rendering, strategy):
    job = trainjob(strategy, nodes=2, image=None)
    job["spec"]["trainer"]["image"] = IMAGE  # what the launcher used to send
    pods, _ = render(runtimes_by_rendering["chart-gpu"][f"invfold-{strategy}"], job)
    assert {p.job: p.image for p in pods}["node"] != IMAGE  # builder.go: the image skips node pods
    with pytest.raises(ConfigError, match="launcher only"):
        trainjob(strategy, nodes=2, image=IMAGE)


def test_runtime_patches_name_only_jobs_of_the_referenced_runtime(runtimes_by_rendering):
    for strategy in ("ddp", "deepspeed", "horovod"):
        for nodes in (1, 2):
            job = trainjob(strategy, nodes, image=None)
            assert job["spec"]["runtimePatches"]  # the workspace volume
            render(runtimes_by_rendering["chart-gpu"][job["spec"]["runtimeRef"]["name"]], job)
    one_node = trainjob("deepspeed", 1, image=None)
    with pytest.raises(Invalid, match="'node' is not in the runtime"):  # what the old patches did
        render(
            runtimes_by_rendering["chart-gpu"]["invfold-deepspeed-single-node"],
            {
                **one_node,
                "spec": {
                    **one_node["spec"],
                    "runtimePatches": trainjob("deepspeed", 2, image=None)["spec"]["runtimePatches"],
                },
            },
        )
