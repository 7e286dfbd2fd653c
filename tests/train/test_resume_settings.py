"""A checkpoint resumes only under the settings that wrote it: data digest, model architecture,
learning rate, seed and the other RESUME_FIELDS are recorded in its COMPLETE marker, and a rerun
that changed any of them is refused with each differing field named and how to start fresh.
Both directions: a changed setting is refused, an unchanged one (or a longer run) resumes."""

from __future__ import annotations

import json

import pytest

from invfold.components.train import checkpoint as ckpt
from invfold.components.train.config import TrainConfig
from invfold.components.train.trainer import run_settings
from invfold.errors import ConfigError
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
