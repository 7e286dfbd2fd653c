"""SIGTERM to one rank: all ranks agree at the next step, checkpoint together and exit non-zero;
a later run resumes from that checkpoint. Checkpoints go to object storage (moto's S3 server on
loopback), where only the COMPLETE marker can make a save atomic."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import psutil
import pytest

from invfold.components.launch.processes import ENTRYPOINT, launch_command
from invfold.components.train import checkpoint as ckpt
from tests.support.training import read_metrics, run_job, summary, tiny_config
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]


def _logged_steps(out) -> int:
    try:
        return len(read_metrics(out))
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def test_sigterm_on_one_rank_checkpoints_all_and_exits_nonzero(synthetic_prepared, tmp_path, s3_server):
    out = tmp_path / "run"
    checkpoints = f"s3://{s3_server.new_bucket()}/run/checkpoints"
    cfg = tiny_config(
        synthetic_prepared,
        out,
        max_steps=100_000,
        time_budget_s=120.0,
        checkpoint_every=0,
        validate_every=0,
        checkpoint_dir=checkpoints,
    )
    out.mkdir()
    cfg.to_json(str(out / "train_config.json"))
    launcher = subprocess.Popen(
        launch_command(cfg, 2, str(out / "train_config.json")), env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    try:
        wait_for(lambda: _logged_steps(out) >= 3, 90, "3 training steps")
        workers = wait_for(
            lambda: [
                p for p in psutil.Process(launcher.pid).children(recursive=True) if ENTRYPOINT in " ".join(p.cmdline())
            ],
            10,
            "2 worker processes",
        )
        assert len(workers) == 2
        rank1 = next(p for p in workers if p.environ().get("RANK") == "1")
        rank1.send_signal(signal.SIGTERM)
        code = launcher.wait(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert code != 0

    done = summary(out)
    assert done["stop_reason"] == "preempted"
    steps = ckpt.complete_steps(checkpoints)
    assert steps == [done["step"]] and read_metrics(out)[-1]["step"] == done["step"]
    state = ckpt.load_torch(f"{ckpt.step_dir(checkpoints, done['step'])}/state.pt")
    assert len(state["trainer"]["rng"]) == 2  # both ranks contributed their RNG state
    assert not (out / "model.pt").exists()

    resumed = tiny_config(
        synthetic_prepared, out, max_steps=done["step"] + 2, validate_every=0, checkpoint_dir=checkpoints
    )
    assert run_job(resumed) == 0
    assert summary(out)["step"] == done["step"] + 2 and (out / "model.pt").exists()


def test_sigkill_on_one_rank_then_the_same_command_resumes_to_the_uninterrupted_weights(synthetic_prepared, tmp_path):
    """No signal handler runs on SIGKILL: the job dies with whatever save was in flight. The same
    command again must resume from the newest COMPLETE checkpoint and end bitwise where a run
    that was never killed ends."""
    import torch

    from invfold.components.model.io import load_model

    options = {"max_steps": 24, "checkpoint_every": 3, "validate_every": 0}
    reference = tiny_config(synthetic_prepared, tmp_path / "uninterrupted", **options)
    assert run_job(reference) == 0

    out = tmp_path / "killed"
    cfg = tiny_config(synthetic_prepared, out, **options)
    out.mkdir()
    cfg.to_json(str(out / "train_config.json"))
    launcher = subprocess.Popen(
        launch_command(cfg, 2, str(out / "train_config.json")), env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    try:
        wait_for(lambda: ckpt.complete_steps(cfg.checkpoint_dir)[-1:] >= [6], 90, "the step-6 checkpoint")
        workers = [
            p for p in psutil.Process(launcher.pid).children(recursive=True) if ENTRYPOINT in " ".join(p.cmdline())
        ]
        next(p for p in workers if p.environ().get("RANK") == "1").send_signal(signal.SIGKILL)
        code = launcher.wait(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert code != 0
    killed_at = ckpt.complete_steps(cfg.checkpoint_dir)[-1]
    assert 6 <= killed_at < cfg.max_steps and not (out / "model.pt").exists()

    assert run_job(cfg) == 0  # the same config, the same command
    steps = [r["step"] for r in read_metrics(out)]
    assert steps == list(range(1, cfg.max_steps + 1))  # each step once: lines past the checkpoint dropped
    a = load_model(tmp_path / "uninterrupted" / "model.pt").state_dict()
    b = load_model(out / "model.pt").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a), "the resumed run differs from the uninterrupted one"
