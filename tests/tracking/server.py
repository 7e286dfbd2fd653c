"""A real MLflow tracking server on loopback for the tests (SQLite store, proxied artifacts)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{root}/mlflow.db",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(uri + "/health", timeout=1) as response:
                if response.status == 200:
                    break
        except OSError:
            time.sleep(0.3)
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited: {(root / 'server.log').read_text()[-2000:]}")
    else:
        proc.terminate()
        raise RuntimeError(f"mlflow server not healthy after 90 s: {(root / 'server.log').read_text()[-2000:]}")
    yield uri
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture
def unreachable_uri() -> str:
    """A loopback port nobody listens on: connections are refused at once."""
    return f"http://127.0.0.1:{free_port()}"
