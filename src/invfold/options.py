"""Command-line options written once, on the config dataclass's fields.

Each field says what it is (`option(default, "help")`); `add_options` turns a dataclass into
argparse options (`add_command`: a subcommand of them) and `from_args` turns the parsed
namespace back into the dataclass, so a default, a type, the choices and the help text live in
one place (the field) and the CLI cannot drift from the Python API. The option is
`--field-name`; older spellings stay accepted as aliases. Type -> option: `bool` is a switch
(`--name`, or `--no-name` when it defaults to True), `X | None` an optional X, `Literal[...]`
(or `choices=`) its choices, `list[X]` a repeatable option, `tuple[X, X, X]` three values,
`dict` a repeatable NAME=VALUE (VALUE read as JSON when it is JSON). `check_values` validates
in `__post_init__` what the fields declare: the choices, bounds (`min`/`max`; exclusive:
`above`/`below`), and that every float is finite (unless `finite=False`), so one rule holds for
the CLI, `--config` files, the Python API and the pipeline parameters that set the same fields
(`check_value`); `config_from_dict` builds a config from JSON, naming unknown keys."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import json
import math
import re
import sys
import types
import typing
from typing import Any, Literal

from invfold.errors import ConfigError


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Any = dataclasses.MISSING,
    aliases: tuple[str, ...] = (),
    positional: bool = False,
    cli: bool = True,
    choices: tuple | None = None,
    metavar: str | tuple | None = None,
    type: Any = None,
    min: float | None = None,
    max: float | None = None,
    above: float | None = None,
    below: float | None = None,
    finite: bool = True,
    pipeline: bool | str = False,
    groups: tuple[str, ...] = (),
) -> Any:
    """A dataclass field that knows its command-line option. aliases: other spellings kept for
    existing users (e.g. "-n"); positional: an argument, not an --option; cli=False: not on the
    command line (e.g. in-memory records); choices: when they are not in the type (a table's
    keys); type: the option's value type when the field's is wider (e.g. `str | list[int]`).
    min/max: inclusive bounds of a number (each number of a tuple or list): a count that sizes
    an allocation needs a max, or a few characters of input ask for gigabytes; above/below: the
    exclusive ones (a rate or a timeout above 0); a bounded int field takes ints only, a bounded
    float field numbers only; finite=False: a float field that may be inf or NaN (floats are
    finite otherwise). `check_values` holds them.
    pipeline: the field is also a parameter of the pipeline and of its step's component (written
    there by scripts/generate_signatures.py, described by `with_field_help`'s `@pipeline` mark); a
    str is what the parameter's description adds after the help. groups: names of the lists the
    field belongs to (`fields_in`), e.g. TrainConfig's settings a checkpoint resumes only under."""
    if not help:
        raise TypeError("option(): every option needs its help text")
    if min is not None and max is not None and min > max:
        raise TypeError(f"option(): min {min!r} > max {max!r}")
    if (min is not None and above is not None) or (max is not None and below is not None):
        raise TypeError("option(): a side takes min or above (max or below), not both")
    metadata = dict(
        help=help,
        aliases=tuple(aliases),
        positional=positional,
        cli=cli,
        choices=choices,
        metavar=metavar,
        type=type,
        min=min,
        max=max,
        above=above,
        below=below,
        finite=finite,
        pipeline=None if pipeline is False else "" if pipeline is True else pipeline,
        groups=tuple(groups),
    )
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def name_value(text: str) -> tuple[str, Any]:
    """NAME=VALUE with VALUE parsed as JSON when it is JSON (numbers, true/false), else a string."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value
    except RecursionError:
        raise argparse.ArgumentTypeError(f"{name}: VALUE nested deeper than the JSON parser's limit") from None


def flag(name: str) -> str:
    """The option of a field or parameter name: max_steps -> --max-steps."""
    return "--" + name.replace("_", "-")


def _strip_optional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def choices_of(f: dataclasses.Field, hint: Any) -> tuple | None:
    """A field's allowed values: its option(choices=...) or its Literal type, else None."""
    if f.metadata.get("choices") is not None:
        return tuple(f.metadata["choices"])
    hint = _strip_optional(hint)
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    return None


