"""Options generated from a dataclass: each field type becomes its option, and back."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from invfold.errors import ConfigError
from invfold.options import (
    add_options,
    check_values,
    fields_in,
    from_args,
    from_pipeline,
    option,
    pipeline_default,
    pipeline_fields,
    pipeline_type,
    with_field_help,
)


@dataclass
class Example:
    source: str = option(positional=True, help="where from")
    out: str = option(aliases=("-o",), help="where to")
    steps: int | None = option(None, "how many steps")
    rate: float = option(0.5, "how fast")
    mode: Literal["fast", "slow"] = option("fast", "which way")
    level: int = option(1, "how deep", choices=(1, 2, 3))
    quiet: bool = option(False, "say less")
    resume: bool = option(True, "go on where it stopped")
    files: list[str] = option(factory=list, help="extra files")
    pair: tuple[float, float] = option((0.1, 0.9), "low and high")
    extra: dict[str, Any] = option(factory=dict, help="NAME=VALUE settings")
    hidden: object = option(None, "in memory only", cli=False)

    def __post_init__(self):
        check_values(self)


def _parse(argv):
    parser = argparse.ArgumentParser()
    add_options(parser, Example)
    return from_args(Example, parser.parse_args(argv))


def test_defaults_come_from_the_fields():
    assert _parse(["in", "--out", "x"]) == Example(source="in", out="x")


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["-o", "y"], "out", "y"),
        (["--steps", "7"], "steps", 7),
        (["--rate", "0.25"], "rate", 0.25),
        (["--mode", "slow"], "mode", "slow"),
        (["--level", "3"], "level", 3),
        (["--quiet"], "quiet", True),
        (["--no-resume"], "resume", False),
        (["--files", "a", "--files", "b"], "files", ["a", "b"]),
        (["--pair", "0.2", "0.3"], "pair", (0.2, 0.3)),
        (
            ["--extra", "hidden=64", "--extra", "act=gelu", "--extra", "on=true"],
            "extra",
            {"hidden": 64, "act": "gelu", "on": True},
        ),
    ],
)
def test_each_type_becomes_its_option(argv, field, value):
    parsed = _parse(["in", "--out", "x", *argv])
    assert getattr(parsed, field) == value


@pytest.mark.parametrize(
    "argv", [["in"], ["in", "--out", "x", "--mode", "medium"], ["in", "--out", "x", "--level", "4"], ["--out", "x"]]
)
def test_bad_or_missing_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        _parse(argv)
    assert "error:" in capsys.readouterr().err


def test_fields_off_the_command_line_and_help_text():
    parser = argparse.ArgumentParser()
    add_options(parser, Example)
    text = parser.format_help()
    assert "--hidden" not in text
    assert "how fast (default: 0.5)" in " ".join(text.split())


def test_choices_are_checked_in_python_too():
    with pytest.raises(ConfigError, match=r"Example.mode: expected one of \('fast', 'slow'\), got 'medium'"):
        Example(source="in", out="x", mode="medium")


def test_an_option_needs_help():
    with pytest.raises(TypeError, match="help"):
        option(1)


def test_a_no_switch_reads_the_way_it_works():
    from invfold.options import negated_help

    text = negated_help("resume from the newest complete checkpoint (--no-resume: ignore them)")
    assert text == "ignore them (without it: resume from the newest complete checkpoint)"
    assert negated_help("show colours") == "turn off: show colours"


@dataclass
class Bounded:
    count: int = option(4, "how many", min=1, max=100)
    rate: float = option(0.5, "how fast", min=0.0)
    pair: tuple[float, float] = option((0.1, 0.9), "low and high", max=1.0)
    limit: float = option(float("inf"), "no limit by default", finite=False)
    free: float = option(1.0, "any finite number")
    speed: float = option(1.0, "above zero", above=0, below=10)
    share: float = option(0.1, "a share below one", min=0.0, below=1)

    def __post_init__(self):
        check_values(self)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"count": 0}, r"Bounded\.count: expected an integer in \[1, 100\], got 0"),
        ({"count": 10**20}, r"Bounded\.count: expected an integer in \[1, 100\], got 100000000000000000000"),
        ({"rate": float("nan")}, r"Bounded\.rate: expected a finite number >= 0\.0, got nan"),
        ({"rate": float("inf")}, r"Bounded\.rate: expected a finite number >= 0\.0, got inf"),
        ({"free": float("-inf")}, r"Bounded\.free: expected a finite number, got -inf"),
        ({"pair": (0.1, float("nan"))}, r"Bounded\.pair: expected a finite number <= 1\.0, got \(0\.1, nan\)"),
        ({"pair": (0.1, 2.0)}, r"Bounded\.pair: expected a finite number <= 1\.0"),
        ({"speed": 0.0}, r"Bounded\.speed: expected a finite number in \(0, 10\), got 0\.0"),
        ({"speed": 10}, r"Bounded\.speed: expected a finite number in \(0, 10\), got 10"),
        ({"share": 1.0}, r"Bounded\.share: expected a finite number in \[0\.0, 1\), got 1\.0"),
        ({"count": 2.5}, r"Bounded\.count: expected an integer in \[1, 100\], got 2\.5"),
        ({"count": True}, r"Bounded\.count: expected an integer in \[1, 100\], got True"),
        ({"count": "3"}, r"Bounded\.count: expected an integer in \[1, 100\], got '3'"),
        ({"rate": "fast"}, r"Bounded\.rate: expected a finite number >= 0\.0, got 'fast'"),
    ],
)
def test_bounds_and_finite_floats_are_checked_at_construction(changes, message):
    with pytest.raises(ConfigError, match=message):
        Bounded(**changes)


def test_a_field_may_allow_what_is_not_finite_and_the_bounds_are_inclusive():
    assert Bounded(count=100, rate=0.0, pair=(1.0, 1.0), limit=float("nan")).count == 100


def test_the_bounds_need_a_max_no_smaller_than_the_min():
    with pytest.raises(TypeError, match="min 2 > max 1"):
        option(1, "a count", min=2, max=1)


def test_a_side_takes_one_bound():
    with pytest.raises(TypeError, match="not both"):
        option(1.0, "a rate", min=0.0, above=0.0)


@dataclass
class Stepped:
    """A config with pipeline parameters and groups."""

    steps: int | None = option(None, "steps to run", min=1, pipeline=" (0 = not limited)", groups=("resume",))
    rate: float = option(0.1, "learning rate", pipeline=True, groups=("resume", "shown"))
    source: str | None = option(None, "where from", pipeline=True)
    mode: Literal["a", "b"] = option("a", "which mode", pipeline=True)
    extra: dict[str, Any] = option(factory=dict, help="more settings", pipeline=True)
    quiet: bool = option(False, "say less", groups=("shown",))


def test_groups_and_pipeline_fields_are_read_from_the_fields():
    assert fields_in(Stepped, "resume") == ("steps", "rate")
    assert fields_in(Stepped, "shown") == ("rate", "quiet")
    assert [f.name for f, _ in pipeline_fields(Stepped)] == ["steps", "rate", "source", "mode", "extra"]
    kinds = {f.name: pipeline_type(hint) for f, hint in pipeline_fields(Stepped)}
    assert kinds == {"steps": int, "rate": float, "source": str, "mode": str, "extra": dict}


def test_an_optional_field_is_none_where_its_pipeline_parameter_is_empty():
    values = {"steps": 0, "rate": 0.0, "source": "", "mode": "a", "other": 0}
    assert from_pipeline(Stepped, values) == {"steps": None, "rate": 0.0, "source": None, "mode": "a", "other": 0}
    assert from_pipeline(Stepped, {"steps": 5, "source": "s3://b"}) == {"steps": 5, "source": "s3://b"}
    hints = dict((f.name, hint) for f, hint in pipeline_fields(Stepped))
    assert pipeline_default(hints["steps"], None) == 0 and pipeline_default(hints["source"], None) == ""
    assert pipeline_default(hints["rate"], 0.1) == 0.1


def test_the_pipeline_mark_writes_a_line_per_pipeline_field_the_function_takes():
    @with_field_help(Stepped)
    def step(steps: int, rate: float, other: str):
        """Run.

        Args:
            other: Something else.
            @pipeline
        """

    assert step.__doc__.splitlines()[3:6] == [
        "            other: Something else.",
        "            steps: Steps to run (0 = not limited).",
        "            rate: Learning rate.",
    ]
