#!/usr/bin/env python3
"""Imports inside functions are for heavy modules only; heavy modules stay out of `invfold --help`.

Why lazy imports at all: `invfold --help`, every subcommand's help and a user's mistake answer from
argparse and the config dataclasses alone, without loading torch (1.6-8 s and 343 MB on every
`--help` when it was imported: tests/test_cli.py), MLflow, KFP or ONNX. So a module that the CLI
loads imports a heavy module inside the function that needs it. Every other import is at the top
of its module, where a reader looks for it.

This script walks the AST of the library (src/invfold, components, pipelines) and fails on:
- an import inside a function, unless (a) it imports a HEAVY library, or an invfold module whose
  own module-level imports reach one; (b) it is in a module that `invfold --help` loads and
  imports one that `--help` does not (a subcommand's step, its tracker, rich's progress bars:
  at module level they would double the CPU time of `invfold --help`, 0.14 s to 0.26-0.31 s
  measured with `/usr/bin/time -f %U+%S python -m invfold --help`, least of 7, 2026-11-29);
  (c) the function is a KFP component (`@dsl.component`, `@dsl.container_component`): KFP ships
  the function's source alone, so its imports must be in it; or (d) it is listed, with its
  reason, in scripts/lazy_imports_allowlist.txt;
- an allowlist entry that matches no import (a stale entry);
- a module-level import of a heavy module (as above) in a module that `invfold --help` or any
  subcommand's help loads (sys.modules after `invfold.cli.build_parser()`, every subcommand's
  options included, in a fresh interpreter), and a HEAVY library found loaded there at all.

HEAVY: the third-party libraries whose import costs 35 ms or more, about what importing invfold.cli
costs (`python -X importtime -c "import M"`, the cumulative figure, least of 3 runs, on the
project's 2-core machine at load 15 from other jobs, 2026-11-29): invfold.cli 42 ms; deepspeed
13.1 s, torch 10.2 s, mlflow 4.4 s, horovod.torch 4.2 s, s3fs 1.0 s, matplotlib 0.87 s, kfp 0.67 s,
kubernetes 0.56 s, pyarrow 0.27 s, onnx 0.23 s, onnxruntime 0.19 s, boto3 0.18 s, scipy 0.13 s,
jsonschema 0.12 s, numpy 95 ms, kfp_server_api 88 ms, urllib3 85 ms, fsspec 80 ms, shtab 56 ms,
botocore 47 ms, gemmi 41 ms, markdown_it 40 ms; light: psutil 18 ms, yaml 15 ms, rich 3.2 ms.

    python scripts/lint_lazy_imports.py   # `make lint`; exit 1 with one line per finding
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ALLOWLIST = REPO / "scripts" / "lazy_imports_allowlist.txt"
# where each part of the `invfold` package lives (pyproject.toml's package-dir)
PACKAGE_DIRS = {"invfold.components": "components", "invfold.pipelines": "pipelines", "invfold": "src/invfold"}
HEAVY = frozenset(
    {
        "boto3",
        "botocore",
        "deepspeed",
        "fsspec",
        "gemmi",
        "horovod",
        "jsonschema",
        "kfp",
        "kfp_server_api",
        "kubernetes",
        "markdown_it",
        "matplotlib",
        "mlflow",
        "numpy",
        "onnx",
        "onnxruntime",
        "pyarrow",
        "s3fs",
        "scipy",
        "shtab",
        "torch",
        "urllib3",
    }
)
KFP_COMPONENT_DECORATORS = frozenset({"component", "container_component"})
CLI_PROBE = """
import contextlib, io, json, sys
from invfold.cli import build_parser, main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["--help"])
help_loads = sorted(sys.modules)
build_parser()
print(json.dumps({"help": help_loads, "parsers": sorted(sys.modules)}))
"""


@dataclass(frozen=True)
class Import:
    path: str  # relative to the repository
    line: int
    module: str  # the module this statement loads (for `from X import y`: X, or X.y when that is a module)
    function: str | None  # qualified name of the enclosing function; None at module level
    in_kfp_component: bool = False


def module_name(path: str) -> str | None:
    """invfold's name for a library file (components/train/step.py -> invfold.components.train.step)."""
    for package, folder in PACKAGE_DIRS.items():
        if path == f"{folder}/__init__.py":
            return package
        if path.startswith(folder + "/") and path.endswith(".py"):
            rest = path[len(folder) + 1 : -3].replace("/", ".")
            return f"{package}.{rest.removesuffix('.__init__')}"
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_kfp_component(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in KFP_COMPONENT_DECORATORS:
            return True
    return False


def imports_of(path: str, source: str, modules: set[str]) -> list[Import]:
    """Every executed import statement of a file (not those under `if TYPE_CHECKING:`), one per
    module it loads; `modules` names invfold's modules, to tell `from pkg import submodule`."""
    found: list[Import] = []

    def visit(node: ast.AST, function: str | None, component: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(ast.Module(body=[other], type_ignores=[]), function, component)
                continue
            if isinstance(child, ast.Import):
                found.extend(Import(path, child.lineno, a.name, function, component) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.module != "__future__":
                for alias in child.names:
                    sub = f"{child.module}.{alias.name}"
                    target = sub if sub in modules else child.module
                    found.append(Import(path, child.lineno, target, function, component))
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = child.name if function is None else f"{function}.{child.name}"
                visit(child, name, component or _is_kfp_component(child))
            elif isinstance(child, ast.ClassDef):
                visit(child, child.name if function is None else f"{function}.{child.name}", component)
            else:
                visit(child, function, component)

    visit(ast.parse(source, filename=path), None, False)
    return found


def _parents(module: str) -> list[str]:
    """`import a.b.c` runs a, a.b and a.b.c."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def heavy_modules(imports: list[Import]) -> dict[str, str]:
    """Each invfold module whose import loads a HEAVY library -> that library (module level only)."""
    edges: dict[str, set[str]] = {}
    for found in imports:
        name = module_name(found.path)
        edges.setdefault(name, set())
        if found.function is None:
            edges[name].update(_parents(found.module))
    for name in list(edges):
        edges[name].update(p for p in _parents(name)[:-1])  # a module's packages run first
    heavy: dict[str, str] = {}
    changed = True
    while changed:  # to a fixed point: cycles between modules end it too
        changed = False
        for name, targets in edges.items():
            if name in heavy:
                continue
            for target in sorted(targets):
                library = target.split(".")[0] if target.split(".")[0] in HEAVY else heavy.get(target)
                if library:
                    heavy[name], changed = library, True
                    break
    return heavy


def is_heavy(module: str, heavy: dict[str, str]) -> str | None:
    """The HEAVY library that importing `module` loads, if any."""
    for name in _parents(module):
        if name.split(".")[0] in HEAVY:
            return name.split(".")[0]
        if name in heavy:
            return heavy[name]
    return None


def read_allowlist(text: str) -> tuple[dict[tuple[str, str, str], str], list[str]]:
    """`path function module: reason` lines -> ({(path, function, module): reason}, mistakes)."""
    entries: dict[tuple[str, str, str], str] = {}
    mistakes = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        where, _, reason = line.partition(":")
        fields = where.split()
        if len(fields) != 3 or not reason.strip():
            mistakes.append(f"{ALLOWLIST.relative_to(REPO)}:{number}: expected `path function module: reason`")
            continue
        entries[(fields[0], fields[1], fields[2])] = reason.strip()
    return entries, mistakes


def kept_out_of_cli(found: Import, loaded: set[str]) -> bool:
    """(b): an import in a module `invfold --help` loads, of a module it does not."""
    return module_name(found.path) in loaded and found.module not in loaded


def check_function_imports(
    imports: list[Import], heavy: dict[str, str], allowlist: dict[tuple[str, str, str], str], loaded: set[str]
) -> list[str]:
    """One line per import inside a function that none of (a)-(d) allows, and per unused entry."""
    problems, used = [], set()
    for found in imports:
        if found.function is None or found.in_kfp_component or is_heavy(found.module, heavy):
            continue
        if kept_out_of_cli(found, loaded):
            continue
        key = (found.path, found.function, found.module)
        if key in allowlist:
            used.add(key)
            continue
        problems.append(
            f"{found.path}:{found.line}: `{found.module}` is imported inside {found.function}() but is not heavy: "
            f"import it at the top of the module (or list it in {ALLOWLIST.name} with the reason)"
        )
    for key in sorted(allowlist.keys() - used):
        problems.append(f"{ALLOWLIST.relative_to(REPO)}: `{' '.join(key)}` matches no import inside a function")
    return problems


def check_cli_path(imports: list[Import], heavy: dict[str, str], loaded: set[str]) -> list[str]:
    """One line per module-level import of a heavy module in a module `invfold --help` loads, and
    per HEAVY library loaded there."""
    problems = []
    for found in imports:
        name = module_name(found.path)
        if found.function is None and name in loaded and (library := is_heavy(found.module, heavy)):
            via = "" if found.module.split(".")[0] == library else f" (which loads {library})"
            problems.append(
                f"{found.path}:{found.line}: `{found.module}`{via} is imported at module level, and "
                f"`invfold --help` loads {name}: import it inside the function that needs it"
            )
    for library in sorted(HEAVY & {m.split(".")[0] for m in loaded}):
        problems.append(f"`invfold --help` loads {library}")
    return problems


def library_files(root: Path = REPO) -> dict[str, str]:
    """Every library file -> its source."""
    files = {}
    for folder in PACKAGE_DIRS.values():
        for path in sorted((root / folder).rglob("*.py")):
            files[path.relative_to(root).as_posix()] = path.read_text()
    return files


@dataclass(frozen=True)
class CliModules:
    help: set[str]  # sys.modules after `invfold --help`
    parsers: set[str]  # and after building every subcommand's parser (help for any of them)


def cli_modules(python: str = sys.executable) -> CliModules:
    """What the CLI loads, in a fresh interpreter."""
    done = subprocess.run([python, "-c", CLI_PROBE], capture_output=True, text=True, timeout=300, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return CliModules(help=set(found["help"]), parsers=set(found["parsers"]))


def lint(files: dict[str, str], allowlist_text: str, cli: CliModules) -> list[str]:
    modules = {name for path in files if (name := module_name(path))}
    imports = [found for path, source in files.items() for found in imports_of(path, source, modules)]
    heavy = heavy_modules(imports)
    allowlist, mistakes = read_allowlist(allowlist_text)
    return (
        mistakes
        + check_function_imports(imports, heavy, allowlist, cli.help)
        + check_cli_path(imports, heavy, cli.parsers)
    )


def main() -> int:
    problems = lint(library_files(), ALLOWLIST.read_text(), cli_modules())
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
