#!/usr/bin/env python3
"""Render k8s/base from the Helm chart, so a fix to the cluster manifests lands once (in
charts/invfold) and reaches the kustomize overlays by construction.

`helm template invfold charts/invfold --namespace invfold -f k8s/base-values.yaml`, split into one
file per chart template (`runtimes.yaml`, `rbac.yaml`, `scheduling.yaml`, `network-policies.yaml`),
each under a do-not-edit header; Helm's own bookkeeping labels (`helm.sh/chart`,
`app.kubernetes.io/managed-by: Helm`) are left out (k8s/base/kustomization.yaml labels the objects
as kustomize's), and so is the indentation helm leaves on empty lines.
k8s/base/kustomization.yaml and namespace.yaml are written by hand.

    python scripts/generate_k8s_base.py              # rewrite k8s/base's generated files
    python scripts/generate_k8s_base.py --out DIR    # write them into DIR instead (the staleness test)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "invfold"
BASE = REPO / "k8s" / "base"
VALUES = REPO / "k8s" / "base-values.yaml"
RELEASE = NAMESPACE = "invfold"
HELM = REPO / ".cache" / "tools" / "bin" / "helm"  # where scripts/install_tools.sh links it
HAND_WRITTEN = ("kustomization.yaml", "namespace.yaml")
SOURCE = re.compile(r"^# Source: invfold/templates/(?P<name>[\w.-]+\.yaml)$", re.MULTILINE)
HELM_LABELS = re.compile(r"^ +(helm\.sh/chart: .*|app\.kubernetes\.io/managed-by: Helm)\n", re.MULTILINE)
BLANK = re.compile(r"^[ \t]+$", re.MULTILINE)  # the indentation helm leaves on empty lines


def header(template: str) -> str:
    return (
        f"# GENERATED from charts/invfold/templates/{template} by scripts/generate_k8s_base.py with\n"
        "# k8s/base-values.yaml: do not edit. Change the chart (or those values), then run `make generate`.\n"
    )


def render(helm: Path) -> dict[str, str]:
    """File name -> text, one per chart template that renders in the kustomize flavour."""
    cmd = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(VALUES)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"generate_k8s_base: `helm template` failed ({proc.returncode}): {proc.stderr.strip()}")
    parts: dict[str, list[str]] = {}
    for document in re.split(r"^---\n", proc.stdout, flags=re.MULTILINE):
        found = SOURCE.search(document)
        if found is None:
            if document.strip():
                sys.exit(f"generate_k8s_base: a rendered document names no chart template: {document[:200]!r}")
            continue
        document = BLANK.sub("", HELM_LABELS.sub("", document))
        parts.setdefault(found["name"], []).append(document.rstrip("\n") + "\n")
    clash = sorted(set(parts) & set(HAND_WRITTEN))
    if clash:
        sys.exit(f"generate_k8s_base: chart templates {clash} would overwrite hand-written files of k8s/base")
    return {name: header(name) + "".join(f"---\n{doc}" for doc in docs) for name, docs in sorted(parts.items())}


def listed_resources() -> list[str]:
    """The resources k8s/base/kustomization.yaml lists (one `  - file.yaml` line each)."""
    text = (BASE / "kustomization.yaml").read_text()
    block = text.split("\nresources:\n", 1)[1]
    return re.findall(r"^  - (\S+)$", block.split("\n\n", 1)[0], re.MULTILINE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BASE, help="folder to write into (default: k8s/base)")
    parser.add_argument("--helm", type=Path, default=HELM, help="the helm binary (default: scripts/install_tools.sh's)")
    args = parser.parse_args(argv)
    if not args.helm.is_file():
        sys.exit(
            f"generate_k8s_base: no helm at {args.helm}: run `PYTHON=.venv/bin/python bash scripts/install_tools.sh`"
        )
    files = render(args.helm)
    unlisted = sorted(set(files) - set(listed_resources()))
    if unlisted:
        sys.exit(f"generate_k8s_base: k8s/base/kustomization.yaml does not list {unlisted}: add them to its resources")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.out.resolve() == BASE.resolve():
        stale = [p for p in BASE.glob("*.yaml") if p.name not in files and p.name not in HAND_WRITTEN]
        for path in stale:  # a template that no longer renders leaves no orphan behind
            path.unlink()
    for name, text in files.items():
        (args.out / name).write_text(text)
    print(f"generate_k8s_base: wrote {', '.join(sorted(files))} into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
