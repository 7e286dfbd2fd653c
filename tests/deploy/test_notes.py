"""NOTES.txt (what `helm install` prints) names only flags that exist: each `--flag` it shows
after `invfold <command>` is in that command's real --help."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.deploy_tools import CHART, REPO, run, tool


def notes(namespace: str) -> str:
    proc = run([tool("helm"), "install", "invfold", str(CHART), "-n", namespace, "--dry-run=client"])
    return proc.stdout.split("NOTES:", 1)[1]


@pytest.mark.parametrize("namespace", ["kubeflow", "kubeflow-user-example-com"])
def test_notes_name_only_real_flags(namespace):
    text = notes(namespace)
    assert re.search(r"invfold (compile|submit|run)\b", text), text
    for line in text.splitlines():
        for command in re.findall(r"invfold (compile|submit|run)\b", line):
            help_text = subprocess.run(
                [sys.executable, "-m", "invfold.cli", command, "--help"], capture_output=True, text=True, cwd=REPO
            ).stdout
            for flag in re.findall(r"(--[a-z][a-z-]+)", line):
                assert flag in help_text, f"NOTES.txt: `invfold {command} {flag}` does not exist: {line.strip()}"