@functools.cache
def field_types(cls) -> dict[str, Any]:
    """Each field's resolved type; a field off the command line (option(cli=False)) whose type
    names a class imported only for type checkers (so that a config module stays light) keeps
    its annotation text."""
    try:
        return typing.get_type_hints(cls)
    except NameError:
        module = vars(sys.modules[cls.__module__])
        types_: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            try:
                # the annotation is the module's own source text, evaluated as get_type_hints would
                types_[f.name] = eval(f.type, module) if isinstance(f.type, str) else f.type  # noqa: S307
            except NameError:
                if f.metadata.get("cli", True):
                    raise
                types_[f.name] = f.type
        return types_


def cli_fields(cls) -> list[tuple[dataclasses.Field, Any]]:
    """(field, resolved type) of every field that is on the command line."""
    hints = field_types(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def negated_help(text: str) -> str:
    """The help of a --no-NAME switch read the way the switch works: the field's help says what
    NAME does ("resume from the newest checkpoint (--no-resume: ignore them)"), the switch turns
    it off ("ignore them (without it: resume from the newest checkpoint)")."""
    found = re.match(r"^(.*) \(--no-[\w-]+: (.*)\)$", text)
    return f"{found[2]} (without it: {found[1]})" if found else f"turn off: {text}"


def add_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls, skip: tuple[str, ...] = ()) -> None:
    """An option per field of dataclass `cls` (fields named in `skip` left out)."""
    for f, hint in cli_fields(cls):
        if f.name in skip:
            continue
        meta = f.metadata
        default = _default(f)
        required = default is dataclasses.MISSING
        kwargs: dict[str, Any] = {"help": meta["help"].replace("%", "%%")}
        base = _strip_optional(hint)
        origin, args = typing.get_origin(base), typing.get_args(base)
        choices = choices_of(f, hint)
        if meta.get("type") is not None:
            kwargs["type"] = meta["type"]
        elif base is bool:
            kwargs["action"] = "store_false" if default is True else "store_true"
        elif choices is not None:
            kwargs["type"] = type(choices[0])
        elif origin in (list, tuple) and args:
            kwargs["type"] = args[0]
        elif origin is dict or base is dict:
            kwargs["type"] = name_value
        elif base in (int, float, str):
            kwargs["type"] = base
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: no command-line form for {hint!r} (use option(cli=False))")
        if choices is not None:
            kwargs["choices"] = choices
        if meta.get("metavar") is not None:
            kwargs["metavar"] = meta["metavar"]
        if origin is tuple and meta.get("type") is None:
            kwargs["nargs"] = len(args)
        elif (origin is list or origin is dict or base is dict) and meta.get("type") is None:
            kwargs["action"] = "append"
        nullable = base is not hint  # `X | None`: a config file may set it to null
        if meta.get("positional"):
            parser.add_argument(f.name, **kwargs).nullable = nullable
            continue
        if base is bool and default is True:
            names = ["--no-" + f.name.replace("_", "-"), *meta.get("aliases", ())]
            kwargs["help"] = negated_help(kwargs["help"])
        else:
            names = [flag(f.name), *meta.get("aliases", ())]
        if required:
            kwargs["required"] = True
        # collected values (append) start empty; the dataclass's own default applies when unset
        kwargs["default"] = None if kwargs.get("action") == "append" or required else default
        switch = base is bool  # a switch's help says what it does; "(default: True)" would not help
        if not (switch or kwargs["default"] is None or kwargs["default"] is False or kwargs["default"] in ("", [], ())):
            kwargs["help"] += " (default: %(default)s)"
        parser.add_argument(*names, dest=f.name, **kwargs).nullable = nullable


def add_command(subparsers, name: str, run, *configs, help: str, description: str) -> argparse.ArgumentParser:
    """A subcommand whose options are the fields of `configs` (after the first, a group each,
    titled by the class's docstring) and whose handler is `run(args)`."""
    parser = subparsers.add_parser(name, help=help, description=description)
    for i, config in enumerate(configs):
        add_options(
            parser if i == 0 else parser.add_argument_group((config.__doc__ or "").split("\n")[0].rstrip(".")), config
        )
    parser.set_defaults(func=run)
    return parser


