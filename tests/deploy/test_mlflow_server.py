"""The real MLflow server, started on loopback with exactly the arguments the chart renders
(only the listen address, port, database and artifact folder swapped for local ones), answers
the Host headers clients inside the cluster and through the ingress send.

Upstream fact: since MLflow 3.5 the tracking server rejects (403) every Host header outside
localhost and private IPs unless `--allowed-hosts` names it, and exempts /health
(mlflow/mlflow mlflow/server/security.py, mlflow/server/security_utils.py: is_allowed_host_header,
is_health_endpoint, get_default_allowed_hosts). Basic auth answers 401 without credentials
(mlflow/mlflow mlflow/server/auth/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.chart_mlflow import NAMESPACE, SERVICE_HOST, TRACKED, chart_mlflow_server, local_args, request
from tests.support.deploy_tools import documents, helm_template
from tests.support.mlflow_server import free_port

INGRESS_HOST = "mlflow.team-a.example.org"
ADMIN = ("admin", "a-test-password-0")
# team-a is a profile namespace, where auth is on by default: the tests without a user store turn it off
NO_AUTH = ("--set", "mlflow.auth.enabled=false")


def rendered_mlflow_container(*values: str) -> dict:
    text = helm_template(*values, namespace=NAMESPACE)
    (deployment,) = [
        o for o in documents(text) if o["kind"] == "Deployment" and o["metadata"]["name"] == "invfold-mlflow"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.fixture(scope="module", params=["auth", "no-auth"])
def chart_server(request, tmp_path_factory):
    auth = request.param == "auth"
    if auth:
        values = ["--set", "mlflow.ingress.enabled=true", "--set", f"mlflow.ingress.host={INGRESS_HOST}"]
        values += ["--set", "mlflow.auth.enabled=true", "--set", "mlflow.auth.existingSecret=mlflow-basic-auth"]
    else:  # the chart refuses an Ingress without auth: the same Host admitted through allowedHosts
        values = ["--set", "mlflow.auth.enabled=false", "--set", f"mlflow.allowedHosts={{{INGRESS_HOST}}}"]
    container = rendered_mlflow_container(*values)
    tmp_path = tmp_path_factory.mktemp(f"mlflow-{request.param}")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    if auth:
        ini = tmp_path / "basic_auth.ini"
        ini.write_text(
            "[mlflow]\ndefault_permission = READ\n"
            f"database_uri = sqlite:///{tmp_path}/auth.db\n"
            f"admin_username = {ADMIN[0]}\nadmin_password = {ADMIN[1]}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        )
        env["MLFLOW_AUTH_CONFIG_PATH"] = str(ini)
        env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = "test-only"
    with chart_mlflow_server(local_args(container["args"], tmp_path, free_port()), env, tmp_path) as port:
        yield port, (ADMIN if auth else None), container


@pytest.mark.parametrize(
    "host", [SERVICE_HOST, "invfold-mlflow:5000", f"invfold-mlflow.{NAMESPACE}:5000", INGRESS_HOST]
)
def test_cluster_and_ingress_hosts_reach_a_tracked_endpoint(chart_server, host):
    port, auth, _ = chart_server
    assert request(port, host, TRACKED, auth) == 200, f"Host: {host}"


def test_a_foreign_host_is_refused(chart_server):
    """The check that would have failed: without --allowed-hosts the service name gets 403 too."""
    port, auth, _ = chart_server
    assert request(port, "attacker.example.net", TRACKED, auth) == 403
    assert request(port, "attacker.example.net", "/health") == 200  # why probes never noticed


def test_auth_refuses_anonymous_clients(chart_server):
    port, auth, container = chart_server
    if auth is None:
        assert "--app-name=basic-auth" not in container["args"]
        return
    assert "--app-name=basic-auth" in container["args"]
    assert request(port, SERVICE_HOST, TRACKED) == 401
    assert request(port, SERVICE_HOST, TRACKED, ("admin", "wrong")) == 401


def test_without_allowed_hosts_the_service_name_is_refused(tmp_path):
    """Upstream's default (the chart before --allowed-hosts): the in-cluster name gets 403."""
    container = rendered_mlflow_container(*NO_AUTH)
    args = [a for a in container["args"] if not a.startswith("--allowed-hosts")]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with chart_mlflow_server(local_args(args, tmp_path, free_port()), env, tmp_path) as port:
        assert request(port, SERVICE_HOST, TRACKED) == 403
        assert request(port, "10.1.2.3:5000", TRACKED) == 200  # a private IP is accepted by default


def helm_test_pod(*values: str) -> dict:
    (pod,) = [o for o in documents(helm_template(*values, namespace=NAMESPACE)) if o["kind"] == "Pod"]
    return pod


def run_helm_test(pod: dict, tracking_uri: str, tmp_path, extra_env: dict | None = None):
    """The `helm test` pod's own command (the MLflow image's python and client: the same mlflow
    version as this venv) with the pod's env, the tracking URI pointed at the local server."""
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.update(MLFLOW_TRACKING_URI=tracking_uri, HOME=str(tmp_path), TMPDIR=str(tmp_path), **(extra_env or {}))
    env["PATH"] = os.environ["PATH"]
    command = [sys.executable if c == "python3" else c for c in container["command"]]
    return subprocess.run(
        [*command, *container["args"]], env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow
def test_helm_test_stores_and_returns_an_artifact_through_the_proxy(tmp_path, s3_server):
    """`helm test` fails when MLflow cannot reach its artifact store (the chart's NetworkPolicies
    blocking it made the first log_artifact hang while `helm test` passed), and passes when it can.
    The store: moto's S3 server on loopback standing in for the S3 endpoint of
    mlflow.artifacts.s3EndpointUrl (MLflow's proxy writes through boto3, MLFLOW_S3_ENDPOINT_URL)."""
    pod = helm_test_pod(*NO_AUTH)
    bucket = s3_server.new_bucket()
    container = rendered_mlflow_container(*NO_AUTH)
    args = local_args(container["args"], tmp_path, free_port())
    args = [
        f"--artifacts-destination=s3://{bucket}/mlflow" if a.startswith("--artifacts-destination") else a for a in args
    ]
    base_env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    base_env.pop("AWS_ENDPOINT_URL", None)

    reachable = {**base_env, "MLFLOW_S3_ENDPOINT_URL": s3_server.endpoint_url}
    with chart_mlflow_server(args, reachable, tmp_path) as port:
        proc = run_helm_test(pod, f"http://127.0.0.1:{port}", tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "stored and returned an artifact" in proc.stdout
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert any(k.endswith("helm-test/note.txt") for k in keys), keys

    blocked = tmp_path / "blocked"
    blocked.mkdir()
    # one attempt per upload: the refusal is the same, without botocore's retries and backoff
    unreachable = {**base_env, "MLFLOW_S3_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}", "AWS_MAX_ATTEMPTS": "1"}
    args = [f"--port={free_port()}" if a.startswith("--port=") else a for a in args]
    args = [
        f"--backend-store-uri=sqlite:///{blocked}/mlflow.db" if a.startswith("--backend-store") else a for a in args
    ]
    with chart_mlflow_server(args, unreachable, blocked) as port:
        proc = run_helm_test(pod, f"http://127.0.0.1:{port}", blocked)
    assert proc.returncode != 0, f"helm test passed with the artifact store unreachable:\n{proc.stdout}"
    assert "could not store and return an artifact" in proc.stderr, proc.stderr[-2000:]
