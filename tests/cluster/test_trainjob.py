"""TrainJobs made by the train step's own build_trainjob, for each strategy and node count, against
the real Kubeflow Trainer v2.3 webhooks and TrainJob CRD with the chart's runtimes installed; and
TrainJobs of every strategy (DDP, DeepSpeed, Horovod; 1 and 2 nodes) executing on the node with
the project's CPU image of that strategy, reading the bundled sample from the cluster's SeaweedFS
and handing the model back through it, watched by the train step's own KubernetesLauncher.
(What Trainer makes of every rendering of the runtimes, GPU values and overlays included:
test_runtime_renderings.py.)
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import re
import uuid
from pathlib import Path

import pytest
from kubernetes.utils import parse_quantity

from invfold import storage
from invfold.components.launch import Resources
from invfold.components.launch.base import LaunchError
from invfold.components.launch.kubernetes import KubernetesLauncher
from invfold.components.launch.step import checkpoint_location
from invfold.components.launch.trainjob import (
    RUN_LABEL,
    WORKSPACE_MOUNT,
    ClusterOptions,
    build_trainjob,
    job_name,
    run_label,
)
from tests.support.cluster import (
    NODE_IMAGES,
    PROFILE_LABELS,
    STORE_ENDPOINT,
    TRAINER_CPU,
    WORKSPACE_CLAIM,
    cpu_requests,
    store_keys,
)
from tests.support.cluster import workspace_claim as cluster_workspace_claim
from tests.support.training import read_metrics, summary, tiny_config

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NAMESPACE = "invfold-train"
SECRET = "invfold-storage"


@pytest.fixture(scope="module")
def train_namespace(cluster, release):
    """A namespace that enforces Pod Security `restricted` (what k8s/base and the overlays claim
    for invfold's namespace), with the store's keys in KFP's Secret layout."""
    # A namespace an earlier session deleted may still be terminating (pods in their grace period).
    cluster.wait_for(
        f"namespace {NAMESPACE} deleted",
        lambda: (
            cluster.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0
            or cluster.get("namespace", NAMESPACE)["status"].get("phase") != "Terminating"
        ),
        660,
        interval=5,
    )
    ns = cluster.namespace(
        NAMESPACE,
        {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
            **PROFILE_LABELS,
        },
    )
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": ns},
            "stringData": store_keys(cluster),
        }
    )
    room_for_two_trainers(cluster)
    yield ns
    cluster.delete_namespace(ns)


def room_for_two_trainers(cluster) -> None:
    """A 2-node job's pods must fit beside what the cluster already runs: otherwise each 2-node
    test would wait out the launcher's unschedulable timeout and fail on `Insufficient cpu`."""
    needed = 2 * parse_quantity(TRAINER_CPU)

    def free():
        allocatable, requested, _ = cpu_requests(cluster)
        return allocatable - requested >= needed

    def explain():
        allocatable, requested, lines = cpu_requests(cluster)
        return f"the node has {allocatable} CPU, {requested} requested; needed {needed} more:\n" + "\n".join(lines)

    cluster.wait_for("room on the node for a 2-node TrainJob", free, 120, interval=5, explain=explain)


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("strategy", ["ddp", "deepspeed", "horovod"])
def test_trainers_webhook_accepts_every_strategys_trainjob(cluster, release, train_namespace, strategy, nodes):
    """build_trainjob's manifest for each strategy and node count, against the chart's runtimes:
    the TrainJob CRD's schema and CEL rules and Trainer's validating webhook (which checks the
    runtime patches against the referenced runtime) answer on a server-side dry run."""
    cfg = tiny_config("s3://invfold/prepared", "/tmp/train", strategy=strategy, checkpoint_dir="/workspace/ckpt")
    options = ClusterOptions(
        namespace=train_namespace,
        storage_root="s3://invfold/jobs",
        storage_secret=SECRET,
        storage_endpoint="http://seaweedfs.kubeflow:8333",
        node_selector={"kubernetes.io/os": "linux"},
        workspace_pvc=WORKSPACE_CLAIM,
    )
    name = job_name(strategy, "cluster-lane")
    manifest = build_trainjob(name, cfg, Resources(nodes=nodes, procs_per_node=2), options, "s3://invfold/out")
    dry_run = ("create", "--dry-run=server", "-o", "json", "-f", "-")
    out = cluster.kubectl(*dry_run, input=json.dumps(manifest), check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["spec"]["runtimeRef"]["name"] == manifest["spec"]["runtimeRef"]["name"]
    # The server refuses what its schema does not allow: the check can fail.
    bad = {**manifest, "spec": {**manifest["spec"], "trainer": {**manifest["spec"]["trainer"], "numNodes": "two"}}}
    refused = cluster.kubectl(*dry_run, input=json.dumps(bad), check=False)
    assert refused.returncode != 0 and "numNodes" in refused.stderr, refused.stderr


@pytest.fixture(scope="module")
def store_from_here(cluster):
    """This process's S3 client pointed at the cluster's SeaweedFS by its pod address (the
    Service's name resolves only in pods), with KFP's admin keys; restored afterwards."""
    ip = cluster.kubectl(
        "-n", "kubeflow", "get", "pods", "-l", "app=seaweedfs", "-o", "jsonpath={.items[0].status.podIP}"
    ).stdout.strip()  # fmt: skip
    keys = store_keys(cluster)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ENDPOINT_URL", f"http://{ip}:8333")
        patch.setenv("AWS_ACCESS_KEY_ID", keys["accesskey"])
        patch.setenv("AWS_SECRET_ACCESS_KEY", keys["secretkey"])
        storage.forget_s3_clients()
        yield
    storage.forget_s3_clients()


def lane_options(namespace: str, run: str, **settings) -> ClusterOptions:
    """The train step's cluster settings for one run of the lane: KFP's store, its keys' Secret,
    the root under the namespace's private prefix (the only keys a profile may write)."""
    return ClusterOptions(
        namespace=namespace,
        storage_root=store_root(namespace),
        storage_secret=SECRET,
        storage_endpoint=STORE_ENDPOINT,
        pipeline_run_id=run,
        **settings,
    )


def store_root(namespace: str) -> str:
    return f"s3://mlpipeline/private/{namespace}/invfold"


def launch_error(cluster, options: ClusterOptions, cfg) -> str:
    """The message the train step's launcher fails with for a 1-node job of `cfg`."""
    api, pods_api = kube_apis(cluster)
    with pytest.raises(LaunchError) as failed:
        KubernetesLauncher(options, api=api, pods_api=pods_api).run(cfg, Resources(nodes=1, procs_per_node=1))
    return str(failed.value)


def kube_apis(cluster):
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(cluster.kubeconfig))
    return client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)


