"""`invfold evaluate MODEL --data PREPARED --out DIR`."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys

from invfold import storage
from invfold.options import add_command, from_args
from invfold.storage import redact

# the subcommands this module adds, with their line in `invfold --help` (listed without building them)
COMMANDS = {
    "evaluate": "perplexity, recovery, confusion matrix and a report for a trained model",
}

# examples at the end of each subcommand's --help (real commands, as the README runs them)
EXAMPLES = {
    "evaluate": (
        "invfold evaluate train/model.pt --data prepared/ --out eval/",
        "invfold evaluate proteinmpnn:v_48_020 --data prepared/ --out eval-published/",
        "invfold evaluate models:/invfold-inverse-folding@champion --data prepared/ --out eval/ --tracking-uri http://mlflow:5000",
    ),
}


# exit codes `invfold evaluate` can return (its --help lists these): no training, so no 3 or 143
EXIT_CODES = {"evaluate": (0, 1, 2, 141)}
# what stdout (and --json's record) shows per dataset: the headline figures with the recovery's
# bootstrap 95% interval
SUMMARY = ("perplexity", "recovery", "recovery_ci_low", "recovery_ci_high", "proteins")


def summary_line(figure: dict) -> str:
    """`perplexity 5.1, recovery 0.4512 [0.4301, 0.4733], proteins 50` (the interval when measured)."""
    shown = [f"perplexity {figure['perplexity']:.4g}"] if isinstance(figure.get("perplexity"), float) else []
    if isinstance(figure.get("recovery"), float):
        low, high = figure.get("recovery_ci_low"), figure.get("recovery_ci_high")
        interval = f" [{low:.4f}, {high:.4f}]" if isinstance(low, float) and isinstance(high, float) else ""
        shown.append(f"recovery {figure['recovery']:.4f}{interval}")
    if "proteins" in figure:
        shown.append(f"proteins {figure['proteins']}")
    return ", ".join(shown)


def add_parser(subparsers) -> None:
    from invfold.components.evaluate.config import EvaluateConfig
    from invfold.components.tracking.tracker import CommandTracking

    add_command(
        subparsers,
        "evaluate",
        run,
        EvaluateConfig,
        CommandTracking,
        help=COMMANDS["evaluate"],
        description="Score a model on the prepared test set and its subsets (short chains, "
        "single-chain, any subset datasets): perplexity, median recovery of designed sequences, "
        "confusion matrix, recovery by length, burial and secondary structure, recall per residue, "
        "diversity among sampled designs, the best constant predictor; writes metrics.json, "
        "confusion.json, PNG plots, report.md and report.html.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.allocator import reexec_under_jemalloc
    from invfold.components.evaluate.config import EvaluateConfig
    from invfold.components.model.reference import check_model, resolve
    from invfold.components.tracking.tracker import CommandTracking

    cfg = from_args(EvaluateConfig, args)  # inputs judged before torch is imported
    tracking = from_args(CommandTracking, args)
    context = tracking.context(cfg.model_path)  # --experiment with nowhere to record: refused first
    check_model(cfg.model_path, onnx=False)
    storage.require_local(cfg.data, "an existing prepared folder (invfold prep --out)")
    cfg.command = redact(shlex.join(getattr(args, "command_line", ["invfold", "evaluate"])))  # for the report
    resolved = resolve(cfg.model_path, tracking.tracking_uri)
    cfg.model_path, cfg.model_label = resolved.path, resolved.label  # the report names the reference
    check_model(cfg.model_path, onnx=False)  # a registered model without its checkpoint is ONNX only
    reexec_under_jemalloc()  # eager PyTorch without page faults on every large tensor (allocator.py)
    from invfold.components.evaluate.evaluate import evaluate

    if context is None:
        metrics = evaluate(cfg)
    else:
        from invfold.components.evaluate.step import record_evaluation
        from invfold.components.tracking import Tracker

        with Tracker(context, "evaluate", params=dataclasses.asdict(cfg)) as tracker:
            metrics = evaluate(cfg)
            record_evaluation(tracker, metrics, cfg.data, cfg.out)
        print(tracker.where(), file=sys.stderr)
    figures = {name: {k: v for k, v in m.items() if k in SUMMARY} for name, m in metrics["datasets"].items()}
    for name, figure in figures.items():  # the whole record is --json's (and metrics.json)
        print(f"{name}: {summary_line(figure)}")
    print(f"wrote {cfg.out} (report.html)")
    args.result = {"out": cfg.out, "datasets": figures}
    return 0
