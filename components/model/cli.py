"""`invfold weights list | import NAME --out model.pt`: published weights as invfold model files."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from invfold.options import add_command, from_args, option

# the subcommands this module adds, with their line in `invfold --help` (listed without building them)
COMMANDS = {
    "weights": "list or import published model weights (ProteinMPNN)",
}

# examples at the end of each subcommand's --help (real commands, as the README runs them)
EXAMPLES = {
    "weights list": ("invfold weights list",),
    "weights import": (
        "invfold weights import proteinmpnn:v_48_020 --out v_48_020.pt",
        "invfold weights import proteinmpnn-soluble:v_48_020 --out soluble.pt",
        "invfold weights import proteinmpnn-ca:v_48_020 --out ca.pt",
    ),
}


@dataclass
class WeightsImport:
    """Convert published weights into an invfold model file."""

    name: str = option(
        positional=True,
        help="e.g. proteinmpnn:v_48_020, proteinmpnn-soluble:v_48_020, proteinmpnn-ca:v_48_020 (see `list`)",
    )
    out: str = option(help="model file to write (path or URI)")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "weights",
        help=COMMANDS["weights"],
        description="Convert published ProteinMPNN weights (from the optional proteinmpnn package, "
        "never downloaded at run time) into an invfold model file of the `proteinmpnn` preset "
        "(`proteinmpnn-ca` for the CA-only weights).",
    )
    sub = p.add_subparsers(dest="weights_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="names of the published weights the installed package ships")
    listing.set_defaults(func=run_list)
    add_command(sub, "import", run_import, WeightsImport, help=WeightsImport.__doc__, description=WeightsImport.__doc__)


def run_list(args: argparse.Namespace) -> int:
    from invfold.components.model import published

    names = [weights.name for weights in published.available()]
    print("\n".join(names))
    args.result = {"weights": names}
    return 0


def run_import(args: argparse.Namespace) -> int:
    from invfold.components.model import published

    opts = from_args(WeightsImport, args)
    published.locate(opts.name)  # an unknown name is one line, before torch is imported
    from invfold.components.model.io import save_model

    model, provenance = published.load_published(opts.name)
    save_model(opts.out, model, provenance)
    print(f"{opts.name} -> {opts.out} ({model.num_parameters()} parameters, preset {model.cfg.preset_name()})")
    args.result = {"name": opts.name, "out": opts.out, "parameters": model.num_parameters()}
    return 0
