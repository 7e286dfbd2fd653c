"""Least privilege by default, each on the rendering (and MLflow's accounts on the real server):

- no Role the install leaves behind may create Secrets: the secret-init account, Role and binding
  are hooks deleted once the install's hooks succeeded (helm pkg/action/hooks.go `execHook`: after
  the event's last hook, every hook with `hook-succeeded` is deleted). The API cannot narrow
  `create` by resourceNames (Kubernetes RBAC docs: "you cannot restrict create ... by resource name").
- MLflow runs basic-auth in every namespace, KFP's own included;
- step pods reach the Kubernetes API at its endpoint addresses only (Endpoints `kubernetes`, looked
  up at install), not at every private range;
- the steps' MLflow account is not MLflow's admin: only the MLflow server holds the admin's password
  (mlflow/mlflow mlflow/server/auth/__init__.py: users/create, permissions are admin-only; the creator
  of an experiment or registered model gets MANAGE on it).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import yaml

from tests.support.chart_mlflow import chart_mlflow_server, local_args
from tests.support.deploy_tools import CHART, documents, helm_template, pod_specs, run, tool
from tests.support.mlflow_server import free_port

NS = "team-a"
RENDERINGS = {
    "profile": ((), NS),
    "single-user": ((), "kubeflow"),
    "gpu": (("-f", str(CHART / "values-gpu.yaml")), NS),
}


def hook_policy(obj: dict) -> tuple[set[str], set[str]]:
    notes = obj["metadata"].get("annotations") or {}
    events = {e for e in notes.get("helm.sh/hook", "").split(",") if e}
    return events, {p for p in notes.get("helm.sh/hook-delete-policy", "").split(",") if p}


@pytest.mark.parametrize("name", RENDERINGS)
def test_no_role_that_outlives_the_install_creates_secrets(name):
    values, namespace = RENDERINGS[name]
    objects = documents(helm_template(*values, namespace=namespace))
    creators = [
        o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
        and any("secrets" in r.get("resources", []) and "create" in r.get("verbs", []) for r in o.get("rules", []))
    ]
    assert creators, "the secret-init hook's Role (generated credentials)"
    for role in creators:
        events, deletes = hook_policy(role)
        assert events and "hook-succeeded" in deletes, f"{role['metadata']['name']}: {events} {deletes}"
        same = [o for o in objects if o["metadata"]["name"] == role["metadata"]["name"] and o is not role]
        assert {o["kind"] for o in same} >= {"ServiceAccount", "RoleBinding", "Job"}
        for obj in same:
            assert "hook-succeeded" in hook_policy(obj)[1], f"{obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.parametrize("name", RENDERINGS)
def test_mlflow_auth_is_on_by_default_in_every_namespace(name):
    values, namespace = RENDERINGS[name]
    (deploy,) = [o for o in documents(helm_template(*values, namespace=namespace)) if o["kind"] == "Deployment"]
    assert "--app-name=basic-auth" in deploy["spec"]["template"]["spec"]["containers"][0]["args"]


# --- the API server's addresses -----------------------------------------------------------------


def endpoints(*ips: str) -> dict:
    """Endpoints `kubernetes` as the API returns it (one subset, port 6443)."""
    return {"subsets": [{"addresses": [{"ip": ip} for ip in ips], "ports": [{"name": "https", "port": 6443}]}]}


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """The chart's own helper rendered by real helm with the Endpoints handed in as values
    (`helm template` cannot answer the chart's lookup)."""
    root = tmp_path_factory.mktemp("kube-api")
    (root / "templates").mkdir()
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: harness\nversion: 0.0.1\n")
    shutil.copy(CHART / "templates" / "_helpers.tpl", root / "templates" / "_helpers.tpl")
    (root / "templates" / "out.yaml").write_text(
        'cidrs: {{ include "invfold.kubeApiCidrs" (list . .Values.endpoints) }}\n'
    )
    return root


def cidrs(harness, given: list[str], found: dict) -> subprocess.CompletedProcess | list[str]:
    values = harness / "values.yaml"
    values.write_text(yaml.safe_dump({"endpoints": found, "networkPolicies": {"kubeApiCidrs": given}}))
    proc = run([tool("helm"), "template", "h", str(harness), "-f", str(values)], check=False)
    if proc.returncode:
        return proc
    return yaml.safe_load(proc.stdout)["cidrs"]


def test_the_install_admits_the_api_servers_endpoints_alone(harness):
    assert cidrs(harness, [], endpoints("172.18.0.2")) == ["172.18.0.2/32"]
    assert cidrs(harness, [], endpoints("10.1.0.5", "10.1.0.6")) == ["10.1.0.5/32", "10.1.0.6/32"]
    assert cidrs(harness, [], endpoints("fd00::5")) == ["fd00::5/128"]


def test_given_cidrs_must_hold_every_endpoint(harness):
    assert cidrs(harness, ["172.18.0.0/16"], endpoints("172.18.0.2")) == ["172.18.0.0/16"]
    assert cidrs(harness, ["172.18.0.2/32", "34.1.2.3/32"], endpoints("34.1.2.3")) == ["172.18.0.2/32", "34.1.2.3/32"]
    # The Service IP (what `kubectl get svc kubernetes` shows) is not where the packets go after DNAT.
    proc = cidrs(harness, ["10.96.0.1/32"], endpoints("172.18.0.2"))
    assert isinstance(proc, subprocess.CompletedProcess) and proc.returncode != 0
    assert "kubeApiCidrs" in proc.stderr and "172.18.0.2" in proc.stderr and "DNAT" in proc.stderr


def test_without_a_cluster_to_ask_the_values_or_the_private_ranges_are_rendered(harness):
    assert cidrs(harness, ["172.18.0.2/32"], {}) == ["172.18.0.2/32"]
    assert cidrs(harness, [], {}) == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]


