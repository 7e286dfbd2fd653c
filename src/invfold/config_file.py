"""`--config FILE` and `--print-config` on every subcommand: its options read from YAML, and
written as YAML.

A key is an option's name: the config field's name, which is the flag and the pipeline parameter
(`max_steps`, or `max-steps`; older spellings such as `nproc` too; `no_resume: true` or
`resume: false`). Precedence: a flag on the command line > the file > `--recipe` > the defaults.
The file's values become the subcommand parser's defaults before the command line is parsed, so
argparse's own rules apply to what is left (an option the file gives is no longer required, a
flag given still wins); each value is converted and checked here as the flag's own text would be.
A mistake is one line naming the file, the line, the key and what was expected (`InputError`),
and a value the config's own validation refuses later is reported against its key
(`name_file_in`)."""

from __future__ import annotations

import argparse
import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from invfold import storage
from invfold.errors import InputError, shown
from invfold.options import name_value, unmarked

CONFIG_FLAG, PRINT_FLAG = "--config", "--print-config"
# A config file holds one command's options: `invfold train --print-config` writes 1,033 bytes,
# `invfold run --print-config` 1,106. Files past 1 MiB and values nested past 64 levels are
# mistakes, refused before they cost memory or recursion.
MAX_CONFIG_BYTES = 2**20
MAX_DEPTH = 64
# options that say how the command runs, not what it does: never keys of a config file
NOT_KEYS = frozenset({"help", "version", "verbose", "quiet", "json", "config", "print_config"})


def add_config_options(parser: argparse.ArgumentParser, command: str) -> None:
    """--config and --print-config on the parser of `invfold COMMAND`."""
    group = parser.add_argument_group("config file")
    group.add_argument(
        CONFIG_FLAG,
        metavar="FILE",
        help="YAML file of this command's options, keys as the flags (max_steps: 100): a flag given "
        f"wins over the file, the file over --recipe and the defaults (`invfold {command} {PRINT_FLAG}` "
        "writes one)",
    )
    group.add_argument(
        PRINT_FLAG,
        action="store_true",
        help="print the options as a YAML config file (set ones as keys, defaults commented) and exit",
    )


def _key(text: str) -> str:
    return text.lstrip("-").replace("-", "_")


def config_keys(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.Action, bool]]:
    """key -> (action, whether the key is the field's own name); a flag spelling
    (`no_resume`, `nproc`) is a key too, meaning what typing that flag means."""
    keys: dict[str, tuple[argparse.Action, bool]] = {}
    actions = [a for a in parser._actions if a.dest not in NOT_KEYS and a.dest != argparse.SUPPRESS]
    for action in actions:
        keys[action.dest] = (action, True)
    for action in actions:
        for spelling in action.option_strings:
            if spelling.startswith("--"):
                keys.setdefault(_key(spelling), (action, False))
    return keys


class _FromFile(list):
    """A repeatable option's values from the file: a flag given on the command line replaces them
    (argparse would append to its default), see `ConfigFile.finish`."""


@dataclass
class ConfigFile:
    """The values a config file sets: dest -> value, and where each came from (line, key)."""

    path: str
    values: dict[str, Any] = field(default_factory=dict)
    where: dict[str, tuple[int, str]] = field(default_factory=dict)
    overridden: set[str] = field(default_factory=set)  # keys a flag on the command line replaced

    def finish(self, args: argparse.Namespace) -> None:
        """After parsing: a repeatable flag given replaces the file's list; which values a flag
        overrode (error messages then name the flag, not the file)."""
        for dest, value in self.values.items():
            got = getattr(args, dest, None)
            if isinstance(got, _FromFile):
                if len(got) > len(value):
                    got = got[len(value) :]
                    self.overridden.add(dest)
                setattr(args, dest, list(got))
            elif got is not value:
                self.overridden.add(dest)

    def sources(self) -> dict[str, tuple[int, str]]:
        return {dest: where for dest, where in self.where.items() if dest not in self.overridden}


def _spells(word: str, flag: str) -> bool:
    """Whether `word` is `flag` as argparse reads it: in full or a prefix of it (argparse refuses an
    ambiguous prefix itself)."""
    name = word.split("=", 1)[0]
    return len(name) > 2 and name.startswith("--") and flag.startswith(name)


def argv_config(argv: list[str]) -> str | None:
    """The FILE of `--config FILE` / `--config=FILE` on a command line (the last one given)."""
    found = None
    for i, word in enumerate(argv):
        if _spells(word, CONFIG_FLAG):
            found = word.split("=", 1)[1] if "=" in word else argv[i + 1] if i + 1 < len(argv) else None
    return found


