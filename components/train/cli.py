"""`invfold train --strategy ddp|horovod|deepspeed --nproc N --data PREPARED --out DIR ...`."""

from __future__ import annotations

import argparse
import sys

# the subcommands this module adds, with their line in `invfold --help` (listed without building them)
COMMANDS = {
    "train": "train a model on prepared data with N local processes",
}


def add_parser(subparsers) -> None:
    from invfold.components.model.reference import ModelSource
    from invfold.components.train.config import TrainConfig
    from invfold.components.train.launch import LocalProcesses
    from invfold.options import add_command

    add_command(
        subparsers,
        "train",
        run,
        TrainConfig,
        LocalProcesses,
        ModelSource,
        help=COMMANDS["train"],
        description="Train an inverse-folding model on a prep output folder with DDP, Horovod or "
        "DeepSpeed, on N processes of this machine. Writes model.pt, checkpoints/, metrics.jsonl, "
        "tensorboard/ and summary.json under --out; resumes from the newest complete checkpoint.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold import storage
    from invfold.components.model.reference import ModelSource, check_model, resolve_model
    from invfold.components.train.config import TrainConfig
    from invfold.components.train.launch import LocalProcesses, launch_local
    from invfold.options import from_args

    cfg = from_args(TrainConfig, args)
    processes = from_args(LocalProcesses, args)
    storage.require_local(cfg.data, "an existing prepared folder (invfold prep --out)")
    if cfg.init_from is not None:
        check_model(cfg.init_from, "--init-from", onnx=False)
        cfg.init_from = resolve_model(cfg.init_from, from_args(ModelSource, args).tracking_uri)
        check_model(cfg.init_from, "--init-from", onnx=False)
    # a bad --model override or init_from fails in launch_local, before any process starts
    code = launch_local(cfg, processes.procs_per_node, launcher=processes.launcher)
    if code != 0:
        print(f"invfold train: the {cfg.strategy} job exited with status {code}", file=sys.stderr)
    return code