@pytest.fixture(scope="module")
def workspace_claim(cluster, train_namespace, tmp_path_factory):
    """The workspace claim in the lane's namespace (tests/support/cluster.py); yields its host folder."""
    with cluster_workspace_claim(cluster, train_namespace, tmp_path_factory.mktemp("workspace")) as folder:
        yield folder


@pytest.mark.parametrize(
    ("strategy", "nodes"), [("ddp", 1), ("ddp", 2), ("deepspeed", 1), ("deepspeed", 2), ("horovod", 1), ("horovod", 2)]
)
def test_a_trainjob_of_each_strategy_trains_on_the_node_and_the_step_fetches_its_model(
    cluster,
    release,
    train_namespace,
    node_images,
    workspace_claim,
    sample_prepared,
    store_from_here,
    tmp_path,
    strategy,
    nodes,
):
    """The train step's launcher, run here against the real cluster: it creates the TrainJob on
    the chart's runtime for the strategy (DDP: torchrun, rendezvous across pods for 2 nodes;
    DeepSpeed and Horovod: mpirun in the launcher pod reaching the node pod's sshd on 2222 over
    Trainer's keys and hostfile, or the launcher alone for 1 node) with the project's CPU image of
    that strategy; Trainer and JobSet start the pods, they read the prepared sample from
    SeaweedFS, checkpoint (DDP, Horovod: to the store; DeepSpeed: to the shared workspace claim)
    and hand the model over through the store, and the launcher's watch loop sees the job complete
    and fetches the output folder."""
    node_images(*NODE_IMAGES)
    run = f"lane-{strategy}-{nodes}-{uuid.uuid4().hex[:8]}"  # the store outlives a session: nothing to resume from
    root = store_root(train_namespace)
    data = f"{root}/prepared-{run}"
    storage.upload_folder(sample_prepared, data)
    # Where the train step puts them: the store, or the claim for DeepSpeed's local files.
    checkpoints = checkpoint_location(
        strategy,
        remote=True,
        pipeline_run_id=run,
        checkpoint_root="",
        storage_root=root,
        workspace_pvc=WORKSPACE_CLAIM,
        local_root="",
    )
    cfg = tiny_config(data, tmp_path / "out", strategy=strategy, checkpoint_dir=checkpoints)
    options = lane_options(
        train_namespace,
        run,
        poll_s=2.0,
        timeout_s=900.0,
        unschedulable_timeout_s=300.0,
        workspace_pvc=WORKSPACE_CLAIM,
    )
    api, pods_api = kube_apis(cluster)
    result = KubernetesLauncher(options, api=api, pods_api=pods_api).run(cfg, Resources(nodes=nodes, procs_per_node=1))

    job = cluster.get("trainjob", result.job_name, "-n", train_namespace)
    assert job["spec"]["runtimeRef"]["name"].startswith(f"invfold-{strategy}")
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"]), job["status"]
    out = Path(cfg.out)
    assert (out / "model.pt").is_file()
    done = summary(out)
    assert done["world_size"] == nodes and done["step"] == cfg.max_steps, done
    losses = [r["loss"] for r in read_metrics(out)]
    assert losses and all(math.isfinite(x) for x in losses)
    if checkpoints.startswith(f"{WORKSPACE_MOUNT}/"):  # the claim's folder is on this machine
        folder = workspace_claim / checkpoints.removeprefix(f"{WORKSPACE_MOUNT}/")
        written = {f"{p.parent.name}/{p.name}" for p in folder.glob("step-*/COMPLETE")}
    else:
        fs, path = storage.filesystem(checkpoints)
        written = {f.rsplit("/", 2)[-2] + "/" + f.rsplit("/", 1)[-1] for f in fs.find(path)}
    assert {"step-00000004/COMPLETE", "step-00000008/COMPLETE"} <= written, written


