"""A checkpoint resumes only under the settings that wrote it: data digest, model architecture,
learning rate, seed and the other RESUME_FIELDS are recorded in its COMPLETE marker, and a rerun
that changed any of them is refused with each differing field named and how to start fresh.
Both directions: a changed setting is refused, an unchanged one (or a longer run) resumes. So is
the process count (each rank's share of the data and its random streams belong to it), and a
COMPLETE marker that is empty or not JSON is refused naming it: real `invfold train` commands,
one line and exit 2 before any training process starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from invfold.components.train import checkpoint as ckpt
from invfold.components.train.config import TrainConfig
from invfold.components.train.trainer import run_settings
from invfold.errors import ConfigError, InputError
from tests.support.training import read_metrics, run_job, summary, tiny_config


def _settings(cfg: TrainConfig, digest: str = "sha256:" + "0" * 64) -> dict:
    return run_settings(cfg, cfg.model_config(), digest, cfg.max_steps)


def test_equal_settings_resume_and_each_change_is_named(tmp_path):
    base = tiny_config("data", tmp_path)
    recorded = {"settings": _settings(base)}
    ckpt.check_resumable("ckpt/step-00000004", recorded, _settings(base))  # same settings: accepted
    longer = tiny_config("data", tmp_path / "elsewhere", max_steps=80, log_every=5, validate_every=0)
    ckpt.check_resumable("ckpt/step-00000004", recorded, _settings(longer))  # longer, elsewhere: accepted

    changed = tiny_config("data", tmp_path, lr=1e-3, seed=5, model_overrides={"hidden": 48})
    with pytest.raises(ConfigError) as refused:
        ckpt.check_resumable("ckpt/step-00000004", recorded, _settings(changed, "sha256:" + "1" * 64))
    message = str(refused.value)
    assert message.startswith("ckpt/step-00000004: this checkpoint was written under other settings")
    for expected in ("data 'sha256:000", "lr 0.005 -> 0.001", "seed 0 -> 5", "model.hidden", "--checkpoint-dir"):
        assert expected in message, message
    assert "max_steps" not in message and "out" not in message.split("(", 1)[1].split(")")[0]


def test_one_cycle_ties_the_run_length_to_the_checkpoint(tmp_path):
    short = tiny_config("data", tmp_path, schedule="one_cycle", max_steps=8)
    longer = tiny_config("data", tmp_path, schedule="one_cycle", max_steps=16)
    with pytest.raises(ConfigError, match="total_steps 8 -> 16"):
        ckpt.check_resumable("c", {"settings": _settings(short)}, _settings(longer))


def test_a_checkpoint_without_recorded_settings_is_refused():
    with pytest.raises(ConfigError, match="none recorded"):
        ckpt.check_resumable("c", {"step": 4}, _settings(tiny_config("data", "out")))


@pytest.mark.slow
def test_a_rerun_with_another_learning_rate_is_refused_and_the_same_one_resumes(tmp_path, synthetic_prepared, capfd):
    """Real single-process runs: 4 steps with a checkpoint, then two reruns on that folder (a
    changed data digest is refused the same way: the unit test above)."""
    out = tmp_path / "run"
    first = tiny_config(synthetic_prepared, out, max_steps=4, checkpoint_every=4, validate_every=0)
    assert run_job(first, nproc=1) == 0
    marker = json.loads((out / "checkpoints" / "step-00000004" / ckpt.MARKER).read_text())
    assert marker["settings"]["lr"] == first.lr and marker["settings"]["data"].startswith("sha256:")
    before = (out / "summary.json").read_text()
    capfd.readouterr()

    other_lr = tiny_config(synthetic_prepared, out, max_steps=6, checkpoint_every=4, validate_every=0, lr=1e-3)
    assert run_job(other_lr, nproc=1) != 0  # the rank exits 2; torchrun reports its own 1
    err = capfd.readouterr().err
    assert "other settings (lr 0.005 -> 0.001)" in err and "--checkpoint-dir" in err
    assert "invfold.errors.ConfigError" not in err  # one line from the rank, not its traceback
    assert (out / "summary.json").read_text() == before  # the refused run reported nothing

    longer = tiny_config(synthetic_prepared, out, max_steps=6, checkpoint_every=4, validate_every=0)
    assert run_job(longer, nproc=1) == 0
    assert [r["step"] for r in read_metrics(out)] == list(range(1, 7))  # resumed at 4, ran 5 and 6
    assert summary(out)["step"] == 6


def _train(data: str, out: Path, nproc: int, max_steps: int) -> subprocess.CompletedProcess:
    args = ["train", "--data", data, "--out", str(out), "--preset", "tiny", "--nproc", str(nproc)]
    args += ["--max-steps", str(max_steps), "--checkpoint-every", "2", "--validate-every", "0"]
    args += ["--tokens-per-batch", "1500", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "invfold", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.fixture(scope="module")
def two_process_run(synthetic_prepared, tmp_path_factory) -> Path:
    """A real 2-process run of the tiny preset with a checkpoint at step 2."""
    out = tmp_path_factory.mktemp("two-processes") / "run"
    done = _train(synthetic_prepared, out, nproc=2, max_steps=2)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("invfold train: error: "), done.stderr[-3000:]
    return errors[0]


@pytest.mark.slow
def test_a_resume_with_another_process_count_is_refused_naming_both(two_process_run, synthetic_prepared, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(two_process_run, out)
    line = _one_line_error(_train(synthetic_prepared, out, nproc=1, max_steps=4))
    assert "step-00000002: written by 2 training processes, resuming with 1" in line
    assert "--nproc 2" in line and "--checkpoint-dir" in line
    assert not (out / "checkpoints" / "step-00000004").exists()
    resumed = _train(synthetic_prepared, out, nproc=2, max_steps=4)  # the same count resumes
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and summary(out)["step"] == 4


@pytest.mark.parametrize(
    ("content", "got"), [(b"", "got an empty file"), (b'{"step": 2', "got invalid JSON"), (b"[2]", "got a JSON list")]
)
def test_a_damaged_complete_marker_is_refused_naming_it(two_process_run, synthetic_prepared, tmp_path, content, got):
    out = tmp_path / "run"
    shutil.copytree(two_process_run, out)
    (out / "checkpoints" / "step-00000002" / ckpt.MARKER).write_bytes(content)
    line = _one_line_error(_train(synthetic_prepared, out, nproc=2, max_steps=4))
    assert f"step-00000002/{ckpt.MARKER}: expected the JSON object invfold writes last" in line and got in line


def test_the_ranks_hold_the_same_rules(tmp_path):
    """What every rank checks again (jobs started elsewhere than `invfold train`)."""
    directory = tmp_path / "step-00000002"
    directory.mkdir()
    (directory / ckpt.MARKER).write_text("not json")
    with pytest.raises(InputError, match=r"COMPLETE: expected the JSON object .* got invalid JSON"):
        ckpt.read_marker(str(directory))
    with pytest.raises(ConfigError, match=r"written by 2 training processes, resuming with 1; resume with 2"):
        ckpt.check_world_size(str(directory), 2, 1)
    ckpt.check_world_size(str(directory), 2, 2)
