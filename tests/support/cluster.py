"""The real single-node cluster of `make cluster-up` (scripts/cluster/) as the cluster lane sees
it: where its run state lies and a small client (kubectl and helm on its kubeconfig)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import subprocess
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from glob import glob
from pathlib import Path

import pytest
import yaml

from tests.support.deploy_tools import REPO, run, tool

CACHE = Path(os.environ.get("INVFOLD_CACHE_DIR") or Path.home() / ".cache" / "invfold")
RUN = CACHE / "cluster"
KUBECONFIG = RUN / "admin.kubeconfig"
CONTAINERD_SOCKET = RUN / "containerd" / "containerd.sock"
# The CPU images the lane runs on the node: the chart's trainer runtimes and MLflow.
NODE_IMAGES = ("runtime", "deepspeed", "horovod", "mlflow")
GATEWAY = "10.244.0.1"  # the pod bridge's address: the API server, CoreDNS and host services pods reach
TRAINER_CPU = "250m"  # what the lane's trainer pods request (install_args)


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(self, *args: str, check: bool = True, timeout: float = 300, input: str | None = None):
        return run([tool("kubectl"), *args], check=check, timeout=timeout, env=self.env(), input=input)

    def helm(self, *args: str, check: bool = True, timeout: float = 900):
        return run([tool("helm"), *args], check=check, timeout=timeout, env=self.env())

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: dict | str, *args: str, check: bool = True):
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        return self.kubectl("apply", "--server-side", "--force-conflicts", *args, "-f", "-", input=text, check=check)

    def wait_for(self, what: str, check, timeout: float, interval: float = 2.0, explain=None):
        """Poll `check()` until it returns a true value; on timeout fail with `explain()`."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not reached in {timeout:.0f} s\n{explain() if explain else ''}")
            time.sleep(interval)

    def namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """The namespace, with `labels` among its labels. The lane's own field manager: applied as
        `kubectl` (the manager KFP's install applies `kubeflow` with), a namespace without those
        labels would take KFP's Pod Security labels off `kubeflow`."""
        doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
        self.apply(doc, "--field-manager=invfold-lane")
        return name

    def delete_namespace(self, name: str) -> None:
        self.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=true", "--timeout=180s", check=False)

    def wait_for_runtimes_gone(self, label: str) -> None:
        """Runtimes an earlier session labelled `label` stay until their TrainJobs go (Trainer's
        finalizer); a module that installs them again waits for that first."""
        self.wait_for(
            f"earlier runtimes labelled {label} deleted",
            lambda: not self.get("clustertrainingruntimes", "-l", label)["items"],
            180,
            interval=3,
        )


def prefixed_runtimes(docs: list[dict], prefix: str, label: str, value: str, namespace: str = "") -> list[dict]:
    """A rendering's (Cluster)TrainingRuntimes renamed `<prefix><name without invfold->` and
    labelled `label=value`, so several renderings install side by side and are deleted by label;
    namespaced ones go into `namespace`."""
    runtimes = [doc for doc in docs if doc["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime")]
    for doc in runtimes:
        doc["metadata"]["name"] = prefix + doc["metadata"]["name"].removeprefix("invfold-")
        doc["metadata"].setdefault("labels", {})[label] = value
        if doc["kind"] == "TrainingRuntime":
            assert namespace, f"{doc['metadata']['name']}: a namespaced runtime needs a namespace"
            doc["metadata"]["namespace"] = namespace
    return runtimes