def test_a_trainjob_whose_pods_cannot_be_placed_fails_with_the_schedulers_reason(
    cluster, release, train_namespace, node_images, sample_prepared, store_from_here, tmp_path
):
    """A GPU pool label no node carries (docs/deploy.md: a missing label leaves the pods Pending):
    the launcher reports the scheduler's own reason after its bounded wait, deletes the job and
    fails, instead of waiting out the TrainJob's timeout."""
    node_images("runtime")
    run = f"pending-{uuid.uuid4().hex[:8]}"
    root = store_root(train_namespace)
    cfg = tiny_config(f"{root}/prepared-{run}", tmp_path / "out", strategy="ddp")
    options = lane_options(
        train_namespace,
        run,
        node_selector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
        poll_s=2.0,
        timeout_s=600.0,
        unschedulable_timeout_s=10.0,
    )
    message = launch_error(cluster, options, cfg)
    assert "could not be scheduled" in message and "node affinity/selector" in message, message
    labelled = f"{RUN_LABEL}={run_label(run)}"
    assert f"TrainJob {train_namespace}/invfold-ddp-" in message
    (job,) = re.findall(rf"TrainJob {train_namespace}/(invfold-ddp-[a-z0-9-]+)", message)
    # gone, with its JobSet: not left deleting while the Trainer makes the JobSet again (KubernetesLauncher._delete)
    cluster.wait_for(
        "the job and its JobSet gone",
        lambda: (
            not cluster.get("trainjobs", "-n", train_namespace, "-l", labelled)["items"]
            and job not in {j["metadata"]["name"] for j in cluster.get("jobsets", "-n", train_namespace)["items"]}
        ),
        120,
    )


def test_a_trainjob_whose_image_the_node_cannot_pull_fails_with_the_kubelets_reason(
    cluster, release, train_namespace, node_images, store_from_here, tmp_path
):
    """An image tag no registry the node reaches has (here: none is reachable, as on an air-gapped
    cluster): the pod is placed, the kubelet reports the pull failure, and the launcher fails the
    step with that reason after its bounded wait instead of waiting out the TrainJob's timeout."""
    run = f"noimage-{uuid.uuid4().hex[:8]}"
    root = store_root(train_namespace)
    cfg = tiny_config(f"{root}/prepared-{run}", tmp_path / "out", strategy="ddp")
    options = lane_options(
        train_namespace,
        run,
        image="invfold-test/invfold-runtime:no-such-tag",
        poll_s=2.0,
        timeout_s=600.0,
        unschedulable_timeout_s=10.0,
    )
    message = launch_error(cluster, options, cfg)
    assert "could not start" in message and "no-such-tag" in message and "imagePullSecrets" in message, message


