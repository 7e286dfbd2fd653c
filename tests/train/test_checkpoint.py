"""Checkpoint folders on a local disk and on S3 (moto's server on loopback): only folders with a
COMPLETE marker count, the newest wins, pruning keeps the newest and removes torn leftovers; every
load is weights_only, so a planted pickle is refused before it runs (ours and DeepSpeed's loaders)."""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from invfold.components.train import checkpoint as ckpt
from invfold.errors import InputError

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "checkpoints")
    s3 = request.getfixturevalue("s3_server")
    return f"s3://{s3.new_bucket()}/run/checkpoints"


def _save(root: str, step: int, complete: bool) -> str:
    directory = ckpt.step_dir(root, step)
    ckpt.save_torch({"step": step, "w": torch.arange(3.0) * step}, f"{directory}/state.pt")
    if complete:
        ckpt.mark_complete(directory, {"step": step})
    return directory


def test_newest_complete_checkpoint_wins_and_torn_ones_are_ignored(root):
    assert ckpt.latest_complete(root) is None
    _save(root, 3, complete=True)
    _save(root, 6, complete=True)
    _save(root, 9, complete=False)  # a save interrupted before its marker
    assert ckpt.complete_steps(root) == [3, 6]
    latest = ckpt.latest_complete(root)
    assert latest == ckpt.step_dir(root, 6) and ckpt.step_of(latest) == 6
    assert torch.equal(ckpt.load_torch(f"{latest}/state.pt")["w"], torch.tensor([0.0, 6.0, 12.0]))


def test_prune_keeps_the_newest_and_drops_older_torn_saves(root):
    for step, complete in ((2, True), (4, False), (6, True), (8, True), (10, False)):
        _save(root, step, complete)
    assert ckpt.prune(root, keep=2) == [2, 4]
    assert ckpt.complete_steps(root) == [6, 8]
    _save(root, 10, complete=True)  # the newer torn folder was kept: a save may still be writing it
    assert ckpt.complete_steps(root) == [6, 8, 10]


def test_a_folder_name_that_is_not_a_step_is_refused():
    with pytest.raises(InputError, match=r"/x/checkpoints/latest: expected a checkpoint folder named step-XXXXXXXX"):
        ckpt.step_of("/x/checkpoints/latest")


class _Planted:
    """What an attacker with write access to the checkpoint prefix would plant: unpickling it
    calls Path.touch on a marker file (any function could stand there)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_a_planted_pickle_in_state_pt_is_refused_naming_the_file_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    directory = ckpt.step_dir(str(tmp_path / "checkpoints"), 4)
    ckpt.save_torch({"model": {}, "trainer": _Planted(marker)}, f"{directory}/state.pt")
    ckpt.mark_complete(directory, {"step": 4})
    refused = r"step-00000004/state\.pt: expected a checkpoint .*weights_only=True.*calls or builds"
    with pytest.raises(InputError, match=refused):
        ckpt.load_torch(f"{directory}/state.pt")
    assert not marker.exists()


def test_deepspeeds_own_loaders_are_held_to_weights_only(tmp_path):
    """DeepSpeed's checkpoint engine and zero_to_fp32 call torch.load(weights_only=False);
    under safe_loading the same calls refuse a planted pickle and still read its own classes."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    marker = tmp_path / "pwned"
    planted, honest = tmp_path / "planted.pt", tmp_path / "honest.pt"
    torch.save({"optimizer_state_dict": _Planted(marker)}, planted)
    torch.save({"zero_stage": ZeroStageEnum.gradients, "loss_scaler": LossScaler(1.0), "w": torch.ones(2)}, honest)
    engine = TorchCheckpointEngine()
    with pytest.raises(InputError, match=r"step-00000002: expected a checkpoint .*calls or builds"):
        with ckpt.safe_loading("run/step-00000002"):
            engine.load(str(planted), map_location="cpu")
    assert not marker.exists()
    with ckpt.safe_loading("run/step-00000002"):
        loaded = engine.load(str(honest), map_location="cpu")
    assert loaded["zero_stage"] == ZeroStageEnum.gradients and loaded["loss_scaler"].cur_scale == 1.0
    assert os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD") is None  # restored on the way out


def test_the_environment_cannot_switch_weights_only_off_for_deepspeed(tmp_path, monkeypatch):
    """TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 in the user's environment: torch refused every DeepSpeed
    load (both switches set: RuntimeError); it is set aside while DeepSpeed loads, so a planted
    pickle is still refused, an honest checkpoint loads, and the variable is back afterwards."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.runtime.zero.config import ZeroStageEnum

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "pwned"
    planted, honest = tmp_path / "planted.pt", tmp_path / "honest.pt"
    torch.save({"optimizer_state_dict": _Planted(marker)}, planted)
    torch.save({"zero_stage": ZeroStageEnum.gradients, "w": torch.ones(2)}, honest)
    engine = TorchCheckpointEngine()
    with pytest.raises(InputError, match=r"step-00000002: expected a checkpoint .*calls or builds"):
        with ckpt.safe_loading("run/step-00000002"):
            engine.load(str(planted), map_location="cpu")
    assert not marker.exists()
    with ckpt.safe_loading("run/step-00000002"):
        assert engine.load(str(honest), map_location="cpu")["zero_stage"] == ZeroStageEnum.gradients
    assert os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1" and "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ


def test_a_deepspeed_run_resumes_under_the_variable_that_switches_weights_only_off(synthetic_prepared, tmp_path):
    """Real `invfold train --strategy deepspeed` runs: 2 steps, then 4 steps with
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 resume from step 2 (its loads still weights_only)."""
    args = ["train", "--data", synthetic_prepared, "--out", str(tmp_path / "run"), "--preset", "tiny"]
    args += ["--strategy", "deepspeed", "--nproc", "1", "--checkpoint-every", "2", "--validate-every", "0"]
    args += ["--tokens-per-batch", "1500", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "invfold", *args]
    first = subprocess.run([*command, "--max-steps", "2"], capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    resumed = subprocess.run([*command, "--max-steps", "4"], capture_output=True, text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and "step-00000002" in resumed.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["step"] == 4


def test_rng_states_survive_a_weights_only_round_trip(tmp_path):
    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    np.random.standard_normal()  # leaves a cached Gaussian in numpy's state
    ckpt.save_torch({"rng": ckpt.capture_rng()}, str(tmp_path / "state.pt"))
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(tmp_path / "state.pt")) == []
    expected = (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist())
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    ckpt.restore_rng(ckpt.load_torch(str(tmp_path / "state.pt"))["rng"])
    assert (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist()) == expected
