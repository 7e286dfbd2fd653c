"""The real API server's admission (ResourceQuota with its PriorityClass scope, LimitRanger) for
the pods our TrainJobs start, on every rendering that ships the compute quota (the chart with its
default and GPU values, the gpu-prod overlay).

Each rendering's runtimes are installed under `adm-<rendering>-invfold-` and build_trainjob makes
a suspended TrainJob per strategy and node count on them; the real Trainer writes its JobSet (the
runtime's pod templates with the job's resourcesPerNode merged in). The pods of that JobSet (one
per replica and completion, as JobSet's Jobs would make them, same spec and labels) are then
created for real, in a throwaway namespace holding the rendering's two ResourceQuotas: quota
admission happens at creation, and they stay Pending (no node has GPUs, or 8 CPUs). Plain pods,
not the Jobs' own: the MPI runtimes start their launcher only once the node pods are Ready
(`dependsOn`), which a pod asking for GPUs never is here, so JobSet would never make the
launcher's pod. The DDP runtime has no such step: there, unsuspended TrainJobs make their pods
through the real Trainer, JobSet and Job controllers, and the quota's refusal of a third job is
read from what the Job controller reports. Dry runs do not add to a quota's usage, hence real pods.
The PriorityClasses the quota is scoped to are the rendering's (created here when no install has
made them, and deleted again).
"""

from __future__ import annotations

import copy
import json
import re
import uuid

import pytest
from kubernetes.utils import parse_quantity

from invfold.components.launch import Resources
from invfold.components.launch.trainjob import ClusterOptions, build_trainjob, job_name
from invfold.components.train.config import TrainConfig
from tests.support.cluster import prefixed_runtimes
from tests.support.deploy_tools import documents, rendering

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# Renderings with the PriorityClass-scoped compute quota (single-user and cpu-dev install into
# KFP's own namespace, tenant cannot create the class: tests/deploy/test_admission.py).
QUOTA_RENDERINGS = ("chart-default", "chart-gpu", "k8s-gpu-prod")
GPU_RENDERINGS = ("chart-gpu", "k8s-gpu-prod")
STRATEGIES = ("ddp", "deepspeed", "horovod")
# docs/deploy.md: `--nodes 2 --nproc 8 --gpus-per-node 8`.
DOC_NODES, DOC_GPUS = 2, 8
LABEL = "invfold.dev/lane-admission"  # on every object this module makes cluster-wide
QUOTA = "invfold-compute"
COUNTED = ("pods", "requests.cpu", "requests.memory", "limits.memory", "requests.nvidia.com/gpu")
# A KFP 2.17 executor pod as the driver creates it for our steps: no resources and no priority
# class (kubeflow/pipelines backend/src/v2/driver sets resources only from a task's
# set_*_request/limit, which our steps do not call), a launcher init container.
KFP_STEP = {
    "initContainers": [{"name": "kfp-launcher", "image": "registry.example.com/kfp/launcher:2.17.0"}],
    "containers": [{"name": "main", "image": "registry.example.com/invfold/x:1"}],
}
NOTEBOOK = {
    "containers": [
        {
            "name": "notebook",
            "image": "registry.example.com/nb:1",
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
        }
    ]
}
NOWHERE = {"invfold.dev/lane-admission": "no-such-node"}  # step and notebook pods: never placed, never pulled


def gpus_of(name: str) -> int:
    return DOC_GPUS if name in GPU_RENDERINGS else 0


def trainjob(namespace: str, name: str, strategy: str, nodes: int, prefix: str) -> dict:
    """build_trainjob's suspended TrainJob on the runtimes named `prefix...`."""
    cfg = TrainConfig(data="s3://b/p", out="/tmp/o", checkpoint_dir="/tmp/c", strategy=strategy, max_steps=1)
    options = ClusterOptions(
        namespace=namespace, storage_root="s3://b/r", storage_secret="invfold-storage", runtime_prefix=prefix
    )
    gpus = gpus_of(name)
    resources = Resources(nodes=nodes, procs_per_node=gpus or 1, gpus_per_node=gpus)
    job = build_trainjob(job_name(strategy, name), cfg, resources, options, "s3://b/r/x", environ={})
    job["spec"]["suspend"] = True
    return job


def quota_docs(name: str, namespace: str) -> list[dict]:
    """The rendering's ResourceQuotas, moved into `namespace`."""
    out = []
    for doc in documents(rendering(name)):
        if doc["kind"] == "ResourceQuota":
            doc = copy.deepcopy(doc)
            doc["metadata"]["namespace"] = namespace
            out.append(doc)
    assert QUOTA in {d["metadata"]["name"] for d in out}, f"{name} ships no {QUOTA}"
    return out


