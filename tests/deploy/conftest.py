"""Rendered manifests, shared across the deploy tests (rendering once keeps the suite fast)."""

from __future__ import annotations

import pytest

from tests.support.deploy_tools import CHART, OVERLAYS, helm_template, kustomize

VALUE_SETS = {"default": (), "gpu": ("-f", str(CHART / "values-gpu.yaml"))}


@pytest.fixture(scope="session")
def rendered() -> dict[str, str]:
    """Name -> rendered YAML: the chart with each value set, and every kustomize overlay."""
    out = {f"chart-{name}": helm_template(*args) for name, args in VALUE_SETS.items()}
    out.update({f"k8s-{overlay}": kustomize(overlay) for overlay in OVERLAYS})
    return out
