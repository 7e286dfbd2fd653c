"""`invfold design MODEL STRUCTURE --out designs.fasta ...`."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "design",
        help="sample sequences for a backbone with a trained model",
        description="Sample sequences for one protein chain with a model checkpoint (.pt) or an "
        "exported ONNX model (.onnx); write FASTA with each sequence's mean NLL and its recovery "
        "of the native sequence.",
    )
    parser.add_argument("model", help="model.pt (training output) or model.onnx (invfold export)")
    parser.add_argument("structure", help="PDB/mmCIF file (or .gz), chain-set .jsonl[.gz], or TS50 json")
    parser.add_argument("--out", required=True, help="FASTA file to write")
    parser.add_argument("--name", default=None, help="record name to design (e.g. 1abc.A)")
    parser.add_argument("--chain", default=None, help="chain id to design (e.g. A)")
    parser.add_argument("-n", "--num-sequences", type=int, default=4)
    parser.add_argument("-T", "--temperature", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0, help="sample i uses seed + i")
    parser.add_argument(
        "--fixed",
        default="",
        metavar="POSITIONS",
        help="1-based sequence positions kept native, e.g. 1-10,15 (autoregressive models only: a one-shot "
        "model could not condition the other positions on them)",
    )
    parser.add_argument("--exclude", default="", metavar="LETTERS", help="amino acids never designed, e.g. C")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .design import DesignConfig, design

    designs = design(
        DesignConfig(
            model=args.model,
            structure=args.structure,
            out=args.out,
            name=args.name,
            chain=args.chain,
            num_sequences=args.num_sequences,
            temperature=args.temperature,
            seed=args.seed,
            fixed_positions=args.fixed,
            excluded=args.exclude,
            threads=args.threads,
        )
    )
    for d in designs:
        print(f"{d.name} sample {d.index}: mean NLL {d.mean_nll:.3f}, recovery {d.recovery:.3f}")
    print(f"wrote {len(designs)} sequences to {args.out}")
    return 0
