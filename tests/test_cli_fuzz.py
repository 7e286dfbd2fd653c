"""Every option of every subcommand, given hostile values, ends in success or in one error line
with exit 2: never a traceback, nor the CLI's line for an exception it did not expect (exit 1).

The options are read from the real parser (`invfold.cli.build_parser`), so a new option is
covered the day it is added. Each value runs through `invfold.cli.main` in this process up to
where the command would start its heavy work (preparing, training, evaluating, exporting,
designing, scoring, a pipeline run or submission): that call is replaced by one that stops the
command (`Reached`), which counts as success, since everything before it (parsing, every config's
validation, the checks of files and models) has run. `test_option_pairs_fuzzed` (Hypothesis,
the fixed profile of tests/support/fuzz.py) combines options and runs design and score to the
end on a tiny model; `test_a_sample_as_real_commands` runs a few as `python -m invfold`.

An error line is `invfold <cmd>: error: <message>`; argparse's own mistakes add the hint line
"(see `invfold <cmd> --help`)" (cli.CommandLineParser), accepted here as part of it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invfold.cli import _leaf_parsers, build_parser, main
from tests.support.fuzz import FUZZ

# Values a user (or a script gone wrong) types: huge, non-finite, negative, zero, empty, unicode,
# long, ranges past every bound. Paths are added per test (files below).
VALUES = ["1e20", "1e309", "-1e309", "nan", "inf", "-inf", "-1", "0", "99999999999999999999", "", " ", "ü名\u202e",
          "x" * 5000, "1-1e20"]  # fmt: skip
SWITCHES_ONLY = {"help"}


class Reached(BaseException):
    """The command got past its checks to where its heavy work starts (a BaseException, so that
    the CLI's handler of unexpected exceptions lets it through)."""


# where each command's heavy work starts (module, attribute): replaced by a call that raises Reached
HEAVY = [
    ("invfold.components.prep.run", "run_prep"),
    ("invfold.components.launch.processes", "launch_local"),
    ("invfold.components.evaluate.evaluate", "evaluate"),
    ("invfold.components.export.onnx_export", "export_onnx"),
    ("invfold.components.export.proteinmpnn_export", "export_proteinmpnn"),
    ("invfold.components.design.design", "design_record"),
    ("invfold.components.design.batch", "design_record"),
    ("invfold.components.design.score", "_score_entry"),
    ("invfold.components.model.published", "load_published"),
    ("invfold.components.tracking", "Tracker"),
    ("invfold.components.tracking.tracker", "Tracker"),
    ("invfold.pipelines.local", "run_local"),
    ("invfold.pipelines.local", "run_design_local"),
    ("invfold.pipelines.compile", "compile_pipeline"),
    ("kfp", "Client"),  # submit: after its package is read and checked
]


def _reached(*args, **kwargs):
    raise Reached


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny model, a one-chain structure set, a folder, and hostile files."""
    import torch

    from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
    from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set

    root = tmp_path_factory.mktemp("fuzz")
    write_synthetic_set(root, SyntheticConfig(num_chains=1, seed=2, min_length=20, max_length=30, median_length=25))
    torch.manual_seed(0)
    save_model(root / "tiny.pt", InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval())
    (root / "folder").mkdir()
    files = {
        "binary": root / "binary.json",
        "nested_json": root / "nested.json",
        "nested_jsonl": root / "nested.jsonl",
        "nested_yaml": root / "nested.yaml",
    }
    files["binary"].write_bytes(bytes(range(256)) * 8)
    files["nested_json"].write_text("[" * 100_000 + "]" * 100_000)
    files["nested_jsonl"].write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    files["nested_yaml"].write_text("seed: " + "[" * 5000 + "]" * 5000 + "\n")
    paths = [os.devnull, str(root / "folder"), str(root / "missing.json"), *map(str, files.values())]
    return {"root": root, "model": str(root / "tiny.pt"), "structure": str(root / "chain_set.jsonl"), "paths": paths}


def base_argv(command: str, world, out: Path) -> list[str]:
    """A command line of `command` that passes its checks (its required arguments, small inputs)."""
    model, structure = world["model"], world["structure"]
    folder = str(world["root"] / "folder")
    return {
        "prep": [structure, "--out", str(out / "prep")],
        "train": ["--data", folder, "--out", str(out / "train")],
        "evaluate": [model, "--data", folder, "--out", str(out / "eval")],
        "export": [model, "--out", str(out / "m.onnx")],
        "design": [model, structure, "--out", str(out / "d.fasta")],
        "score": [model, structure, "--out", str(out / "s.csv")],
        "weights list": [],
        "weights import": ["proteinmpnn:v_48_020", "--out", str(out / "w.pt")],
        "run": ["--data", structure, "--runs-dir", str(out / "runs")],
        "compile": ["--out", str(out / "p.yaml")],
        "submit": ["--host", "http://127.0.0.1:9", "--data", "s3://bucket/set.jsonl"],
        "completion": ["bash"],
    }[command]


def commands() -> dict[str, argparse.ArgumentParser]:
    return {sub.prog.removeprefix("invfold "): sub for sub in _leaf_parsers(build_parser())}


COMMANDS = commands()


def with_value(argv: list[str], sub: argparse.ArgumentParser, action: argparse.Action, value: str | None) -> list[str]:
    """argv with `action` given `value` (a switch: given; a positional or an option argv already
    has: replaced)."""
    argv = list(argv)
    if not action.option_strings:  # a positional: the k-th bare word of argv
        k = [a for a in sub._actions if not a.option_strings].index(action)
        bare = [
            i
            for i, word in enumerate(argv)
            if not word.startswith("-") and (i == 0 or not argv[i - 1].startswith("--"))
        ]
        argv[bare[k]] = value
        return argv
    flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") else action.option_strings[0]
    for spelling in action.option_strings:
        if spelling in argv and action.nargs is None:
            i = argv.index(spelling)
            return [*argv[:i], spelling, value, *argv[i + 2 :]]
    if action.nargs == 0:
        return [*argv, flag]
    count = action.nargs if isinstance(action.nargs, int) else 1
    return [*argv, flag, *[value] * count]


def outcome(command: str, argv: list[str]) -> str | None:
    """None when `invfold COMMAND ARGV` succeeds (or reaches its heavy work) or fails in one
    error line with exit 2; otherwise what went wrong (a traceback's exception, a wrong exit)."""
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = main([*command.split(), *argv])
    except Reached:
        return None
    except Exception as exc:  # a traceback (the CLI's own handler shows one as exit 1, below)
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    if code == 0:
        return None
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    prefix = f"invfold {command}: error: "
    hint = f"  (see `invfold {command} --help`)"
    if code == 2 and len(lines) in (1, 2) and lines[0].startswith(prefix) and lines[1:] in ([], [hint]):
        return None
    return f"exit {code}: {err.getvalue()[-300:]!r}"


@pytest.fixture()
def stopped(monkeypatch, tmp_path):
    """Heavy work replaced by Reached; the process never re-executed; files land in tmp_path."""
    import importlib

    for module, name in HEAVY:
        monkeypatch.setattr(importlib.import_module(module), name, _reached)
    monkeypatch.setattr(importlib.import_module("invfold.allocator"), "reexec_under_jemalloc", lambda: None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INVFOLD_NO_PROGRESS", "1")
    for variable in ("MLFLOW_TRACKING_URI", "KFP_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


def options(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions if a.dest not in SWITCHES_ONLY]


@pytest.mark.parametrize(
    "command", [pytest.param(c, marks=pytest.mark.slow) if c == "submit" else c for c in sorted(COMMANDS)]
)
def test_every_option_with_hostile_values(command, world, stopped):
    sub = COMMANDS[command]
    base = base_argv(command, world, stopped)
    assert outcome(command, base) is None, "the base command line itself fails"
    failures = []
    for action in options(sub):
        values = [None] if action.nargs == 0 else [*VALUES, *world["paths"]]
        for value in values:
            argv = with_value(base, sub, action, value)
            found = outcome(command, argv)
            if found is not None:
                failures.append(f"invfold {command} {_shown(argv)}: {found}")
    assert not failures, f"{len(failures)} tracebacks or bad exits:\n" + "\n".join(failures)


def _shown(argv: list[str]) -> str:
    return " ".join(a if len(a) < 40 else a[:20] + f"...({len(a)} chars)" for a in argv)


# Hypothesis: several options at once; design and score run to the end on the tiny model.
FUZZ_COMMANDS = sorted(COMMANDS)


@settings(FUZZ, max_examples=int(os.environ.get("INVFOLD_CLI_FUZZ_EXAMPLES", "60")))
@given(data=st.data())
def test_option_pairs_fuzzed(data, world, tmp_path_factory):
    import importlib

    tmp = tmp_path_factory.mktemp("pairs")
    command = data.draw(st.sampled_from(FUZZ_COMMANDS))
    sub = COMMANDS[command]
    argv = base_argv(command, world, tmp)
    values = st.sampled_from([*VALUES, *world["paths"], "0.5", "1", "A", "A1", "1,2", "B"])
    for action in data.draw(st.lists(st.sampled_from(options(sub)), min_size=1, max_size=3, unique_by=id)):
        argv = with_value(argv, sub, action, None if action.nargs == 0 else data.draw(values))
    heavy = [(m, n) for m, n in HEAVY if command not in ("design", "score") or "design" not in m]
    with pytest.MonkeyPatch.context() as patch:
        for module, name in heavy:
            patch.setattr(importlib.import_module(module), name, _reached)
        patch.setattr(importlib.import_module("invfold.allocator"), "reexec_under_jemalloc", lambda: None)
        patch.chdir(tmp)
        patch.setenv("INVFOLD_NO_PROGRESS", "1")
        if command in ("design", "score"):  # bounded so that a real run stays small
            argv += ["--max-length", "64"]
        found = outcome(command, argv)
    assert found is None, f"invfold {command} {_shown(argv)}: {found}"


def test_a_sample_as_real_commands(world, tmp_path):
    """The same rule for whole processes: exit 0 or 2, one error line, no traceback."""
    model, structure, root = world["model"], world["structure"], world["root"]
    cases = [
        ["design", model, structure, "--out", str(tmp_path / "d"), "--bias-aa", str(root / "nested.json")],
        ["design", model, structure, "--out", str(tmp_path / "d.fasta"), "--pssm-jsonl", str(root / "binary.json")],
        ["score", model, structure, "--out", str(tmp_path / "s.csv"), "--fasta", str(root / "binary.json")],
        ["prep", structure, "--out", str(tmp_path / "p"), "--split-file", str(root / "nested.json")],
        ["train", "--config", str(root / "nested.yaml"), "--data", str(root), "--out", str(tmp_path / "t")],
        ["export", model, "--out", str(tmp_path / "m.onnx"), "--config", str(root / "binary.json")],
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "INVFOLD_NO_PROGRESS": "1"}
    for argv in cases:
        result = subprocess.run([sys.executable, "-m", "invfold", *argv], capture_output=True, text=True, env=env,
                                timeout=300, cwd=tmp_path)  # fmt: skip
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and "Traceback" not in result.stderr, (argv, result.stderr[-2000:])
        assert lines[-1].startswith(f"invfold {argv[0]}: error: "), (argv, result.stderr[-2000:])
        assert json.dumps(lines[-1])  # one printable line
