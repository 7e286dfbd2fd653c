"""The chart's MLflow container run on loopback: its rendered args with the machine-specific ones
swapped for local ones, and a plain HTTP probe that sets the Host header a client in the cluster sends."""

from __future__ import annotations

import base64
import contextlib
import http.client

import pytest

from tests.support.mlflow_server import MlflowServer

NAMESPACE = "team-a"
SERVICE_HOST = f"invfold-mlflow.{NAMESPACE}.svc.cluster.local:5000"
TRACKED = "/api/2.0/mlflow/experiments/search?max_results=1"


def local_args(args: list[str], tmp_path, port: int) -> list[str]:
    """The chart's args with the four machine-specific ones pointed at this machine."""
    swap = {
        "--host": "127.0.0.1",
        "--port": str(port),
        "--backend-store-uri": f"sqlite:///{tmp_path}/mlflow.db",
        "--artifacts-destination": str(tmp_path / "artifacts"),
        "--workers": "1",
    }
    out = []
    for arg in args:
        key = arg.split("=", 1)[0]
        out.append(f"{key}={swap[key]}" if key in swap else arg)
    # the chart gives the backend URI as env (MLFLOW_BACKEND_STORE_URI), never on the command line
    assert "--backend-store-uri" not in {a.split("=", 1)[0] for a in out}, args
    out.append(f"--backend-store-uri={swap['--backend-store-uri']}")
    assert {a.split("=", 1)[0] for a in out} >= set(swap), args
    return out


def request(port: int, host: str, path: str, auth: tuple[str, str] | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Host": host}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    conn.request("GET", path, headers=headers)
    status = conn.getresponse().status
    conn.close()
    return status


@contextlib.contextmanager
def chart_mlflow_server(args: list[str], env: dict, tmp_path):
    """`mlflow server ARGS` on loopback (ARGS from local_args); yields its port once /health answers."""
    port = int(next(a for a in args if a.startswith("--port=")).split("=")[1])
    server = MlflowServer(tmp_path, port, args=args, env=env, start_timeout_s=120)
    try:
        server.start()
    except RuntimeError as err:
        pytest.fail(str(err))
    try:
        yield port
    finally:
        server.stop()
