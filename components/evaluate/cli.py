"""`invfold evaluate MODEL --data PREPARED --out DIR`."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> None:
    from invfold.components.evaluate.evaluate import EvaluateConfig
    from invfold.options import add_command

    add_command(
        subparsers,
        "evaluate",
        run,
        EvaluateConfig,
        help="perplexity, recovery, confusion matrix and a report for a trained model",
        description="Score a model on the prepared test set and its subsets (short chains, "
        "single-chain, any subset datasets): perplexity, median recovery of designed sequences, "
        "confusion matrix, recovery by length, burial and secondary structure, recall per residue, "
        "diversity among sampled designs, the best constant predictor; writes metrics.json, "
        "confusion.json, PNG plots, report.md and report.html.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.allocator import reexec_under_jemalloc
    from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate
    from invfold.options import from_args

    cfg = from_args(EvaluateConfig, args)
    reexec_under_jemalloc()  # eager PyTorch without page faults on every large tensor (allocator.py)
    metrics = evaluate(cfg)
    print(
        json.dumps(
            {
                name: {k: v for k, v in m.items() if k in ("perplexity", "recovery", "proteins")}
                for name, m in metrics["datasets"].items()
            },
            indent=2,
        )
    )
    print(f"wrote {cfg.out} (report.html)")
    return 0
