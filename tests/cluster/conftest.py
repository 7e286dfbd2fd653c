"""Fixtures of the cluster lane (tests/cluster): the cluster of `make cluster-up` and the images on its node.

`cluster` brings it up once for the lane, or reuses one already running (then leaves it running);
one started here is stopped after the lane's last test. The first start on a machine builds
Kubernetes, JobSet, Trainer and CoreDNS from their Go modules into the build cache
(scripts/cluster/build.sh), which takes minutes; later starts take seconds. `node_images` loads
the project's CPU images (built by the image tests' fixture) into the node's containerd: nothing
can be pulled here."""

from __future__ import annotations

import collections
import gzip
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.support.cluster import (
    CHART_NAMESPACE,
    CHART_PREFIX,
    DESIGN_STRUCTURES,
    KFP_BUCKET,
    KUBECONFIG,
    NODE_IMAGES,
    POSTGRESQL_IMAGE,
    RELEASE,
    RUN,
    Cluster,
    Release,
    ctr,
    database_volume,
    install_args,
    kfp_api_address,
    kfp_store,
    on_node,
    prerequisites,
    running,
    stale_node_images,
)
from tests.support.deploy_tools import CHART, REPO, run, tool
from tests.support.docker_engine import DOCKER


@pytest.fixture(scope="package")
def cluster():
    """The cluster of `make cluster-up` (reused if running; else started, and stopped after the
    last test under tests/cluster/: its control plane and pods would take CPU from the tests after)."""
    reused = running()
    env = {**os.environ, "KUBECTL": tool("kubectl"), "PYTHON": str(REPO / ".venv" / "bin" / "python")}
    if not Path(env["PYTHON"]).exists():
        env.pop("PYTHON")
    if not reused:
        started = time.monotonic()
        last = collections.deque(maxlen=15)
        with subprocess.Popen(
            ["bash", str(REPO / "scripts" / "cluster" / "up.sh")],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        ) as proc:
            for line in proc.stdout:
                print(line, end="", flush=True)
                last.append(line.rstrip())
        if proc.returncode != 0:
            # Its last lines in the message: every test of the lane repeats it, so a log's tail has it.
            pytest.fail(f"`make cluster-up` failed (logs: {RUN / 'logs'}); its last lines:\n" + "\n".join(last))
        print(f"cluster up in {time.monotonic() - started:.0f} s")
    yield Cluster(KUBECONFIG)
    if not reused:
        subprocess.run(["bash", str(REPO / "scripts" / "cluster" / "down.sh")], env=env, timeout=600, check=False)


@pytest.fixture(scope="package")
def node_images(cluster, cpu_images):
    """Load the CPU images a test names into the node (`docker save | ctr images import`) once.

    They stay in the node's containerd (under the cluster's run folder) across sessions: an
    import of the 6.2 GB runtime image takes about 2 minutes. Images of other tags (older inputs)
    are removed first, so the disk holds one generation. The missing images go in one `docker
    save`, which writes the layers they share (all but the last few hundred MB) once."""
    command = ctr()
    keep = {f"docker.io/{cpu_images[name]}" for name in NODE_IMAGES}
    stale = stale_node_images(
        subprocess.run([*command, "images", "ls"], capture_output=True, text=True, check=True).stdout, keep
    )
    if stale:
        subprocess.run([*command, "images", "rm", "--sync", *stale], capture_output=True, check=False)

    def load(*names: str) -> list[str]:
        refs = [cpu_images[name] for name in names]
        present = subprocess.run([*command, "images", "ls", "-q"], capture_output=True, text=True, check=True).stdout
        missing = [ref for ref in refs if f"docker.io/{ref}" not in present.split()]
        if missing:
            _check_free_space(cpu_images, missing)
            script = REPO / "scripts" / "cluster" / "load-image.sh"
            out = run(["bash", str(script), *missing], timeout=1800, env={**cpu_images.engine.env(), "DOCKER": DOCKER})
            print(out.stdout.strip())
        return refs

    return load