@pytest.fixture(scope="module")
def priority_classes(cluster):
    """The renderings' PriorityClasses (all the same); made here only where no install made them."""
    docs = {d["metadata"]["name"]: d for d in documents(rendering("chart-default")) if d["kind"] == "PriorityClass"}
    made = []
    for name, doc in docs.items():
        found = cluster.kubectl("get", "priorityclass", name, "-o", "json", check=False)
        if found.returncode == 0:
            have = json.loads(found.stdout)
            assert (have["value"], have["preemptionPolicy"]) == (doc["value"], doc["preemptionPolicy"]), name
            continue
        cluster.kubectl("create", "-f", "-", input=json.dumps(doc))
        made.append(name)
    yield docs
    for name in made:
        cluster.kubectl("delete", "priorityclass", name, "--ignore-not-found", check=False)


@pytest.fixture(scope="module")
def jobsets(cluster, priority_classes):
    """{(rendering, strategy, nodes): the JobSet the real Trainer made of build_trainjob's
    suspended TrainJob}, and each rendering's runtime prefix."""
    cluster.wait_for_runtimes_gone(LABEL)
    namespace = cluster.namespace(f"invfold-admission-jobs-{uuid.uuid4().hex[:6]}")
    docs, jobs, prefixes = [], {}, {}
    for name in QUOTA_RENDERINGS:
        prefix = prefixes[name] = f"adm-{name}-invfold-"
        docs += prefixed_runtimes(documents(rendering(name)), prefix, LABEL, name)
        for strategy in STRATEGIES:
            for nodes in (1, DOC_NODES):
                jobs[(name, strategy, nodes)] = trainjob(namespace, name, strategy, nodes, prefix)
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": docs})
    cluster.kubectl(
        "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(jobs.values())})
    )

    def made():
        items = cluster.get("jobsets", "-n", namespace)["items"]
        return len(items) == len(jobs) and {s["metadata"]["name"]: s for s in items}

    found = cluster.wait_for(f"the JobSets of {len(jobs)} TrainJobs", made, 300, interval=3)
    yield {key: found[job["metadata"]["name"]] for key, job in jobs.items()}, prefixes
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    cluster.kubectl("delete", "clustertrainingruntimes", "-l", LABEL, "--wait=false", check=False)


def job_pods(jobset: dict, namespace: str, copy_name: str) -> list[dict]:
    """The pods of a JobSet as its Jobs would make them: replicas x parallelism per replicated
    job, each with the Job template's spec and labels (named `<copy>-<job>-<replica>-<index>`)."""
    pods = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        spec = rjob["template"]["spec"]
        template = spec["template"]
        for r in range(rjob.get("replicas", 1)):
            for p in range(spec.get("parallelism", 1)):
                pods.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": f"{copy_name}-{rjob['name']}-{r}-{p}",
                            "namespace": namespace,
                            "labels": {**template.get("metadata", {}).get("labels", {}), LABEL: copy_name},
                        },
                        "spec": copy.deepcopy(template["spec"]),
                    }
                )
    return pods


def plain_pod(name: str, namespace: str, spec: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {**copy.deepcopy(spec), "nodeSelector": NOWHERE, "restartPolicy": "Never"},
    }


def create(cluster, pods: list[dict]):
    return cluster.kubectl(
        "create", "-o", "json", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}),
        check=False,
    )  # fmt: skip


