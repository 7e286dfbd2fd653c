"""Checkpoint folders on a local disk and on S3 (moto's server on loopback): only folders with a
COMPLETE marker count, the newest wins, pruning keeps the newest and removes torn leftovers."""

from __future__ import annotations

import pytest
import torch

from invfold.components.train import checkpoint as ckpt


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
    with pytest.raises(ValueError, match="expected step-XXXXXXXX"):
        ckpt.step_of("/x/checkpoints/latest")
