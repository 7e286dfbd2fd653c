"""Generated credentials: the PostgreSQL password reaches MLflow through env and a
Secret, never its command line; `helm template` renders the same manifests every time (nothing
random is rendered: a pre-install/pre-upgrade hook Job creates missing Secrets in the cluster,
once); `postgresql.existingSecret` is used instead when given.

The hook's own script (from the rendered Job) runs here against a stand-in of the Kubernetes
Secrets API (GET one Secret: 404 or the object; POST: 201, or 409 when it exists), the subset the
script calls through the real `kubernetes` client: no API server runs on this machine's test lane."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from tests.support.deploy_tools import CHART, documents, helm_template

VALUE_SETS = [((), "kubeflow"), ((), "team-a"), (("-f", str(CHART / "values-gpu.yaml")), "team-a")]


@pytest.mark.parametrize(("values", "namespace"), VALUE_SETS, ids=["single-user", "profile", "gpu"])
def test_helm_template_renders_the_same_manifests_every_time(values, namespace):
    assert helm_template(*values, namespace=namespace) == helm_template(*values, namespace=namespace)


def workload(objects, kind, role):
    (o,) = [
        o
        for o in objects
        if o["kind"] == kind and o["spec"]["template"]["metadata"]["labels"].get("invfold.dev/role") == role
    ]
    return o["spec"]["template"]["spec"]["containers"][0]


def test_the_database_password_never_reaches_a_command_line():
    objects = documents(helm_template(namespace="team-a"))
    mlflow = workload(objects, "Deployment", "mlflow")
    assert not any("PASSWORD" in a or "postgresql" in a for a in mlflow.get("args", [])), mlflow["args"]
    env = {e["name"]: e for e in mlflow["env"]}
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "invfold-postgresql", "key": "POSTGRES_PASSWORD"}
    uri = env["MLFLOW_BACKEND_STORE_URI"]["value"]
    assert uri == "postgresql+psycopg2://mlflow@invfold-postgresql:5432/mlflow", uri
    assert not [o for o in objects if o["kind"] == "Secret"], "a rendered Secret would be re-rolled by every render"


def hook_job(*values: str, namespace: str = "team-a") -> dict:
    (job,) = [
        o
        for o in documents(helm_template(*values, namespace=namespace))
        if o["kind"] == "Job" and o["metadata"]["name"].endswith("secret-init")
    ]
    return job


def job_secrets(job: dict) -> list[dict]:
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    return json.loads(env["SECRETS"])


def test_an_existing_postgresql_secret_is_used_as_given():
    objects = documents(helm_template("--set", "postgresql.existingSecret=team-db", namespace="team-a"))
    for kind, role in (("Deployment", "mlflow"), ("StatefulSet", "mlflow-db")):
        env = {e["name"]: e for e in workload(objects, kind, role)["env"]}
        key = "PGPASSWORD" if role == "mlflow" else "POSTGRES_PASSWORD"
        assert env[key]["valueFrom"]["secretKeyRef"] == {"name": "team-db", "key": "POSTGRES_PASSWORD"}
    names = [s["name"] for s in job_secrets(hook_job("--set", "postgresql.existingSecret=team-db"))]
    assert "invfold-postgresql" not in names and "team-db" not in names
    annotations = hook_job()["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"


class SecretsApi(BaseHTTPRequestHandler):
    store: dict[tuple[str, str], dict] = {}

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        parts = self.path.split("?")[0].strip("/").split("/")  # api v1 namespaces NS secrets NAME
        found = self.store.get((parts[3], parts[5]))
        if found is None:
            self._send(
                404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
            )
        else:
            self._send(200, found)

    def do_POST(self):
        ns = self.path.strip("/").split("/")[3]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = (ns, body["metadata"]["name"])
        if key in self.store:
            self._send(
                409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409}
            )
            return
        data = {k: base64.b64encode(v.encode()).decode() for k, v in (body.pop("stringData", None) or {}).items()}
        body["data"] = {**body.get("data", {}), **data}
        self.store[key] = body
        self._send(201, body)


@pytest.fixture
def secrets_api(tmp_path):
    SecretsApi.store = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), SecretsApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
                "users": [{"name": "u", "user": {"token": "test"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    yield SecretsApi.store, kubeconfig
    server.shutdown()


def run_hook(job: dict, kubeconfig) -> subprocess.CompletedProcess:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.update(PATH=os.environ["PATH"], KUBECONFIG=str(kubeconfig), HOME=str(kubeconfig.parent))
    command = [sys.executable if c == "python" else c for c in container["command"]]
    return subprocess.run([*command, *container["args"]], env=env, capture_output=True, text=True, timeout=120)


def test_the_hook_creates_each_missing_secret_once_and_keeps_existing_ones(secrets_api):
    store, kubeconfig = secrets_api
    mine = {
        "metadata": {"name": "invfold-mlflow-auth"},
        "data": {"MLFLOW_TRACKING_USERNAME": "bWU=", "MLFLOW_TRACKING_PASSWORD": "eA=="},
    }
    store[("team-a", "invfold-mlflow-auth")] = mine  # made by the team before the install
    job = hook_job()
    first = run_hook(job, kubeconfig)
    assert first.returncode == 0, first.stderr[-2000:]
    made = {name: obj["data"] for (ns, name), obj in store.items() if ns == "team-a"}
    assert set(made) == {"invfold-postgresql", "invfold-mlflow-server", "invfold-mlflow-admin", "invfold-mlflow-auth"}
    password = base64.b64decode(made["invfold-postgresql"]["POSTGRES_PASSWORD"]).decode()
    assert len(password) >= 32 and password not in first.stdout + first.stderr
    assert store[("team-a", "invfold-mlflow-auth")] is mine, "a Secret the team made is used as it is"
    again = run_hook(job, kubeconfig)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {name: obj["data"] for (ns, name), obj in store.items() if ns == "team-a"} == made, "re-rolled on upgrade"
