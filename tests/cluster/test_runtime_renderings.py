"""What the real Kubeflow Trainer v2.3 makes of our TrainJobs on every shipped rendering of the
runtimes: the chart with its default and GPU values and each kustomize overlay (k8s/).

Each rendering's runtimes are installed under the rendering's name as a prefix (the chart's
installed runtimes keep theirs; the tenant overlay's namespaced TrainingRuntimes go into this
module's namespace), and build_trainjob, told that prefix (`runtime_prefix`, `runtime_kind`),
makes a suspended TrainJob per strategy and node count, with 8 GPUs per node. A suspended
TrainJob gets its JobSet (and, for MPI, its hostfile ConfigMap) from the real Trainer controller
while no pod starts, so jobs of 4 nodes and 8 GPUs fit a CPU-only node. The assertions are on
what the controller wrote: pods per replicated job, GPUs per pod, image, command and args on each
container, the hostfile; and on what Trainer's admission webhook answers. A pod's host name is
JobSet's `<jobset>-<replicated job>-<job index>-<pod index>.<subdomain>` (the hostfile's names).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest

from invfold.components.launch import Resources
from invfold.components.launch.trainjob import ClusterOptions, build_trainjob, job_name
from invfold.components.train.config import TrainConfig
from tests.support.cluster import prefixed_runtimes, upstream_runtime
from tests.support.deploy_tools import RENDERINGS, documents, rendering

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

GPUS = 8
NODES = (1, 2, 4)
STRATEGIES = ("ddp", "deepspeed", "horovod")
IMAGE = "registry.example.com/invfold/x:1"
LABEL = "invfold.dev/lane-rendering"  # on every runtime this module installs (for clean-up)
UPSTREAM = "upstream-"  # the prefix of Trainer's own deepspeed-distributed runtime here


@dataclass(frozen=True)
class Made:
    """A TrainJob we created and what the real controller made of it."""

    job: dict
    jobset: dict
    hostfile: list[str] | None  # the MPI hostfile ConfigMap's lines (None: no MPI)

    def replicated(self) -> dict[str, dict]:
        """Per replicated job: its pod count, host names and `node` container."""
        subdomain = self.jobset["spec"].get("network", {}).get("subdomain") or self.jobset["metadata"]["name"]
        out = {}
        for rjob in self.jobset["spec"]["replicatedJobs"]:
            spec = rjob["template"]["spec"]
            replicas, parallelism = rjob.get("replicas", 1), spec.get("parallelism", 1)
            out[rjob["name"]] = {
                "hosts": [
                    f"{self.jobset['metadata']['name']}-{rjob['name']}-{r}-{p}.{subdomain}"
                    for r in range(replicas)
                    for p in range(parallelism)
                ],
                "container": next(c for c in spec["template"]["spec"]["containers"] if c["name"] == "node"),
                "ancestor": rjob["template"]
                .get("metadata", {})
                .get("labels", {})
                .get("trainer.kubeflow.org/trainjob-ancestor-step")
                == "trainer",
            }
        return out


def gpus(container: dict) -> int:
    return int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))


def trainjob(namespace: str, strategy: str, nodes: int, prefix: str, kind: str, image: str | None) -> dict:
    """build_trainjob's suspended TrainJob of `nodes` x 8 GPUs (the workspace claim patched into
    every replicated job, the store's keys from a Secret), on the runtimes named `prefix...`."""
    cfg = TrainConfig(data="s3://b/p", out="/tmp/o", checkpoint_dir="/workspace/c", strategy=strategy, max_steps=1)
    options = ClusterOptions(
        namespace=namespace,
        storage_root="s3://b/r",
        storage_secret="invfold-storage",
        storage_endpoint="http://seaweedfs.kubeflow:8333",
        image=image,
        workspace_pvc="invfold-workspace",
        runtime_prefix=prefix,
        runtime_kind=kind,
    )
    resources = Resources(nodes=nodes, procs_per_node=GPUS, gpus_per_node=GPUS)
    job = build_trainjob(job_name(strategy, "renderings"), cfg, resources, options, "s3://b/r/x", environ={})
    job["spec"]["suspend"] = True
    return job


