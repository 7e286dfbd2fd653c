"""`invfold`: one command with a subcommand per step; each step's cli.py registers its own.

Errors the project raises on purpose (`invfold.errors.InvfoldError`) are reported here, once:
`invfold <cmd>: error: <message>` and the error's exit code; any other exception (a library's, or
a bug) as `invfold <cmd>: error: <Type>: <message>`, exit 1, its traceback with -v. Every line
of it passes through `invfold.storage.redact`: credentials in the command's URIs never show."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import json
import logging
import os
import re
import sys
import traceback
from dataclasses import dataclass

from invfold import __version__
from invfold.config_file import ConfigFile, add_config_options, apply_config, name_file_in, print_config
from invfold.errors import EXIT_STATUS, InvfoldError, exit_status
from invfold.options import add_command, from_args, option
from invfold.storage import redact, remember_secrets

# Each module exposes COMMANDS (name -> its line in `invfold --help`) and add_parser(subparsers),
# and keeps heavy imports inside its handlers (scripts/lint_lazy_imports.py says which and why).
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
GLOBAL_FLAGS = ("-h", "--help", "--version", "-v", "--verbose", "-q", "--quiet", "--json")
COMPLETION_SHELLS = ("bash", "zsh")
EXAMPLES = {
    "completion": (
        "invfold completion bash > ~/.local/share/bash-completion/completions/invfold",
        "invfold completion zsh > ~/.zfunc/_invfold   # with fpath+=(~/.zfunc) before compinit in ~/.zshrc",
    ),
}


@dataclass
class CompletionOptions:
    """What `invfold completion` writes."""

    shell: str = option(positional=True, choices=COMPLETION_SHELLS, help="the shell the script is for")


class CommandLineParser(argparse.ArgumentParser):
    """A mistake on the command line in two lines, `invfold <cmd>: error: <message>` and where to
    read more, instead of the whole usage (every subcommand's parser is one of these); with
    --json also `{"error", "exit_code"}` on stdout, as for every other mistake."""

    json_errors = False  # set by parse() when the command line has --json
    foreign_flags: dict[str, str] = {}  # another tool's flag -> what to type here (a module's FOREIGN_FLAGS)

    def error(self, message: str):
        message = redact(with_suggestion(message))
        if self.json_errors:
            print(json.dumps({"error": message, "exit_code": 2}))
        self.exit(2, f"{self.prog}: error: {message}\n  (see `{self.prog} --help`)\n")


def with_suggestion(message: str) -> str:
    """argparse's "invalid choice: 'desing' (choose from ...)" with the closest choice named."""
    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if found:
        close = difflib.get_close_matches(found[1], re.findall(r"'([^']*)'", found[2]), n=1)
        if close:
            message += f"; did you mean {close[0]!r}?"
    return message


def unrecognized(extras: list[str], command: argparse.ArgumentParser) -> str:
    """The message for arguments `command` does not take: another tool's flag (ProteinMPNN's
    `--sampling_temp`) answered with ours, an unknown one with the closest flags it has."""
    flags = [word.split("=", 1)[0] for word in extras if word.startswith("-")]
    for word in flags:
        if word in command.foreign_flags:
            return f"{word} is ProteinMPNN's; {command.foreign_flags[word]}"
    known = [s for action in command._actions for s in action.option_strings if s.startswith("--")]
    close = []
    for word in flags:
        spelled = "--" + word.lstrip("-").replace("_", "-")
        close += [c for c in difflib.get_close_matches(spelled, known, n=2, cutoff=0.7) if c not in close]
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"unrecognized arguments: {' '.join(extras)}{hint}"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; given `command`, only the module that adds it builds its options (the
    others are listed by name and help line), so `invfold X` imports X's config alone and
    `invfold --help` none: help and mistakes answer without importing torch. Without
    `command`, every subcommand's options (what a completion script is written from)."""
    parser = CommandLineParser(
        prog="invfold",
        description="Train protein inverse-folding models: prep -> train -> evaluate -> export, "
        "locally or on Kubeflow. Every command with options also reads them from a YAML file "
        "(--config FILE, keys as the flags; --print-config writes one); `invfold completion bash|zsh` "
        "prints a shell completion script.",
    )
    parser.add_argument("--version", action="version", version=f"invfold {__version__}")
    add_logging_flags(parser, default=False)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        module = importlib.import_module(name)
        if command is None or command in module.COMMANDS:
            module.add_parser(subparsers)
        else:
            for listed, line in module.COMMANDS.items():
                subparsers.add_parser(listed, help=line)
    completion = add_command(
        subparsers,
        "completion",
        completion_command,
        CompletionOptions,
        help="print a shell completion script (bash, zsh) for invfold",
        description="Print a tab-completion script for invfold's subcommands, options and choices, "
        "written from the parser itself (shtab): the shell reads it; invfold does not run on TAB.",
    )
    examples, exit_codes, foreign = dict(EXAMPLES), {"completion": (0, 2, 141)}, {}
    for name in SUBCOMMAND_MODULES:
        module = importlib.import_module(name)
        examples.update(getattr(module, "EXAMPLES", {}))
        exit_codes.update(getattr(module, "EXIT_CODES", {}))
        foreign.update(getattr(module, "FOREIGN_FLAGS", {}))
    for sub in _leaf_parsers(parser):
        if sub is not completion and any(a.dest != "help" for a in sub._actions):
            add_config_options(sub, sub.prog.removeprefix("invfold "))
        add_logging_flags(sub, default=argparse.SUPPRESS)  # absent after the command: the global value
        name = sub.prog.removeprefix("invfold ")
        lines = examples.get(name, ())
        status = exit_status(exit_codes.get(name))
        sub.epilog = ("examples:\n" + "".join(f"  {line}\n" for line in lines) + "\n" if lines else "") + status
        sub.foreign_flags = foreign.get(name, {})
        sub.formatter_class = ExamplesFormatter
    parser.epilog, parser.formatter_class = EXIT_STATUS, ExamplesFormatter
    return parser


class ExamplesFormatter(argparse.HelpFormatter):
    """Wraps the description as argparse does; the epilog (examples, exit status) keeps its lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(("examples:", "exit status:")):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def add_logging_flags(parser: argparse.ArgumentParser, default) -> None:
    """-v/--verbose and -q/--quiet, before the subcommand or after it (a subcommand that has its
    own --verbose, `invfold run`'s alias of --show-logs, keeps it: -v is the logging flag there)."""
    for short, long, help_text in (("-v", "--verbose", "debug logging"), ("-q", "--quiet", "warnings and errors only")):
        taken = {s for action in parser._actions for s in action.option_strings}
        names = [short] + ([long] if long not in taken else [])
        parser.add_argument(*names, dest=long[2:], action="store_true", default=default, help=help_text)
    parser.add_argument(
        "--json",
        action="store_true",
        default=default,
        help="the result as one JSON object on stdout (what the command prints goes to stderr)",
    )


def _leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers that run a command (`invfold weights import`, not `invfold weights`)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                found.extend(_leaf_parsers(sub) if nested else [sub])
    return found


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every (sub)subcommand's parser below `parser`."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += [sub, *_all_parsers(sub)]
    return found


def subcommand_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)subcommand `argv` names."""
    current = parser
    for word in argv:
        actions = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if actions and word in actions[0].choices:
            current = actions[0].choices[word]
    return current


def with_flag_names(message: str, parser: argparse.ArgumentParser) -> str:
    """A config field in a message as the flag that sets it, so a user reads what to type:
    "DesignConfig.design_chains" -> "--design-chains", "TrainConfig: give max_steps" -> "give
    --max-steps". The configs name their fields (their messages serve Python callers too)."""
    flags = {}
    for action in parser._actions:
        if action.option_strings:
            flags.setdefault(action.dest, action.option_strings[0])
        elif action.dest and action.dest != argparse.SUPPRESS:
            flags.setdefault(action.dest, str(action.metavar or action.dest).upper())
    about_config = re.search(r"\b[A-Z]\w*(?:\.\w+|: )", message)
    message = re.sub(r"\b[A-Z]\w*\.(\w+)\b", lambda m: flags.get(m.group(1), m.group(0)), message)
    message = re.sub(r"^[A-Z]\w*: ", "", message)
    if about_config:  # bare field names: with an underscore, or listed ("max_steps, epochs or ...")
        listed = r"\b[a-z]+(?:_[a-z]+)+\b|(?<=, )[a-z]+\b|(?<=or )[a-z]+\b|\b[a-z]+(?=,| or )"
        message = re.sub(listed, lambda m: flags.get(m.group(0), m.group(0)), message)
    return message


def command_of(argv: list[str]) -> str:
    """The subcommand word of a command line ("" when there is none: `invfold --help`)."""
    for word in argv:
        if word not in GLOBAL_FLAGS:
            return "" if word.startswith("-") else word
    return ""


def completion_command(args: argparse.Namespace) -> int:
    """The completion script, written from the whole parser (every subcommand's options)."""
    import shtab

    shell = from_args(CompletionOptions, args).shell
    parser = build_parser()
    for sub in [parser, *_all_parsers(parser)]:
        for action in sub._actions:  # a text value (a path, a URI, a name): complete file names
            if action.nargs != 0 and action.choices is None and action.type in (None, str):
                action.complete = shtab.FILE
    print(shtab.complete(parser, shell=shell).rstrip("\n"))
    args.result = {"shell": shell}
    return 0


def report(err: InvfoldError, command: argparse.ArgumentParser, config: ConfigFile | None, as_json: bool) -> int:
    """`invfold <cmd>: error: <message>` on stderr (and as JSON on stdout): the one error handler."""
    message = redact(name_file_in(with_flag_names(str(err), command), command, config))
    print(f"{command.prog}: error: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"error": message, "exit_code": err.exit_code}))
    return err.exit_code


def report_unexpected(err: Exception, command: argparse.ArgumentParser, verbose: bool, as_json: bool) -> int:
    """An exception invfold did not raise on purpose (a library's, or a bug): one line with its type
    and message, the traceback with -v; both redacted, since libraries quote the URIs they were
    given (botocore names an s3:// URI's userinfo as the bucket)."""
    if verbose:
        print(redact("".join(traceback.format_exception(err))).rstrip("\n"), file=sys.stderr)
    detail = " ".join(str(err).split())  # one line: botocore's names the bucket on its second
    detail = detail if len(detail) <= 400 else detail[:399] + "…"
    message = redact(f"{type(err).__name__}: {detail}" if detail else type(err).__name__)
    hint = "" if verbose else " (not an error invfold expected; -v shows the traceback)"
    print(f"{command.prog}: error: {message}{hint}", file=sys.stderr)
    if as_json:
        print(json.dumps({"error": message, "exit_code": 1}))
    return 1


@dataclass
class CommandLine:
    """A parsed command line: the subcommand's parser, its options, the config file it read."""

    parser: argparse.ArgumentParser
    command: argparse.ArgumentParser
    args: argparse.Namespace | None = None
    config: ConfigFile | None = None


def parse(argv: list[str]) -> CommandLine:
    """Parse `argv`, a --config file's values under the flags given (SystemExit as argparse does:
    --help, a mistake on the command line; InvfoldError: a mistake in the file)."""
    parser = build_parser(command_of(argv))
    for each in (parser, *_all_parsers(parser)):
        each.json_errors = "--json" in argv
    line = CommandLine(parser, subcommand_parser(parser, argv))
    line.config = apply_config(line.command, argv)  # --config FILE: its values become the defaults
    line.args, extras = parser.parse_known_args(argv)
    if extras:  # named by the subcommand that does not take them, not by `invfold`
        line.command.error(unrecognized(extras, line.command))
    if line.config is not None:
        line.config.finish(line.args)
    return line


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    remember_secrets(argv)  # before anything can fail and quote them
    try:
        line = parse(argv)
    except SystemExit as done:  # --help, --version, or a mistake parse_args has already reported
        return 0 if done.code is None else done.code if isinstance(done.code, int) else 2
    except InvfoldError as err:  # a mistake in the config file
        parser = build_parser(command_of(argv))
        return report(err, subcommand_parser(parser, argv), None, "--json" in argv)
    parser, command, args, config = line.parser, line.command, line.args, line.config
    remember_secrets(vars(args).values())  # a --config file's URIs too
    args.command_line = ["invfold", *argv]  # what a report says it was written by
    # invfold's own lines at INFO; other libraries' at WARNING (`invfold export` of a `small` model
    # printed 387 lines, 376 of them onnxscript's and onnx_ir's INFO); -v: everything at DEBUG,
    # -q: warnings and errors only
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    logging.getLogger("invfold").setLevel(
        logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    stdout = sys.stdout
    try:
        # --json: the handler's lines go to stderr, its `args.result` is the one object on stdout
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            if getattr(args, "print_config", False):
                args.result, code = {"config": print_config(command, args, config)}, 0
            else:
                code = int(args.func(args) or 0)
    except InvfoldError as err:  # a mistake the user can fix: its message, no traceback
        return report(err, command, config, args.json)
    except BrokenPipeError:  # `| head` read enough: no traceback, and no second error at exit's flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:  # noqa: BLE001 - a library's exception or a bug: one redacted line
        return report_unexpected(err, command, args.verbose, args.json)
    if args.json:
        print(json.dumps({**getattr(args, "result", {}), "exit_code": code}, default=str), file=stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
