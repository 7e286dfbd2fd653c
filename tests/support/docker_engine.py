"""A Docker engine for the image tests, and the images (CPU and GPU variants) built once per content
of their inputs.

The engine is Debian's docker.io, started here with its state in the build cache outside the clone
(scripts/cache.sh), so another clone or CI run on this machine reuses its images and BuildKit layers.
Images are tagged with a hash of everything that goes into them, so a re-run with unchanged sources
builds nothing."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.deploy_tools import BUILD_CACHE, REPO, run

DOCKER = "/usr/bin/docker"  # the Debian client: BuildKit (RUN --mount) works with it
STATE = BUILD_CACHE / "docker"  # short: unix sockets have a 108-byte limit
SETUP_HINT = "install the engine with `bash scripts/setup.sh test` (apt: docker.io debootstrap)"
# The inputs of the images: a change to any of them gives new tags and a rebuild.
IMAGE_INPUTS = (
    "images",
    "src",
    "components",
    "pipelines",
    "pyproject.toml",
    "constraints/ci.txt",
    "scripts/build_images.sh",
    "scripts/make_base_image.sh",
)
CPU_IMAGES = ("runtime", "mpi", "deepspeed", "horovod", "ci-cpu", "mlflow")
GPU_IMAGES = ("runtime", "mpi", "deepspeed", "horovod", "mlflow")


@dataclass(frozen=True)
class Engine:
    host: str  # DOCKER_HOST

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "1"}

    def docker(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        return run([DOCKER, *args], check=check, timeout=timeout, env=self.env())


def _alive(host: str) -> bool:
    proc = subprocess.run(
        [DOCKER, "-H", host, "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True, timeout=20
    )
    return proc.returncode == 0


def start_engine():
    """Yield an Engine: an engine already listening on our socket, or one started (and stopped) here."""
    if not (Path(DOCKER).exists() and shutil.which("dockerd")):
        pytest.fail(f"the Docker engine (dockerd, {DOCKER}) is not installed: {SETUP_HINT}")
    STATE.mkdir(parents=True, exist_ok=True)
    host = f"unix://{STATE / 'docker.sock'}"
    if _alive(host):
        yield Engine(host)
        return
    log = open(STATE / "dockerd.log", "ab")
    proc = subprocess.Popen(
        [
            "dockerd",
            "--data-root",
            str(STATE / "data"),
            "--exec-root",
            str(STATE / "exec"),
            "--pidfile",
            str(STATE / "docker.pid"),
            "-H",
            host,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not _alive(host):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"dockerd did not start (see {STATE / 'dockerd.log'}); it needs root: {SETUP_HINT}")
            time.sleep(0.3)
        yield Engine(host)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def inputs_digest() -> str:
    digest = hashlib.sha256()
    horovod = sorted((BUILD_CACHE / "wheels").glob("horovod-*/horovod-*.whl"))
    paths = []
    for name in IMAGE_INPUTS:
        root = REPO / name
        paths += (
            [root]
            if root.is_file()
            else sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        )
    for path in paths + horovod:
        digest.update(str(path.relative_to(REPO) if path.is_relative_to(REPO) else path.name).encode())
        digest.update(path.read_bytes() if path.stat().st_size < 50_000_000 else str(path.stat().st_size).encode())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class Images:
    engine: Engine
    tag: str
    variant: str = "cpu"

    def __getitem__(self, name: str) -> str:
        suffix = "-cpu" if self.variant == "cpu" else ""  # scripts/build_images.sh's tags
        return f"invfold-test/invfold-{name}:{self.tag}{suffix}"

    def user(self, name: str) -> str:
        """The user the image runs as (its Config.User)."""
        return self.engine.docker("image", "inspect", "--format", "{{.Config.User}}", self[name]).stdout.strip()


def build_cpu_images(engine: Engine) -> Images:
    """INVFOLD_TEST_IMAGES_TAG=T tests images already built as invfold-test/invfold-NAME:T-cpu
    (e.g. by `scripts/build_images.sh --registry invfold-test --tag T`) instead of building."""
    return build_images(engine, "cpu", CPU_IMAGES, os.environ.get("INVFOLD_TEST_IMAGES_TAG"))


def build_gpu_images(engine: Engine) -> Images:
    """The GPU variant (`scripts/build_images.sh --variant gpu`), tagged invfold-test/invfold-NAME:T."""
    return build_images(engine, "gpu", GPU_IMAGES)


def build_images(engine: Engine, variant: str, names: tuple[str, ...], given: str | None = None) -> Images:
    images = Images(engine, given or inputs_digest(), variant)
    missing = [n for n in names if engine.docker("image", "inspect", images[n], check=False).returncode != 0]
    if given:
        assert not missing, (
            f"INVFOLD_TEST_IMAGES_TAG={given}: these images do not exist: {[images[n] for n in missing]}"
        )
        return images
    if missing:
        only = [arg for name in names for arg in ("--only", name)]
        started = time.monotonic()
        run(
            [
                "bash",
                str(REPO / "scripts" / "build_images.sh"),
                "--variant",
                variant,
                "--registry",
                "invfold-test",
                "--tag",
                images.tag,
                *only,
            ],
            timeout=2400,
            env={**engine.env(), "DOCKER": DOCKER},
            cwd=REPO,
        )
        print(f"built the {variant} variant of {', '.join(names)} in {time.monotonic() - started:.0f} s")
        _remove_stale_test_images(engine, images.tag)
    return images


BUILD_CACHE_KEEP = "10GB"  # BuildKit's layers kept after a build: the latest dependency layers fit


def _remove_stale_test_images(engine: Engine, tag: str) -> None:
    """Earlier test builds (other input hashes) only fill the disk, and so does BuildKit's cache past
    the latest layers: it had grown to 18.7 GB when a CI run on this disk left the cluster's node
    under 1 GiB free."""
    listed = engine.docker("images", "--format", "{{.Repository}}:{{.Tag}}", "invfold-test/*").stdout.split()
    stale = [ref for ref in listed if ref.rsplit(":", 1)[-1] not in (tag, f"{tag}-cpu")]
    if stale:
        engine.docker("rmi", *stale, check=False)
    engine.docker("builder", "prune", "--force", "--keep-storage", BUILD_CACHE_KEEP, check=False)
