"""Every rendered pod template (chart and every overlay), the pods KFP creates for the steps, and
one TrainJob of the documented GPU size go through LimitRange defaulting and the quota as the API
server applies them (tests/deploy/admission.py, with the upstream rules cited there)."""

from __future__ import annotations

import copy

import pytest

from tests.deploy.admission import Rejected, admit_container, admit_pod, quota_admits
from tests.deploy.tools import documents, helm_template

# k8s-cpu-dev installs into KFP's own namespace (standalone KFP), where no LimitRange belongs.
RENDERINGS = ("chart-default", "chart-gpu", "k8s-gpu-prod", "k8s-tenant")
# docs/deploy.md: `--nodes 2 --nproc 8 --gpus-per-node 8`.
DOC_NODES, DOC_GPUS = 2, 8


def pod_templates(objs: list[dict]) -> dict[str, dict]:
    out = {}
    for o in objs:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            out[name] = o["spec"]["template"]["spec"]
        elif o["kind"] == "Pod":
            out[name] = o["spec"]
        elif o["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime"):
            for rj in o["spec"]["template"]["spec"]["replicatedJobs"]:
                out[f"{name}/{rj['name']}"] = rj["template"]["spec"]["template"]["spec"]
    return out


# A KFP 2.17 executor pod as the driver creates it for our steps: no resources set by the
# pipeline (kubeflow/pipelines backend/src/v2/driver: resources only from the task's
# set_*_request/limit, which our steps do not call).
KFP_STEP = {"containers": [{"name": "main", "resources": {}}], "initContainers": [{"name": "kfp-launcher"}]}


@pytest.mark.parametrize("name", RENDERINGS)
def test_every_pod_template_passes_limitrange_defaulting(rendered, name):
    objs = documents(rendered[name])
    limit_ranges = [o for o in objs if o["kind"] == "LimitRange"]
    assert limit_ranges, f"{name}: no LimitRange rendered"
    templates = pod_templates(objs)
    assert templates
    for where, spec in {**templates, "KFP step pod": KFP_STEP}.items():
        spec = copy.deepcopy(spec)
        for c in spec.get("initContainers", []):
            c.setdefault("resources", {})
        try:
            admitted = admit_pod(spec, limit_ranges)
        except Rejected as err:
            pytest.fail(f"{name}: {where} is rejected: {err}")
        for c in admitted["containers"]:
            assert "memory" in c["resources"]["limits"], f"{name}: {where}/{c['name']} has no memory limit"


def test_the_old_default_cpu_limit_is_caught():
    """A default CPU limit of 2 under a trainer's request of 8 is what the API server refused."""
    old = [{"spec": {"limits": [{"type": "Container", "default": {"cpu": "2", "memory": "4Gi"}}]}}]
    trainer = {"name": "node", "resources": {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"memory": "128Gi"}}}
    with pytest.raises(Rejected, match="cpu limit 2"):
        admit_container(trainer, old)


def one_gpu_job(objs: list[dict], strategy: str) -> list[dict]:
    """The pods of one TrainJob of the documented size, as Trainer creates them: its
    resourcesPerNode (GPUs) on the trainer pods, the runtime's template otherwise; MPI runtimes
    run the launcher as a node, so numNodes=2 is one launcher and one node pod
    (kubeflow/trainer pkg/runtime/framework/plugins/mpi/mpi.go: node count = numNodes - 1)."""
    (runtime,) = [
        o for o in objs if o["kind"].endswith("TrainingRuntime") and o["metadata"]["name"] == f"invfold-{strategy}"
    ]
    pods = []
    for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        spec = copy.deepcopy(rj["template"]["spec"]["template"]["spec"])
        count = DOC_NODES if strategy == "ddp" else 1
        for c in spec["containers"]:
            res = c.setdefault("resources", {})
            for kind in ("requests", "limits"):
                res.setdefault(kind, {})["nvidia.com/gpu"] = str(DOC_GPUS)
        pods += [spec] * count
    return pods


@pytest.mark.parametrize("name", ["chart-gpu", "k8s-gpu-prod"])
@pytest.mark.parametrize("strategy", ["ddp", "deepspeed", "horovod"])
def test_the_quota_admits_one_job_of_the_documented_gpu_size(rendered, name, strategy):
    objs = documents(rendered[name])
    limit_ranges = [o for o in objs if o["kind"] == "LimitRange"]
    (quota,) = [o for o in objs if o["kind"] == "ResourceQuota"]
    pods = [admit_pod(p, limit_ranges) for p in one_gpu_job(objs, strategy)]
    # ... while the pipeline's train step (a KFP pod with LimitRange defaults) follows it.
    pods.append(admit_pod({"containers": [{"name": "main"}], "initContainers": []}, limit_ranges))
    assert not quota_admits(pods, quota), quota_admits(pods, quota)


def test_single_user_installs_leave_kfps_namespace_without_quota():
    objs = documents(helm_template(namespace="kubeflow"))
    kinds = {o["kind"] for o in objs}
    assert "ResourceQuota" not in kinds and "LimitRange" not in kinds
    assert {"ResourceQuota", "LimitRange"} <= {o["kind"] for o in documents(helm_template(namespace="team-a"))}


def test_training_never_preempts(rendered):
    for name in ("chart-default", "k8s-cpu-dev"):
        (training,) = [
            o
            for o in documents(rendered[name])
            if o["kind"] == "PriorityClass" and o["metadata"]["name"] == "invfold-training"
        ]
        assert training["preemptionPolicy"] == "Never", name
