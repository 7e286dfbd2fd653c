"""The launcher against a local stand-in of the TrainJob API (create, follow, succeed, fail, time
out, cancel), one TrainJob actually executed on this machine end to end, and the local backend."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from invfold.components.launch import LaunchError, Resources, select_launcher
from invfold.components.launch.kubernetes import Cancelled, KubernetesLauncher
from invfold.components.launch.local import LocalLauncher
from invfold.components.launch.trainjob import ClusterOptions
from invfold.errors import InputError
from tests.support.trainjob_api import FakeClock, TrainJobApi, launcher, tiny


def test_completed_job_is_followed_to_its_end_and_its_outputs_fetched(tmp_path):
    api = TrainJobApi("complete", polls_until_done=3)
    k8s = launcher(api, tmp_path)
    result = k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources(nodes=2, procs_per_node=1))
    assert result.backend == "kubernetes" and result.job_name.startswith("invfold-ddp-")
    assert api.gets == 3 and k8s.fetched == [f"file://{tmp_path}/store/runs/{result.job_name}"]
    assert (tmp_path / "out" / "model.pt").exists()
    assert api.deleted == []  # a finished job stays for inspection; the owner reference removes it
    created = api.created[0]
    assert created["metadata"]["namespace"] == "team-a"
    assert created["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_failed_job_surfaces_the_trainer_reason_and_is_deleted(tmp_path):
    api = TrainJobApi("fail", reason="DeadlineExceeded", message="TrainJob exceeded its activeDeadlineSeconds")
    k8s = launcher(api, tmp_path)
    with pytest.raises(LaunchError, match="failed: DeadlineExceeded: TrainJob exceeded its activeDeadlineSeconds"):
        k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources())
    assert api.deleted == [api.created[0]["metadata"]["name"]] and k8s.fetched == []


def test_job_that_never_finishes_is_deleted_at_the_timeout(tmp_path):
    clock = FakeClock()
    api = TrainJobApi("hang")
    k8s = launcher(api, tmp_path, clock, timeout_s=60.0)
    with pytest.raises(LaunchError, match="did not finish within 60 s"):
        k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources())
    assert clock.now >= 60.0 and api.gets == 13
    assert api.deleted == [api.created[0]["metadata"]["name"]]


def test_cancelled_step_deletes_its_job(tmp_path):
    api = TrainJobApi("hang", on_get=lambda n: n == 2 and os.kill(os.getpid(), signal.SIGTERM))
    k8s = launcher(api, tmp_path)
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Cancelled, match="cancelled by signal"):
        k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources())
    assert api.deleted == [api.created[0]["metadata"]["name"]]
    assert api.propagation == ["Background"]  # the foreground would never end: KubernetesLauncher._delete
    assert signal.getsignal(signal.SIGTERM) is previous


def test_missing_storage_root_is_a_clear_error(tmp_path):
    k8s = KubernetesLauncher(ClusterOptions(namespace="a"), api=TrainJobApi())
    with pytest.raises(LaunchError, match="storage root"):
        k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources())


def test_a_trainjob_executed_for_real_trains_and_hands_its_outputs_back(prepared_sample, tmp_path, monkeypatch):
    """The stand-in runs the TrainJob's own command (torchrun + trainjob_entry, 2 processes) with
    object storage on file://; the step gets model.pt, metrics and summary back."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    api = TrainJobApi("execute")
    opts = ClusterOptions(
        namespace="team-a", storage_root=f"file://{tmp_path}/store", pipeline_run_id="run-8", poll_s=0.01
    )
    cfg = tiny(prepared_sample, tmp_path / "pod-local", checkpoint_dir=f"file://{tmp_path}/store/checkpoints/run-8")
    result = KubernetesLauncher(opts, api=api).run(cfg, Resources(nodes=1, procs_per_node=2))
    out = Path(result.out)
    assert {"model.pt", "metrics.jsonl", "summary.json"} <= {p.name for p in out.iterdir()}
    store = tmp_path / "store"
    assert (store / "runs" / result.job_name / "model.pt").exists()
    assert any((store / "checkpoints" / "run-8").iterdir())


def test_local_backend_refuses_missing_data_before_starting_processes(tmp_path):
    with pytest.raises(InputError, match=r"no-such-data/index\.json: expected an existing file"):
        LocalLauncher().run(tiny(str(tmp_path / "no-such-data"), tmp_path / "out"), Resources(procs_per_node=1))
    assert not (tmp_path / "out").exists()


def test_local_backend_reports_a_failed_job(tmp_path, monkeypatch, prepared_sample):
    """The processes it starts die at interpreter start (a sitecustomize on their PYTHONPATH exits 3):
    the launcher reports the exit status and where the outputs are."""
    (tmp_path / "crash").mkdir()
    (tmp_path / "crash" / "sitecustomize.py").write_text("raise SystemExit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "crash"))
    with pytest.raises(LaunchError, match="exited with status [1-9]"):
        LocalLauncher().run(tiny(prepared_sample, tmp_path / "out"), Resources(procs_per_node=1))


@pytest.mark.parametrize("env, backend", [({}, "local"), ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "kubernetes")])
def test_backend_follows_where_the_step_runs(env, backend):
    assert select_launcher(env, namespace="a").name == backend
