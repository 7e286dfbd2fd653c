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
    assert {p.parent.name for p in DOCKERFILES} == {"runtime", "mpi", "deepspeed", "horovod", "mlflow"}


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


def test_every_pin_is_one_the_pin_refresh_checks_on_every_base():
    """A pinned package a base does not have fails the build (Ubuntu 24.04 renamed libopenmpi3 to
    libopenmpi3t64): every pinned name is in `build_images.sh --print-pins` (which shows
    `Candidate: (none)` for a name the base lacks), and every version argument is set per base."""
    pins = {}
    for dockerfile in DOCKERFILES:
        pins |= pinned_packages(dockerfile.read_text())
    script = (REPO / "scripts" / "build_images.sh").read_text()
    refreshed = set(re.search(r"apt-cache policy ([^|]+)\|", script).group(1).split())
    assert set(pins) <= refreshed, f"pinned but never refreshed: {sorted(set(pins) - refreshed)}"
    for base in sorted(REPO.glob("images/bases/*.args")):
        defined = {line.split("=", 1)[0] for line in base.read_text().splitlines() if "=" in line and line[0] != "#"}
        assert set(pins.values()) <= defined, f"{base.name} lacks {sorted(set(pins.values()) - defined)}"
    old = 'apt-get install -y openmpi-bin="${OPENMPI_VERSION}" libopenmpi3="${OPENMPI_VERSION}"'
    assert "libopenmpi3" in pinned_packages(old) and "libopenmpi3" not in refreshed  # what this catches


POCKETS = ("release", "security", "base")
# Ubuntu's version suffixes of a stable-release update (`ubuntu13.5`, `0ubuntu2.1`, `~24.04`): never
# what the release pocket itself serves.
UPDATE_SUFFIX = re.compile(r"ubuntu\d+\.\d+|~\d\d\.\d\d")


def pin_pockets(text: str) -> dict[str, tuple[str, str]]:
    """Version argument -> (the pocket its preceding `# pocket:` comment names, the version)."""
    pockets, pocket = {}, ""
    for line in text.splitlines():
        if line.startswith("# pocket:"):
            pocket = line.split(":", 1)[1].split()[0]
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            if key.endswith("_VERSION"):
                pockets[key] = (pocket, value)
            pocket = ""
    return pockets


def test_every_gpu_pin_names_its_pocket_and_release_pins_are_the_releases():
    """A -updates/-security pin stops resolving when Ubuntu supersedes it (one version per pocket):
    every pin of the GPU bases says which pocket it takes, and one that claims the release pocket
    carries no stable-update suffix (the earlier python3 3.12.3-0ubuntu2 and libgomp1
    14.2.0-4ubuntu2~24.04 pins came from noble-updates unannounced)."""
    pins = pin_pockets((REPO / "images" / "bases" / "cuda.args").read_text())
    pinned = set().union(*(pinned_packages(d.read_text()).values() for d in DOCKERFILES))
    assert pinned <= set(pins), f"pins of cuda.args without a `# pocket:` line: {sorted(pinned - set(pins))}"
    assert {key: pocket for key, (pocket, _) in pins.items() if pocket not in POCKETS} == {}
    assert [key for key, (pocket, v) in pins.items() if pocket == "release" and UPDATE_SUFFIX.search(v)] == []
    # what the check catches: an update's version claimed as the release's, a pin with no pocket
    caught = pin_pockets("# pocket: release\nA_VERSION=1:9.6p1-3ubuntu13.5\nB_VERSION=14.2.0-4ubuntu2~24.04\n")
    assert UPDATE_SUFFIX.search(caught["A_VERSION"][1]) and caught["B_VERSION"][0] == ""


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
