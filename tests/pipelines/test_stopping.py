"""SIGTERM/SIGINT to `invfold run`: every process it started ends with it (the steps KFP's local
runner started, the design shards, the training ranks under the train step, and those a killed
step left orphaned), and the pipeline's MLflow runs end KILLED instead of RUNNING forever.
Real processes throughout: the mechanism on a small tree, then real `invfold run` commands of
the design and training pipelines stopped while their work runs."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from mlflow import MlflowClient

from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.tracking import default_tracking_uri
from invfold.data import SAMPLE_CHAIN_SET
from tests.support.waiting import wait_for

MODEL = "invfold-stopping-test"


def _alive(pid: int, created: float) -> bool:
    """The process (not a later one given the same pid) still runs."""
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _descendants(pid: int) -> dict[int, float]:
    try:
        return {p.pid: p.create_time() for p in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return {}


def _cmdlines(pid: int) -> list[str]:
    found = []
    for proc in psutil.Process(pid).children(recursive=True):
        try:
            found.append(" ".join(proc.cmdline()))
        except psutil.Error:
            pass
    return found


DRIVER = """
import json, os, signal, subprocess, sys, time
import psutil
from invfold.pipelines.stopping import Signalled, stop_on_signal

sleeper = "import time; time.sleep(300)"
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
child = subprocess.Popen([sys.executable, "-c", (
    "import subprocess, sys, time\\n"
    f"subprocess.Popen([sys.executable, '-c', {sleeper!r}])\\n"
    f"subprocess.Popen([sys.executable, '-c', {stubborn!r}])\\n"
    "time.sleep(300)\\n"
)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while len(psutil.Process(child.pid).children()) < 2:
    time.sleep(0.1)
time.sleep(1)  # the stubborn one has set its handler
tree = {p.pid: p.create_time() for p in psutil.Process().children(recursive=True)}
previous, start, caught = signal.getsignal(signal.SIGINT), time.monotonic(), None
try:
    with stop_on_signal(grace_s=2.0):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(60)  # interrupted by the handler
except Signalled as stop:
    caught = stop.signum
child.wait(timeout=10)
print(json.dumps({"tree": tree, "caught": caught, "seconds": time.monotonic() - start,
                  "restored": signal.getsignal(signal.SIGINT) is previous}))
"""


def test_a_signal_stops_every_descendant_orphans_and_stubborn_ones_included():
    """A child with two children of its own, one of which ignores SIGTERM: SIGINT to the process
    (a real one of its own, so that nothing of the test session's is stopped) ends all three
    (SIGKILL after the grace period for the stubborn one; the others are orphaned when their
    parent ends first) and raises Signalled; the handlers are restored after."""
    done = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert len(result["tree"]) == 3 and result["caught"] == signal.SIGINT and result["restored"]
    assert result["seconds"] < 30
    survivors = [pid for pid, created in result["tree"].items() if _alive(int(pid), created)]
    assert not survivors, f"still running after the stop: {survivors}"


@pytest.fixture(scope="module")
def registered(tmp_path_factory) -> dict:
    """A tiny autoregressive model registered as the champion in a local MLflow store, and a
    structure set large enough that the design shards are still working when the signal comes."""
    root = tmp_path_factory.mktemp("stopping")
    runs = root / "runs"
    runs.mkdir()
    uri = default_tracking_uri(runs)
    torch.manual_seed(0)
    save_model(root / "model.pt", InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval())
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("register"), run_name="register")
    client.log_artifact(run.info.run_id, str(root / "model.pt"), "model_pt")
    client.set_terminated(run.info.run_id)
    client.create_registered_model(MODEL)
    version = client.create_model_version(MODEL, f"runs:/{run.info.run_id}/model_pt", run.info.run_id)
    client.set_registered_model_alias(MODEL, "champion", version.version)
    with gzip.open(SAMPLE_CHAIN_SET, "rt") as fh:
        lines = [line.strip() for line in fh][:40]
    structures = root / "chains.jsonl"
    structures.write_text("\n".join(lines) + "\n")
    return {"runs": runs, "uri": uri, "structures": str(structures)}


def _stop_when(proc: subprocess.Popen, marker: str, sig: int, timeout_s: float, working=None) -> dict[int, float]:
    """Send `sig` to `proc` once a descendant's command line holds `marker` (and `working()`
    says it is at work); returns every descendant seen up to then (pid -> start time)."""
    seen: dict[int, float] = {}

    def started():
        seen.update(_descendants(proc.pid))
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        return any(marker in line for line in _cmdlines(proc.pid)) and (working is None or working())

    wait_for(started, timeout_s, f"a process running {marker}")
    time.sleep(2)  # into its work
    seen.update(_descendants(proc.pid))
    proc.send_signal(sig)
    return seen


def _invfold_run(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "invfold", "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_a_design_run_stops_its_shards(registered, sig, status):
    runs, uri = registered["runs"], registered["uri"]
    proc = _invfold_run(
        ["--pipeline", "design", "--data", registered["structures"], "--model", f"models:/{MODEL}@champion"]
        + ["--shards", "2", "--num-sequences", "8", "--score-orders", "8", "--threads", "1"]
        + ["--experiment", f"design-stopped-{sig.name}", "--runs-dir", str(runs), "--tracking-uri", uri]
    )
    seen = _stop_when(proc, "design_shard", sig, timeout_s=400)
    out, err = proc.communicate(timeout=120)
    survivors = [pid for pid, created in seen.items() if _alive(pid, created)]
    assert not survivors, f"still running after invfold run ended: {survivors}"
    assert proc.returncode == status, err[-3000:]  # not -15: ended by its own exit, not the signal's
    assert f"invfold run: error: stopped by {sig.name}: every process of the run ended" in err
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(f"design-stopped-{sig.name}")
    if experiment is not None:  # the shards record nothing until gather; whatever was opened is closed
        assert all(r.info.status != "RUNNING" for r in client.search_runs([experiment.experiment_id]))


@pytest.mark.slow
def test_sigterm_to_a_training_run_stops_its_ranks_and_ends_its_mlflow_runs_killed(tmp_path):
    runs, uri = tmp_path / "runs", default_tracking_uri(tmp_path / "runs")
    proc = _invfold_run(
        ["--preset", "tiny", "--max-steps", "100000", "--time-budget", "600", "--nproc", "2", "--threads", "1"]
        + ["--experiment", "train-stopped", "--runs-dir", str(runs), "--no-cache"]
    )

    def training():  # the ranks have taken steps: SIGTERM reaches their loop
        return any(p.stat().st_size for p in runs.glob("pipeline_root/*/train-op/model/metrics.jsonl"))

    seen = _stop_when(proc, "rank_entry", signal.SIGTERM, timeout_s=500, working=training)
    out, err = proc.communicate(timeout=180)
    survivors = [pid for pid, created in seen.items() if _alive(pid, created)]
    assert not survivors, f"still running after invfold run ended: {survivors}"
    assert proc.returncode == 143, err[-3000:]
    assert "stopped by SIGTERM: every process of the run ended; MLflow runs " in err
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("train-stopped")
    statuses = {
        r.data.tags.get("invfold.step", "pipeline"): r.info.status
        for r in client.search_runs([experiment.experiment_id])
    }
    assert statuses["pipeline"] == "KILLED" and statuses.get("train") in ("KILLED", "FAILED"), statuses
    assert "RUNNING" not in statuses.values(), statuses
    parent = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    assert parent[0].data.tags["invfold.pipeline_status"] == "stopped by SIGTERM"
    # the ranks were asked to checkpoint before they left (the SIGTERM path of the trainer)
    assert list(Path(runs, "checkpoints").glob("*/step-*/COMPLETE")), err[-3000:]
