"""hadolint (no finding at any level) on every Dockerfile; checkov over the rendered chart, the
kustomize overlays and the Dockerfiles with no failed check outside .checkov.yaml's skip list."""

from __future__ import annotations

import json

import pytest

from tests.deploy.tools import REPO, run, tool

DOCKERFILES = sorted(REPO.glob("images/*/Dockerfile"))


def test_there_is_a_dockerfile_per_image():
    assert {p.parent.name for p in DOCKERFILES} == {"runtime", "mpi", "deepspeed", "horovod", "mlflow"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[p.parent.name for p in DOCKERFILES])
def test_hadolint_is_clean(dockerfile):
    proc = run([tool("hadolint"), "--no-color", "--failure-threshold", "style", str(dockerfile)], check=False)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_hadolint_flags_an_unpinned_package(tmp_path):
    """The check above can fail: an unpinned apt install is reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM debian:12.5\nRUN apt-get update && apt-get install -y --no-install-recommends curl "
        "&& rm -rf /var/lib/apt/lists/*\nUSER 10001\n"
    )
    proc = run([tool("hadolint"), "--no-color", str(bad)], check=False)
    assert proc.returncode != 0 and "DL3008" in proc.stdout


def checkov(*args: str) -> dict:
    proc = run(
        [
            tool("checkov"),
            "--config-file",
            str(REPO / ".checkov.yaml"),
            "--skip-download",
            "--quiet",
            "--output",
            "json",
            *args,
        ],
        check=False,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    reports = json.loads(proc.stdout) if proc.stdout.strip().startswith(("[", "{")) else []
    return {r["check_type"]: r for r in ([reports] if isinstance(reports, dict) else reports)}


def failures(reports: dict) -> list[str]:
    return [
        f"{check_type}: {c['check_id']} {c['check_name']} -- {c['resource']} ({c['file_path']})"
        for check_type, report in reports.items()
        for c in report["results"]["failed_checks"]
    ]


def test_checkov_on_rendered_manifests(rendered, tmp_path):
    for name, text in rendered.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    reports = checkov("--directory", str(tmp_path), "--framework", "kubernetes")
    assert reports["kubernetes"]["summary"]["passed"] > 100, "checkov scanned (almost) nothing"
    assert not failures(reports), "\n".join(failures(reports))


@pytest.mark.parametrize(("folder", "framework"), [("k8s", "kustomize"), ("images", "dockerfile")])
def test_checkov_on_sources(folder, framework):
    reports = checkov("--directory", str(REPO / folder), "--framework", framework)
    assert reports[framework]["summary"]["passed"] > 20, f"checkov scanned (almost) nothing in {folder}"
    assert not failures(reports), "\n".join(failures(reports))


def test_checkov_flags_a_privileged_pod(tmp_path):
    """The checkov checks above can fail: a privileged root pod is reported."""
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad, namespace: invfold}\nspec:\n  containers:\n"
        "    - name: c\n      image: example/bad:1.0\n      securityContext: {privileged: true}\n"
    )
    failed = {line.split()[1] for line in failures(checkov("--directory", str(tmp_path), "--framework", "kubernetes"))}
    assert "CKV_K8S_16" in failed  # privileged containers
