#!/usr/bin/env python3
"""Write the parameters a training setting adds to the pipeline and to its train step, from
TrainConfig's fields marked `option(pipeline=...)`, so that a new setting is its field alone.

KFP runs a lightweight component from its function's source text (the compiler puts
`inspect.getsource` of it into the pod's command), so a signature built at run time would not
reach the pod: the parameters are written into the files, between `# begin generated: NAME` and
`# end generated: NAME` comment lines:

- components/launch/component.py, `train_op`: a parameter per setting (the ones `train_step` takes
  by name, such as strategy, stay written by hand) and its entry in `train_options`;
- pipelines/pipeline.py, `invfold_pipeline`: a parameter per setting, its default from
  pipelines/defaults.py (`d.TRAIN`), and its pass-through to `train_op`.

Their `Args:` lines come from the fields' help at import (options.with_field_help's `@pipeline`).

A component whose op passes its plain inputs through to its step function by name (PASS_THROUGH:
evaluate_op -> evaluate_step) takes them from the step's signature: the inputs the op binds by
hand in its call (from artifacts: `prepared_path=prepared.path`) stay, every other keyword of the
step becomes an op parameter of the step's annotation, passed on as `name=name`, with its `Args:`
line from the step's docstring (written after the op's `Args:`; a line naming no parameter of
the op goes).

    python scripts/generate_signatures.py          # rewrite the blocks
    python scripts/generate_signatures.py --check  # exit 1 naming the files whose blocks differ
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMPONENT = REPO / "components" / "launch" / "component.py"
PIPELINE = REPO / "pipelines" / "pipeline.py"
# component -> (its op, the step function's file, its name)
PASS_THROUGH = {
    REPO / "components" / "evaluate" / "component.py": (
        "evaluate_op",
        REPO / "components" / "evaluate" / "step.py",
        "evaluate_step",
    ),
}
MARK = re.compile(r"^(?P<indent> *)# (?P<side>begin|end) generated: (?P<name>[\w ]+?)(?: \(.*\))?$")


def blocks(config=None) -> dict[Path, dict[str, list[str]]]:
    """file -> block name -> its lines (without indentation), from `config`'s pipeline fields
    (TrainConfig unless given)."""
    from invfold.components.launch.step import train_step
    from invfold.components.train.config import TrainConfig
    from invfold.options import pipeline_fields, pipeline_type

    settings = [(f.name, pipeline_type(hint).__name__) for f, hint in pipeline_fields(config or TrainConfig)]
    own = set(inspect.signature(train_step).parameters)  # what train_step takes by name
    out = {
        COMPONENT: {
            "train settings": [f"{name}: {kind}," for name, kind in settings if name not in own],
            "train options": [f'"{name}": {name},' for name, kind in settings if name not in own],
        },
        PIPELINE: {
            "train settings": [f'{name}: {kind} = d.TRAIN["{name}"],' for name, kind in settings],
            "train call": [f"{name}={name}," for name, _ in settings],
        },
    }
    for component in PASS_THROUGH:
        inputs = pass_through(component)
        out[component] = {
            "step inputs": [f"{name}: {kind}," for name, kind, _ in inputs],
            "step call": [f"{name}={name}," for name, _, _ in inputs],
        }
    return out


def _function(source: str, name: str, path: Path) -> ast.FunctionDef:
    found = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(found) != 1:
        sys.exit(f"generate_signatures: {path}: expected one function {name}, found {len(found)}")
    return found[0]


def arg_docs(docstring: str) -> dict[str, str]:
    """name -> description of a Google-style docstring's `Args:` lines (continuations joined)."""
    docs: dict[str, str] = {}
    lines = docstring.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), None)
    if start is None:
        return docs
    indent, name = None, None
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        found = re.match(r"(\w+): (.*)$", line.strip())
        if depth == indent and found:
            name = found[1]
            docs[name] = found[2]
        elif name is not None:
            docs[name] += " " + line.strip()
    return docs


