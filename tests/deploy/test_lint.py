"""hadolint (no finding at any level) on every Dockerfile; checkov over the rendered chart, the
kustomize overlays and the Dockerfiles with no failed check outside .checkov.yaml's skip list."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.deploy_tools import REPO, run, tool

DOCKERFILES = sorted(REPO.glob("images/*/Dockerfile"))
# The test cluster's images of KFP's install (scripts/cluster/build.sh builds them).
CLUSTER_DOCKERFILES = sorted(REPO.glob("scripts/cluster/images/*/Dockerfile"))


def test_there_is_a_dockerfile_per_image():
    assert {p.parent.name for p in DOCKERFILES} == {"runtime", "mpi", "toolchain", "deepspeed", "horovod", "mlflow"}


@pytest.mark.parametrize(
    "dockerfile",
    DOCKERFILES + CLUSTER_DOCKERFILES,
    ids=[p.parent.name for p in DOCKERFILES] + [f"cluster-{p.parent.name}" for p in CLUSTER_DOCKERFILES],
)
def test_hadolint_is_clean(dockerfile):
    proc = run([tool("hadolint"), "--no-color", "--failure-threshold", "style", str(dockerfile)], check=False)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def pinned_packages(text: str) -> dict[str, str]:
    """apt package -> the build argument holding its version (`pkg="${VAR}"`)."""
    return dict(re.findall(r'([a-z0-9][a-z0-9+.-]+)="\$\{([A-Z_]+)\}"', text))


def test_every_pin_is_one_the_pin_refresh_checks_and_both_variants_share_them():
    """A pinned package the base does not have fails the build (Ubuntu 24.04 renamed libopenmpi3 to
    libopenmpi3t64): every pinned name is in `build_images.sh --print-pins` (which shows
    `Candidate: (none)` for a name the base lacks), and every version argument is set in
    bookworm.args. gpu.args, read after it for the GPU variant, pins no apt package of its own: both
    variants install the same Debian packages."""
    pins = {}
    for dockerfile in DOCKERFILES:
        pins |= pinned_packages(dockerfile.read_text())
    script = (REPO / "scripts" / "build_images.sh").read_text()
    refreshed = set(re.search(r"apt-cache policy ([^|]+)\|", script).group(1).split())
    assert set(pins) <= refreshed, f"pinned but never refreshed: {sorted(set(pins) - refreshed)}"
    defined = {base.name: build_args(base) for base in REPO.glob("images/bases/*.args")}
    assert set(defined) == {"bookworm.args", "gpu.args"}
    assert set(pins.values()) <= set(defined["bookworm.args"]), sorted(
        set(pins.values()) - set(defined["bookworm.args"])
    )
    assert not set(pins.values()) & set(defined["gpu.args"]), "gpu.args re-pins an apt package"
    # every argument the GPU variant changes is one the CPU variant sets too (no silent default)
    assert set(defined["gpu.args"]) <= set(defined["bookworm.args"]), sorted(
        set(defined["gpu.args"]) - set(defined["bookworm.args"])
    )
    old = 'apt-get install -y openmpi-bin="${OPENMPI_VERSION}" libopenmpi3="${OPENMPI_VERSION}"'
    assert "libopenmpi3" in pinned_packages(old) and "libopenmpi3" not in refreshed  # what this catches


def build_args(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and line[0] != "#")


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
