"""Training on a store whose keys cannot delete.

A real SeaweedFS (`weed server -s3 -iam`, the binary scripts/cluster/build.sh builds for the test
cluster's object store; no cluster is started) on loopback, set up as KFP's manifests set it up,
and a namespace's keys minted as KFP's profile controller mints them (kubeflow/pipelines
manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py:
`create_access_key(UserName=<ns>)`, then `put_user_policy` on
mlpipeline/{artifacts,private-artifacts/<ns>,private/<ns>,shared}/*). 2.16.0 allows s3:Put*,
s3:Get*, s3:List*; 2.17.0 adds s3:DeleteObject and the bucket policy `ensure_bucket_list_policy`,
without which this SeaweedFS refuses a profile's keys even the listing of their own prefix (found
here: `invfold train` stops at its resume check). So the keys that cannot delete are 2.17's
without s3:DeleteObject: a real `invfold train` checkpointing every step with keep_checkpoints 1
finishes, with one warning, every checkpoint kept and the summary saying pruning stopped; with
2.17's rights the old checkpoints go.

The weed here is the lane's build (scripts/cluster/versions.sh SEAWEEDFS_VERSION), not the 4.00
image KFP 2.16.0's manifests run (seaweedfs-deployment.yaml), whose IAM may map the actions otherwise."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cluster import store_client
from tests.support.paths import REPO
from tests.support.processes import stop_group
from tests.support.training import summary

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NO_DELETE = ["s3:Put*", "s3:Get*", "s3:List*"]  # 2.16.0's actions
KFP_2_17 = ["s3:Put*", "s3:Get*", "s3:List*", "s3:DeleteObject"]


def bucket_list_policy() -> dict:
    """2.17.0 sync.py `ensure_bucket_list_policy`, as the profile controller sets it on mlpipeline."""
    bucket = "arn:aws:s3:::mlpipeline"
    own = ["private-artifacts/${aws:username}/*", "private/${aws:username}/*"]
    allow = {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": bucket}
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AllowOwnDeepList",
                **allow,
                "Condition": {"StringLike": {"s3:prefix": [*own, "artifacts/*", "shared/*"]}},
            },
            {"Sid": "AllowHeadBucket", **allow, "Condition": {"StringEquals": {"s3:RequestMethod": "HEAD"}}},
            {
                "Sid": "AllowTopLevelDelimitedBrowse",
                **allow,
                "Condition": {"Null": {"s3:prefix": "true"}, "StringEquals": {"s3:delimiter": "/"}},
            },
            {
                "Sid": "DenyOtherDeepList",
                **allow,
                "Effect": "Deny",
                "Condition": {
                    "StringLike": {"s3:prefix": ["private-artifacts/*", "private/*"]},
                    "StringNotLike": {"s3:prefix": own},
                },
            },
        ],
    }


def resources(namespace: str) -> list[str]:
    return [
        "arn:aws:s3:::mlpipeline/artifacts/*",
        f"arn:aws:s3:::mlpipeline/private-artifacts/{namespace}/*",
        f"arn:aws:s3:::mlpipeline/private/{namespace}/*",
        "arn:aws:s3:::mlpipeline/shared/*",
    ]


def weed_binary() -> Path:
    """The lane's `weed`: CLUSTER_SEAWEEDFS_DIR as scripts/cluster/parts.sh exports it (or the
    environment's, as scripts/cluster/cluster.py reads it), built on demand as `make cluster-up` does."""
    folder = (
        os.environ.get("CLUSTER_SEAWEEDFS_DIR")
        or subprocess.run(
            ["bash", "-c", "source scripts/cluster/parts.sh >/dev/null && echo $CLUSTER_SEAWEEDFS_DIR"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    weed = Path(folder) / "bin" / "weed"
    if not weed.exists():
        proc = subprocess.run(["bash", "scripts/cluster/build.sh", "seaweedfs"], cwd=REPO, timeout=3600)
        if proc.returncode != 0 or not weed.exists():
            pytest.fail(f"`scripts/cluster/build.sh seaweedfs` did not build {weed}")
    return weed


def free_ports(count: int) -> list[int]:
    """Ports p with p + 10000 free as well (weed's gRPC ports)."""
    ports = []
    while len(ports) < count:
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
        if port + 10000 > 65535 or port in ports:
            continue
        try:
            with socket.socket() as b:
                b.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        ports.append(port)
    return ports


WEED_STARTS = 3  # a fresh set of ports each time: another process may take one between free_ports and weed


class WeedExited(Exception):
    """weed stopped before it served S3 (a port taken meanwhile makes it exit at once)."""


def start_weed(weed: Path, root: Path, admin: dict) -> tuple[subprocess.Popen, str, str]:
    """`weed server -s3 -iam` on fresh loopback ports, with KFP's bucket and admin user, serving S3
    with the admin keys; returns (process, s3 url, iam url). The Iceberg and Lance servers that
    `-s3` also starts are off: they would listen on fixed ports (8181, 9101) nothing here uses."""

    (root / "data").mkdir(parents=True)
    master, volume, filer, s3, iam = free_ports(5)
    with open(root / "weed.log", "w") as log:
        proc = subprocess.Popen(
            [str(weed), "server", f"-dir={root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
            + [f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}", "-s3", f"-s3.port={s3}"]
            + ["-s3.port.iceberg=0", "-s3.port.lance=0", "-iam", f"-iam.port={iam}", "-master.volumeSizeLimitMB=64"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    s3_url, iam_url = f"http://127.0.0.1:{s3}", f"http://127.0.0.1:{iam}"
    client = store_client("s3", s3_url, admin["accessKey"], admin["secretKey"], quick=True)
    shell = [str(weed), "shell", f"-master=127.0.0.1:{master}", f"-filer=127.0.0.1:{filer}"]
    commands = (
        "s3.bucket.create --name mlpipeline\n"
        f"s3.configure -user kubeflow-admin -access_key {admin['accessKey']} -secret_key {admin['secretKey']} "
        "-actions Admin -apply\n"
    )
    deadline = time.monotonic() + 180
    while True:
        if proc.poll() is not None:
            raise WeedExited(f"weed exited ({proc.returncode}); the end of {root / 'weed.log'}:\n{log_tail(root)}")
        if time.monotonic() > deadline:
            stop_group(proc, timeout=30)
            pytest.fail(f"weed did not serve S3 with the admin keys in 180 s; the end of its log:\n{log_tail(root)}")
        try:
            subprocess.run(shell, input=commands, capture_output=True, text=True, timeout=120)
            if proc.poll() is None:
                client.head_bucket(Bucket="mlpipeline")
                return proc, s3_url, iam_url
        except Exception:
            time.sleep(2)


def log_tail(root: Path) -> str:
    return (root / "weed.log").read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """SeaweedFS set up as KFP's init does it (kubeflow/pipelines 2.16.0 / 2.17.0
    manifests/kustomize/third-party/seaweedfs/base/seaweedfs/seaweedfs-deployment.yaml: `weed shell`
    `s3.bucket.create --name mlpipeline` and `s3.configure -user kubeflow-admin ... -actions Admin
    -apply`); yields (s3 url, iam url, admin keys)."""

    weed = weed_binary()
    admin = {"accessKey": "kubeflow-admin-" + os.urandom(4).hex(), "secretKey": os.urandom(20).hex()}
    exits = []
    for _ in range(WEED_STARTS):
        try:
            proc, s3_url, iam_url = start_weed(weed, tmp_path_factory.mktemp("seaweedfs"), admin)
            break
        except WeedExited as exited:
            exits.append(str(exited))
    else:
        pytest.fail(f"weed exited before serving S3, {WEED_STARTS} times:\n\n" + "\n\n".join(exits))
    client = store_client("s3", s3_url, admin["accessKey"], admin["secretKey"])
    client.put_bucket_policy(Bucket="mlpipeline", Policy=json.dumps(bucket_list_policy()))
    yield s3_url, iam_url, admin
    stop_group(proc, timeout=30)


def profile_keys(store, namespace: str, actions: list[str]) -> dict[str, str]:
    """Keys for `namespace` minted as KFP's profile controller mints them (sync.py)."""

    _, iam_url, admin = store
    iam = store_client("iam", iam_url, admin["accessKey"], admin["secretKey"])
    key = iam.create_access_key(UserName=namespace)["AccessKey"]
    statement = {"Effect": "Allow", "Action": actions, "Resource": resources(namespace)}
    iam.put_user_policy(
        UserName=namespace,
        PolicyName=f"KubeflowProject{namespace}",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [statement]}),
    )
    time.sleep(2)  # the S3 gateway picks identity changes up from the filer
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}


def train(store, keys: dict, data: str, out: Path, root: str) -> subprocess.CompletedProcess:
    """`invfold train` (one process, the tiny model) checkpointing every step under `root`, keeping one."""
    env = {**os.environ, **keys, "AWS_ENDPOINT_URL": store[0], "OMP_NUM_THREADS": "1"}
    env.pop("AWS_PROFILE", None)
    flags = ["--data", data, "--out", str(out), "--checkpoint-dir", root, "--preset", "tiny", "--max-steps", "6"]
    flags += ["--tokens-per-batch", "1500", "--warmup-steps", "1", "--checkpoint-every", "1", "--keep-checkpoints", "1"]
    flags += ["--validate-every", "0", "--threads", "1", "--procs-per-node", "1"]
    return subprocess.run(
        [sys.executable, "-m", "invfold", "train", *flags], env=env, capture_output=True, text=True, timeout=900
    )


def step_folders(store, keys: dict, namespace: str, name: str) -> list[str]:
    """The checkpoint folders under s3://mlpipeline/private/<namespace>/<name>/ that hold objects."""

    client = store_client("s3", store[0], keys["AWS_ACCESS_KEY_ID"], keys["AWS_SECRET_ACCESS_KEY"])
    prefix = f"private/{namespace}/{name}/"
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="mlpipeline", Prefix=prefix).get("Contents", [])]
    return sorted({key.removeprefix(prefix).split("/", 1)[0] for key in keys})  # folders holding objects


def test_keys_that_cannot_delete_stop_the_pruning_not_the_training(store, sample_prepared, tmp_path):
    keys = profile_keys(store, "team-a", NO_DELETE)
    proc = train(store, keys, sample_prepared, tmp_path / "out", "s3://mlpipeline/private/team-a/ckpt")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stderr.count("refused to delete an old checkpoint") == 1, proc.stderr[-4000:]
    result = summary(tmp_path / "out")
    assert result["step"] == 6 and "no longer pruned" in result["checkpoint_pruning"]
    assert len(step_folders(store, keys, "team-a", "ckpt")) == 6  # every checkpoint kept


def test_kfp_2_17_keys_prune(store, sample_prepared, tmp_path):
    keys = profile_keys(store, "team-b", KFP_2_17)
    proc = train(store, keys, sample_prepared, tmp_path / "out", "s3://mlpipeline/private/team-b/ckpt")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "refused to delete" not in proc.stderr
    assert summary(tmp_path / "out")["checkpoint_pruning"] == "on"
    assert step_folders(store, keys, "team-b", "ckpt") == ["step-00000006"]