def pass_through(component: Path) -> list[tuple[str, str, str]]:
    """(name, annotation, description) of each input `component`'s op passes to its step."""
    op_name, step_path, step_name = PASS_THROUGH[component]
    op = _function(component.read_text(), op_name, component)
    step = _function(step_path.read_text(), step_name, step_path)
    calls = [n for n in ast.walk(op) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == step_name]
    if len(calls) != 1:
        sys.exit(f"generate_signatures: {component}: {op_name} should call {step_name} once")
    bound = {k.arg for k in calls[0].keywords if not (isinstance(k.value, ast.Name) and k.value.id == k.arg)}
    docs = arg_docs(ast.get_docstring(step) or "")
    out = []
    for arg, default in zip(step.args.kwonlyargs, step.args.kw_defaults, strict=True):
        if arg.arg in bound:
            continue
        if default is not None or arg.annotation is None or arg.arg not in docs:
            sys.exit(
                f"generate_signatures: {step_path}: {step_name}'s {arg.arg} needs an annotation, an `Args:` "
                f"line and no default to pass through {op_name}"
            )
        out.append((arg.arg, ast.unparse(arg.annotation), docs[arg.arg]))
    return out


def rewrite_args(text: str, component: Path) -> str:
    """The op's docstring with the passed-through inputs' `Args:` lines after `Args:`."""
    op_name = PASS_THROUGH[component][0]
    inputs = pass_through(component)
    op = _function(text, op_name, component)
    params = {a.arg for a in op.args.args + op.args.kwonlyargs}
    lines = text.splitlines(keepends=True)
    doc = op.body[0]
    first, last = doc.lineno - 1, doc.end_lineno  # the docstring's lines
    out, in_args, indent = [], False, None
    for line in lines[first:last]:
        if line.strip() == "Args:":
            in_args, indent = True, " " * (len(line) - len(line.lstrip()) + 4)
            out.append(line)
            out.extend(f"{indent}{name}: {text}\n" for name, _, text in inputs)
            continue
        if in_args and not line.strip():
            in_args = False
        found = re.match(r"^ *(\w+): ", line) if in_args else None
        if (
            found
            and line.startswith(indent + found[1])
            and (found[1] in {n for n, _, _ in inputs} or found[1] not in params)
        ):
            continue
        out.append(line)
    return "".join(lines[:first] + out + lines[last:])


def rewrite(text: str, wanted: dict[str, list[str]], path: Path) -> str:
    """`text` with each `wanted` block's lines put between its marks, at the marks' indentation."""
    out: list[str] = []
    open_block: str | None = None
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        found = MARK.match(line.rstrip("\n"))
        if open_block is not None and not (found and found["side"] == "end"):
            continue  # the block's old lines
        out.append(line)
        if not found:
            continue
        name = found["name"]
        if found["side"] == "begin":
            if name not in wanted:
                sys.exit(f"generate_signatures: {path}:{number}: unknown block {name!r}; expected {sorted(wanted)}")
            open_block = name
            out.extend(f"{found['indent']}{body}\n" for body in wanted[name])
        else:
            if open_block != name:
                sys.exit(f"generate_signatures: {path}:{number}: `end generated: {name}` without its begin")
            open_block = None
            seen.add(name)
    missing = sorted(set(wanted) - seen)
    if open_block is not None or missing:
        sys.exit(f"generate_signatures: {path}: blocks {missing or [open_block]} lack their begin/end marks")
    return "".join(out)


def expected(config=None) -> dict[Path, str]:
    """file -> its text with every block as `config`'s fields write it."""
    texts = {path: rewrite(path.read_text(), wanted, path) for path, wanted in blocks(config).items()}
    for component in PASS_THROUGH:  # after its signature's block: the op's lines as they will be
        texts[component] = rewrite_args(texts[component], component)
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs")
    args = parser.parse_args(argv)
    texts = expected()
    stale = [path for path, text in texts.items() if path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"generate_signatures: {path.relative_to(REPO)} is stale: run `make generate`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(texts[path])
    print(f"generate_signatures: {len(stale)} file(s) rewritten of {len(texts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
