"""A real MLflow tracking server on loopback for the tests (SQLite store, proxied artifacts)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.processes import stop_group


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """`mlflow server` on a free loopback port over a SQLite store under `root`; start() waits
    until /health answers. The same root can be served again after stop() or kill()."""

    def __init__(
        self,
        root: Path,
        port: int | None = None,
        args: list[str] | None = None,
        env: dict | None = None,
        start_timeout_s: float = 90,
    ):
        """`args`: the server's whole argument list (default: SQLite and artifacts under `root`, on
        `port`); given, they must listen on 127.0.0.1:`port`."""
        self.root, self.port = Path(root), port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.args = args or (
            ["--backend-store-uri", f"sqlite:///{self.root}/mlflow.db"]
            + ["--artifacts-destination", str(self.root / "artifacts"), "--host", "127.0.0.1"]
            + ["--port", str(self.port), "--workers", "1"]
        )
        self.env = env or {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None

    def start(self) -> str:
        log = open(self.root / "server.log", "a")  # noqa: SIM115 - the server's lifetime
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", *self.args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # kill() takes the server's workers with it
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=1) as response:
                    if response.status == 200:
                        return self.uri
            except OSError:
                time.sleep(0.3)
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.root / 'server.log').read_text()[-2000:]}")
        self.stop()
        log_tail = (self.root / "server.log").read_text()[-2000:]
        raise RuntimeError(f"mlflow server not healthy after {self.start_timeout_s:.0f} s: {log_tail}")

    def kill(self) -> None:
        """SIGKILL the server and its workers: no goodbye, connections refused from now on."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, timeout=15)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory) -> str:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    yield server.start()
    server.stop()


@pytest.fixture
def unreachable_uri() -> str:
    """A loopback port nobody listens on: connections are refused at once."""
    return f"http://127.0.0.1:{free_port()}"