def apply_config(parser: argparse.ArgumentParser, argv: list[str]) -> ConfigFile | None:
    """Read the --config file of `argv` (if any) into `parser`'s defaults; with --print-config,
    no option is required (it prints what is still missing)."""
    if any(_spells(word, PRINT_FLAG) for word in argv):
        for action in parser._actions:
            positional = not action.option_strings and action.nargs is None and action.dest not in NOT_KEYS
            action.needed = action.required or positional  # printed as "# required" when unset
            action.required = False
            if positional:
                action.nargs = "?"
    path = argv_config(argv)
    if path is None or not any(a.dest == "config" for a in parser._actions):
        return None
    config = ConfigFile(path)
    data, lines = _read(path)
    keys = config_keys(parser)
    for key, raw in data.items():
        line = lines[key]
        found = keys.get(_key(str(key)))
        if found is None:
            near = difflib.get_close_matches(_key(str(key)), keys, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise InputError(path, line, str(key), f"an option of {parser.prog}{hint}")
        action, by_name = found
        if action.dest in config.values:
            raise InputError(path, line, str(key), f"one key per option ({action.dest} is set twice)")
        config.values[action.dest] = _value(action, raw, by_name, path, line, str(key))
        config.where[action.dest] = (line, str(key))
    for dest in config.values:
        action = next(a for a in parser._actions if a.dest == dest)
        action.required = False
        if not action.option_strings and action.nargs is None:
            action.nargs = "?"  # a positional argument the file gives
    parser.set_defaults(**config.values)
    return config


def _read(path: str) -> tuple[dict, dict[Any, int]]:
    """The file's top-level mapping and the 1-based line of each key."""
    import yaml

    storage.require_local(path, "an existing YAML config file")
    try:
        text = storage.read_bytes(path, MAX_CONFIG_BYTES).decode()
    except InputError as err:
        if err.reason != "too_large":
            raise
        raise InputError(path, None, None, f"a config file of at most {MAX_CONFIG_BYTES:,} bytes", "a larger file",
                         reason="too_large") from None  # fmt: skip
    except UnicodeDecodeError:
        raise InputError(path, None, None, "a UTF-8 text file (YAML)", "binary content") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return {}, {}
        if not isinstance(node, yaml.MappingNode):
            raise InputError(path, node.start_mark.line + 1, None, "a mapping of options (max_steps: 100)")
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node)
            if key in lines:  # YAML itself would keep the last one without a word
                raise InputError(path, key_node.start_mark.line + 1, str(key), f"one {key} (also on line {lines[key]})")
            lines[key] = key_node.start_mark.line + 1
        return loader.construct_document(node), lines
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputError(path, mark.line + 1 if mark else None, None, "valid YAML", problem) from None
    except RecursionError:  # PyYAML composes and constructs nested nodes recursively
        raise InputError(path, None, None, "valid YAML", "values nested deeper than the parser's limit") from None
    finally:
        loader.dispose()


def _expected(action: argparse.Action) -> str:
    if action.choices is not None:
        return "one of " + ", ".join(str(c) for c in action.choices)
    kind = action.type
    if kind is int:
        return "an integer"
    if kind is float:
        return "a number"
    if kind is json.loads:
        return "a JSON/YAML value"
    return "a string" if kind in (None, str) else f"a value as --{action.dest.replace('_', '-')} takes it"


def _nullable(action: argparse.Action) -> bool:
    """Whether null is a value: the field is `X | None` (options.add_options says so), or, for an
    option of no field (a pipeline parameter), None is its default (unset)."""
    nullable = getattr(action, "nullable", None)
    return unmarked(action.default) is None if nullable is None else nullable


def _value(action: argparse.Action, raw: Any, by_name: bool, path: str, line: int, key: str) -> Any:
    """`raw` (what YAML read) as the value the flag would have given."""

    def fail(expected: str, got: Any = raw):
        raise InputError(path, line, key, expected, json.dumps(got, default=str) if _depth(got) < 4 else shown(got))

    if raw is None:
        if _nullable(action):
            return None
        fail(_expected(action) if action.nargs != 0 else "true or false")
    if action.nargs == 0:  # a switch: the field's value by its name, the flag given or not by a spelling
        if not isinstance(raw, bool):
            fail("true or false")
        if by_name:
            return raw
        return action.const if raw else unmarked(action.default)
    if isinstance(action, argparse._AppendAction):
        if isinstance(raw, dict):  # NAME=VALUE settings as a mapping (model: {hidden: 64})
            raw = [f"{k}={json.dumps(v)}" for k, v in raw.items()]
        items = raw if isinstance(raw, list) else [raw]
        return _FromFile(_convert(action, item, fail) for item in items)
    if isinstance(action.nargs, int):
        if not isinstance(raw, list) or len(raw) != action.nargs:
            fail(f"a list of {action.nargs} values")
        return [_convert(action, item, fail) for item in raw]
    return _convert(action, raw, fail)