def running() -> bool:
    if not KUBECONFIG.exists():
        return False
    proc = subprocess.run(
        [tool("kubectl"), f"--kubeconfig={KUBECONFIG}", "get", "--raw", "/readyz"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return proc.returncode == 0


def ctr() -> list[str]:
    found = sorted(glob(str(CACHE / "build" / "cluster" / "debian-*" / "root" / "usr" / "bin" / "ctr")))
    assert found, "ctr is missing from the cluster's Debian root: run `make cluster-up`"
    return [found[-1], "--address", str(CONTAINERD_SOCKET), "-n", "k8s.io"]


def trainer_version() -> str:
    """The Kubeflow Trainer the cluster runs (scripts/cluster/versions.sh)."""
    return re.search(r"^TRAINER_VERSION=(\S+)$", (REPO / "scripts" / "cluster" / "versions.sh").read_text(), re.M)[1]


def upstream_runtime(file: str) -> dict:
    """A runtime Kubeflow Trainer ships (its module's manifests/base/runtimes/<file>, which
    scripts/cluster/build.sh keeps beside the controller it builds)."""
    path = CACHE / "build" / "cluster" / f"trainer-{trainer_version()}" / "runtimes" / file
    assert path.is_file(), f"{path} is missing: run `make cluster-up` (it adds Trainer's shipped runtimes)"
    return yaml.safe_load(path.read_text())


KFP_NAMESPACE = "kubeflow"  # KFP's own namespace: its API server, store and admin keys
KFP_BUCKET = "mlpipeline"  # the one bucket KFP's store creates
STORE_ENDPOINT = "http://seaweedfs.kubeflow:8333"  # KFP 2.16+'s store, which `make cluster-up` installs


def store_keys(cluster: Cluster) -> dict[str, str]:
    """The store's admin keys from KFP's Secret `mlpipeline-minio-artifact` (accesskey/secretkey)."""
    data = cluster.get("secret", "mlpipeline-minio-artifact", "-n", KFP_NAMESPACE)["data"]
    return {key: base64.b64decode(data[key]).decode() for key in ("accesskey", "secretkey")}


def store_client(service: str, url: str, access_key: str, secret_key: str, quick: bool = False):
    """A boto3 client (`s3` or `iam`) of a SeaweedFS at `url` with the given keys; `quick` for
    probing a store that may not be up: one try, 5 s timeouts (boto3's default is 5 tries of 60 s)."""
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=5, retries={"max_attempts": 1}) if quick else None
    return boto3.client(
        service,
        endpoint_url=url,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="foobar",
        config=config,
    )


def kfp_api_address(cluster: Cluster) -> str:
    """The address of KFP's API server (its Service, which this machine reaches through
    kube-proxy's rules); fails naming the fix when KFP is not installed on the running cluster."""
    found = cluster.kubectl("get", "service", "ml-pipeline", "-n", KFP_NAMESPACE, "-o", "json", check=False)
    if found.returncode != 0:
        pytest.fail(
            "Kubeflow Pipelines is not installed on the running cluster (started with INVFOLD_CLUSTER_KFP=0): "
            "stop it (make cluster-down) and start it without that (make cluster-up)"
        )
    return f"http://{json.loads(found.stdout)['spec']['clusterIP']}:8888"


def kfp_ui_address(cluster: Cluster) -> str:
    """The address of KFP's UI (its Service ml-pipeline-ui, port 80, as upstream's manifests
    name it), which this machine reaches through kube-proxy's rules."""
    return f"http://{cluster.get('service', 'ml-pipeline-ui', '-n', KFP_NAMESPACE)['spec']['clusterIP']}"


def stored(cluster: Cluster, prefix: str) -> dict[str, bytes]:
    """The objects under `prefix` in KFP's bucket, read with the store's admin keys."""
    s3 = kfp_store(cluster)
    listed = s3.get_paginator("list_objects_v2").paginate(Bucket=KFP_BUCKET, Prefix=prefix)
    keys = [o["Key"] for page in listed for o in page.get("Contents", [])]
    return {key: s3.get_object(Bucket=KFP_BUCKET, Key=key)["Body"].read() for key in keys}


def kfp_store(cluster: Cluster):
    """A boto3 client of KFP's SeaweedFS (its Service from this machine) with the admin keys."""
    keys = store_keys(cluster)
    address = cluster.get("service", "seaweedfs", "-n", KFP_NAMESPACE)["spec"]["clusterIP"]
    return store_client("s3", f"http://{address}:8333", keys["accesskey"], keys["secretkey"])


FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED")


def wait_for_run(client, run_id: str, timeout: float) -> dict:
    """The KFP run (v2beta1, as a dict) once it has ended, or as it is at `timeout`; each change
    of its steps' states is printed (a lane run takes minutes)."""
    deadline = time.monotonic() + timeout
    started, seen = time.monotonic(), None
    while True:
        run = client.get_run(run_id).to_dict()
        states = {name: state for name, state in step_states(run).items() if name.endswith("-op")}
        if states != seen:
            steps = ", ".join(f"{name.removesuffix('-op')} {str(state).lower()}" for name, state in states.items())
            print(f"{time.monotonic() - started:6.0f} s {str(run['state']).lower()}: {steps}", flush=True)
            seen = states
        if run["state"] in FINAL_STATES or time.monotonic() > deadline:
            return run
        time.sleep(5)


def step_states(run: dict) -> dict[str, str]:
    """Each named task of a KFP run (its Argo nodes: `train-op`, `train-op-driver`, ...) and its state."""
    details = (run.get("run_details") or {}).get("task_details") or []
    return {t["display_name"]: t["state"] for t in details if t.get("display_name")}


WORKSPACE_CLAIM = "invfold-workspace"  # the chart's `workspace.name`


def no_provisioner_class(name: str) -> dict:
    """A StorageClass no provisioner serves: its claims bind only to volumes made for them."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "kubernetes.io/no-provisioner",
    }


def host_volume(
    cluster: Cluster, folder: Path, namespace: str, claim: str, access: str, size: str, storage_class: str = ""
) -> str:
    """A hostPath PersistentVolume on `folder` bound ahead to the claim `claim` in `namespace` (on
    this one-node cluster no provisioner runs); its name. The folder is made world-writable: a
    hostPath volume ignores the pods' fsGroup."""
    folder.chmod(0o777)
    volume = f"{claim}-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": [access],
                "storageClassName": storage_class,
                "hostPath": {"path": str(folder), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        }
    )
    return volume