def objects(text: str) -> list[dict]:
    """The objects `kubectl create -o json` printed (one JSON document after another)."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        obj, end = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        out += obj.get("items", [obj]) if obj.get("kind") == "List" else [obj]
        at = end
    return out


def used(cluster, namespace: str) -> dict[str, float]:
    status = cluster.get("resourcequota", QUOTA, "-n", namespace)["status"]
    return {key: float(parse_quantity(status["used"].get(key, "0"))) for key in COUNTED}


def usage(pods: list[dict]) -> dict[str, float]:
    """What the quota should count for these pods (no init containers on trainer pods)."""
    out = dict.fromkeys(COUNTED, 0.0)
    for pod in pods:
        assert not pod["spec"].get("initContainers"), pod["metadata"]["name"]
        out["pods"] += 1
        for c in pod["spec"]["containers"]:
            res = c.get("resources", {})
            for kind in ("requests", "limits"):
                for resource, value in res.get(kind, {}).items():
                    if f"{kind}.{resource}" in out:
                        out[f"{kind}.{resource}"] += float(parse_quantity(value))
    return out


@pytest.fixture(scope="module")
def quota_namespace(cluster, priority_classes):
    """A factory: a fresh namespace holding a rendering's ResourceQuotas, counted by the quota
    controller (before that, quota admission refuses every pod); all deleted at the end."""
    made = []

    def make(name: str) -> str:
        namespace = cluster.namespace(f"invfold-admission-{uuid.uuid4().hex[:6]}")
        made.append(namespace)
        cluster.apply({"apiVersion": "v1", "kind": "List", "items": quota_docs(name, namespace)})
        cluster.wait_for(
            f"quota {QUOTA} counted in {namespace}",
            lambda: cluster.get("resourcequota", QUOTA, "-n", namespace).get("status", {}).get("used"),
            60,
            interval=0.5,
        )
        return namespace

    yield make
    for namespace in made:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", QUOTA_RENDERINGS)
def test_the_compute_quota_admits_and_counts_every_trainer_pod(cluster, jobsets, quota_namespace, name, strategy):
    """Every pod of a 1- and a 2-node job of the strategy (each runtime: the MPI ones with and
    without `-single-node`; 8 GPUs per node on the GPU renderings) is admitted, and the quota's
    used grows by exactly its requests and limits: it is in the quota's PriorityClass scope (and
    sets the memory limit the quota's limits.memory needs)."""
    found, _ = jobsets
    namespace = quota_namespace(name)
    before = used(cluster, namespace)
    assert not any(before.values()), before
    for nodes in (1, DOC_NODES):
        pods = job_pods(found[(name, strategy, nodes)], namespace, f"{strategy}-{nodes}")
        out = create(cluster, pods)
        assert out.returncode == 0, f"{name} {strategy} x{nodes}: {out.stderr}"
        made = objects(out.stdout)
        assert len(made) == len(pods) == nodes, [p["metadata"]["name"] for p in made]
        assert {p["spec"].get("priorityClassName") for p in made} == {"invfold-training"}
        after = used(cluster, namespace)
        grew = {key: after[key] - before[key] for key in COUNTED}
        assert grew == usage(made), f"{name} {strategy} x{nodes}: counted {grew}, pods ask {usage(made)}"
        assert grew["pods"] == nodes and grew["requests.nvidia.com/gpu"] == nodes * gpus_of(name)
        before = after


@pytest.mark.parametrize("name", QUOTA_RENDERINGS)
def test_the_compute_quota_does_not_count_kfp_step_pods_or_notebooks(cluster, quota_namespace, name):
    """A quota on the whole profile namespace capped its notebooks. A KFP step pod
    (no resources, no limits.memory) and a notebook are created beside the quota and its used
    stays as it was (zero)."""
    namespace = quota_namespace(name)
    pods = [plain_pod("kfp-step", namespace, KFP_STEP), plain_pod("notebook", namespace, NOTEBOOK)]
    out = create(cluster, pods)
    assert out.returncode == 0, f"{name}: {out.stderr}"
    assert len(cluster.get("pods", "-n", namespace)["items"]) == 2
    # Quota admission charges a pod in scope as it admits it (the trainer test sees that at once).
    assert not any(used(cluster, namespace).values()), used(cluster, namespace)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", GPU_RENDERINGS)
def test_the_quota_admits_two_jobs_of_the_documented_gpu_size_and_refuses_a_third(
    cluster, jobsets, quota_namespace, name, strategy
):
    """docs/deploy.md's GPU size (2 nodes x 8 GPUs): two jobs at once, while their train steps'
    pods (KFP pods, outside the quota's scope) run beside them; a third job's pods are refused."""
    found, _ = jobsets
    namespace = quota_namespace(name)
    jobset = found[(name, strategy, DOC_NODES)]
    first = job_pods(jobset, namespace, "a") + job_pods(jobset, namespace, "b")
    steps = [plain_pod(f"step-{i}", namespace, KFP_STEP) for i in ("a", "b")]
    out = create(cluster, first + steps)
    assert out.returncode == 0, f"{name} {strategy}: {out.stderr}"
    hard = cluster.get("resourcequota", QUOTA, "-n", namespace)["status"]["hard"]
    assert used(cluster, namespace)["requests.nvidia.com/gpu"] == 2 * DOC_NODES * DOC_GPUS
    third = job_pods(jobset, namespace, "c")
    refused = create(cluster, third)
    assert refused.returncode != 0, f"{name} {strategy}: a third job fits in {hard}"
    assert refused.stderr.count(f"exceeded quota: {QUOTA}") == len(third), refused.stderr
    assert refusal(refused.stderr)["requests.nvidia.com/gpu"] == str(DOC_GPUS), refused.stderr
    names = {p["metadata"]["name"] for p in cluster.get("pods", "-n", namespace)["items"]}
    assert names == {p["metadata"]["name"] for p in first + steps}


