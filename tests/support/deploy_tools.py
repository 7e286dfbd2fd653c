"""Where the deploy-check tools live and how to render the chart and overlays (shared by tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.paths import CACHE_ROOT, REPO

CHART = REPO / "charts" / "invfold"
OVERLAYS = ("cpu-dev", "gpu-prod", "tenant", "single-user")
# Every way the runtimes ship: the chart with its default and GPU values, and each overlay.
RENDERINGS = ("chart-default", "chart-gpu", *(f"k8s-{overlay}" for overlay in OVERLAYS))
INSTALL_HINT = "run `PYTHON=.venv/bin/python bash scripts/install_tools.sh` (or `make test`)"
# What the set-up scripts build is kept outside the clone (scripts/cache.sh; same root as prep's cache).
BUILD_CACHE = CACHE_ROOT / "build"
# A tool is looked up where scripts/install_tools.sh puts it, never on a random PATH entry.
TOOL_DIRS = (REPO / ".venv" / "bin", REPO / ".cache" / "tools" / "bin", Path(sys.executable).parent)


def tool(name: str) -> str:
    """The path of an installed tool; a missing tool fails the test (it is part of the CI install)."""
    for folder in TOOL_DIRS:
        path = folder / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    pytest.fail(f"{name} is not installed in {', '.join(str(d) for d in TOOL_DIRS)}: {INSTALL_HINT}")


def helper_chart(root: Path, template: str) -> Path:
    """A chart at `root` holding the chart's `_helpers.tpl` and one template, `template`: a named
    template of ours rendered alone against the values a test gives."""
    (root / "templates").mkdir()
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: harness\nversion: 0.0.1\n")
    shutil.copy(CHART / "templates" / "_helpers.tpl", root / "templates" / "_helpers.tpl")
    (root / "templates" / "check.yaml").write_text(template)
    return root


def run(cmd: list[str], *, check: bool = True, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        pytest.fail(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def helm_template(*args: str, namespace: str = "invfold") -> str:
    return run([tool("helm"), "template", "invfold", str(CHART), "--namespace", namespace, *args]).stdout


def kustomize(overlay: str) -> str:
    return run([tool("kubectl"), "kustomize", str(REPO / "k8s" / "overlays" / overlay)]).stdout


def rendering(name: str) -> str:
    """One of RENDERINGS as text."""
    if name == "chart-default":
        return helm_template()
    if name == "chart-gpu":
        return helm_template("-f", str(CHART / "values-gpu.yaml"))
    return kustomize(name.removeprefix("k8s-"))


def documents(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def pod_specs(node, where: str):
    """(path, pod spec) for every mapping that holds `containers`, at any depth of a rendered
    object: a pod template of any kind, one added later included."""
    if isinstance(node, dict):
        if "containers" in node:
            yield where, node
        for key, value in node.items():
            yield from pod_specs(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from pod_specs(value, f"{where}[{i}]")


def pod_templates(objs: list[dict]) -> dict[str, dict]:
    """`Kind/name` (runtimes: `Kind/name/replicated job`) -> pod spec, for every rendered pod template."""
    out = {}
    for o in objs:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            out[name] = o["spec"]["template"]["spec"]
        elif o["kind"] == "Pod":
            out[name] = o["spec"]
        elif o["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime"):
            for rj in o["spec"]["template"]["spec"]["replicatedJobs"]:
                out[f"{name}/{rj['name']}"] = rj["template"]["spec"]["template"]["spec"]
    return out
