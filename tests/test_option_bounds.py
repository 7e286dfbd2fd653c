"""The value rules option() declares, as every subcommand answers them: a float option given
inf or NaN, and a count past its bound, is one error line naming the flag (exit 2), before any
input is read or memory is asked for."""

from __future__ import annotations

import argparse

import pytest

from invfold.cli import build_parser, main


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch):
    """A value the rules let through would start a pipeline run or a submission: fail instead."""
    from invfold.pipelines import compile as compile_module
    from invfold.pipelines import local

    def started(*args, **kwargs):
        raise AssertionError("the value was accepted: a run or a submission started")

    for module, name in ((local, "run_local"), (local, "run_design_local"), (compile_module, "submit")):
        monkeypatch.setattr(module, name, started)


def _leaf_commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(words, parser) of every subcommand that runs something ("design", "weights import")."""
    found = []

    def walk(words: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs and words:
            found.append((words, parser))
        for sub in subs:
            for name, child in sub.choices.items():
                walk((*words, name), child)

    walk((), build_parser())
    return found


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """Placeholder values for the positionals and required options: the rule must answer first."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings and action.dest not in ("help", argparse.SUPPRESS) and action.nargs != 0:
            argv.append("x")
        elif action.option_strings and action.required:
            argv += [action.option_strings[0], "x"]
    return argv


FLOAT_OPTIONS = [
    (words, action.option_strings[0], action.nargs if isinstance(action.nargs, int) else 1, required)
    for words, parser in _leaf_commands()
    for required in [_required(parser)]
    for action in parser._actions
    if action.type is float and action.option_strings
]


def test_there_are_float_options_of_several_commands():
    commands = {words for words, *_ in FLOAT_OPTIONS}
    assert {("prep",), ("train",), ("evaluate",), ("export",), ("design",), ("run",), ("submit",)} <= commands


@pytest.mark.parametrize("value", ["nan", "inf", "1e999"])  # 1e999: inf by overflow
@pytest.mark.parametrize(
    "words, flag, count, required", FLOAT_OPTIONS, ids=[f"{' '.join(w)} {f}" for w, f, *_ in FLOAT_OPTIONS]
)
def test_every_float_option_refuses_what_is_not_a_finite_number(words, flag, count, required, value, capsys, tmp_path):
    runs = ["--runs-dir", str(tmp_path / "runs")] if words == ("run",) else []  # refused before anything runs
    code = main([*words, *required, *runs, flag, *[value] * count])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err, err
    assert lines[0].startswith(f"invfold {' '.join(words)}: error: ") and flag in lines[0], err
    assert "finite" in lines[0] or "[0, 1]" in lines[0], err


@pytest.mark.parametrize(
    "line, expected",
    [
        ("design m.pt s.pdb --out d.fasta -n 1000000000", "--num-sequences: expected an integer in [1, 100,000]"),
        ("design m.pt s.pdb --out d.fasta -T inf", "--temperature: expected one or more temperatures in (0, 10]"),
        ("design m.pt s.pdb --out d.fasta -T 0.1,nan", "--temperature: expected one or more temperatures in (0, 10]"),
        ("design m.pt s.pdb --out d.fasta --backbone-noise 1e30", "--backbone-noise: expected a finite number in"),
        ("design m.pt s.pdb --out d.fasta --fixed-positions 1-100000000000000000000", "expected positions <= 10,000"),
        ("design m.pt s.pdb --out d.fasta --max-length 10000000", "--max-length: expected an integer in [1,"),
        ("score m.pt s.pdb --out s.csv --num-orders 100000000000", "--num-orders: expected"),
        ("evaluate m.pt --data d --out o --bootstrap-resamples 100000000000", "--bootstrap-resamples: expected"),
        ("evaluate m.pt --data d --out o --designs-per-protein 100000000", "--designs-per-protein: expected"),
        ("evaluate m.pt --data d --out o --tokens-per-batch 900000", "900,000 x 5 = 4,500,000 residues at once"),
        ("prep in --out o --max-length 100000000000000000000", "--max-length: expected an integer in [1,"),
        ("prep in --out o --split-fractions nan nan nan", "--split-fractions: expected a finite number in [0.0, 1.0]"),
        ("train --data d --out o --max-steps 1 --lr 1e30", "--lr: expected a finite number in (0, 1.0]"),
        ("run --lr nan", "--lr: expected a finite number"),
        ("run --registration-threshold nan", "--registration-threshold: expected a recovery in [0, 1]"),
        ("run --pipeline design --num-sequences 1000000000", "--num-sequences: expected an integer in [1,"),
        ("run --pipeline design --temperatures inf", "--temperatures: expected one or more temperatures in (0, 10]"),
        ("submit --host http://127.0.0.1:9 --data s3://b/x --param lr=NaN", "--lr: expected a finite number"),
    ],
)
def test_a_value_past_its_bound_is_one_error_line_naming_the_flag(line, expected, capsys):
    code = main(line.split())
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert expected in lines[0], err
