"""What KFP's launcher accepts as an output artifact's metadata.

Kubeflow Pipelines 2.17.0's launcher turns each top-level metadata value into an ML Metadata value
and refuses a null (`backend/src/v2/metadata/converter.go`, "TODO: support null"): on a real KFP
the compare step of a first run (no champion: `champion: None`) failed after its work was done, while the local runner
(which writes the metadata as JSON) had always passed it. Every wrapper goes through
`invfold.runtime.artifact_metadata`."""

from __future__ import annotations

import ast
from pathlib import Path

from invfold.runtime import artifact_metadata

COMPONENTS = Path(__file__).resolve().parents[2] / "components"


def test_top_level_nulls_are_left_out_and_nested_values_kept():
    values = {"init_from": None, "register": False, "score": 0.0, "detail": {"champion": None}, "runs": [None]}
    assert artifact_metadata(values) == {"register": False, "score": 0.0, "detail": {"champion": None}, "runs": [None]}


def test_every_wrapper_sets_artifact_metadata_through_the_filter():
    calls = []
    for path in sorted(COMPONENTS.glob("*/component.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
                target = node.func.value
                if isinstance(target, ast.Attribute) and target.attr == "metadata":
                    argument = node.args[0] if node.args else None
                    wrapped = isinstance(argument, ast.Call) and getattr(argument.func, "id", "") == "artifact_metadata"
                    calls.append((f"{path.parent.name}:{node.lineno}", wrapped))
    assert len(calls) >= 8, calls  # prep, evaluate, launch, register (2), design (3)
    assert [where for where, wrapped in calls if not wrapped] == []
