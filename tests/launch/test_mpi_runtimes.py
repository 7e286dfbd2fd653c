"""Our MPI runtimes as we ship them, and what the launcher asks of them: unit tests of our
renderings (the chart with default and GPU values, every overlay) and of build_trainjob.

What the real Kubeflow Trainer v2.3 makes of these runtimes and jobs (pods per node, GPUs per pod,
which pods run ranks, where a TrainJob's image goes, what its webhook refuses) is checked on the
cluster of `make cluster-up` for every rendering: tests/cluster/test_runtime_renderings.py.

Upstream facts (kubeflow/trainer v2.3):
- manifests/base/runtimes/deepspeed_distributed.yaml lists the `node` replicated job first and
  gives `launcher` `dependsOn: [{name: node, status: Ready}]` (mpirun starts once every sshd is up);
  runLauncherAsNode: true, the launcher carries `trainjob-ancestor-step: trainer`.
- pkg/runtime/framework/plugins/mpi/mpi.go: with runLauncherAsNode the node count is
  max(numNodes - 1, 1) (a one-node job still starts one node pod), and the hostfile lists the
  endpoints of the pod sets in the runtime's order (node pods first). OpenMPI still starts rank 0
  on the launcher, the host mpirun runs on (tests/cluster/test_trainjob.py saw it on a real cluster).
  Without a node job, Validate accepts numNodes 1 only: one-node jobs use the launcher-only
  `-single-node` runtimes."""

from __future__ import annotations

import pytest

from invfold.components.launch import Resources
from invfold.components.launch.trainjob import ClusterOptions, build_trainjob, job_name, replicated_jobs, runtime_name
from invfold.components.train.config import TrainConfig
from invfold.components.train.strategies import STRATEGIES
from invfold.errors import ConfigError
from tests.support.deploy_tools import RENDERINGS, documents, rendering

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

# the strategies whose jobs mpirun starts, and their runtimes
MPI_STRATEGIES = tuple(name for name, spec in STRATEGIES.items() if spec.cluster_launcher == "mpirun")
MPI = tuple(runtime_name(name) for name in MPI_STRATEGIES)
SINGLE = tuple(runtime_name(name, nodes=1) for name in MPI_STRATEGIES)
IMAGE = "registry.example.com/invfold/x:1"


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
    assert len(runtimes) == len(MPI)
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


@pytest.mark.parametrize("strategy", MPI_STRATEGIES)
def test_several_nodes_meet_at_the_launcher_where_rank_0_runs(strategy):
    job = trainjob(strategy, nodes=2, image=None)
    name, args = job["metadata"]["name"], job["spec"]["trainer"]["args"]
    assert f"MASTER_ADDR={name}-launcher-0-0.{name}" in args
    assert args[args.index("--hostfile") + 1] == "/etc/mpi/hostfile"


@pytest.mark.parametrize("strategy", MPI_STRATEGIES)
def test_one_node_runs_every_rank_on_the_launcher(strategy):
    job = trainjob(strategy, nodes=1)
    args = job["spec"]["trainer"]["args"]
    assert "--hostfile" not in args and args[args.index("--host") + 1] == "localhost:8"
    assert "MASTER_ADDR=127.0.0.1" in args


@pytest.mark.parametrize("name", RENDERINGS)
def test_single_node_runtimes_are_the_launcher_alone(runtimes_by_rendering, name):
    for single, multi in zip(SINGLE, MPI, strict=True):
        runtime = runtimes_by_rendering[name][single]
        jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        assert [j["name"] for j in jobs] == ["launcher"] and "dependsOn" not in jobs[0]
        assert jobs[0]["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
        assert runtime["spec"]["mlPolicy"] == runtimes_by_rendering[name][multi]["spec"]["mlPolicy"]
        launcher = runtimes_by_rendering[name][multi]["spec"]["template"]["spec"]["replicatedJobs"][1]
        assert jobs[0]["template"]["spec"] == launcher["template"]["spec"]  # the same pod as the launcher


@pytest.mark.parametrize("strategy", MPI_STRATEGIES)
def test_several_node_mpi_jobs_refuse_an_image_trainer_would_give_the_launcher_only(strategy):
    """The real Trainer gives trainer.image to the launcher only
    (tests/cluster/test_runtime_renderings.py::test_trainer_gives_a_trainjob_image_to_the_mpi_launcher_only)."""
    with pytest.raises(ConfigError, match="launcher only"):
        trainjob(strategy, nodes=2, image=IMAGE)


@pytest.mark.parametrize("name", RENDERINGS)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_runtime_patches_name_exactly_the_jobs_of_the_referenced_runtime(runtimes_by_rendering, name, strategy, nodes):
    """Trainer v2.3 turns a patch naming a job its runtime lacks into a job of its own, with no
    image, and refuses nothing (tests/cluster/test_runtime_renderings.py, the old-patches test):
    the patches must name the referenced runtime's jobs, and only containers they have."""
    job = trainjob(strategy, nodes, image=None)
    runtime = runtimes_by_rendering[name][job["spec"]["runtimeRef"]["name"]]
    (patch,) = job["spec"]["runtimePatches"]  # the workspace volume
    patched = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    shipped = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert [j["name"] for j in patched] == [j["name"] for j in shipped] == list(replicated_jobs(strategy, nodes))
    for job_patch, job_shipped in zip(patched, shipped, strict=True):
        shipped_containers = {c["name"] for c in job_shipped["template"]["spec"]["template"]["spec"]["containers"]}
        for container in job_patch["template"]["spec"]["template"]["spec"].get("containers", []):
            assert container["name"] in shipped_containers, (job_patch["name"], container["name"])