def _check_free_space(cpu_images, refs: list[str]) -> None:
    """The node keeps an image twice (its layers and their unpacked snapshot) on the disk the
    builds and clones share; the kubelet does not evict for disk here (scripts/cluster/cluster.py),
    so a full disk would surface as odd container errors: fail before, with the numbers. (Layers
    the node already has are stored once, so this asks for more than an import of a sibling
    image takes: 0.6 GB for the deepspeed image beside the runtime one.)"""
    size = max(
        int(cpu_images.engine.docker("image", "inspect", "--format", "{{.Size}}", ref).stdout.strip()) for ref in refs
    )
    need = 2 * size + 2 * 1024**3
    free = shutil.disk_usage(RUN).free
    if free < need:
        pytest.fail(
            f"loading {', '.join(refs)} ({size / 1e9:.1f} GB) into the node needs about {need / 1e9:.0f} GB free on "
            f"the disk of {RUN}; {free / 1e9:.1f} GB are: free space (old clones, `docker builder prune`) and rerun"
        )


@pytest.fixture(scope="package")
def release(cluster, cpu_images, node_images) -> Release:
    """The chart installed (or upgraded in place) into `kubeflow`, MLflow running: on the chart's
    own PostgreSQL with basic-auth, as the chart's defaults run it, its data on a host volume that
    goes with the cluster's state (`make cluster-down`). A cluster started without KFP's parts has
    no PostgreSQL image (it is built with KFP's): MLflow on SQLite there, auth off."""
    node_images("mlflow", "runtime")  # the runtime image: the hook that makes the chart's passwords
    namespace = cluster.namespace(CHART_NAMESPACE)
    prerequisites(cluster, namespace)
    database = "postgresql" if on_node(POSTGRESQL_IMAGE) else "sqlite"
    claim = cluster.kubectl("get", "pvc", f"data-{RELEASE}-postgresql-0", "-n", namespace, check=False)
    if database == "postgresql" and claim.returncode != 0:
        folder = RUN / "volumes" / f"{RELEASE}-postgresql"
        folder.mkdir(parents=True, exist_ok=True)
        database_volume(cluster, folder, namespace)
    if database == "sqlite":
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "mlflow-backend", "namespace": namespace},
                "stringData": {"MLFLOW_BACKEND_STORE_URI": "sqlite:////tmp/mlflow.db"},
            }
        )
    args = tuple(install_args(cpu_images, database=database))
    cluster.helm("upgrade", "--install", RELEASE, str(CHART), *args)
    if database == "postgresql":  # KFP's MLflow plugin signs in as the steps (docs/deploy.md)
        steps = cluster.get("secret", "invfold-mlflow-auth", "-n", namespace)["data"]
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "kfp-mlflow-credentials", "namespace": namespace},
                "data": steps,
            }
        )
    return Release(RELEASE, args, auth=database == "postgresql")


@pytest.fixture(scope="package")
def kfp_host(cluster) -> str:
    """KFP's API server on the running cluster (make cluster-up installs it)."""
    return kfp_api_address(cluster)


SAMPLE = REPO / "src" / "invfold" / "data"


@pytest.fixture(scope="package")
def lane_data(cluster) -> str:
    """The sample (and a few of its chains for design runs) under a fresh prefix of KFP's store."""
    prefix = f"{CHART_PREFIX}/lane-data/{uuid.uuid4().hex[:8]}"
    s3 = kfp_store(cluster)
    for name in ("sample_chain_set.jsonl.gz", "sample_chain_set_splits.json"):
        s3.upload_file(str(SAMPLE / name), KFP_BUCKET, f"{prefix}/{name}")
    with gzip.open(SAMPLE / "sample_chain_set.jsonl.gz", "rt") as fh:
        first = [next(fh) for _ in range(DESIGN_STRUCTURES)]
    s3.put_object(Bucket=KFP_BUCKET, Key=f"{prefix}/design_set.jsonl", Body="".join(first).encode())
    return f"s3://{KFP_BUCKET}/{prefix}"