def test_the_chart_asks_for_the_endpoints_in_its_api_policy():
    text = (CHART / "templates" / "network-policies.yaml").read_text()
    assert 'lookup "v1" "Endpoints" "default" "kubernetes"' in text and "invfold.kubeApiCidrs" in text
    (policy,) = [o for o in documents(helm_template(namespace=NS)) if o["metadata"]["name"] == "invfold-allow-kube-api"]
    blocks = [peer["ipBlock"]["cidr"] for rule in policy["spec"]["egress"] for peer in rule["to"]]
    assert blocks == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]  # helm template: nothing to ask


# --- MLflow's accounts ---------------------------------------------------------------------------


def secret_refs(pod_spec: dict) -> set[str]:
    containers = pod_spec.get("initContainers", []) + pod_spec["containers"]
    return {
        e["valueFrom"]["secretKeyRef"]["name"]
        for c in containers
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def test_only_the_mlflow_server_holds_the_admin_password():
    objects = documents(helm_template(namespace=NS))
    (job,) = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("secret-init")]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    specs = {s["name"]: s for s in json.loads(env["SECRETS"])}
    admin = specs["invfold-mlflow-admin"]
    client = specs["invfold-mlflow-auth"]  # mlflow.auth.clientSecret: the steps' and helm test's
    assert admin["fixed"]["MLFLOW_TRACKING_USERNAME"] == "admin"
    assert client["fixed"]["MLFLOW_TRACKING_USERNAME"] not in ("", "admin")
    holders = {
        f"{obj['kind']}/{obj['metadata']['name']}"
        for obj in objects
        for _, spec in pod_specs(obj, "")
        if "invfold-mlflow-admin" in secret_refs(spec)
    }
    assert holders == {"Deployment/invfold-mlflow"}


def call(port: int, path: str, auth: tuple[str, str], body: dict | None = None) -> tuple[int, dict]:
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, {}


