"""Strict validation of Trainer v2 manifests against the schemas in schemas/ (generated from
the typed models by scripts/generate_schemas.py; unknown fields are errors)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from invfold.errors import InvfoldError

SCHEMA_FILES = {"TrainJob": "trainjob.json", "ClusterTrainingRuntime": "clustertrainingruntime.json"}


class ManifestError(InvfoldError, ValueError):
    """A manifest that a Trainer v2 API server would not accept as written."""


@cache
def _validator(kind: str):
    import jsonschema

    text = resources.files(__package__).joinpath("schemas", SCHEMA_FILES[kind]).read_text()
    schema = json.loads(text)
    return jsonschema.Draft202012Validator(schema)


def validate(manifest: dict, source: str = "manifest") -> None:
    """Raise ManifestError listing every problem (path: message) of a TrainJob or
    ClusterTrainingRuntime; the kind decides the schema."""
    kind = manifest.get("kind") if isinstance(manifest, dict) else None
    if kind not in SCHEMA_FILES:
        raise ManifestError(f"{source}: kind: expected one of {sorted(SCHEMA_FILES)}, got {kind!r}")
    errors = sorted(_validator(kind).iter_errors(manifest), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  {'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in errors]
        raise ManifestError(f"{source}: {kind} fails the strict Trainer v2 schema:\n" + "\n".join(lines))