def from_args(cls, args: argparse.Namespace, **extra: Any):
    """The dataclass from parsed options (and `extra` fields the CLI sets itself)."""
    values: dict[str, Any] = {}
    for f, hint in cli_fields(cls):
        if f.name in extra or not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if value is None and f.default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            continue  # a repeatable option never given: the field's factory default
        base = _strip_optional(hint)
        if value is not None and (typing.get_origin(base) is dict or base is dict):
            value = dict(value)
        elif value is not None and typing.get_origin(base) is tuple:
            value = tuple(value)
        values[f.name] = value
    return cls(**values, **extra)


def _numbers(value: Any) -> list:
    """The numbers a field's value holds: itself, or the members of a tuple or list."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return [v for v in items if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _kind(hint: Any) -> Any:
    """The number type of a field: its type, or the members' of a tuple or list."""
    base = _strip_optional(hint)
    return typing.get_args(base)[0] if typing.get_origin(base) in (tuple, list) and typing.get_args(base) else base


# option() bounds: key, its sign, its bracket in an interval (a low side first)
_SIDES = (("min", ">=", "["), ("above", ">", "("), ("max", "<=", "]"), ("below", "<", ")"))


def _bounds_text(meta: Any, hint: Any) -> str:
    kind = _kind(hint)
    finite = "an integer" if kind is int else "a finite number" if meta.get("finite", True) else "a number"
    # (text of one side, its sign alone, its bracket in an interval) per side declared
    sides = [(f"{meta[key]:,}", sign, bracket) for key, sign, bracket in _SIDES if meta.get(key) is not None]
    if len(sides) == 2:
        (low, _, opening), (high, _, closing) = sides
        return f"{finite} in {opening}{low}, {high}{closing}"
    if sides:
        value, sign, _ = sides[0]
        return f"{finite} {sign} {value}"
    return finite


def _breaks(meta: Any, number: Any) -> bool:
    """Whether `number` is outside the bounds `meta` declares."""
    return (
        (meta.get("min") is not None and number < meta["min"])
        or (meta.get("max") is not None and number > meta["max"])
        or (meta.get("above") is not None and not number > meta["above"])
        or (meta.get("below") is not None and not number < meta["below"])
    )


def check_value(cls, name: str, value: Any) -> None:
    """Raise ConfigError ("Cls.name: expected ..., got ...") when `value` breaks what field `name`
    of dataclass `cls` declares: its choices, its bounds (an int field's, ints only), a float's
    finiteness. The message names the field, which the CLI shows as its flag (cli.with_flag_names)."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    hint = field_types(cls)[name]
    choices = choices_of(f, hint)
    if choices is not None and value is not None and value not in choices:
        raise ConfigError(f"{cls.__name__}.{name}: expected one of {choices}, got {value!r}")
    meta = f.metadata
    finite = meta.get("finite", True)
    bounded = any(meta.get(side) is not None for side in ("min", "max", "above", "below"))
    if bounded and value is not None:
        members = value if isinstance(value, (list, tuple)) else [value]
        number = (int,) if _kind(hint) is int else (int, float)
        if any(isinstance(v, bool) or not isinstance(v, number) for v in members):
            raise ConfigError(f"{cls.__name__}.{name}: expected {_bounds_text(meta, hint)}, got {value!r}")
    for number in _numbers(value):
        if (finite and isinstance(number, float) and not math.isfinite(number)) or _breaks(meta, number):
            raise ConfigError(f"{cls.__name__}.{name}: expected {_bounds_text(meta, hint)}, got {value!r}")


def check_values(config) -> None:
    """Raise ConfigError naming the field when a value breaks what its option() declares (choices,
    min/max, finite floats); called first in each config's `__post_init__`."""
    for f in dataclasses.fields(config):
        if "help" in f.metadata:  # an option() field
            check_value(type(config), f.name, getattr(config, f.name))