def image_for(strategy: str, nodes: int) -> str | None:
    """A custom image wherever build_trainjob allows one (several-node MPI jobs refuse it)."""
    return IMAGE if strategy == "ddp" or nodes == 1 else None


@pytest.fixture(scope="module")
def installed(cluster):
    """{rendering: (runtime prefix, runtime kind, {name: runtime})} installed, and the namespace."""
    cluster.wait_for_runtimes_gone(LABEL)
    namespace = cluster.namespace(f"invfold-renderings-{uuid.uuid4().hex[:6]}")
    out, docs = {}, []
    for name in RENDERINGS:
        prefix = f"{name}-invfold-"
        runtimes = prefixed_runtimes(documents(rendering(name)), prefix, LABEL, name, namespace)
        assert {d["kind"] for d in runtimes} in ({"ClusterTrainingRuntime"}, {"TrainingRuntime"}), name
        docs += runtimes
        out[name] = (prefix, runtimes[0]["kind"], {d["metadata"]["name"]: d for d in runtimes})
    upstream = upstream_runtime("deepspeed_distributed.yaml")
    upstream["metadata"]["name"] = UPSTREAM + upstream["metadata"]["name"]
    upstream["metadata"].setdefault("labels", {})[LABEL] = "upstream"
    docs.append(upstream)
    # Trainer's runtime webhook answers for each (the apply fails on a refusal).
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": docs})
    yield out, namespace
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    cluster.kubectl("delete", "clustertrainingruntimes", "-l", LABEL, "--wait=false", check=False)


def pods_case(rendered: str, strategy: str, nodes: int) -> str:
    return f"{rendered}/{strategy}/{nodes}"


ONE_NODE_ON_SEVERAL = (("chart-gpu-invfold-deepspeed", "deepspeed"), ("chart-gpu-invfold-horovod", "horovod"))
ONE_NODE_ON_UPSTREAM = (f"{UPSTREAM}deepspeed-distributed", "deepspeed")


@pytest.fixture(scope="module")
def made(cluster, installed) -> dict[str, Made]:
    """Every TrainJob of this module, created at once (one request), and what the controller
    made of each."""
    out, namespace = installed
    jobs = {}
    for name, (prefix, kind, _) in out.items():
        for strategy in STRATEGIES:
            for nodes in NODES:
                image = image_for(strategy, nodes)
                jobs[pods_case(name, strategy, nodes)] = trainjob(namespace, strategy, nodes, prefix, kind, image)
    prefix, kind, _ = out["chart-gpu"]
    for runtime, strategy in (*ONE_NODE_ON_SEVERAL, ONE_NODE_ON_UPSTREAM):
        job = trainjob(namespace, strategy, 1, prefix, kind, IMAGE)
        job["spec"]["runtimeRef"]["name"] = runtime
        jobs[f"one-node-on/{runtime}"] = job
    for strategy in ("deepspeed", "horovod"):
        # Several nodes with a TrainJob image (what build_trainjob refuses to write).
        job = trainjob(namespace, strategy, 2, prefix, kind, None)
        job["spec"]["trainer"]["image"] = IMAGE
        jobs[f"image/{strategy}"] = job
    # One node with the runtime patches of a two-node job (what the launcher wrote before the
    # launcher-only runtimes: they name the `node` job, which that runtime lacks).
    job = trainjob(namespace, "deepspeed", 1, prefix, kind, None)
    job["spec"]["runtimePatches"] = trainjob(namespace, "deepspeed", 2, prefix, kind, None)["spec"]["runtimePatches"]
    jobs["old-patches"] = job
    listed = {"apiVersion": "v1", "kind": "List", "items": list(jobs.values())}
    cluster.kubectl("create", "-f", "-", input=json.dumps(listed))
    key_of = {job["metadata"]["name"]: key for key, job in jobs.items()}
    mpi = {name for name, key in key_of.items() if jobs[key]["spec"]["trainer"]["command"] == ["mpirun"]}

    def jobsets():
        items = cluster.get("jobsets", "-n", namespace)["items"]
        return len(items) == len(jobs) and items

    def hostfiles():
        items = cluster.get("configmaps", "-n", namespace)["items"]
        got = {c["metadata"]["name"].removesuffix("-mpi-hostfile"): c.get("data", {}).get("hostfile") for c in items}
        return mpi <= {name for name, text in got.items() if text} and got

    found = cluster.wait_for(f"the JobSets of {len(jobs)} TrainJobs", jobsets, 300, interval=3)
    lines = cluster.wait_for("the MPI hostfiles", hostfiles, 120, interval=3)
    return {
        key_of[s["metadata"]["name"]]: Made(
            jobs[key_of[s["metadata"]["name"]]],
            s,
            lines[s["metadata"]["name"]].splitlines() if s["metadata"]["name"] in mpi else None,
        )
        for s in found
    }