@pytest.mark.slow  # a real MLflow server with its auth app
def test_the_steps_account_works_without_admin_rights_on_the_real_server(tmp_path):
    """The MLflow Deployment as rendered: its init container's script makes the steps' account in
    MLflow's user store (SQLite here instead of PostgreSQL), the server starts with the admin from its
    own Secret; the steps' account then records runs and registers models, and is refused what only
    the admin may do."""
    objects = documents(helm_template(namespace=NS))
    (deploy,) = [o for o in objects if o["kind"] == "Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (config,) = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("mlflow-auth-config")
    ]
    ini = tmp_path / "basic_auth.ini"
    ini.write_text(
        "\n".join(
            f"database_uri = sqlite:///{tmp_path}/auth.db" if line.startswith("database_uri") else line
            for line in config["data"]["basic_auth.ini"].splitlines()
        )
    )
    admin = ("admin", "admin-" + os.urandom(12).hex())
    steps = ("invfold-steps", "steps-" + os.urandom(12).hex())
    secrets = {  # what the secret-init hook would have written
        "invfold-mlflow-server": {"MLFLOW_FLASK_SERVER_SECRET_KEY": os.urandom(16).hex()},
        "invfold-mlflow-admin": {"MLFLOW_TRACKING_USERNAME": admin[0], "MLFLOW_TRACKING_PASSWORD": admin[1]},
        "invfold-mlflow-auth": {"MLFLOW_TRACKING_USERNAME": steps[0], "MLFLOW_TRACKING_PASSWORD": steps[1]},
    }

    def container_env(container: dict) -> dict:
        env = {**os.environ, "HOME": str(tmp_path), "MLFLOW_AUTH_CONFIG_PATH": str(ini)}
        for e in container["env"]:
            if "value" in e and e["name"] != "MLFLOW_AUTH_CONFIG_PATH":
                env[e["name"]] = e["value"]
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref and ref["name"] in secrets:
                env[e["name"]] = secrets[ref["name"]][ref["key"]]
        return env

    def run_init() -> subprocess.CompletedProcess:
        command = [sys.executable if c == "python3" else c for c in init["command"]]
        return subprocess.run(
            [*command, *init["args"]], env=container_env(init), capture_output=True, text=True, timeout=300
        )

    first = run_init()
    assert first.returncode == 0, first.stderr[-3000:]
    assert "created (not an admin)" in first.stdout
    again = run_init()  # a restart or a second replica: kept, password set again
    assert again.returncode == 0 and "kept (not an admin)" in again.stdout, again.stderr[-3000:]

    (server,) = pod["containers"]
    server_env = container_env(server) | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server_env.pop("MLFLOW_BACKEND_STORE_URI", None)
    args = local_args(server["args"], tmp_path, free_port())
    with chart_mlflow_server(args, server_env, tmp_path) as port:
        status, body = call(port, "/api/2.0/mlflow/experiments/create", steps, {"name": "invfold"})
        assert status == 200, status
        status, _ = call(port, "/api/2.0/mlflow/runs/create", steps, {"experiment_id": body["experiment_id"]})
        assert status == 200
        status, _ = call(port, "/api/2.0/mlflow/registered-models/create", steps, {"name": "invfold-model"})
        assert status == 200
        # admin-only: users and their rights
        assert call(port, "/api/2.0/mlflow/users/create", steps, {"username": "x", "password": "y" * 16})[0] == 403
        status, user = call(port, f"/api/2.0/mlflow/users/get?username={steps[0]}", admin)
        assert status == 200 and user["user"]["is_admin"] is False


def test_a_client_secret_naming_the_admin_stops_the_server_from_starting(tmp_path):
    (deploy,) = [o for o in documents(helm_template(namespace=NS)) if o["kind"] == "Deployment"]
    (init,) = deploy["spec"]["template"]["spec"]["initContainers"]
    env = {**os.environ, "HOME": str(tmp_path), "MLFLOW_AUTH_ADMIN_USERNAME": "admin", "CLIENT_SECRET": "x"}
    env |= {"STEPS_USERNAME": "admin", "STEPS_PASSWORD": "p" * 20, "MLFLOW_AUTH_CONFIG_PATH": str(tmp_path / "no")}
    command = [sys.executable if c == "python3" else c for c in init["command"]]
    proc = subprocess.run([*command, *init["args"]], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "names MLflow's admin" in proc.stderr
