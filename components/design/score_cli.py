"""`invfold score MODEL STRUCTURE [--fasta seqs.fasta] --out scores.csv`."""

from __future__ import annotations

import argparse

from invfold import storage
from invfold.options import add_command, from_args

# the subcommands this module adds, with their line in `invfold --help` (listed without building them)
COMMANDS = {
    "score": "score sequences on a backbone (mean and per-residue NLL)",
}

# examples at the end of each subcommand's --help (real commands, as the README runs them)
EXAMPLES = {
    "score": (
        "invfold score model.pt 1abc.cif --chain A --out native.csv             # the native sequence",
        "invfold score model.onnx 1abc.cif --chain A --fasta designs.fasta --out scores.csv",
    ),
}


# exit codes `invfold score` can return (its --help lists these): no training, so no 3 or 143
EXIT_CODES = {"score": (0, 1, 2, 141)}

# protein_mpnn_run.py's flags that have no alias here, and what to type instead
FOREIGN_FLAGS = {
    "score": {
        "--score_only": "invfold score is its --score_only 1 (drop the flag)",
        "--pdb_path": "give the structure as the second argument: invfold score MODEL STRUCTURE --out scores.csv",
        "--model_name": "give the model as the first argument, e.g. invfold score proteinmpnn:v_48_020 ...",
        "--path_to_model_weights": "give the model as the first argument (a .pt file or proteinmpnn:v_48_020)",
        "--out_folder": "use --out scores.csv",
        "--pdb_path_chains": "use --score-chains A,B (comma-separated)",
        "--path_to_fasta": "use --fasta FILE",
        "--conditional_probs_only": "use --probs conditional",
        "--unconditional_probs_only": "use --probs unconditional",
        "--conditional_probs_only_backbone": "use --probs conditional-backbone",
    },
}


def add_parser(subparsers) -> None:
    from invfold.components.design.config import ScoreConfig
    from invfold.components.model.reference import ModelSource

    add_command(
        subparsers,
        "score",
        run,
        ScoreConfig,
        ModelSource,
        help=COMMANDS["score"],
        description="Negative log-likelihood of given sequences (FASTA, or the native) on a structure, "
        "averaged over random decoding orders as ProteinMPNN's --score_only does; writes CSV (one row per "
        "sequence) and JSON (per-residue NLL) beside it. Works with model.pt and model.onnx alike.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.allocator import reexec_under_jemalloc
    from invfold.components.design.config import ScoreConfig
    from invfold.components.model.reference import ModelSource, check_model, resolve_model

    cfg = from_args(ScoreConfig, args)  # inputs judged before torch is imported
    check_model(cfg.model)
    storage.require_local(cfg.structure, "an existing structure file")
    storage.require_local(cfg.fasta, "an existing FASTA file")
    cfg.model = resolve_model(cfg.model, from_args(ModelSource, args).tracking_uri)
    reexec_under_jemalloc()  # eager PyTorch without page faults on every large tensor (allocator.py)
    from invfold.components.design.score import score

    scores = score(cfg)
    for s in scores:
        print(
            f"{s.structure} {s.sequence_name}: mean NLL {s.mean_nll:.3f} (+- {s.std_nll:.3f} over "
            f"{s.orders} orders), perplexity {s.perplexity:.2f}, {s.scored} residues"
        )
    print(f"wrote {cfg.out}")
    keys = ("structure", "sequence_name", "mean_nll", "std_nll", "perplexity", "scored", "orders")
    args.result = {"out": cfg.out, "scores": [{k: getattr(s, k) for k in keys} for s in scores]}
    return 0
