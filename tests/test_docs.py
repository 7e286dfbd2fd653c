"""What the Markdown documents say about the code is checked against it: every `invfold <command>`
they write takes the flags they give it, every test they cite by name exists, and every file a
table of theirs lists, and every repository path they write in code, exists. Every tracked
Markdown file is read, so a new one is covered as it lands."""

from __future__ import annotations

import argparse
import re
import subprocess

from invfold.cli import build_parser
from tests.support.docs import unmatched
from tests.support.paths import REPO

# `invfold <command>` and its words, up to a code span's end, a comment, a shell operator or the
# next `invfold`; a word ending a sentence (`,` `.` `;`) ends it too
COMMAND = re.compile(r"(?<![\w/.-])invfold ([a-z]+)((?:[ \t]+(?!invfold\b)[^\s`#|;&]+)*)")
INLINE_CODE = re.compile(r"(?<!`)`[^`]+`(?!`)")
FILE_COLUMNS = {"module", "file", "path"}
CITED_TEST = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?")


def documents() -> dict[str, str]:
    names = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True)
    return {name: (REPO / name).read_text() for name in names.stdout.split()}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def unknown_flags(text: str) -> list[str]:
    """`invfold <command> ... --flag` uses whose flag that command does not take."""
    commands = _subcommands(build_parser())
    found = []
    text = re.sub(r"\\\n\s*", " ", text)  # shell line continuations
    text = INLINE_CODE.sub(lambda span: span.group(0).replace("\n", " "), text)  # a span the text wraps
    for match in COMMAND.finditer(text):
        parser = commands.get(match.group(1))
        if parser is None:
            continue
        args = []
        for arg in match.group(2).split():
            args.append(arg)
            if arg.endswith((",", ".", ";")):
                break
        nested = _subcommands(parser)
        if args and args[0] in nested:
            parser = nested[args[0]]
        flags = {s for action in parser._actions for s in action.option_strings}
        for arg in args:
            flag = arg.split("=")[0].rstrip(",.:)")
            if flag.startswith("--") and flag not in flags:
                found.append(f"invfold {match.group(1)} {flag}")
    return found


def missing_tests(text: str) -> list[str]:
    """Cited test files and test functions that do not exist."""
    found = []
    for match in CITED_TEST.finditer(text):
        path = REPO / match.group(1)
        if not path.exists():
            found.append(match.group(0))
        elif match.group(2) and not re.search(rf"^\s*(?:async )?def {match.group(2)}\(", path.read_text(), re.M):
            found.append(match.group(0))
    return found


def missing_table_files(name: str, text: str) -> list[str]:
    """Files and folders a table whose first column is headed module, file or path lists there,
    that exist neither beside the document nor from the repository's root."""
    found, listing = [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            listing = False
            continue
        first = line.strip("|").split("|")[0].strip()
        if first in FILE_COLUMNS:
            listing = True
        elif listing:
            sibling = ""  # `components/evaluate`, `export`: the second is components/export
            for span in re.findall(r"`([^`\s]+)`", first):
                if "/" not in span:
                    span = sibling + span
                sibling = span.rstrip("/").rpartition("/")[0] + "/" if "/" in span.rstrip("/") else ""
                if unmatched(span, (REPO / name).parent) and unmatched(span):
                    found.append(span)
    return found


def top_folders() -> set[str]:
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return {name.split("/")[0] for name in names.split() if "/" in name}


def missing_paths(text: str, folders: set[str]) -> list[str]:
    """Paths into the repository (`scripts/...`, `components/...`) a document writes in code that
    name nothing; an upstream project's file is written after its name (kubeflow/pipelines
    `backend/...`) and is not ours to check."""
    found = []
    for match in INLINE_CODE.finditer(text):
        span = re.sub(r"::.*", "", match.group(0).strip("`")).rstrip(".,:;")
        upstream = re.search(r"[\w.-]+/[\w.-]+ $", text[: match.start()][-100:])
        if "/" in span and span.split("/")[0] in folders and not re.search(r"[\s<$]", span) and not upstream:
            if unmatched(span):
                found.append(span)
    return found


def test_every_invfold_command_in_the_documents_takes_the_flags_it_is_given():
    wrong = {name: unknown_flags(text) for name, text in documents().items()}
    assert not {name: flags for name, flags in wrong.items() if flags}


def test_every_test_the_documents_cite_exists():
    wrong = {name: missing_tests(text) for name, text in documents().items()}
    assert not {name: tests for name, tests in wrong.items() if tests}


def test_every_file_a_documents_table_lists_exists():
    wrong = {name: missing_table_files(name, text) for name, text in documents().items()}
    assert not {name: files for name, files in wrong.items() if files}


def test_every_repository_path_the_documents_write_exists():
    folders = top_folders()
    wrong = {name: missing_paths(text, folders) for name, text in documents().items()}
    assert not {name: paths for name, paths in wrong.items() if paths}


def test_the_checks_find_what_they_are_for():
    assert unknown_flags("`invfold train --max-steps 5 --no-such-flag`") == ["invfold train --no-such-flag"]
    assert unknown_flags("invfold run \\\n  --preset tiny --nodez 2") == ["invfold run --nodez"]
    assert unknown_flags("after `invfold run --max-steps 40\n--budget 0` (wrapped)") == ["invfold run --budget"]
    assert unknown_flags("invfold train --max-steps 5, then invfold run --pipeline design") == []
    assert missing_tests("tests/test_docs.py::test_the_checks_find_what_they_are_for") == []
    assert missing_tests("tests/test_docs.py::test_gone, tests/nowhere.py") == [
        "tests/test_docs.py::test_gone",
        "tests/nowhere.py",
    ]
    table = "| file | what |\n|---|---|\n| `trainer.py` | the loop |\n| `gone.py` | moved |\n| `tests/` | tests |"
    assert missing_table_files("components/train/README.md", table) == ["gone.py"]
    assert missing_table_files("README.md", "| code | meaning |\n|---|---|\n| `gone.py` | a code |") == []
    folders = "| path | what |\n|---|---|\n| `components/evaluate`, `export`, `gone` | steps |"
    assert missing_table_files("README.md", folders) == ["components/gone"]
    text = "`scripts/setup.sh`, `scripts/gone.sh`, kubeflow/pipelines `scripts/theirs.sh`, `k8s/base/{rbac,gone}.yaml`"
    assert missing_paths(text, {"scripts", "k8s"}) == ["scripts/gone.sh", "k8s/base/{rbac,gone}.yaml"]
