"""`invfold prep INPUT --out DIR ...`: the prep step from the command line."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    from invfold.components.protein.alphabet import ALPHABET

    p = subparsers.add_parser(
        "prep",
        help="validate, filter, split and shard a protein set, with a dataset card",
        description="Turn a protein set (chain_set.jsonl[.gz], TS50 JSON list, PDB/mmCIF file or folder; "
        "local path or URI) into Arrow datasets per split and subset, index.json and card.json/card.md.",
    )
    p.add_argument("input", help="protein set path or URI")
    p.add_argument("--out", required=True, help="output folder (path or URI)")
    p.add_argument(
        "--split-file",
        help="chain_set_splits.json with train/validation/test; "
        "without it prep makes a split that keeps related chains together",
    )
    p.add_argument(
        "--subset",
        action="append",
        default=[],
        metavar="FILE",
        help="subset file with a 'test' list (e.g. test_split_L100.json); repeatable",
    )
    p.add_argument("--strict", action="store_true", help="input defects are errors instead of counted skips")
    p.add_argument("--max-length", type=int, default=500)
    p.add_argument("--min-length", type=int, default=30)
    p.add_argument("--min-observed-fraction", type=float, default=0.5)
    p.add_argument("--alphabet", default=ALPHABET, help="letters kept (chains with others are dropped)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--split-fractions", type=float, nargs=3, default=(0.8, 0.1, 0.1), metavar=("TRAIN", "VALIDATION", "TEST")
    )
    p.add_argument("--split-by", choices=("auto", "cath", "cluster", "identity"), default="auto")
    p.add_argument("--identity-tool", choices=("auto", "mmseqs", "kmer"), default="auto")
    p.add_argument("--identity-threshold", type=float, default=0.4)
    p.add_argument(
        "--check-identity",
        action="store_true",
        help="with --split-file, also report the highest train-test sequence identity",
    )
    p.add_argument(
        "--check-against",
        metavar="PREPARED",
        help="a prepared folder whose train split these chains are checked against (overlap in the card), "
        "e.g. the training data of the model an external benchmark list will evaluate",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .config import PrepConfig
    from .run import run_prep

    cfg = PrepConfig(
        input=args.input,
        output=args.out,
        split_file=args.split_file,
        subset_files=args.subset,
        max_length=args.max_length,
        min_length=args.min_length,
        min_observed_fraction=args.min_observed_fraction,
        alphabet=args.alphabet,
        strict=args.strict,
        seed=args.seed,
        split_fractions=tuple(args.split_fractions),
        split_by=args.split_by,
        identity_tool=args.identity_tool,
        identity_threshold=args.identity_threshold,
        check_identity=args.check_identity,
        check_against=args.check_against,
    )
    result = run_prep(cfg)
    c = result.counts
    print(f"read {c['read']} records: kept {c['kept']}, skipped {c['skipped']}")
    for reason, n in result.card["dropped"].items():
        print(f"  dropped {n} {reason}")
    print("datasets: " + ", ".join(f"{name} {n}" for name, n in result.datasets.items()))
    identity = result.card["split"].get("highest_train_test_identity")
    if identity:
        print(f"highest train-test identity: {identity['identity']:.3f} ({identity['tool']})")
    external = result.card["split"].get("external_overlap")
    if external:
        for name, o in external["datasets"].items():
            print(
                f"{name} against {external['reference']} train: {o['in_train']} of {o['chains']} are train chains, "
                f"{o['above_threshold']} at >= {o['threshold']:g} identity"
            )
    print(f"digest: {result.digest}")
    print(f"wrote {result.output} (card: card.md)")
    return 0
