"""The TrainJob (Kubeflow Trainer v2, trainer.kubeflow.org/v1alpha1) the train step creates.

Hand-over through object storage (fsspec URIs): the job reads the prepared data from its URI,
writes checkpoints to `checkpoint_dir` (a URI keyed by the pipeline run, so a retried step
resumes) and, on rank 0 at the end, copies its output folder to `output_uri`, from where the
step fetches it. Storage credentials come from a named Secret through `secretKeyRef` env entries
(referenced, never copied); MLFLOW_* variables of the step are forwarded. GPU node pools are
reached with `resourcesPerNode` (nvidia.com/gpu) and `runtimePatches` (nodeSelector,
tolerations) on every replicated job of the runtime.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from invfold.components.launch.base import Resources
from invfold.components.train.config import TrainConfig
from invfold.components.train.strategies import strategy_spec
from invfold.errors import ConfigError
from invfold.options import check_values, option

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "trainjobs"
RUNTIME_PREFIX = "invfold-"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
PATCH_MANAGER = "invfold.dev/launcher"
ENTRY_MODULE = "invfold.components.launch.trainjob_entry"
# The trainer container of every replicated job of the runtimes in k8s/ (their replicated jobs
# are each strategy's StrategySpec.replicated_jobs).
TRAINER_CONTAINER = "node"
WORKSPACE_MOUNT = "/workspace"
# Where each rank writes its output folder: the pod's /tmp emptyDir (the root filesystem is
# read-only). The step's own output path means nothing in the job's pods (under KFP it is the
# launcher's local mirror of the artifact store, /minio/...); rank 0 copies this folder to the
# job's output URI and the step fetches it from there to its path.
JOB_OUT = "/tmp/invfold-train-out"
RENDEZVOUS_PORT = 29500  # allowed between a job's pods by k8s/base/network-policies.yaml
# A one-node MPI job references `<runtime>-single-node`: the launcher alone, every rank on it.
# Trainer v2.3 always starts max(numNodes - 1, 1) node pods beside a launcher that runs as a node
# (pkg/runtime/framework/plugins/mpi/mpi.go), each with the TrainJob's resourcesPerNode
# (pkg/runtime/core/trainingruntime.go): an idle sshd pod holding GPUs. Without a node job the MPI
# plugin accepts numNodes 1 only (mpi.go Validate), and trainer.image reaches the one pod.
SINGLE_NODE_SUFFIX = "-single-node"
FORWARDED_ENV = re.compile(r"^(MLFLOW_(?!TRACKING_PASSWORD|TRACKING_TOKEN|TRACKING_USERNAME)\w+)$")
# The storage Secret's layout: KFP's own artifact-store Secret (mlpipeline-minio-artifact, which
# KFP copies into every profile namespace) holds `accesskey` / `secretkey`; they become the AWS
# variables s3fs/botocore read. Env variable -> key in the Secret.
SECRET_KEYS = {"AWS_ACCESS_KEY_ID": "accesskey", "AWS_SECRET_ACCESS_KEY": "secretkey"}
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclass
class ClusterOptions:
    """Cluster settings of the train step.

    storage_root: object-storage URI (s3://, gs://, ...) under which each job writes its outputs
        (`<root>/runs/<run>/<job>`); required on a cluster.
    storage_secret: name of a Secret with the storage keys (None: the pods' own identity, e.g.
        workload identity); secret_keys maps env variable -> key in it (KFP's layout by default).
    storage_endpoint: S3-compatible endpoint URL (KFP's MinIO / SeaweedFS, any non-AWS store):
        handed to every training pod as AWS_ENDPOINT_URL, else s3fs goes to AWS.
    image: training image (None: the runtime's own); reaches every pod of ddp and one-node MPI jobs, and
        is refused for several-node MPI jobs (Trainer gives it to the launcher only).
        node_selector / tolerations: GPU node pool.
    runtime_kind: ClusterTrainingRuntime (installed cluster-wide), or TrainingRuntime for tenants
        whose runtimes are installed in their own namespace (k8s/overlays/tenant).
    workspace_pvc / workspace_mount: a ReadWriteMany claim mounted into every training pod (for
        DeepSpeed, whose checkpoints are local files: point checkpoint_root under the mount).
    timeout_s: delete the job and fail after this long. poll_s: status poll interval.
    unschedulable_timeout_s: delete the job and fail once one of its pods stayed unschedulable, or
        placed with a container that cannot start (image pull, missing Secret), this long (the
        scheduler's or kubelet's reason in the error); 0 = never look at the pods.
    owner_pod_name / owner_pod_uid: the step's pod (downward API env POD_NAME / POD_UID); the
        TrainJob's owner, so Kubernetes deletes it with the pod.
    """

    namespace: str | None = None
    storage_root: str = ""
    storage_secret: str | None = None
    secret_keys: dict[str, str] = field(default_factory=lambda: dict(SECRET_KEYS))
    storage_endpoint: str | None = None
    image: str | None = None
    runtime_prefix: str = RUNTIME_PREFIX
    runtime_kind: str = option("ClusterTrainingRuntime", "the kind of runtime a job references", choices=RUNTIME_KINDS)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=list)
    workspace_pvc: str | None = None
    workspace_mount: str = WORKSPACE_MOUNT
    timeout_s: float = option(7 * 24 * 3600.0, "seconds a job may run", above=0, finite=False)
    poll_s: float = option(10.0, "seconds between looks at the job", above=0)
    unschedulable_timeout_s: float = option(900.0, "seconds a pod may stay unschedulable", min=0, finite=False)
    owner_pod_name: str | None = None
    owner_pod_uid: str | None = None
    pipeline_run_id: str = ""

    def __post_init__(self) -> None:
        if self.owner_pod_name is None:
            self.owner_pod_name = os.environ.get("POD_NAME") or None
        if self.owner_pod_uid is None:
            self.owner_pod_uid = os.environ.get("POD_UID") or None
        if self.namespace is None and os.path.exists(SERVICE_ACCOUNT_NAMESPACE):
            with open(SERVICE_ACCOUNT_NAMESPACE) as fh:
                self.namespace = fh.read().strip()
        self.secret_keys = dict(self.secret_keys)
        self.storage_endpoint = self.storage_endpoint or None
        if self.storage_endpoint and not self.storage_endpoint.startswith(("http://", "https://")):
            raise ConfigError(
                f"ClusterOptions.storage_endpoint: expected an http(s) URL such as "
                f"http://minio-service.kubeflow:9000, got {self.storage_endpoint!r}"
            )
        self.tolerations = list(self.tolerations or [])
        self.node_selector = dict(self.node_selector or {})
        check_values(self)
        if self.storage_root and "://" not in self.storage_root:
            raise ConfigError(
                f"ClusterOptions.storage_root: expected an object-storage URI "
                f"(s3://bucket/prefix), got {self.storage_root!r}"
            )
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.node_selector.items()):
            raise ConfigError(
                f"ClusterOptions.node_selector: expected string keys and values, got {self.node_selector!r}"
            )
        if not all(isinstance(t, dict) for t in self.tolerations):
            raise ConfigError(f"ClusterOptions.tolerations: expected a list of objects, got {self.tolerations!r}")


# KFP's own bucket: in a profile namespace the profile controller's per-namespace keys may write only
# these prefixes (kubeflow/pipelines 2.17.0 manifests/kustomize/base/installs/multi-user/
# pipelines-profile-controller/sync.py); KFP's namespace itself (single-user) holds the store's
# admin keys.
KFP_BUCKET = "mlpipeline"
KFP_NAMESPACE = "kubeflow"


def profile_prefixes(namespace: str) -> tuple[str, ...]:
    return tuple(
        f"s3://{KFP_BUCKET}/{p}/"
        for p in ("artifacts", f"private-artifacts/{namespace}", f"private/{namespace}", "shared")
    )


def default_storage_root(namespace: str) -> str:
    return f"s3://{KFP_BUCKET}/private/{namespace}/invfold"


def storage_root_problem(root: str, namespace: str | None) -> str | None:
    """Why a profile namespace's keys cannot write under `root` in KFP's bucket (None: they can,
    or it is not KFP's bucket, or this is KFP's own namespace)."""
    if not root.startswith(f"s3://{KFP_BUCKET}/") or not namespace or namespace == KFP_NAMESPACE:
        return None
    allowed = profile_prefixes(namespace)
    if (root.rstrip("/") + "/").startswith(allowed):
        return None
    return (
        f"storage_root {root}: the profile's keys for KFP's store may write only under "
        f"{', '.join(allowed)}; use e.g. {default_storage_root(namespace)}"
    )


# Every TrainJob of one pipeline run carries this label: a retried train step finds the jobs an
# earlier attempt left running (its pod died uncleanly; KFP keeps dead step pods, so the owner
# reference never fires) and deletes them before it starts its own.
RUN_LABEL = "invfold.dev/pipeline-run"


def run_label(pipeline_run_id: str) -> str:
    """A label value for the run (<= 63 characters, [a-z0-9]): a digest of its id."""
    return hashlib.sha256(pipeline_run_id.encode()).hexdigest()[:40]


def job_name(strategy: str, pipeline_run_id: str = "") -> str:
    """A fresh RFC 1035 name (<= 63 characters) tied to the pipeline run: a retried step makes a
    new job (the previous one may still be terminating) that resumes the same checkpoints."""
    run = hashlib.sha256(pipeline_run_id.encode()).hexdigest()[:8] if pipeline_run_id else "adhoc"
    return f"invfold-{strategy}-{run}-{secrets.token_hex(3)}"


def _single_node_mpi(strategy: str, nodes: int) -> bool:
    return strategy_spec(strategy).cluster_launcher == "mpirun" and nodes == 1


def runtime_name(strategy: str, prefix: str = RUNTIME_PREFIX, nodes: int = 2) -> str:
    """The runtime a job of `nodes` nodes references (one-node MPI jobs: the launcher-only one)."""
    return f"{prefix}{strategy}{SINGLE_NODE_SUFFIX if _single_node_mpi(strategy, nodes) else ''}"


def replicated_jobs(strategy: str, nodes: int) -> tuple[str, ...]:
    """The replicated jobs of the runtime `runtime_name(strategy, nodes=nodes)` names."""
    return ("launcher",) if _single_node_mpi(strategy, nodes) else strategy_spec(strategy).replicated_jobs


def _env(options: ClusterOptions, environ: Mapping[str, str]) -> list[dict]:
    env = [{"name": k, "value": v} for k, v in sorted(environ.items()) if FORWARDED_ENV.match(k) and v]
    if options.storage_endpoint:
        env.append({"name": "AWS_ENDPOINT_URL", "value": options.storage_endpoint})
    if options.storage_secret:
        env += [
            {"name": env_name, "valueFrom": {"secretKeyRef": {"name": options.storage_secret, "key": key}}}
            for env_name, key in options.secret_keys.items()
        ]
    return env


def _command(
    name: str, cfg: TrainConfig, resources: Resources, output_uri: str, env: list[dict]
) -> tuple[list[str], list[str]]:
    """(command, args): both set, so neither the runtime's command nor its args survive.
    Under mpirun, torch.distributed's rendezvous (DeepSpeed) is rank 0's pod. Trainer writes the
    hostfile in the order of the runtime's replicated jobs, node first, then the launcher (which
    runs as a node), but OpenMPI starts rank 0 on the host mpirun runs on when the hostfile lists
    it: rank 0 is `<job>-launcher-0-0` (seen on a real cluster: OMPI_COMM_WORLD_RANK=0 in the
    launcher pod), reachable through the job's headless Service. A one-node job runs every rank
    on the launcher itself (localhost), the only pod of its launcher-only runtime."""
    job_cfg = replace(cfg, out=JOB_OUT).to_dict()
    entry = [ENTRY_MODULE, "--config-json", json.dumps(job_cfg, sort_keys=True), "--output", output_uri]
    if strategy_spec(cfg.strategy).cluster_launcher == "torchrun":
        # The torch runtime sets PET_NNODES / PET_NPROC_PER_NODE / PET_NODE_RANK / PET_MASTER_*.
        return ["torchrun"], ["--module", *entry]
    single = resources.nodes == 1
    first = "127.0.0.1" if single else f"{name}-launcher-0-0.{name}"
    rendezvous = [f"MASTER_ADDR={first}", f"MASTER_PORT={RENDEZVOUS_PORT}"]
    hosts = ["--host", f"localhost:{resources.procs_per_node}"] if single else ["--hostfile", "/etc/mpi/hostfile"]
    exports = (
        [arg for item in env for arg in ("-x", item["name"])]
        + ["-x", "OMP_NUM_THREADS"]
        + [arg for pair in rendezvous for arg in ("-x", pair)]
    )
    return ["mpirun"], [
        *hosts,
        "-np",
        str(resources.world_size),
        "--bind-to",
        "none",
        *exports,
        "python",
        "-m",
        *entry,
    ]


def _runtime_patches(strategy: str, nodes: int, options: ClusterOptions) -> list[dict]:
    """The same pod changes for every replicated job of the runtime. Trainer v2.3 patches only a
    container's env, securityContext and volumeMounts (ContainerPatch in
    pkg/apis/trainer/v1alpha1/trainjob_types.go): resources reach MPI node pods through
    resourcesPerNode, an image never does (see build_trainjob)."""
    pod_spec = _pod_patch(options)
    if not pod_spec:
        return []
    replicated = [
        {"name": name, "template": {"spec": {"template": {"spec": pod_spec}}}}
        for name in replicated_jobs(strategy, nodes)
    ]
    return [{"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": replicated}}}}]


def _pod_patch(options: ClusterOptions) -> dict:
    pod_spec: dict = {}
    if options.node_selector:
        pod_spec["nodeSelector"] = dict(options.node_selector)
    if options.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in options.tolerations]
    if options.workspace_pvc:
        pod_spec["volumes"] = [
            {"name": "invfold-workspace", "persistentVolumeClaim": {"claimName": options.workspace_pvc}}
        ]
        pod_spec["containers"] = [
            {
                "name": TRAINER_CONTAINER,
                "volumeMounts": [{"name": "invfold-workspace", "mountPath": options.workspace_mount}],
            }
        ]
    return pod_spec


def build_trainjob(
    name: str,
    cfg: TrainConfig,
    resources: Resources,
    options: ClusterOptions,
    output_uri: str,
    environ: Mapping[str, str] = os.environ,
) -> dict:
    """The TrainJob manifest (a plain dict, validated by schema.validate_trainjob)."""
    if not NAME.match(name) or len(name) > 63:
        raise ConfigError(f"TrainJob name {name!r}: expected an RFC 1035 label of at most 63 characters")
    if options.image and strategy_spec(cfg.strategy).cluster_launcher == "mpirun" and resources.nodes > 1:
        # pkg/runtime/framework/plugins/jobset/builder.go (Trainer): trainer.image goes to the
        # job labelled trainjob-ancestor-step=trainer, the launcher; node pods keep the runtime's.
        raise ConfigError(
            f"ClusterOptions.image: Kubeflow Trainer gives a TrainJob's image to the MPI launcher only, so a "
            f"{resources.nodes}-node {cfg.strategy} job would run its node pods on the runtime's image; install the "
            f"runtimes with {options.image!r} (chart images.registry/images.tag, or a kustomize images entry) "
            f"and leave image unset"
        )
    env = _env(options, environ)
    command, args = _command(name, cfg, resources, output_uri, env)
    trainer: dict = {
        "numNodes": resources.nodes,
        "numProcPerNode": resources.procs_per_node,
        "command": command,
        "args": args,
        "env": env,
    }
    if resources.gpus_per_node:
        gpus = str(resources.gpus_per_node)
        trainer["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    if options.image:
        trainer["image"] = options.image
    metadata: dict = {
        "name": name,
        "labels": {
            "app.kubernetes.io/part-of": "invfold",
            "app.kubernetes.io/component": "train",
            "invfold.dev/strategy": cfg.strategy,
        },
    }
    if options.pipeline_run_id:
        metadata["annotations"] = {"invfold.dev/pipeline-run-id": options.pipeline_run_id}
        metadata["labels"][RUN_LABEL] = run_label(options.pipeline_run_id)
    if options.namespace:
        metadata["namespace"] = options.namespace
    if options.owner_pod_name and options.owner_pod_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": options.owner_pod_name,
                "uid": options.owner_pod_uid,
                "blockOwnerDeletion": False,
            }
        ]
    spec: dict = {
        "runtimeRef": {
            "apiGroup": GROUP,
            "kind": options.runtime_kind,
            "name": runtime_name(cfg.strategy, options.runtime_prefix, resources.nodes),
        },
        "trainer": trainer,
    }
    patches = _runtime_patches(cfg.strategy, resources.nodes, options)
    if patches:
        spec["runtimePatches"] = patches
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata, "spec": spec}