def test_a_killed_trainer_pod_is_replaced_and_its_ranks_resume_from_the_stores_checkpoint(
    cluster, release, train_namespace, node_images, sample_prepared, store_from_here, tmp_path
):
    """A trainer pod deleted mid-run (a node drained, a spot VM reclaimed): its ranks get SIGTERM and
    checkpoint, the peer rank loses its collective and exits; the Job controller (Kubernetes'
    default backoffLimit 6: the runtimes set no failure policy) starts new pods, whose ranks resume
    from the last checkpoint in the store instead of step 0, and the TrainJob completes, as
    docs/deploy.md says. The launcher sees one job from start to finish."""
    node_images("runtime")
    run = f"killed-{uuid.uuid4().hex[:8]}"
    root = store_root(train_namespace)
    data = f"{root}/prepared-{run}"
    storage.upload_folder(sample_prepared, data)
    checkpoints = f"{root}/checkpoints/{run}"
    options = lane_options(
        train_namespace,
        run,
        poll_s=2.0,
        timeout_s=600.0,
    )
    api, pods_api = kube_apis(cluster)
    fs, path = storage.filesystem(checkpoints)
    cfg = tiny_config(
        data, tmp_path / "out", strategy="ddp", checkpoint_dir=checkpoints, max_steps=60, checkpoint_every=2
    )
    launcher = KubernetesLauncher(options, api=api, pods_api=pods_api)
    job = concurrent.futures.ThreadPoolExecutor(1).submit(launcher.run, cfg, Resources(nodes=2, procs_per_node=1))
    cluster.wait_for(
        "a first checkpoint", lambda: fs.exists(f"{path}/step-00000002/COMPLETE") or job.done(), 300, interval=0.5
    )
    assert not job.done(), "the job finished before a pod could be killed"
    labelled = f"{RUN_LABEL}={run_label(run)}"
    name = cluster.get("trainjobs", "-n", train_namespace, "-l", labelled)["items"][0]["metadata"]["name"]
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    killed = {p["metadata"]["name"] for p in cluster.get("pods", "-n", train_namespace, "-l", selector)["items"]}
    cluster.kubectl("delete", "pod", "-n", train_namespace, "-l", selector, "--wait=false")

    result = job.result(timeout=540)
    replaced = {p["metadata"]["name"] for p in cluster.get("pods", "-n", train_namespace, "-l", selector)["items"]}
    assert replaced and not replaced & killed, (killed, replaced)
    steps = [r["step"] for r in read_metrics(Path(result.out))]  # the replaced pods' own record
    assert steps[0] > 1, steps[:3]  # resumed, not restarted (older checkpoints are pruned by then)
    assert summary(Path(result.out))["step"] == 60


def test_deleting_the_steps_pod_deletes_its_trainjob(
    cluster, release, train_namespace, node_images, sample_prepared, store_from_here, tmp_path
):
    """The TrainJob is owned by the train step's pod (downward API POD_NAME / POD_UID): deleting
    that pod (a cancelled run, a deleted workflow) lets Kubernetes' garbage collector delete the
    job and its pods, so nothing keeps training for a step that is gone. A pause pod stands for the
    step's pod (the launcher runs here, outside the cluster)."""
    node_images("runtime")
    run = f"owner-{uuid.uuid4().hex[:8]}"
    step_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"step-{run}", "namespace": train_namespace},
        "spec": {
            "containers": [
                {
                    "name": "step",
                    "image": "invfold.test/pause:1",
                    "imagePullPolicy": "Never",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ]
        },
    }
    cluster.apply(step_pod)
    uid = cluster.get("pod", step_pod["metadata"]["name"], "-n", train_namespace)["metadata"]["uid"]
    root = store_root(train_namespace)
    data = f"{root}/prepared-{run}"
    storage.upload_folder(sample_prepared, data)
    options = lane_options(
        train_namespace,
        run,
        poll_s=1.0,
        timeout_s=600.0,
        owner_pod_name=step_pod["metadata"]["name"],
        owner_pod_uid=uid,
    )
    checkpoints = f"{root}/checkpoints/{run}"
    cfg = tiny_config(
        data, tmp_path / "out", strategy="ddp", max_steps=100_000, checkpoint_dir=checkpoints, checkpoint_every=2
    )
    api, pods_api = kube_apis(cluster)
    launcher = KubernetesLauncher(options, api=api, pods_api=pods_api)
    job = concurrent.futures.ThreadPoolExecutor(1).submit(launcher.run, cfg, Resources(nodes=1, procs_per_node=1))
    labelled = f"{RUN_LABEL}={run_label(run)}"
    jobs = cluster.wait_for(
        "the TrainJob", lambda: cluster.get("trainjobs", "-n", train_namespace, "-l", labelled)["items"], 120
    )
    assert jobs[0]["metadata"]["ownerReferences"][0]["uid"] == uid
    # Training, not still in torchrun's rendezvous (there it does not stop on SIGTERM: see docs/deploy.md).
    fs, path = storage.filesystem(checkpoints)
    cluster.wait_for("a first checkpoint", lambda: fs.exists(f"{path}/step-00000002/COMPLETE"), 300, interval=0.5)
    cluster.kubectl("delete", "pod", step_pod["metadata"]["name"], "-n", train_namespace, "--wait=false")
    cluster.wait_for(
        "the TrainJob garbage-collected",
        lambda: not cluster.get("trainjobs", "-n", train_namespace, "-l", labelled)["items"],
        120,
    )
    pods_of_job = f"jobset.sigs.k8s.io/jobset-name={jobs[0]['metadata']['name']}"
    cluster.wait_for(
        "its pods stopped", lambda: not cluster.get("pods", "-n", train_namespace, "-l", pods_of_job)["items"], 120
    )
    with pytest.raises(Exception):  # noqa: B017 - the job vanished under the watch loop (a 404)
        job.result(timeout=60)
