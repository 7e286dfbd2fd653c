"""k8s/base is rendered from the chart (scripts/generate_k8s_base.py, `make generate`), so a fix to
the cluster manifests is made once, in charts/invfold, and reaches every kustomize overlay."""

from __future__ import annotations

import sys

import yaml

from tests.support.deploy_tools import REPO, run, tool

BASE = REPO / "k8s" / "base"
SCRIPT = REPO / "scripts" / "generate_k8s_base.py"
HAND_WRITTEN = {"kustomization.yaml", "namespace.yaml"}


def test_the_kustomize_base_is_the_charts_rendering(tmp_path):
    """Re-rendered into a temp folder, every generated file equals the committed one byte for byte."""
    run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--helm", tool("helm")])
    fresh = {path.name: path.read_bytes() for path in tmp_path.glob("*.yaml")}
    assert set(fresh) == {"network-policies.yaml", "rbac.yaml", "runtimes.yaml", "scheduling.yaml"}
    committed = {path.name for path in BASE.glob("*.yaml")} - HAND_WRITTEN
    assert committed == set(fresh), (
        f"k8s/base holds {sorted(committed)}, the chart renders {sorted(fresh)}: run `make generate`"
    )
    stale = [name for name, text in sorted(fresh.items()) if (BASE / name).read_bytes() != text]
    assert stale == [], f"stale (not what the chart renders): k8s/base/{', k8s/base/'.join(stale)}; run `make generate`"


def test_the_base_lists_the_rendered_files_and_its_own_namespace():
    """Everything the base installs comes from the chart, except the Namespace (no chart owns the
    namespace its release lives in); the overlays delete it."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    generated = {path.name for path in BASE.glob("*.yaml")} - HAND_WRITTEN
    assert set(kustomization["resources"]) == generated | {"namespace.yaml"}
    for name in generated:
        assert (BASE / name).read_text().startswith("# GENERATED from charts/invfold/templates/"), name
    (namespace,) = yaml.safe_load_all((BASE / "namespace.yaml").read_text())
    assert namespace["kind"] == "Namespace" and namespace["metadata"]["name"] == kustomization["namespace"]
