"""ARCHITECTURE.md's import layers are pyproject.toml's import-linter contract, and that contract
covers every module: lint-imports checks only the modules its layers name, so a module in no
layer could import anything without `make lint` noticing."""

from __future__ import annotations

import re
import subprocess
import tomllib

from tests.support.docs import ARCHITECTURE, code_spans, generated_files, table, unmatched
from tests.support.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PACKAGE_DIRS = PYPROJECT["tool"]["setuptools"]["package-dir"]
# The packages the layers live in: empty __init__ files, not layers of their own.
CONTAINERS = {"invfold", "invfold.components"}


def contract_layers() -> list[list[str]]:
    (layers,) = [c for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [[name.strip() for name in line.split("|")] for line in layers["layers"]]


def architecture_layers() -> list[list[str]]:
    """The fenced block under ARCHITECTURE.md's "## Import layers" heading, a layer a line."""
    text = (REPO / "ARCHITECTURE.md").read_text()
    assert "\n## Import layers\n" in text, "ARCHITECTURE.md has no '## Import layers' section"
    section = text.split("\n## Import layers\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert block, "ARCHITECTURE.md's 'Import layers' section has no fenced list of layers"
    return [[name.strip() for name in line.split("|")] for line in block.group(1).splitlines() if line.strip()]


def modules_on_disk() -> set[str]:
    """Every module and package under the package-dirs, by its import name."""
    found = set()
    for package, base in PACKAGE_DIRS.items():
        for path in (REPO / base).rglob("*.py"):
            parts = path.relative_to(REPO / base).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found.add(".".join((package, *parts)))
    return found


def in_no_layer(modules: set[str], layers: list[list[str]]) -> list[str]:
    names = [name for line in layers for name in line]
    return sorted(m for m in modules - CONTAINERS if not any(m == name or m.startswith(name + ".") for name in names))


def test_every_module_sits_in_an_import_layer():
    missing = in_no_layer(modules_on_disk(), contract_layers())
    assert not missing, f"put each in a layer of pyproject.toml's [tool.importlinter] (and ARCHITECTURE.md): {missing}"


def test_a_new_module_outside_the_layers_is_found():
    layers = contract_layers()
    assert in_no_layer({"invfold.newcore", "invfold.components.newstep.step", "invfold.pipelines.x"}, layers) == [
        "invfold.components.newstep.step",
        "invfold.newcore",
    ]
    assert {"invfold.cli", "invfold.components.train.strategies.ddp", "invfold.data"} <= modules_on_disk()


def test_the_architecture_states_the_contracts_import_order():
    assert architecture_layers() == contract_layers()
    assert contract_layers()[:2] == [["invfold.__main__"], ["invfold.cli"]]


GENERATED_MARK = re.compile(r"do not edit|^# PIPELINE DEFINITION$", re.IGNORECASE | re.MULTILINE)


def generated_rows() -> list[dict[str, str]]:
    return table(ARCHITECTURE, "Generated files: do not edit by hand")


def make_recipe(target: str) -> list[str]:
    """The commands of a Makefile target, without the venv prefix."""
    text = (REPO / "Makefile").read_text()
    found = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert found, f"the Makefile has no '{target}' target"
    return [line.strip().removeprefix(".venv/bin/") for line in found.group(1).splitlines()]


def test_each_generated_file_the_table_names_exists_with_its_command_and_check():
    commands = []
    for row in generated_rows():
        for pattern in code_spans(row["file"]):
            assert not unmatched(pattern), f"ARCHITECTURE.md's generated files: {unmatched(pattern)} name no file"
        for span in code_spans(row["regenerate"]):
            if span.startswith("make "):
                make_recipe(span.removeprefix("make "))
            elif span.startswith(("invfold ", "python ")):
                commands.append(span)
        for path in re.findall(r"tests/[\w/]+(?:\.py)?", row["stale check"]):
            assert (REPO / path).exists(), f"ARCHITECTURE.md's generated files: no {path}"
    assert sorted(commands) == sorted(make_recipe("generate")), "the table and `make generate` differ"


def test_every_file_marked_generated_is_in_the_table():
    listed = generated_files()
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    marked = []
    for name in tracked.splitlines():
        path = REPO / name
        # links (the chart's copies of the compiled pipelines) are their targets
        if path.suffix in {".yaml", ".json", ".py", ".md", ".txt"} and path.is_file() and not path.is_symlink():
            head = "\n".join(path.read_text(errors="replace").splitlines()[:3])
            if GENERATED_MARK.search(head):
                marked.append(path)
    assert marked, "no generated file found: the marker no longer matches"
    assert not [str(p.relative_to(REPO)) for p in marked if p not in listed]