def refusal(message: str) -> dict[str, str]:
    """What a quota refusal says the pod requested, for the resources the quota has no room for
    (`exceeded quota: Q, requested: k=v,..., used: ..., limited: ...`, in ResourceQuota admission's
    words: kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota)."""
    found = re.search(rf"exceeded quota: {QUOTA}, requested: (\S+), used: \S+, limited: \S+", message)
    assert found, message
    return dict(pair.split("=", 1) for pair in found[1].split(","))


def job_events(cluster, namespace: str) -> list[dict]:
    return [e for e in cluster.get("events", "-n", namespace)["items"] if e["involvedObject"]["kind"] == "Job"]


@pytest.mark.parametrize("name", GPU_RENDERINGS)
def test_trainer_starts_two_ddp_jobs_of_the_documented_size_and_the_quota_stops_a_third(
    cluster, jobsets, quota_namespace, name
):
    """The same through the real controllers: three suspended TrainJobs of build_trainjob (2
    nodes x 8 GPUs on the rendering's DDP runtime) are resumed one after the other; Trainer,
    JobSet and the Job controller create the first two jobs' pods, and the Job controller reports
    the quota's refusal of the third's (its pods never appear)."""
    _, prefixes = jobsets
    namespace = quota_namespace(name)
    jobs = [trainjob(namespace, name, "ddp", DOC_NODES, prefixes[name]) for _ in range(3)]
    cluster.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs}))

    def pods_of(job: dict) -> list[dict]:
        selector = f"jobset.sigs.k8s.io/jobset-name={job['metadata']['name']}"
        return cluster.get("pods", "-n", namespace, "-l", selector)["items"]

    def resume(job: dict) -> None:
        cluster.kubectl(
            "patch", "trainjob", job["metadata"]["name"], "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"suspend": False}}),
        )  # fmt: skip

    for job in jobs[:2]:
        resume(job)
        cluster.wait_for(f"{job['metadata']['name']}'s pods", lambda job=job: len(pods_of(job)) == DOC_NODES, 120)
    assert used(cluster, namespace)["requests.nvidia.com/gpu"] == 2 * DOC_NODES * DOC_GPUS
    resume(jobs[2])
    third = jobs[2]["metadata"]["name"]

    def refused():
        return [
            e
            for e in job_events(cluster, namespace)
            if e["involvedObject"]["name"].startswith(f"{third}-")
            and e["reason"] == "FailedCreate"
            and f"exceeded quota: {QUOTA}" in e["message"]
        ]

    events = cluster.wait_for(
        f"the Job controller's quota refusal for {third}", refused, 120, explain=lambda: job_events(cluster, namespace)
    )
    assert refusal(events[0]["message"])["requests.nvidia.com/gpu"] == str(DOC_GPUS), events[0]["message"]
    assert not pods_of(jobs[2])
    assert all(len(pods_of(job)) == DOC_NODES for job in jobs[:2])


def test_a_default_cpu_limit_below_a_trainers_request_is_refused(cluster, priority_classes):
    """The LimitRange the chart once shipped (default CPU limit 2 for every container) under the
    GPU values' trainer (8 CPUs requested, no CPU limit): the API server gives the container a
    limit below its request and refuses it; the same pod is admitted where no LimitRange is."""
    namespace = cluster.namespace(f"invfold-admission-lr-{uuid.uuid4().hex[:6]}")
    try:
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": {"name": "old-defaults", "namespace": namespace},
                "spec": {"limits": [{"type": "Container", "default": {"cpu": "2", "memory": "4Gi"}}]},
            }
        )
        (runtime,) = [
            d
            for d in documents(rendering("chart-gpu"))
            if d["kind"] == "ClusterTrainingRuntime" and d["metadata"]["name"] == "invfold-ddp"
        ]
        template = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        assert template["containers"][0]["resources"]["requests"]["cpu"] == "8"
        spec = copy.deepcopy(template)
        for where, expect in ((namespace, False), ("default", True)):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": where}, "spec": spec}
            out = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
            assert (out.returncode == 0) is expect, (where, out.stderr)
            if not expect:
                assert "must be less than or equal to cpu limit of 2" in out.stderr, out.stderr
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
