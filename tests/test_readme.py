"""The README is a user's guide a newcomer reads in minutes: short, the next command after `make
run` on its first screen, every command in it one the CLI accepts, every link one that resolves.
Measurements live in bench/README.md, with their commands and conditions."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from tests.support.paths import REPO

README = REPO / "README.md"
MAX_LINES = 200
FIRST_SCREEN = 60  # lines a terminal or a repository page shows before the first scroll
# the user's guides whose commands and links are checked like the README's
GUIDES = ["README.md", "docs/usage.md"]


def shell_commands(text: str) -> list[str]:
    """The commands of the text's ```bash blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S):
        for command in re.sub(r"\\\n\s*", " ", block).splitlines():
            command = command.split(" #")[0].strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    from invfold.cli import build_parser

    (subparsers,) = [a for a in build_parser(name)._actions if isinstance(a, argparse._SubParsersAction)]
    return subparsers.choices[name]


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES}): move details to docs/"


def test_the_next_command_after_make_run_is_on_the_first_screen():
    """What `make run` tells the user to do next (pipelines/cli.py's next_steps: activate, the
    MLflow UI, a design with the champion) is what the README's first screen shows."""
    from invfold.pipelines.defaults import REGISTERED_MODEL

    screen = README.read_text().splitlines()[:FIRST_SCREEN]
    make_run = next(i for i, line in enumerate(screen) if line.startswith("make run"))
    after = [line.strip() for line in screen[make_run + 1 :]]
    for start in (
        "source .venv/bin/activate",
        "mlflow ui --backend-store-uri sqlite:///",
        f"invfold design models:/{REGISTERED_MODEL}@champion ",
        "invfold prep ",
        "invfold train ",
        "invfold submit ",
    ):
        assert any(line.startswith(start) for line in after), f"no `{start}...` within the README's first screen"


@pytest.mark.parametrize("guide", GUIDES)
def test_every_invfold_command_in_the_guides_is_one_the_cli_accepts(guide):
    """Each `invfold SUBCOMMAND --flag ...` line of a bash block names a subcommand and flags that
    exist (a renamed flag fails here, not in a newcomer's terminal)."""
    commands = [c for c in shell_commands((REPO / guide).read_text()) if c.startswith("invfold ")]
    assert commands, f"{guide} shows no invfold command"
    unknown = []
    for command in commands:
        words = shlex.split(command.replace("[", "").replace("]", ""))
        parser, rest = subcommand_parser(words[1]), words[2:]
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if nested and rest and rest[0] in nested[0].choices:  # invfold weights import ...
            parser, rest = nested[0].choices[rest[0]], rest[1:]
        known = {option for action in parser._actions for option in action.option_strings}
        unknown += [f"{command}: {w}" for w in rest if w.startswith("--") and w.split("=")[0] not in known]
    assert not unknown, "\n".join(unknown)


@pytest.mark.parametrize("guide", [*GUIDES, "bench/README.md"])
def test_every_relative_link_and_anchor_resolves(guide):
    path = REPO / guide
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.M)
            if anchor not in {github_anchor(h) for h in headings}:
                broken.append(target)
    assert not broken, f"{guide}: " + ", ".join(broken)


def test_the_anchor_rule_is_githubs():
    assert github_anchor("Set-up: two commands") == "set-up-two-commands"
    assert github_anchor("Training against ProteinMPNN (`bench/train_bench.py`)") == (
        "training-against-proteinmpnn-benchtrain_benchpy"
    )