@contextlib.contextmanager
def workspace_claim(cluster: Cluster, namespace: str, folder: Path):
    """The ReadWriteMany claim DeepSpeed's checkpoints need (docs/deploy.md), as the chart's
    `workspace` names it, in `namespace`, on a host volume on `folder` (no RWX provisioner runs
    here; Pod Security checks the pod's volume, a claim, not the volume behind it)."""
    volume = host_volume(cluster, folder, namespace, WORKSPACE_CLAIM, "ReadWriteMany", size="1Gi")
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": WORKSPACE_CLAIM, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    try:
        yield folder
    finally:
        cluster.kubectl("-n", namespace, "delete", "pvc", WORKSPACE_CLAIM, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", volume, "--wait=false", check=False)


# What Kubeflow's profile controller labels a profile namespace with; KFP's SeaweedFS admits S3
# from such namespaces and from its own alone (its manifests' NetworkPolicy `seaweedfs`), so the
# lane's namespaces that stand for invfold's carry it, as they would under Kubeflow.
PROFILE_LABELS = {"app.kubernetes.io/part-of": "kubeflow-profile"}
CHART_NAMESPACE = "kubeflow"  # single-user: KFP's own namespace, created by the KFP install (here: by us)
RELEASE = "invfold"
# What the chart's defaults make of that release: the steps' MLflow and the pipelines' storage root.
CHART_TRACKING_URI = f"http://{RELEASE}-mlflow.{CHART_NAMESPACE}.svc.cluster.local:5000"
CHART_STORAGE_ROOT = f"s3://{KFP_BUCKET}/private/{CHART_NAMESPACE}/invfold"
CHART_PREFIX = CHART_STORAGE_ROOT.removeprefix(f"s3://{KFP_BUCKET}/")  # that root's keys in KFP's bucket
DESIGN_STRUCTURES = 6  # the sample's first chains: the design runs' input (the lane_data fixture)


def step_pods(cluster: Cluster, run_id: str) -> list[dict]:
    """The pods Argo ran for a KFP run (their workflow carries the run's id as a label)."""
    return cluster.get("pods", "-n", KFP_NAMESPACE, "-l", f"pipeline/runid={run_id}")["items"]


def prerequisites(cluster, namespace: str = CHART_NAMESPACE) -> None:
    """The Secret docs/deploy.md has the user create before the install: MLflow's keys to the
    store (here KFP's admin keys of the cluster's SeaweedFS; the chart's default destination lies in
    its `mlpipeline` bucket, the only one KFP creates)."""
    keys = store_keys(cluster)
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "mlflow-s3-credentials", "namespace": namespace},
            "stringData": {"AWS_ACCESS_KEY_ID": keys["accesskey"], "AWS_SECRET_ACCESS_KEY": keys["secretkey"]},
        }
    )


# The chart's PostgreSQL on the node: Debian's PostgreSQL 15, built with KFP's images
# (scripts/cluster/build.sh) in place of the official image, which no registry here serves.
POSTGRESQL_IMAGE = ("invfold.test/postgresql", "15")
DATABASE_CLASS = "invfold-lane-local"  # its claims' class: bound to host volumes, no provisioner here


def database_volume(cluster: Cluster, folder: Path, namespace: str) -> str:
    """A host volume on `folder` for the claim of a release's PostgreSQL in `namespace` (the
    StatefulSet's `data-<release>-postgresql-0`), of the lane's volume class; its name."""
    cluster.apply(no_provisioner_class(DATABASE_CLASS))
    claim = f"data-{RELEASE}-postgresql-0"
    return host_volume(cluster, folder, namespace, claim, "ReadWriteOnce", size="10Gi", storage_class=DATABASE_CLASS)


@dataclass(frozen=True)
class Release:
    """The lane's release of the chart: its helm values (for upgrades back to them) and whether
    its MLflow asks for an account (basic-auth, with the chart's own PostgreSQL)."""

    name: str
    args: tuple[str, ...]
    auth: bool


def on_node(image: tuple[str, str]) -> bool:
    """Whether the node's containerd holds `image` (repository, tag)."""
    listing = subprocess.run([*ctr(), "images", "ls", "-q"], capture_output=True, text=True, check=True).stdout
    return ":".join(image) in listing.split()


