"""Every rendered pod template (chart and every overlay), the pods KFP creates for the steps, and
one TrainJob of the documented GPU size go through LimitRange defaulting and the quota as the API
server applies them (tests/support/admission.py, with the upstream rules cited there)."""

from __future__ import annotations

import copy

import pytest

from tests.support.admission import Rejected, admit_container, admit_pod, in_scope, pod_templates, quota_admits
from tests.support.deploy_tools import documents, helm_template

# k8s-cpu-dev installs into KFP's own namespace (standalone KFP), where no LimitRange belongs.
RENDERINGS = ("chart-default", "chart-gpu", "k8s-gpu-prod", "k8s-tenant")
# docs/deploy.md: `--nodes 2 --nproc 8 --gpus-per-node 8`.
DOC_NODES, DOC_GPUS = 2, 8


# A KFP 2.17 executor pod as the driver creates it for our steps: no resources set by the
# pipeline (kubeflow/pipelines backend/src/v2/driver: resources only from the task's
# set_*_request/limit, which our steps do not call).
KFP_STEP = {"containers": [{"name": "main", "resources": {}}], "initContainers": [{"name": "kfp-launcher"}]}


QUOTA_RENDERINGS = ("chart-default", "chart-gpu", "k8s-gpu-prod")
NOTEBOOK = {"containers": [{"name": "notebook", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}


@pytest.mark.parametrize("name", QUOTA_RENDERINGS)
def test_the_quota_counts_invfolds_trainers_only(rendered, name):
    """Issue 22.12: a quota (and a LimitRange default) on the whole profile namespace capped its
    notebooks. The compute quota is scoped to the training PriorityClass: every trainer pod is in
    its scope (and sets the memory limit its limits.memory needs), KFP's step pods and a notebook
    are not, and no LimitRange gives the namespace's containers a default."""
    objs = documents(rendered[name])
    assert not [o for o in objs if o["kind"] == "LimitRange"], f"{name}: a LimitRange covers every container"
    (quota,) = [o for o in objs if o["kind"] == "ResourceQuota" and o["spec"].get("scopeSelector")]
    trainers = {k: v for k, v in pod_templates(objs).items() if "TrainingRuntime" in k}
    assert trainers
    for where, spec in trainers.items():
        admitted = admit_pod(copy.deepcopy(spec), [])
        assert in_scope(admitted, quota), f"{name}: {where} escapes the quota"
        assert not quota_admits([admitted], quota), (where, quota_admits([admitted], quota))
    for where, spec in {"KFP step pod": KFP_STEP, "notebook": NOTEBOOK}.items():
        spec = admit_pod({"initContainers": [], **copy.deepcopy(spec)}, [])
        assert not in_scope(spec, quota), f"{name}: the quota covers a {where}"
        assert not quota_admits([spec], quota), f"{name}: a {where} without limits is refused"
    counted = [o for o in objs if o["kind"] == "ResourceQuota" and not o["spec"].get("scopeSelector")]
    assert [set(o["spec"]["hard"]) for o in counted] == [{"count/trainjobs.trainer.kubeflow.org"}]


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
def test_the_quota_admits_two_jobs_of_the_documented_gpu_size(rendered, name, strategy):
    """Two jobs of the documented size (2 nodes x 8 GPUs) at once, while their train steps (KFP
    pods, outside the quota's scope) follow them; a third waits."""
    objs = documents(rendered[name])
    (quota,) = [o for o in objs if o["kind"] == "ResourceQuota" and o["spec"].get("scopeSelector")]
    job = [admit_pod(p, []) for p in one_gpu_job(objs, strategy)]
    steps = [admit_pod({"containers": [{"name": "main"}], "initContainers": []}, [])] * 2
    assert not quota_admits(job + job + steps, quota), quota_admits(job + job + steps, quota)
    assert quota_admits(job * 3, quota), "three jobs fit: the quota bounds nothing"


def test_single_user_installs_leave_kfps_namespace_without_quota():
    objs = documents(helm_template(namespace="kubeflow"))
    kinds = {o["kind"] for o in objs}
    assert "ResourceQuota" not in kinds and "LimitRange" not in kinds
    assert "ResourceQuota" in {o["kind"] for o in documents(helm_template(namespace="team-a"))}


def test_training_never_preempts(rendered):
    for name in ("chart-default", "k8s-cpu-dev"):
        (training,) = [
            o
            for o in documents(rendered[name])
            if o["kind"] == "PriorityClass" and o["metadata"]["name"] == "invfold-training"
        ]
        assert training["preemptionPolicy"] == "Never", name
