"""`invfold score MODEL STRUCTURE [--fasta seqs.fasta] --out scores.csv`."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    from invfold.components.design.score import ScoreConfig
    from invfold.options import add_command

    add_command(
        subparsers,
        "score",
        run,
        ScoreConfig,
        help="score sequences on a backbone (mean and per-residue NLL)",
        description="Negative log-likelihood of given sequences (FASTA, or the native) on a structure, "
        "averaged over random decoding orders as ProteinMPNN's --score_only does; writes CSV (one row per "
        "sequence) and JSON (per-residue NLL) beside it. Works with model.pt and model.onnx alike.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.allocator import reexec_under_jemalloc
    from invfold.components.design.score import ScoreConfig, score
    from invfold.options import from_args

    cfg = from_args(ScoreConfig, args)
    reexec_under_jemalloc()  # eager PyTorch without page faults on every large tensor (allocator.py)
    for s in score(cfg):
        print(
            f"{s.structure} {s.sequence_name}: mean NLL {s.mean_nll:.3f} (+- {s.std_nll:.3f} over "
            f"{s.orders} orders), perplexity {s.perplexity:.2f}, {s.scored} residues"
        )
    print(f"wrote {cfg.out}")
    return 0
