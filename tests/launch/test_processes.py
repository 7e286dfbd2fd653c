"""The command each strategy/launcher pair runs, and the pairs that are refused."""

from __future__ import annotations

import pytest

from invfold.components.launch.processes import ENTRYPOINT, launch_command
from invfold.components.train.config import TrainConfig

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]


@pytest.mark.parametrize(
    "strategy, launcher, expected",
    [
        ("ddp", None, ["torch.distributed.run", "--nnodes=1", "--nproc-per-node=3", "--rdzv-backend=c10d"]),
        ("deepspeed", None, ["torch.distributed.run", "--nproc-per-node=3"]),
        ("deepspeed", "mpirun", ["mpirun", "-np", "3", "--bind-to", "none"]),
        ("horovod", None, ["-np", "3", "-H", "localhost:3", "--gloo"]),
        ("horovod", "mpirun", ["mpirun", "-np", "3"]),
    ],
)
def test_commands(strategy, launcher, expected, tmp_path):
    cfg = TrainConfig(data="d", out=str(tmp_path), max_steps=1, strategy=strategy)
    command = launch_command(cfg, 3, "cfg.json", launcher)
    assert all(part in command for part in expected), command
    assert ENTRYPOINT in command and command[-2:] == ["--config", "cfg.json"]


@pytest.mark.parametrize(
    "strategy, launcher",
    [("ddp", "mpirun"), ("ddp", "horovodrun"), ("horovod", "torchrun"), ("deepspeed", "horovodrun")],
)
def test_refused_pairs_name_the_choices(strategy, launcher, tmp_path):
    cfg = TrainConfig(data="d", out=str(tmp_path), max_steps=1, strategy=strategy)
    with pytest.raises(ValueError, match=f"launcher '{launcher}' cannot start strategy '{strategy}'"):
        launch_command(cfg, 2, "cfg.json", launcher)


def test_torchrun_rendezvous_is_on_loopback_not_the_host_name(tmp_path):
    """--standalone resolves the host name, which hangs in containers whose name does not resolve."""
    cfg = TrainConfig(data="d", out=str(tmp_path), max_steps=1, strategy="ddp")
    command = launch_command(cfg, 2, "cfg.json")
    assert "--standalone" not in command
    endpoint = next(part for part in command if part.startswith("--rdzv-endpoint="))
    host, port = endpoint.split("=", 1)[1].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