def _convert(action: argparse.Action, item: Any, fail) -> Any:
    kind = action.type
    if kind is json.loads:
        if isinstance(item, str):
            try:
                return json.loads(item)
            except (json.JSONDecodeError, RecursionError):
                fail("a JSON value")
        if _depth(item) > MAX_DEPTH:
            fail(f"a value nested at most {MAX_DEPTH} deep")
        return item
    if isinstance(item, (dict, list)) or isinstance(item, bool):
        fail(_expected(action))
    if kind in (None, str):
        value = item if isinstance(item, str) else str(item)  # YAML read `tag: 1.0` as a number
    elif kind is float and isinstance(item, (int, float)):
        value = float(item)
    elif kind is int and isinstance(item, int):
        value = item
    else:
        try:
            value = kind(str(item))
        except argparse.ArgumentTypeError as err:
            fail(str(err))
        except (TypeError, ValueError):
            fail(_expected(action))
    if action.choices is not None and value not in action.choices:
        fail(_expected(action))
    return value


def name_file_in(message: str, parser: argparse.ArgumentParser, config: ConfigFile | None) -> str:
    """A message about an option the config file set, as `FILE:LINE: KEY: ...` (the flag in it
    replaced by the file's key), so the user edits the file, not a flag never typed."""
    if config is None:
        return message
    actions = {a.dest: a for a in parser._actions}
    for dest, (line, key) in config.sources().items():
        action = actions[dest]
        # the flags, and the field's own name where it cannot be an ordinary word (max_steps)
        spellings = [re.escape(s) for s in action.option_strings if s.startswith("--")]
        spellings += [r"\b" + dest] if "_" in dest else []
        pattern = r"(?<![\w-])(?:" + "|".join(sorted(spellings, key=len, reverse=True)) + r")(?![\w-])"
        value = config.values[dest]
        # outside parentheses: "(invfold prep --out)" is a hint, not the option at fault
        parts = re.split(r"(\([^)]*\))", message)
        if spellings and any(re.search(pattern, part) for part in parts[::2]):
            parts[::2] = [re.sub(pattern, key, part) for part in parts[::2]]
            message = re.sub(f"^{re.escape(key)}:", f"field '{key}':", "".join(parts))  # as InputError names it
            return f"{config.path}:{line}: {message}"
        if isinstance(value, str) and ("/" in value or "." in value) and value in message:
            return f"{config.path}:{line}: field '{key}': {message}"
    return message


def print_config(parser: argparse.ArgumentParser, args: argparse.Namespace, config: ConfigFile | None) -> dict:
    """Print `args` as a config file of `parser`'s options: what the command line or a config set as
    keys, the rest (defaults, the recipe's values) commented out. Returns the effective values."""
    import yaml

    resolved = args.resolve_defaults(args) if hasattr(args, "resolve_defaults") else {}
    given = config.sources() if config else {}
    lines = [
        f"# {parser.prog} {CONFIG_FLAG} FILE: keys are the options (a flag given wins over this file,",
        "# the file over --recipe and the defaults); commented: the default or the recipe's value.",
    ]
    effective = {}
    for key, (action, by_name) in config_keys(parser).items():
        if not by_name:
            continue
        value = getattr(args, action.dest, None)
        is_set = action.dest in given or (value is not action.default and value is not None)
        if not is_set and action.dest in resolved:
            value = resolved[action.dest]
        value = _plain(unmarked(value))
        if value is None and isinstance(action, argparse._AppendAction) and not _nullable(action):
            value = {} if action.type is name_value else []  # a repeatable option never given
        effective[key] = value
        dumped = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6)
        text = f"{key}: " + dumped.removesuffix("\n...\n").rstrip("\n")
        required = value is None and getattr(action, "needed", False)
        lines.append(text if is_set else f"# {text}" + ("  # required" if required else ""))
    print("\n".join(lines))
    return effective


def _plain(value: Any) -> Any:
    """A value YAML writes and --config reads back: lists for tuples, a mapping for NAME=VALUE pairs."""
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: v for k, v in value}
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _depth(value: Any) -> int:
    """How deeply lists and mappings nest in `value` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack.extend((v, depth) for v in (item.values() if isinstance(item, dict) else item))
    return deepest
