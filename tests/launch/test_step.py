"""Where the train step puts a run's checkpoints: keyed by the KFP run id, and somewhere every
training pod can reach (DeepSpeed's local checkpoint files need the shared workspace volume)."""

from __future__ import annotations

import pytest

from invfold.components.launch.step import checkpoint_location
from invfold.components.launch.trainjob import WORKSPACE_MOUNT
from invfold.components.train.config import TrainConfig

RUN = "run-7f3a"


@pytest.mark.parametrize(
    "strategy, remote, root, storage, pvc, expected",
    [
        ("ddp", False, "", "", "", f"/runs/x/checkpoints/{RUN}"),
        ("deepspeed", False, "", "s3://b/p", "", f"/runs/x/checkpoints/{RUN}"),
        ("ddp", True, "", "s3://b/p/", "", f"s3://b/p/checkpoints/{RUN}"),
        ("horovod", True, "", "s3://b/p", "invfold-workspace", f"s3://b/p/checkpoints/{RUN}"),
        ("deepspeed", True, "", "s3://b/p", "invfold-workspace", f"{WORKSPACE_MOUNT}/checkpoints/{RUN}"),
        ("ddp", True, "gs://other/ckpt", "s3://b/p", "", f"gs://other/ckpt/{RUN}"),
    ],
)
def test_checkpoints_are_keyed_by_the_run_and_reachable_by_every_rank(strategy, remote, root, storage, pvc, expected):
    location = checkpoint_location(strategy, remote, RUN, root, storage, pvc, local_root="/runs/x")
    assert location == expected
    # The trainer accepts it (DeepSpeed refuses object-storage checkpoint folders).
    TrainConfig(data="d", out="/tmp/o", checkpoint_dir=location, strategy=strategy, max_steps=1)


def test_deepspeed_on_a_cluster_without_a_shared_volume_names_the_parameter_to_set():
    with pytest.raises(ValueError, match="workspace_pvc"):
        checkpoint_location("deepspeed", True, RUN, "", "s3://b/p", "", local_root="/runs/x")


def test_a_cluster_run_without_storage_is_a_clear_error():
    with pytest.raises(ValueError, match="storage_root"):
        checkpoint_location("ddp", True, RUN, "", "", "", local_root="/runs/x")
