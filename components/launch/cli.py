"""`invfold train [--recipe NAME] --strategy ddp|horovod|deepspeed --nproc N --data PREPARED --out DIR ...`.

The flags start from the default recipe's values (components/train/recipes.py), the same as
`invfold run`'s; `--recipe` swaps in another recipe's values wherever a flag still holds the
default recipe's value, so an option the user sets always wins."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> None:
    from invfold.components.launch.processes import LocalProcesses
    from invfold.components.train import recipes
    from invfold.components.train.config import TrainConfig
    from invfold.options import add_command, marked_defaults

    parser = add_command(
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
    default = recipes.recipe(recipes.DEFAULT)
    parser.add_argument("--recipe", choices=tuple(recipes.RECIPES), default=default.name, help=recipes.help_text())
    # every scalar TrainConfig default as the default recipe sets it, marked: see chosen_settings
    # (repeatable options append to their default, so those keep theirs: no recipe sets them)
    scalars = {k: v for k, v in default.values().items() if not isinstance(v, dict | list | tuple)}
    parser.set_defaults(**marked_defaults(scalars))
    parser.set_defaults(procs_per_node=default.procs_per_node)


def chosen_settings(args: argparse.Namespace) -> dict:
    """The TrainConfig fields as `--recipe` sets them (and --init-from's fine-tuning values),
    except those the user set on the command line."""
    from invfold.components.train import recipes
    from invfold.options import given, unmarked

    settings = recipes.recipe(args.recipe).values()
    if unmarked(args.init_from):
        settings = recipes.fine_tuning(settings)
    return {k: unmarked(v) for k, v in settings.items() if hasattr(args, k) and not given(args, k)}


def run(args: argparse.Namespace) -> int:
    from invfold.components.launch.processes import LocalProcesses, launch_local
    from invfold.components.train.config import TrainConfig
    from invfold.options import from_args, unmarked

    cfg = from_args(TrainConfig, args, **chosen_settings(args))
    processes = from_args(LocalProcesses, args)
    # a bad --model override or init_from fails in launch_local, before any process starts
    code = launch_local(cfg, unmarked(processes.procs_per_node), launcher=processes.launcher)
    if code != 0:
        print(f"invfold train: the {cfg.strategy} job exited with status {code}", file=sys.stderr)
    return code
