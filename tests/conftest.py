"""Shared fixtures: real servers on loopback for remote-path tests.

- `http_server`: a static file server over a folder (files written into `.root` are served at
  `.url + "/" + name`; folder listings work, so fsspec can list remote folders).
- `s3_server`: moto's S3-compatible server on 127.0.0.1 (random port) with fake credentials and
  `AWS_ENDPOINT_URL` set only in this test's environment (child processes inherit them);
  `.new_bucket()` gives each test its own bucket so fsspec's listing caches never go stale.
- `mlflow_server`: one real MLflow tracking server for the whole session (tests/tracking/server.py).
"""

from __future__ import annotations

import functools
import http.server
import itertools
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.tracking.server import mlflow_server, unreachable_uri  # noqa: F401 - fixtures


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
    return S3Server(endpoint_url=_moto_endpoint, _counter=_bucket_numbers)


@pytest.fixture(scope="session")
def sample_prepared(tmp_path_factory) -> str:
    """The bundled sample, prepared once per session (read-only for the tests that use it)."""
    from invfold.components.prep.config import PrepConfig
    from invfold.components.prep.run import run_prep
    from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS

    out = tmp_path_factory.mktemp("sample") / "prepared"
    run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), output=str(out)))
    return str(out)
