"""scripts/cluster/cluster.py's decisions that a run of the lane does not reach: a cluster whose
processes ended without `down` (its etcd still there), and a running cluster asked for the other
store. The calls into Kubernetes are replaced here; the lane runs the real ones."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

import pytest

from tests.support.paths import REPO


@pytest.fixture
def cluster_py(tmp_path, monkeypatch):
    monkeypatch.setenv("INVFOLD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("INVFOLD_CLUSTER_KFP", raising=False)
    spec = importlib.util.spec_from_file_location("cluster_script", REPO / "scripts" / "cluster" / "cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Started(Exception):
    """Raised where `up` would start the control plane."""


def up_on_a_stopped_cluster(cluster_py, monkeypatch) -> list[str]:
    """What `up` does on a cluster with no process running, up to where it starts one."""
    calls = []
    monkeypatch.setattr(cluster_py, "healthy", lambda: False)
    monkeypatch.setattr(cluster_py, "pid_of", lambda name: None)
    monkeypatch.setattr(cluster_py, "down", lambda: calls.append("down"))

    def make_pki():
        calls.append("start")
        raise Started

    monkeypatch.setattr(cluster_py, "make_pki", make_pki)
    with pytest.raises(Started):
        cluster_py.up()
    return calls


def test_a_cluster_never_stopped_is_taken_down_before_it_starts(cluster_py, monkeypatch):
    (cluster_py.RUN / "etcd").mkdir(parents=True)
    assert up_on_a_stopped_cluster(cluster_py, monkeypatch) == ["down", "start"]


def test_a_stopped_cluster_starts_without_a_down(cluster_py, monkeypatch):
    assert up_on_a_stopped_cluster(cluster_py, monkeypatch) == ["start"]


LANE = {"app": "seaweedfs"}
KFP = {"app": "seaweedfs", "application-crd-id": "kubeflow-pipelines"}


def start_store(cluster_py, monkeypatch, held: dict | None, kfp: bool, calls: list[str]) -> None:
    """`start_store` with the store `held` (its Deployment's selector; None: none) and KFP asked
    for or not; the variants it starts go into `calls`, in order."""
    if not kfp:
        monkeypatch.setenv("INVFOLD_CLUSTER_KFP", "0")

    def kubectl(*args, check=True, input=None):
        if held is None:
            return subprocess.CompletedProcess(args, 1, "", 'deployments.apps "seaweedfs" not found')
        return subprocess.CompletedProcess(args, 0, json.dumps(held), "")

    monkeypatch.setattr(cluster_py, "kubectl", kubectl)
    monkeypatch.setattr(cluster_py, "start_pipelines", lambda: calls.append("kfp"))
    monkeypatch.setattr(cluster_py, "start_object_store", lambda: calls.append("lane"))
    cluster_py.start_store()


@pytest.mark.parametrize(
    ("held", "kfp", "started"),
    [(None, False, "lane"), (None, True, "kfp"), (LANE, False, "lane"), (KFP, True, "kfp")],
    ids=["none-lane", "none-kfp", "lane-lane", "kfp-kfp"],
)
def test_the_store_asked_for_starts_where_none_or_the_same_is_held(cluster_py, monkeypatch, held, kfp, started):
    calls = []
    start_store(cluster_py, monkeypatch, held, kfp, calls)
    assert calls == [started]


@pytest.mark.parametrize(
    ("held", "kfp"), [(LANE, True), (KFP, False)], ids=["lane-held-kfp-asked", "kfp-held-lane-asked"]
)
def test_a_running_cluster_refuses_the_other_store_with_what_to_do(cluster_py, monkeypatch, held, kfp):
    """Both stores are Deployment `seaweedfs` with selectors that cannot change in place, and
    replacing one would drop what it holds: refused, naming both and the way out, starting neither."""
    calls = []
    with pytest.raises(SystemExit) as refused:
        start_store(cluster_py, monkeypatch, held, kfp, calls)
    message = str(refused.value)
    assert "make cluster-down" in message and "Kubeflow Pipelines" in message and "INVFOLD_CLUSTER_KFP=0" in message
    assert calls == []


def test_down_kills_what_our_containerd_left(cluster_py, tmp_path, monkeypatch):
    """Shims outlive their containerd by design, and a containerd killed without `down` leaves
    its pods' processes in the kubelet's cgroups. (The cgroup tree here is a folder of files: the
    machine's own holds the pods of any cluster running beside this test.)"""
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    shim = subprocess.Popen([*sleep, "-address", str(cluster_py.RUN / "containerd" / "containerd.sock")])
    container = subprocess.Popen(sleep)
    other = subprocess.Popen(sleep)
    cgroups = tmp_path / "cgroup"
    pod = cgroups / "cpu" / "kubepods" / "besteffort" / "pod1"
    pod.mkdir(parents=True)
    (pod / "cgroup.procs").write_text(f"{container.pid}\n")
    monkeypatch.setattr(cluster_py, "CGROUPS", cgroups)
    try:
        cluster_py.kill_leftover_containers()
        assert shim.wait(timeout=10) == -9 and container.wait(timeout=10) == -9
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        for proc in (shim, container, other):
            proc.kill()