# MLflow's admin account, which only the MLflow server's pod holds (MLFLOW_AUTH_ADMIN_*), as a
# client's variables for a script run in that pod.
AS_ADMIN = (
    'MLFLOW_TRACKING_USERNAME="$MLFLOW_AUTH_ADMIN_USERNAME" MLFLOW_TRACKING_PASSWORD="$MLFLOW_AUTH_ADMIN_PASSWORD" '
    'MLFLOW_TRACKING_URI=http://127.0.0.1:5000 exec python3 -c "$0" "$@"'
)


def mlflow_as_admin(cluster: Cluster, namespace: str, script: str, *args: str) -> str:
    """What `script` prints, run with `args` inside a release's MLflow pod as MLflow's admin."""
    pod = f"deploy/{RELEASE}-mlflow"
    return cluster.kubectl("exec", "-n", namespace, pod, "--", "sh", "-c", AS_ADMIN, script, *args).stdout.strip()


def install_args(images, namespace: str = CHART_NAMESPACE, database: str = "postgresql") -> list[str]:
    """Single-user values (the chart's defaults) with the project's CPU images, sized for one
    2-core node: trainer pods ask for 250m/1Gi instead of the production 2 CPUs/8Gi, so that a
    2-node job's pods fit beside KFP's serving pods and the chart's MLflow and PostgreSQL (1,144m
    requested between them, cpu_requests; the node has 2,000m). MLflow's artifacts go to the
    cluster's SeaweedFS, as docs/deploy.md's walk-through S sets them. The
    cluster's DNS answers on the node's address (no kube-dns pods): the NetworkPolicies, which
    kube-router enforces here, let pods reach it as they do a NodeLocal DNSCache.

    `database="postgresql"`: MLflow as the chart's defaults run it, on its own PostgreSQL
    (POSTGRESQL_IMAGE, its claim on a `database_volume`) with basic-auth. `"sqlite"`, only for a
    cluster started without KFP's parts (where that image is not built): its runs in SQLite inside
    its pod, auth off (the chart keeps basic-auth's users in its PostgreSQL)."""
    assert database in ("postgresql", "sqlite"), database
    if database == "postgresql":
        mlflow = [
            "--set", f"postgresql.image.repository={POSTGRESQL_IMAGE[0]}",
            "--set-string", f"postgresql.image.tag={POSTGRESQL_IMAGE[1]}",
            "--set", f"postgresql.storage.storageClassName={DATABASE_CLASS}",
        ]  # fmt: skip
    else:
        mlflow = [
            "--set", "mlflow.backend.type=external",
            "--set", "mlflow.backend.external.existingSecret=mlflow-backend",
            "--set", "mlflow.auth.enabled=false",
        ]  # fmt: skip
    return [
        "--namespace",
        namespace,
        "--set",
        "images.registry=invfold-test",
        "--set",
        f"images.tag={images.tag}-cpu",
        "--set",
        "pipelineUpload.enabled=false",
        *mlflow,
        "--set",
        f"mlflow.artifacts.s3EndpointUrl={STORE_ENDPOINT}",
        "--set",
        f"networkPolicies.nodeLocalDnsAddresses={{{GATEWAY}}}",
        "--set",
        f"runtimes.resources.requests.cpu={TRAINER_CPU}",
        "--set",
        "runtimes.resources.requests.memory=1Gi",
        "--set",
        "runtimes.resources.limits.memory=6Gi",
        "--set",
        "runtimes.sharedMemory=1Gi",
        "--wait",
        "--timeout",
        "10m",
    ]


def cpu_requests(cluster: Cluster) -> tuple[Decimal, Decimal, list[str]]:
    """The node's allocatable CPU, what its live pods request of it, and one line per requesting pod."""
    from kubernetes.utils import parse_quantity

    allocatable = parse_quantity(cluster.get("nodes")["items"][0]["status"]["allocatable"]["cpu"])
    lines, requested = [], Decimal(0)
    for pod in cluster.get("pods", "-A", "--field-selector=status.phase!=Succeeded,status.phase!=Failed")["items"]:
        requests = [c.get("resources", {}).get("requests", {}) for c in pod["spec"]["containers"]]
        cpu = sum(parse_quantity(r.get("cpu", "0")) for r in requests)
        if cpu:
            requested += cpu
            lines.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}: {cpu}")
    return allocatable, requested, lines


def stale_node_images(listing: str, keep: set[str]) -> list[str]:
    """The refs of `ctr images ls` to remove: our test images of other tags, and the `sha256:<id>`
    refs containerd's CRI adds beside each name, once no kept name shares their digest (left
    behind, they hold each old 6 GB generation on the disk)."""
    rows = [line.split()[:3] for line in listing.splitlines()[1:] if line.strip()]
    stale = [ref for ref, _, _ in rows if ref.startswith("docker.io/invfold-test/") and ref not in keep]
    named = {digest for ref, _, digest in rows if not ref.startswith("sha256:") and ref not in stale}
    return stale + [ref for ref, _, digest in rows if ref.startswith("sha256:") and digest not in named]
