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

# Each module exposes COMMANDS (name -> its line in `invfold --help`) and add_parser(subparsers),
# and keeps heavy imports inside its handlers.
SUBCOMMAND_MODULES = (
    "invfold.components.prep.cli",
    "invfold.components.train.cli",
    "invfold.components.evaluate.cli",
    "invfold.components.export.cli",
    "invfold.components.design.cli",
    "invfold.components.design.score_cli",
    "invfold.components.model.cli",
    "invfold.pipelines.cli",
)
GLOBAL_FLAGS = ("-h", "--help", "--version", "-v", "--verbose")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; given `command`, only the module that adds it builds its options (the
    others are listed by name and help line), so `invfold X` imports X's config alone and
    `invfold --help` none: help and mistakes answer without importing torch (issue 25)."""
    parser = argparse.ArgumentParser(
        prog="invfold",
        description="Train protein inverse-folding models: prep -> train -> evaluate -> export, "
        "locally or on Kubeflow.",
    )
    parser.add_argument("--version", action="version", version=f"invfold {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        module = importlib.import_module(name)
        if command is None or command in module.COMMANDS:
            module.add_parser(subparsers)
        else:
            for listed, line in module.COMMANDS.items():
                subparsers.add_parser(listed, help=line)
    return parser


def command_of(argv: list[str]) -> str:
    """The subcommand word of a command line ("" when there is none: `invfold --help`)."""
    for word in argv:
        if word not in GLOBAL_FLAGS:
            return "" if word.startswith("-") else word
    return ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_of(argv))
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