def rank_hosts(made: Made, jobs: dict[str, dict]) -> set[str]:
    """The pods that run ranks: torchrun starts them on every pod; mpirun on the hostfile's hosts
    (`slots` each), or on the launcher alone when it is given `--host localhost:N`."""
    args = next(j for j in jobs.values() if j["ancestor"])["container"].get("args", [])
    if made.job["spec"]["trainer"]["command"] == ["torchrun"]:
        return {h for j in jobs.values() for h in j["hosts"]}
    if "--hostfile" in args:
        assert all(line.split()[1] == f"slots={GPUS}" for line in made.hostfile), made.hostfile
        return {line.split()[0] for line in made.hostfile}
    assert args[args.index("--host") + 1] == f"localhost:{GPUS}", args
    return {h for j in jobs.values() if j["ancestor"] for h in j["hosts"]}


def runtime_of(installed, made: Made) -> dict:
    out, _ = installed
    name = made.job["spec"]["runtimeRef"]["name"]
    return next(runtimes[name] for _, _, runtimes in out.values() if name in runtimes)


@pytest.mark.parametrize("nodes", NODES)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("rendered", RENDERINGS)
def test_every_pod_trainer_makes_holds_the_jobs_gpus_and_runs_ranks_on_its_image(
    installed, made, rendered, strategy, nodes
):
    """One pod per node, each with the job's 8 GPUs (the runtime's CPU and memory kept beside
    them) and each running ranks (a GPU pod without a rank idles); the TrainJob's command and args
    on the ancestor job's container only (MPI node pods keep the runtime's sshd), its env on every
    pod; the TrainJob's image on every pod where build_trainjob sets one, else one image (the
    runtime's) on launcher and nodes alike; and no replicated job beyond the runtime's (the
    runtime patches name only its jobs)."""
    got = made[pods_case(rendered, strategy, nodes)]
    trainer, jobs = got.job["spec"]["trainer"], got.replicated()
    runtime = runtime_of(installed, got)
    runtime_jobs = {j["name"]: j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    assert list(jobs) == list(runtime_jobs)
    hosts = [h for j in jobs.values() for h in j["hosts"]]
    assert len(hosts) == nodes, {name: j["hosts"] for name, j in jobs.items()}
    assert {name: gpus(j["container"]) for name, j in jobs.items()} == dict.fromkeys(jobs, GPUS)
    assert rank_hosts(got, jobs) == set(hosts), "a pod holds GPUs and runs no rank"
    (ancestor,) = [j["container"] for j in jobs.values() if j["ancestor"]]
    assert ancestor["command"] == trainer["command"] and ancestor["args"] == trainer["args"]
    for name, j in jobs.items():  # the store's endpoint and keys: every pod (MPI nodes too)
        assert {e["name"] for e in trainer["env"]} <= {e["name"] for e in j["container"]["env"]}, name
    if strategy != "ddp":
        assert ancestor["args"][ancestor["args"].index("-np") + 1] == str(nodes * GPUS)
    for name, j in jobs.items():
        shipped = runtime_jobs[name]["template"]["spec"]["template"]["spec"]["containers"][0]
        if not j["ancestor"]:
            assert j["container"]["command"] == shipped["command"] and "args" not in j["container"], name
        # resourcesPerNode is merged in: the runtime's CPU and memory stay (the GPU overlay's too)
        for kind, values in shipped.get("resources", {}).items():
            kept = {k: v for k, v in values.items() if k != "nvidia.com/gpu"}
            assert kept.items() <= j["container"]["resources"][kind].items(), (name, kind)
    images = {j["container"]["image"] for j in jobs.values()}
    assert images == ({IMAGE} if trainer.get("image") else images) and len(images) == 1, images


@pytest.mark.parametrize("strategy", ["deepspeed", "horovod"])
@pytest.mark.parametrize("rendered", RENDERINGS)
def test_trainers_webhook_refuses_several_nodes_on_a_launcher_only_runtime(cluster, installed, rendered, strategy):
    """Trainer's MPI plugin (pkg/runtime/framework/plugins/mpi/mpi.go `Validate`) accepts a
    runtime without a `node` job for one node only: the one-node runtimes cannot be misused."""
    out, namespace = installed
    prefix, kind, _ = out[rendered]
    job = trainjob(namespace, strategy, 2, prefix, kind, None)
    job["spec"]["runtimeRef"]["name"] += "-single-node"
    del job["spec"]["runtimePatches"]  # they name `node` (see the old-patches test below)
    refused = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(job), check=False)
    assert refused.returncode != 0, refused.stdout
    assert "spec.trainer.numNodes" in refused.stderr and "runLauncherAsNode" in refused.stderr, refused.stderr


