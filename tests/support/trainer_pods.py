"""The pods Kubeflow Trainer v2.3 makes of a TrainJob and its runtime, re-implemented from the parts
of kubeflow/trainer v2.3.0 that decide them, for the renderings the test cluster does not install
(the GPU values, the kustomize overlays). tests/cluster/test_trainjob.py checks this module against
the real Trainer on the chart's installed runtimes (each strategy, 1 and 2 nodes, with GPUs):

- pkg/runtime/core/trainingruntime.go `newRuntimeInfo`: the job labelled
  `trainer.kubeflow.org/trainjob-ancestor-step: trainer` starts the runtime's `mlPolicy.numNodes`
  pods; the TrainJob's `resourcesPerNode` is merged into the `node` container of that job and, for
  MPI with `runLauncherAsNode`, of the job named `node` as well.
- pkg/runtime/framework/plugins/torch/torch.go `EnforceMLPolicy`: the ancestor job starts the
  TrainJob's `numNodes` pods.
- pkg/runtime/framework/plugins/mpi/mpi.go: `Validate` refuses numNodes >= 2 with runLauncherAsNode
  unless the runtime has both `launcher` and `node`; `EnforceMLPolicy` makes the node job
  max(numNodes - 1, 1) pods with runLauncherAsNode (numNodes without); the hostfile lists the
  endpoints of the launcher (runLauncherAsNode) and node jobs in the runtime's order, `slots` each.
- pkg/runtime/framework/plugins/jobset/builder.go `Trainer`: trainer.image, command and args go to
  the ancestor job's `node` container only; trainer.env to it and, with runLauncherAsNode, to `node`.
- pkg/runtime/framework/plugins/jobset/jobset.go `Validate`: runtimePatches name replicated jobs
  (and containers) the runtime has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


class Invalid(Exception):
    """The admission webhook would refuse the TrainJob."""


@dataclass
class Pod:
    job: str  # replicated job
    index: int
    hostname: str  # <trainjob>-<job>-0-<index>.<trainjob>
    image: str
    command: list[str]
    args: list[str]
    resources: dict
    env: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return int(self.resources.get("limits", {}).get("nvidia.com/gpu", 0))


def _node_container(job: dict) -> dict:
    return next(c for c in job["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "node")


def _merge(base: dict, override: dict) -> dict:
    out = {k: dict(v) for k, v in (base or {}).items()}
    for kind, values in (override or {}).items():
        out.setdefault(kind, {}).update(values)
    return out


def render(runtime: dict, trainjob: dict) -> tuple[list[Pod], list[str]]:
    """(pods, hostfile lines): what Trainer starts for `trainjob` on `runtime`."""
    name, trainer = trainjob["metadata"]["name"], trainjob["spec"].get("trainer", {})
    policy, jobs = runtime["spec"]["mlPolicy"], runtime["spec"]["template"]["spec"]["replicatedJobs"]
    mpi = policy.get("mpi")
    as_node = bool(mpi and mpi.get("runLauncherAsNode"))
    names = [j["name"] for j in jobs]
    nodes = trainer.get("numNodes", 1)
    if mpi and nodes >= 2 and as_node and not {"launcher", "node"} <= set(names):
        raise Invalid(
            "spec.trainer.numNodes: must have 1 when MPI trainingRuntime with enabled runLauncherAsNode "
            "does not have either launcher and node"
        )
    for patch in trainjob["spec"].get("runtimePatches", []):
        for job_patch in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            if job_patch["name"] not in names:
                raise Invalid(f"spec.runtimePatches: replicated job {job_patch['name']!r} is not in the runtime")
            runtime_job = jobs[names.index(job_patch["name"])]
            have = {c["name"] for c in runtime_job["template"]["spec"]["template"]["spec"]["containers"]}
            for container in job_patch["template"]["spec"]["template"]["spec"].get("containers", []):
                if container["name"] not in have:
                    raise Invalid(
                        f"spec.runtimePatches: container {container['name']!r} is not in job {job_patch['name']!r}"
                    )
    pods, hostfile = [], []
    slots = trainer.get("numProcPerNode", (mpi or {}).get("numProcPerNode", 1))
    for job in jobs:
        ancestor = job["template"].get("metadata", {}).get("labels", {}).get(ANCESTOR) == "trainer"
        container = _node_container(job)
        if ancestor:
            count = nodes if "torch" in policy else policy.get("numNodes", 1)
        elif job["name"] == "node" and mpi:
            count = max(nodes - 1, 1) if as_node else nodes
        else:
            count = job["template"]["spec"].get("parallelism", 1)
        gets_trainer_resources = ancestor or (as_node and job["name"] == "node")
        resources = _merge(
            container.get("resources"), trainer.get("resourcesPerNode") if gets_trainer_resources else None
        )
        env = [e["name"] for e in container.get("env", [])]
        if gets_trainer_resources:
            env += [e["name"] for e in trainer.get("env", [])]
        for index in range(count):
            pod = Pod(
                job=job["name"],
                index=index,
                hostname=f"{name}-{job['name']}-0-{index}.{name}",
                image=trainer.get("image", container["image"]) if ancestor else container["image"],
                command=trainer.get("command", container.get("command", []))
                if ancestor
                else container.get("command", []),
                args=trainer.get("args", container.get("args", [])) if ancestor else container.get("args", []),
                resources=resources,
                env=env,
            )
            pods.append(pod)
            if mpi and (job["name"] == "node" or (as_node and job["name"] == "launcher")):
                hostfile.append(f"{pod.hostname} slots={slots}")
    return pods, hostfile
