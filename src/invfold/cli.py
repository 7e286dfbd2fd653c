"""`invfold`: one command with a subcommand per step; each step's cli.py registers its own.

Errors the project raises on purpose (`invfold.errors.InvfoldError`) are reported here, once:
`invfold <cmd>: error: <message>` and the error's exit code."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from invfold import __version__
from invfold.errors import InvfoldError

# Each module exposes add_parser(subparsers) and keeps heavy imports inside its handlers,
# so `invfold --help` stays fast.
SUBCOMMAND_MODULES = (
    "invfold.components.prep.cli",
    "invfold.components.launch.cli",
    "invfold.components.evaluate.cli",
    "invfold.components.export.cli",
    "invfold.components.design.cli",
    "invfold.components.design.score_cli",
    "invfold.components.model.cli",
    "invfold.pipelines.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="invfold",
        description="Train protein inverse-folding models: prep -> train -> evaluate -> export, "
        "locally or on Kubeflow.",
    )
    parser.add_argument("--version", action="version", version=f"invfold {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        result = args.func(args)
    except InvfoldError as err:  # a mistake the user can fix: its message, no traceback
        print(f"invfold {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
