"""Shared fixtures: real servers on loopback for remote-path tests.

- `http_server`: a static file server over a folder (files written into `.root` are served at
  `.url + "/" + name`; folder listings work, so fsspec can list remote folders).
- `s3_server`: moto's S3-compatible server on 127.0.0.1 (random port) with fake credentials and
  `AWS_ENDPOINT_URL` set only in this test's environment (child processes inherit them);
  `.new_bucket()` gives each test its own bucket so fsspec's listing caches never go stale; cached
  s3fs clients are dropped before and after, as they keep the endpoint they were made with.
- `mlflow_server`: one real MLflow tracking server for the whole session (tests/support/mlflow_server.py).
- `docker_engine`, `cpu_images`, `gpu_images`: the Docker engine and the images of each variant
  (tests/support/docker_engine.py), shared by the image tests and the cluster lane.

Tiers (`pipeline`, `multiproc`, `images`, `cluster`, `slow`; registered in pyproject.toml) are
marks written in the test modules (tests/README.md); collection fails when a test leaves out the
one it is in (tests/support/tiers.py). `make test-fast` deselects `slow`. A run with
INVFOLD_TEST_DURATIONS=FILE writes each test's seconds there (`make test` keeps it in
runs/test-durations.json); tests/durations.json, a copy of one, orders the work and is checked
against the `slow` marks.

Under pytest-xdist with `--dist loadscope --no-loadscope-reorder` (`make test`), a worker takes a
whole module at a time (ModuleUnits), so a module's fixtures run once; the modules that drive the
one Docker engine and the one Kubernetes node (SHARED_ENGINE_MODULES) are one unit, which two
workers would otherwise start twice and fight over. Every worker orders the units longest first by
the recorded durations, so the last one to finish is a short one.
"""

from __future__ import annotations

import functools
import http.server
import itertools
import json
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.mlflow_server import mlflow_server, unreachable_uri  # noqa: F401 - fixtures
from tests.support.tiers import DOCKER_FIXTURES, check_tiers

SHARED_ENGINE_MODULES = (
    "tests/cluster/",
    "tests/deploy/test_images.py",
    "tests/deploy/test_gpu_images.py",
)  # every Docker engine test is in one
ENGINE_FREE_MODULES = ("tests/cluster/test_store_rights.py",)  # the lane's weed build, on loopback: no engine, no node
RECORDED = Path(__file__).with_name("durations.json")  # a clean-clone CI run's INVFOLD_TEST_DURATIONS


def unit_of(nodeid: str) -> str:
    """The module of a test, or "shared-engine" for the modules of SHARED_ENGINE_MODULES (less
    ENGINE_FREE_MODULES)."""
    module = nodeid.split("::")[0]
    return "shared-engine" if module.startswith(SHARED_ENGINE_MODULES) and module not in ENGINE_FREE_MODULES else module


def pytest_collection_modifyitems(config, items):
    recorded = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}
    tests = check_tiers(items, recorded)
    for test in tests:
        if DOCKER_FIXTURES & test.fixtures and unit_of(test.nodeid) != "shared-engine":
            raise pytest.UsageError(f"{test.nodeid} uses the Docker engine: add its module to SHARED_ENGINE_MODULES")
    if hasattr(config, "workerinput"):  # an xdist worker: longest unit first (stable: a module keeps its order)
        units = {item.nodeid: unit_of(item.nodeid) for item in items}
        seconds: dict[str, float] = {}
        for item in items:
            seconds[units[item.nodeid]] = seconds.get(units[item.nodeid], 0.0) + recorded.get(item.nodeid, 1.0)
        items.sort(key=lambda item: -seconds[units[item.nodeid]])


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadscope`: ModuleUnits; other modes are xdist's own."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return ModuleUnits(config, log)


@pytest.fixture(scope="session")
def docker_engine():
    from tests.support.docker_engine import start_engine

    yield from start_engine()


@pytest.fixture(scope="session")
def cpu_images(docker_engine):
    """The CPU variants of every image, built once per content of their inputs (kept in the build cache)."""
    from tests.support.docker_engine import build_cpu_images

    return build_cpu_images(docker_engine)


@pytest.fixture(scope="session")
def gpu_images(docker_engine):
    """The GPU variants (`scripts/build_images.sh --variant gpu`), built once per content of their inputs."""
    from tests.support.docker_engine import build_gpu_images

    return build_gpu_images(docker_engine)


_durations: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Under xdist this runs in the controller too, for every worker's report: the controller
    writes the whole record."""
    if os.environ.get("INVFOLD_TEST_DURATIONS"):
        _durations[report.nodeid] = round(_durations.get(report.nodeid, 0.0) + report.duration, 2)


def pytest_sessionfinish(session):
    path = os.environ.get("INVFOLD_TEST_DURATIONS")
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller writes the record
        return
    if path and _durations:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        ordered = dict(sorted(_durations.items(), key=lambda kv: -kv[1]))
        Path(path).write_text(json.dumps(ordered, indent=0) + "\n")


@dataclass
class FileServer:
    root: Path
    url: str


@pytest.fixture(scope="session")
def http_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("http-root")

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # keep test output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield FileServer(root=root, url=f"http://127.0.0.1:{server.server_address[1]}")
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def _moto_endpoint():
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@dataclass
class S3Server:
    endpoint_url: str
    _counter: itertools.count

    @property
    def storage_options(self) -> dict:
        """fsspec/s3fs options for code that does not read AWS_ENDPOINT_URL."""
        return {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": self.endpoint_url}}

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def new_bucket(self) -> str:
        name = f"bucket-{next(self._counter)}"
        self.client().create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, data: bytes) -> str:
        self.client().put_object(Bucket=bucket, Key=key, Body=data)
        return f"s3://{bucket}/{key}"


_bucket_numbers = itertools.count()


@pytest.fixture
def s3_server(_moto_endpoint, monkeypatch, tmp_path):
    from invfold import storage

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": _moto_endpoint,
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # an s3fs client cached by an earlier test in this process keeps that test's endpoint
    storage.forget_s3_clients()
    yield S3Server(endpoint_url=_moto_endpoint, _counter=_bucket_numbers)
    storage.forget_s3_clients()


@pytest.fixture(scope="session")
def sample_prepared(tmp_path_factory) -> str:
    """The bundled sample, prepared once per session (read-only for the tests that use it)."""
    from invfold.components.prep.config import PrepConfig
    from invfold.components.prep.run import run_prep
    from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS

    out = tmp_path_factory.mktemp("sample") / "prepared"
    run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), out=str(out)))
    return str(out)
