"""`invfold train --strategy ddp|horovod|deepspeed --nproc N --data PREPARED --out DIR ...`."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> None:
    from invfold.components.tracking import CommandTracking
    from invfold.components.train.config import TrainConfig
    from invfold.components.train.launch import LocalProcesses
    from invfold.options import add_command

    add_command(
        subparsers,
        "train",
        run,
        TrainConfig,
        LocalProcesses,
        CommandTracking,
        help="train a model on prepared data with N local processes",
        description="Train an inverse-folding model on a prep output folder with DDP, Horovod or "
        "DeepSpeed, on N processes of this machine. Writes model.pt, checkpoints/, metrics.jsonl, "
        "tensorboard/ and summary.json under --out; resumes from the newest complete checkpoint.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.components.tracking import CommandTracking
    from invfold.components.train.config import TrainConfig
    from invfold.components.train.launch import LocalProcesses, launch_local
    from invfold.options import from_args

    cfg = from_args(TrainConfig, args)
    processes = from_args(LocalProcesses, args)
    tracking = from_args(CommandTracking, args).context()
    # a bad --model override or init_from fails in launch_local, before any process starts
    if tracking is None:
        code = launch_local(cfg, processes.procs_per_node, launcher=processes.launcher)
    else:
        code = _train_recorded(cfg, processes, tracking)
    if code != 0:
        print(f"invfold train: the {cfg.strategy} job exited with status {code}", file=sys.stderr)
    return code


def _train_recorded(cfg, processes, tracking) -> int:
    """Train as a run of its own in MLflow, recorded as the pipeline's train step records (record.py)."""
    from invfold.components.prep.shards import open_prepared
    from invfold.components.tracking import Tracker
    from invfold.components.train.launch import launch_local
    from invfold.components.train.record import processes as workers
    from invfold.components.train.record import record_result, record_start

    with Tracker(tracking, "train") as tracker:
        record_start(tracker, cfg, open_prepared(cfg.data), cfg.data, workers(1, processes.procs_per_node))
        code = launch_local(cfg, processes.procs_per_node, launcher=processes.launcher)
        if code == 0:
            record_result(tracker, cfg, cfg.out)
        tracker.failed = code != 0
    print(tracker.where(), file=sys.stderr)
    return code
