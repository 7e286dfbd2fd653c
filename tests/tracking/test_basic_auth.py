"""The tracker against a real MLflow with basic-auth (the chart's default), signed in as the steps'
account: not an admin, READ by default, MANAGE on what it creates (as the chart's init container
makes it). MLflow 3.17 answers 403, not 404, for the alias of a model that does not exist
(mlflow/server/auth: the permission check looks the model up first), so a first training run's
compare read "Permission denied" and failed; a model the account truly may not read still fails."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
import uuid

import pytest

from invfold.components.tracking import RunContext, Tracker, TrackingError
from tests.support.mlflow_server import MlflowServer, free_port

ADMIN = ("admin", "admin-" + uuid.uuid4().hex)
STEPS = ("invfold-steps", "steps-" + uuid.uuid4().hex)


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("mlflow-basic-auth")
    ini = root / "basic_auth.ini"
    ini.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{root}/auth.db\nadmin_username = {ADMIN[0]}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    port = free_port()
    args = ["--backend-store-uri", f"sqlite:///{root}/mlflow.db", "--artifacts-destination", str(root / "artifacts")]
    args += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--app-name", "basic-auth"]
    env = {
        **os.environ,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_AUTH_CONFIG_PATH": str(ini),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": os.urandom(16).hex(),
        "MLFLOW_AUTH_ADMIN_USERNAME": ADMIN[0],
        "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN[1],
    }
    server = MlflowServer(root, port, args, env)
    uri = server.start()
    admin_call(uri, "users/create", {"username": STEPS[0], "password": STEPS[1]})
    yield uri
    server.stop()


def admin_call(uri: str, endpoint: str, body: dict, version: str = "2.0") -> dict:
    token = base64.b64encode(":".join(ADMIN).encode()).decode()
    request = urllib.request.Request(
        f"{uri}/api/{version}/mlflow/{endpoint}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as err:
        raise AssertionError(f"{endpoint}: {err.code} {err.read().decode()[:500]}") from err


@pytest.fixture
def as_steps(monkeypatch):
    """A cluster step (tracking required) signed in as the steps' account."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", STEPS[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", STEPS[1])


def context(uri: str) -> RunContext:
    return RunContext(pipeline_run_id=uuid.uuid4().hex, tracking_uri=uri, experiment="basic-auth")


def test_a_first_run_finds_no_champion_where_mlflow_answers_403(auth_server, as_steps):
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    name = f"never-registered-{uuid.uuid4().hex[:6]}"
    with pytest.raises(MlflowException, match="403"):  # what MLflow answers the alias call
        MlflowClient(auth_server).get_model_version_by_alias(name, "champion")
    with Tracker(context(auth_server), "compare") as tracker:
        assert tracker.champion(name) is None


def test_the_steps_champion_is_found_once_they_registered_it(auth_server, as_steps):
    from mlflow import MlflowClient

    name = f"registered-{uuid.uuid4().hex[:6]}"
    client = MlflowClient(auth_server)
    with Tracker(context(auth_server), "register") as tracker:
        client.create_registered_model(name)  # the steps' own: MANAGE
        version = client.create_model_version(name, "s3://bucket/model", run_id=tracker.run_id)
        client.set_registered_model_alias(name, "champion", version.version)
        assert tracker.champion(name)["version"] == version.version


def test_a_model_the_steps_may_not_read_fails_the_step(auth_server, as_steps):
    name = f"admins-only-{uuid.uuid4().hex[:6]}"
    admin_call(auth_server, "registered-models/create", {"name": name})
    grant = {"username": STEPS[0], "resource_type": "registered_model", "resource_id": name}
    admin_call(auth_server, "users/permissions/grant", {**grant, "permission": "DENY"}, version="3.0")
    with pytest.raises(TrackingError, match="could not record champion"), Tracker(context(auth_server), "compare") as t:
        t.champion(name)
