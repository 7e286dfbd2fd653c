"""`invfold train --strategy ddp|horovod|deepspeed --nproc N --data PREPARED --out DIR ...`."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> None:
    from invfold.components.launch.processes import LocalProcesses
    from invfold.components.train.config import TrainConfig
    from invfold.options import add_command

    add_command(
        subparsers,
        "train",
        run,
        TrainConfig,
        LocalProcesses,
        help="train a model on prepared data with N local processes",
        description="Train an inverse-folding model on a prep output folder with DDP, Horovod or "
        "DeepSpeed, on N processes of this machine. Writes model.pt, checkpoints/, metrics.jsonl, "
        "tensorboard/ and summary.json under --out; resumes from the newest complete checkpoint.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.components.launch.processes import LocalProcesses, launch_local
    from invfold.components.train.config import TrainConfig
    from invfold.options import from_args

    cfg = from_args(TrainConfig, args)
    processes = from_args(LocalProcesses, args)
    # a bad --model override or init_from fails in launch_local, before any process starts
    code = launch_local(cfg, processes.procs_per_node, launcher=processes.launcher)
    if code != 0:
        print(f"invfold train: the {cfg.strategy} job exited with status {code}", file=sys.stderr)
    return code
