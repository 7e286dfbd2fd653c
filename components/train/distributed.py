"""The one module that sets up and tears down process groups, for every strategy and launcher.

Launchers name ranks differently: torchrun and the DeepSpeed launcher set RANK / WORLD_SIZE /
LOCAL_RANK / MASTER_ADDR / MASTER_PORT; mpirun (OpenMPI) sets OMPI_COMM_WORLD_*; horovodrun sets
HOROVOD_*. Everything below reads them here and nowhere else. On GPU the NCCL backend gets async
error handling and the flight recorder (a trace dumped on timeout), so a hang becomes an error
with evidence instead of a silent stall.
"""

from __future__ import annotations

import datetime
import gc
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from invfold.components.train.strategies import strategy_spec
from invfold.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_MASTER_PORT = "29500"


@dataclass(frozen=True)
class DistInfo:
    strategy: str
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launcher_ranks(env: Mapping[str, str] = os.environ) -> tuple[int, int, int, int]:
    """(rank, world_size, local_rank, local_world_size) from whichever launcher started us;
    (0, 1, 0, 1) for a plain `python` process."""
    for prefix, names in (
        ("torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")),
        (
            "mpirun",
            (
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
            ),
        ),
        ("horovodrun", ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE")),
    ):
        if names[0] in env and names[1] in env:
            try:
                rank, world = int(env[names[0]]), int(env[names[1]])
                local = int(env.get(names[2], rank))
                local_world = int(env.get(names[3], world))
            except ValueError as err:
                raise ConfigError(f"{prefix} environment: expected integers in {names}: {err}") from None
            if not 0 <= rank < world:
                raise ConfigError(f"{prefix} environment: {names[0]}={rank} outside {names[1]}={world}")
            return rank, world, local, local_world
    return 0, 1, 0, 1


def _gpu_env(trace_dir: str | None) -> None:
    """NCCL watchdog settings (defaults only: the operator's environment wins). torch 2.9 renamed
    the flight recorder's variables to TORCH_FR_*; the old names still work but warn on every rank
    (seen on an H200 with torch 2.11), so we set the new name unless either spelling is set."""
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")  # abort the group on error/timeout
    _setdefault_renamed("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")  # entries
    os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
        _setdefault_renamed(
            "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", os.path.join(trace_dir, "nccl_trace_rank_")
        )


def _setdefault_renamed(name: str, old_name: str, value: str) -> None:
    if name not in os.environ and old_name not in os.environ:
        os.environ[name] = value


def _rendezvous_env(rank: int, world: int, local: int, local_world: int) -> None:
    """Export the torch.distributed env:// variables. A single-node mpirun gets MASTER_ADDR
    127.0.0.1: MPI-based discovery would pick a non-loopback address from `hostname -I`."""
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
    os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"] = str(local), str(local_world)
    if "MASTER_ADDR" not in os.environ:
        if world != local_world:
            raise ConfigError(
                "MASTER_ADDR is not set and the job spans several nodes: set it to the "
                "first host of the MPI hostfile (e.g. mpirun -x MASTER_ADDR=...)"
            )
        os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", DEFAULT_MASTER_PORT)


def setup(strategy: str, timeout_s: float = 600.0, trace_dir: str | None = None) -> DistInfo:
    """Initialise the process group for `strategy` (its StrategySpec.process_group) and return who we are."""
    spec = strategy_spec(strategy)
    cuda = torch.cuda.is_available()
    if cuda:
        _gpu_env(trace_dir)
    else:
        for name, value in spec.cpu_env.items():
            os.environ.setdefault(name, value)  # the operator's value wins
    backend = "nccl" if cuda else "gloo"
    if spec.process_group == "horovod":
        import horovod.torch as hvd

        hvd.init()
        rank, world, local = hvd.rank(), hvd.size(), hvd.local_rank()
        backend = "horovod-" + ("nccl" if cuda else ("gloo" if hvd.gloo_enabled() else "mpi"))
    else:
        rank, world, local, local_world = launcher_ranks()
        _rendezvous_env(rank, world, local, local_world)
        timeout = datetime.timedelta(seconds=timeout_s)
        if cuda:
            torch.cuda.set_device(local)
        if spec.process_group == "deepspeed":
            import deepspeed
            import deepspeed.ops

            # Training never uses DeepSpeed's inference all-reduce, whose CPU op would otherwise be
            # JIT-compiled (about a minute) by init_distributed on first use.
            deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
            deepspeed.init_distributed(
                dist_backend=backend, auto_mpi_discovery=False, timeout=timeout, rank=rank, world_size=world
            )
        else:
            import torch.distributed as dist

            device_id = torch.device("cuda", local) if cuda else None
            dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout, device_id=device_id)
    if cuda:
        torch.cuda.set_device(local)
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    log.debug("rank %d/%d (local %d) on %s, backend %s", rank, world, local, device, backend)
    return DistInfo(strategy, rank, world, local, device, backend)


def teardown(info: DistInfo) -> None:
    """Leave the process group cleanly. Callers drop their DeepSpeed engine first: collecting it,
    then a barrier before destroy_process_group, avoids gloo aborts at interpreter exit."""
    if strategy_spec(info.strategy).process_group == "horovod":
        import horovod.torch as hvd

        hvd.shutdown()
        return
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    gc.collect()
    try:
        dist.barrier()
    finally:
        dist.destroy_process_group()
