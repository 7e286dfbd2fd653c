"""Start N local training processes with the launcher each strategy needs.

ddp and deepspeed: torchrun with a c10d rendezvous on 127.0.0.1 and a free port (not
--standalone, which resolves the host name and hangs in containers whose name does not resolve;
DeepSpeed reads torchrun's environment, and needs neither ssh nor a hostfile on one machine). horovod:
horovodrun with Gloo (no MPI installation needed). mpirun (OpenMPI) can start horovod and
deepspeed too, as the cluster's MPI runtimes do. Every process runs train.rank_entry with the
same config file, with OMP_NUM_THREADS set to cfg.threads, and the start of the time budget: the
command's process start where it set one (train/budget.py), else the moment of the launch.

The ranks run under jemalloc when the machine has it, and a job whose estimated peak memory
exceeds the machine's gets a warning naming the flag to change before it starts (memory.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from invfold.components.train.budget import budget_env
from invfold.components.train.config import TrainConfig
from invfold.components.train.memory import allocator_env, memory_warning
from invfold.components.train.strategies import STRATEGIES, local_launchers, strategy_spec
from invfold.errors import ConfigError
from invfold.options import check_values, option

ENTRYPOINT = "invfold.components.train.rank_entry"
CONFIG_FILE = "train_config.json"


@dataclass
class LocalProcesses:
    """How many processes of this machine run the job, and what starts them."""

    procs_per_node: int = option(2, "processes on this machine", aliases=("--nproc",))
    launcher: str | None = option(
        None,
        "default: " + ", ".join(f"{s.local_launchers[0]} ({s.name})" for s in STRATEGIES.values()),
        choices=local_launchers(),
    )

    def __post_init__(self) -> None:
        check_values(self)  # the count is checked by launch_local


def _horovodrun() -> str:
    beside = Path(sys.executable).parent / "horovodrun"
    found = str(beside) if beside.exists() else shutil.which("horovodrun")
    if not found:
        raise ConfigError("--strategy horovod: horovodrun not found; install Horovod (scripts/build_horovod.sh)")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_command(cfg: TrainConfig, nproc: int, config_path: str, launcher: str | None = None) -> list[str]:
    """The command line for `launcher` ("torchrun", "horovodrun", "mpirun"; default: the
    strategy's first local launcher)."""
    allowed = strategy_spec(cfg.strategy).local_launchers
    launcher = launcher or allowed[0]
    if launcher not in allowed:
        raise ConfigError(f"launcher {launcher!r} cannot start strategy {cfg.strategy!r}; expected one of {allowed}")
    entry = [sys.executable, "-m", ENTRYPOINT, "--config", config_path]
    if launcher == "horovodrun":
        return [_horovodrun(), "-np", str(nproc), "-H", f"localhost:{nproc}", "--gloo", *entry]
    if launcher == "mpirun":
        root = ["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        # no core binding: each rank runs cfg.threads threads
        return ["mpirun", *root, "-np", str(nproc), "--bind-to", "none", *entry]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{_free_port()}",
        "--module",
        ENTRYPOINT,
        "--config",
        config_path,
    ]


def refuse_earlier_checkpoints(cfg: TrainConfig) -> None:
    """--no-resume over a checkpoint folder that holds complete checkpoints: every rank would
    refuse it (trainer.py); refused here in one line before any process starts."""
    if cfg.resume or ("://" not in cfg.checkpoint_dir and not os.path.isdir(cfg.checkpoint_dir)):
        return
    from invfold.components.train import checkpoint as ckpt

    latest = ckpt.latest_complete(cfg.checkpoint_dir)
    if latest:
        raise ConfigError(
            f"--no-resume: {cfg.checkpoint_dir} holds checkpoints of an earlier run (newest {latest}); remove "
            "them, choose another --checkpoint-dir, or resume from them (leave out --no-resume)"
        )


def check_resume_point(cfg: TrainConfig, nproc: int) -> None:
    """The checkpoint this run would resume from: a damaged COMPLETE marker or another process
    count is refused here in one line (exit 2) before any process starts; every rank checks the
    same again (trainer.py), for jobs started elsewhere."""
    if not cfg.resume or ("://" not in cfg.checkpoint_dir and not os.path.isdir(cfg.checkpoint_dir)):
        return
    from invfold.components.train import checkpoint as ckpt

    latest = ckpt.latest_complete(cfg.checkpoint_dir)
    if latest:
        ckpt.check_world_size(latest, ckpt.read_marker(latest).get("world_size"), nproc)


def launch_local(
    cfg: TrainConfig, nproc: int, launcher: str | None = None, extra_env: dict[str, str] | None = None
) -> int:
    """Run the job to its end, output streamed to ours; returns the launcher's exit status.
    SIGTERM/SIGINT to this process are passed on, so the ranks checkpoint before leaving."""
    if nproc < 1:
        raise ConfigError(f"nproc: expected a positive number of processes, got {nproc}")
    refuse_earlier_checkpoints(cfg)
    check_resume_point(cfg, nproc)
    initial = cfg.initial_model()
    warning = memory_warning(
        cfg.model_config(initial.cfg if initial is not None else None), cfg.tokens_per_batch, nproc
    )
    from invfold.components.prep.shards import open_prepared  # here: `invfold train --help` needs no pyarrow

    open_prepared(cfg.data).open(cfg.train_dataset)  # a bad --data fails here, not in every rank
    if warning:
        print(f"invfold train: warning: {warning}", file=sys.stderr, flush=True)
    os.makedirs(cfg.out, exist_ok=True)
    config_path = os.path.abspath(os.path.join(cfg.out, CONFIG_FILE))
    cfg.to_json(config_path)
    env = {
        **os.environ,
        **allocator_env(),
        **budget_env(),  # --time-budget's start: the command's (budget_from_process_start), else now
        "OMP_NUM_THREADS": str(cfg.threads),
        "MKL_NUM_THREADS": str(cfg.threads),
    }
    if launcher == "mpirun":  # torchrun finds its own port; under mpirun we choose the rendezvous
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
    env.update(extra_env or {})
    proc = subprocess.Popen(launch_command(cfg, nproc, config_path, launcher), env=env)

    def forward(signum, frame):
        proc.send_signal(signum)

    in_main_thread = threading.current_thread() is threading.main_thread()  # else signals cannot be handled
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)} if in_main_thread else {}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
