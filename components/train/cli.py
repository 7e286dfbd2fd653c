"""`invfold train --strategy ddp|horovod|deepspeed --nproc N --data PREPARED --out DIR ...`."""

from __future__ import annotations

import argparse
import json
import sys


def _override(text: str) -> tuple[str, object]:
    """NAME=VALUE with VALUE parsed as JSON when it is JSON (numbers, true/false), else a string."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="train a model on prepared data with N local processes",
        description="Train an inverse-folding model on a prep output folder with DDP, Horovod or "
        "DeepSpeed, on N processes of this machine. Writes model.pt, checkpoints/, metrics.jsonl, "
        "tensorboard/ and summary.json under --out; resumes from the newest complete checkpoint.",
    )
    p.add_argument("--data", required=True, help="prepared folder (invfold prep output; path or URI)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--strategy", choices=("ddp", "horovod", "deepspeed"), default="ddp")
    p.add_argument("--nproc", type=int, default=2, help="processes on this machine (default 2)")
    p.add_argument(
        "--launcher",
        choices=("torchrun", "horovodrun", "mpirun"),
        help="default: torchrun (ddp, deepspeed), horovodrun (horovod)",
    )
    p.add_argument("--threads", type=int, default=1, help="threads per process (default 1)")
    p.add_argument("--preset", default="default", help="model preset: default, proteinmpnn, small, tiny")
    p.add_argument(
        "--model",
        action="append",
        type=_override,
        default=[],
        metavar="NAME=VALUE",
        help="model config override, e.g. --model hidden=64 (repeatable)",
    )
    p.add_argument(
        "--init-from",
        metavar="MODEL",
        help="fine-tune: start from a model file/URI or published weights (e.g. proteinmpnn:v_48_020; "
        "see `invfold weights list`); the architecture is the initial model's",
    )
    p.add_argument(
        "--freeze-encoder", action="store_true", help="with --init-from: train only the decoder and read-out"
    )
    p.add_argument("--zero-stage", type=int, default=0, choices=(0, 1, 2, 3), help="DeepSpeed ZeRO stage")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--tokens-per-batch", type=int, default=3000, help="residue budget per process and step")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--time-budget", type=float, metavar="SECONDS", help="stop (and save) after this long")
    p.add_argument(
        "--cpu-time-budget",
        type=float,
        metavar="SECONDS",
        help="stop (and save) after this many CPU seconds of each training process",
    )
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup-steps", type=int, default=50)
    p.add_argument("--schedule", choices=("noam", "one_cycle"), default="noam")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--backbone-noise", type=float, default=0.1, help="Angstrom")
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument(
        "--max-nonfinite-steps",
        type=int,
        default=10,
        help="fail after this many steps in a row with a NaN/inf loss or gradient (each is skipped)",
    )
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--validate-every", type=int, default=100)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--checkpoint-dir", help="default OUT/checkpoints; may be a URI (ddp, horovod)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .config import TrainConfig
    from .launch import launch_local

    cfg = TrainConfig(
        data=args.data,
        out=args.out,
        checkpoint_dir=args.checkpoint_dir,
        preset=args.preset,
        model_overrides=dict(args.model),
        init_from=args.init_from,
        freeze_encoder=args.freeze_encoder,
        strategy=args.strategy,
        zero_stage=args.zero_stage,
        precision=args.precision,
        tokens_per_batch=args.tokens_per_batch,
        max_steps=args.max_steps,
        epochs=args.epochs,
        time_budget_s=args.time_budget,
        cpu_time_budget_s=args.cpu_time_budget,
        max_nonfinite_steps=args.max_nonfinite_steps,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        schedule=args.schedule,
        weight_decay=args.weight_decay,
        label_smoothing=args.label_smoothing,
        backbone_noise=args.backbone_noise,
        grad_clip=args.grad_clip,
        grad_accum=args.grad_accum,
        activation_checkpointing=args.activation_checkpointing,
        validate_every=args.validate_every,
        checkpoint_every=args.checkpoint_every,
        seed=args.seed,
        threads=args.threads,
        resume=not args.no_resume,
    )
    # a bad --model override or init_from fails here, before any process starts
    initial = cfg.initial_model()
    cfg.model_config(initial.cfg if initial is not None else None)
    code = launch_local(cfg, args.nproc, launcher=args.launcher)
    if code != 0:
        print(f"invfold train: the {cfg.strategy} job exited with status {code}", file=sys.stderr)
    return code