@pytest.mark.parametrize(("runtime", "strategy"), [*ONE_NODE_ON_SEVERAL, ONE_NODE_ON_UPSTREAM])
def test_a_one_node_job_on_a_several_node_runtime_would_idle_a_gpu_pod(made, runtime, strategy):
    """Why the launcher-only runtimes exist: on Trainer's own deepspeed-distributed runtime (its
    module's manifests/base/runtimes/deepspeed_distributed.yaml) and on ours for several nodes, a
    one-node job gets a node pod beside the launcher, with the job's GPUs, while mpirun runs every
    rank on the launcher."""
    got = made[f"one-node-on/{runtime}"]
    jobs = got.replicated()
    assert list(jobs) == ["node", "launcher"]
    assert [len(j["hosts"]) for j in jobs.values()] == [1, 1]
    assert [gpus(j["container"]) for j in jobs.values()] == [GPUS, GPUS]
    assert rank_hosts(got, jobs) == set(jobs["launcher"]["hosts"])  # the node pod idles with 8 GPUs


@pytest.mark.parametrize("strategy", ["deepspeed", "horovod"])
def test_trainer_gives_a_trainjob_image_to_the_mpi_launcher_only(made, strategy):
    """Why build_trainjob refuses an image for several-node MPI jobs
    (tests/launch/test_mpi_runtimes.py): Trainer puts it on the launcher, and the node pods,
    which run ranks too, keep the runtime's image."""
    got = made[f"image/{strategy}"]
    jobs = got.replicated()
    assert jobs["launcher"]["container"]["image"] == IMAGE
    assert jobs["node"]["container"]["image"] != IMAGE
    assert set(jobs["node"]["hosts"]) <= rank_hosts(got, jobs)


def test_runtime_patches_naming_a_job_the_runtime_lacks_add_a_job_with_no_image(made):
    """Trainer v2.3 merges a TrainJob's runtime patches into the runtime before its webhook checks
    them (pkg/runtime/core/trainingruntime.go `newRuntimeInfo`, then jobset.go `Validate`), so a
    patch naming a job the runtime lacks is never refused: the JobSet gains that job, with the
    patch's container only (no image, the job's GPUs), and the MPI plugin then counts it as a
    node job. So build_trainjob's patches must name exactly the runtime's jobs
    (tests/launch/test_mpi_runtimes.py checks them against every rendering)."""
    got = made["old-patches"]
    jobs = got.replicated()
    assert got.job["spec"]["runtimeRef"]["name"].endswith("-single-node")
    assert set(jobs) == {"launcher", "node"}
    assert "image" not in jobs["node"]["container"] and gpus(jobs["node"]["container"]) == GPUS
