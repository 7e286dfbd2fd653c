"""`invfold design MODEL STRUCTURE --out designs.fasta ...`."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    from invfold.options import add_command

    from .design import DesignConfig

    add_command(
        subparsers,
        "design",
        run,
        DesignConfig,
        help="sample sequences for a backbone with a trained model",
        description="Sample sequences for one protein chain with a model checkpoint (.pt) or an "
        "exported ONNX model (.onnx); write FASTA with each sequence's mean NLL and its recovery "
        "of the native sequence.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.options import from_args

    from .design import DesignConfig, design

    cfg = from_args(DesignConfig, args)
    designs = design(cfg)
    for d in designs:
        print(f"{d.name} sample {d.index}: mean NLL {d.mean_nll:.3f}, recovery {d.recovery:.3f}")
    print(f"wrote {len(designs)} sequences to {cfg.out}")
    return 0
