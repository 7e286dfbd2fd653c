"""`invfold completion bash|zsh`: a script written from the real parser (shtab), which the shell
reads without running invfold on TAB. Bash itself runs the bash script here: sourced, then its
completion function called with COMP_WORDS/COMP_CWORD as bash sets them on TAB."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from invfold.cli import build_parser
from invfold.components.train import recipes
from invfold.components.train.strategies import STRATEGIES


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("completion") / "invfold.bash"
    program = "import sys; from invfold.cli import main; sys.exit(main(['completion', 'bash']))"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path.write_text(done.stdout)
    return str(path)


def test_the_bash_script_is_valid_bash(bash_script):
    done = subprocess.run(["bash", "-n", bash_script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _complete(script: str, words: list[str]) -> list[str]:
    """What bash offers for `words` (the last one being typed), through the script's own function."""
    program = (
        f"source {script}\n"
        'COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))\n'
        'COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()\n'
        '_shtab_invfold; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program, "bash", *words], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def _subcommands() -> list[str]:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(action.choices)


CASES = [
    (["invfold", ""], _subcommands()),
    (["invfold", "des"], ["design"]),
    (["invfold", "design", "--de"], ["--design-chains"]),
    (["invfold", "train", "--strategy", ""], list(STRATEGIES)),
    (["invfold", "train", "--reci"], ["--recipe"]),
    (["invfold", "run", "--recipe", ""], list(recipes.RECIPES)),
    (["invfold", "weights", ""], ["list", "import"]),
    (["invfold", "evaluate", "--conf"], ["--config"]),
    (["invfold", "completion", ""], ["bash", "zsh"]),
]


@pytest.mark.parametrize("words, offered", CASES, ids=[" ".join(w) for w, _ in CASES])
def test_bash_offers_the_subcommands_flags_and_choices(bash_script, words, offered):
    assert sorted(_complete(bash_script, words)) == sorted(offered)


def test_the_zsh_script_names_every_subcommand_and_option():
    """In a process of its own, as the shell's user runs it: in pytest's process, output left by an
    earlier test's thread once landed before the script's first line."""
    program = "import sys; from invfold.cli import main; sys.exit(main(['completion', 'zsh']))"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert script.startswith("#compdef invfold")
    for word in (*_subcommands(), "--design-chains", "--init-from", "--config"):
        assert word in script, word
