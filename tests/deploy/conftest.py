"""Rendered manifests, shared across the deploy tests (rendering once keeps the suite fast)."""

from __future__ import annotations

import pytest

from tests.deploy.tools import CHART, OVERLAYS, helm_template, kustomize

VALUE_SETS = {"default": (), "gpu": ("-f", str(CHART / "values-gpu.yaml"))}


@pytest.fixture(scope="session")
def rendered() -> dict[str, str]:
    """Name -> rendered YAML: the chart with each value set, and every kustomize overlay."""
    out = {f"chart-{name}": helm_template(*args) for name, args in VALUE_SETS.items()}
    out.update({f"k8s-{overlay}": kustomize(overlay) for overlay in OVERLAYS})
    return out


@pytest.fixture(scope="session")
def docker_engine():
    from tests.deploy.docker_engine import start_engine

    yield from start_engine()


@pytest.fixture(scope="session")
def cpu_images(docker_engine):
    """The CPU variants of every image, built once per content of their inputs (kept in the build cache)."""
    from tests.deploy.docker_engine import build_cpu_images

    return build_cpu_images(docker_engine)