def config_from_dict(cls, data: dict[str, Any], source: str = "<dict>"):
    """The dataclass from a dict (a JSON file), naming the unknown keys instead of a TypeError."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown {cls.__name__} fields {unknown}; expected some of {sorted(known)}")
    return cls(**data)


def fields_in(cls, group: str) -> tuple[str, ...]:
    """The names of dataclass `cls`'s fields in option(groups=...) `group`, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if group in f.metadata.get("groups", ()))


def pipeline_fields(cls) -> list[tuple[dataclasses.Field, Any]]:
    """(field, resolved type) of each field that is also a pipeline parameter (option(pipeline=))."""
    return [(f, hint) for f, hint in cli_fields(cls) if f.metadata.get("pipeline") is not None]


def pipeline_type(hint: Any) -> type:
    """The type of the pipeline parameter that sets a field of type `hint`. KFP's parameters are
    str, int, float, bool, dict or list and are never None: an optional field's empty value (0,
    0.0, "") stands for None (`from_pipeline`)."""
    base = _strip_optional(hint)
    if typing.get_origin(base) is Literal:
        return type(typing.get_args(base)[0])
    base = typing.get_origin(base) or base
    if base in (str, int, float, bool, dict, list):
        return base
    raise TypeError(f"no pipeline parameter type for {hint!r}")


def pipeline_default(hint: Any, value: Any) -> Any:
    """A field's value as the default of its pipeline parameter (None: the type's empty value)."""
    return pipeline_type(hint)() if value is None else value


def from_pipeline(cls, values: dict[str, Any]) -> dict[str, Any]:
    """Pipeline parameter values as dataclass `cls`'s fields take them: an optional field's empty
    value (0, 0.0, "") is None; other names pass as they are."""
    hints = field_types(cls)
    out = dict(values)
    for name, value in values.items():
        hint = hints.get(name)
        optional = hint is not None and _strip_optional(hint) is not hint
        if optional and value is not None and not isinstance(value, bool) and value == pipeline_type(hint)():
            out[name] = None
    return out


class _Default:
    """A parser default marked as such, so that a value typed on the command line (a plain value,
    even an equal one) can be told apart from it: how `--recipe` knows what the user set. argparse
    never converts or checks a default that is not a string, and help shows it as the value."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __str__(self) -> str:
        return str(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


def marked_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """`values` marked, for parser.set_defaults (read them back with `given` and `unmarked`)."""
    return {name: _Default(value) for name, value in values.items()}


def given(args: argparse.Namespace, name: str) -> bool:
    """Whether the user set option `name` (its value is not a marked default)."""
    return not isinstance(getattr(args, name, None), _Default)


def unmarked(value: Any) -> Any:
    """The plain value of a marked default (anything else as it is)."""
    return value.value if isinstance(value, _Default) else value


HELP_MARK = "@help"
PIPELINE_MARK = "@pipeline"


def field_help(cls, name: str) -> str:
    """The help of `cls`'s field `name` as the start of a sentence (capitalised)."""
    text = {f.name: f for f in dataclasses.fields(cls)}[name].metadata["help"]
    return text[:1].upper() + text[1:]


def with_field_help(cls):
    """Decorator: each docstring line `name: @help ...` gets field `name`'s help in place of the
    mark, and a line `@pipeline` becomes one such line per pipeline field of `cls` (option(pipeline=))
    the function takes, its help then the field's pipeline note, so a pipeline's or a component's
    `Args:` never restate a config field's help (KFP reads the docstring into the compiled
    parameters' descriptions)."""

    def fill(func):
        lines = []
        for line in (func.__doc__ or "").splitlines():
            if line.strip() == PIPELINE_MARK:
                indent = line[: len(line) - len(line.lstrip())]
                takes = inspect.signature(func).parameters
                for f, _ in pipeline_fields(cls):
                    if f.name in takes:
                        lines.append(f"{indent}{f.name}: {field_help(cls, f.name)}{f.metadata['pipeline']}.")
                continue
            name, sep, rest = line.strip().partition(": ")
            if sep and rest.startswith(HELP_MARK):
                line = line.replace(HELP_MARK, field_help(cls, name), 1)
            lines.append(line)
        func.__doc__ = "\n".join(lines)
        return func

    return fill
