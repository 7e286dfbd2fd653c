"""`invfold prep INPUT --out DIR ...`: the prep step from the command line."""

from __future__ import annotations

import argparse

from invfold import storage
from invfold.options import add_command, from_args

# the subcommands this module adds, with their line in `invfold --help` (listed without building them)
COMMANDS = {
    "prep": "validate, filter, split and shard a protein set, with a dataset card",
}

# examples at the end of each subcommand's --help (real commands, as the README runs them)
EXAMPLES = {
    "prep": (
        "invfold prep chain_set.jsonl.gz --split-file chain_set_splits.json --out prepared/",
        "invfold prep structures/ --out prepared/ --split-by identity   # a folder of PDB/mmCIF files, split made here",
        "invfold prep s3://bucket/chain_set.jsonl.gz --subset test_split_L100.json --out s3://bucket/prepared/",
    ),
}


def add_parser(subparsers) -> None:
    from invfold.components.prep.config import PrepConfig

    add_command(
        subparsers,
        "prep",
        run,
        PrepConfig,
        help=COMMANDS["prep"],
        description="Turn a protein set (chain_set.jsonl[.gz], TS50 JSON list, PDB/mmCIF file or folder; "
        "local path or URI) into Arrow datasets per split and subset, index.json and card.json/card.md.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.components.prep.config import PrepConfig

    cfg = from_args(PrepConfig, args)  # inputs judged before the readers are imported
    storage.require_local(cfg.input, "an existing protein set (file or folder)")
    storage.require_local(cfg.split_file, "an existing split file (JSON)")
    for subset in cfg.subset_files or ():
        storage.require_local(subset, "an existing subset file (JSON)")
    from invfold.components.prep.run import run_prep

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
    args.result = {"out": result.output, "digest": result.digest, "counts": c, "datasets": result.datasets}
    return 0
