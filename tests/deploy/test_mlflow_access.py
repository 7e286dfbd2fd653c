"""Who may reach MLflow: the NetworkPolicy admits the install's own namespace, KFP's
and the namespaces the values name (evaluated by tests/support/network_policy.py); every install
runs basic-auth by default with a generated admin account, and an Ingress without auth is refused;
the real MLflow server started with the chart's generated auth settings answers 401 without
credentials and 200 with the generated ones."""

from __future__ import annotations

import os

import pytest

from tests.support.chart_mlflow import SERVICE_HOST, TRACKED, chart_mlflow_server, local_args, request
from tests.support.deploy_tools import CHART, documents, helm_template, run, tool
from tests.support.mlflow_server import free_port
from tests.support.network_policy import Pod, allowed

NS = "team-a"


def mlflow_pod(ns: str) -> Pod:
    return Pod(ns, {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "mlflow"})


def client(ns: str, labels: dict | None = None) -> Pod:
    return Pod(ns, labels or {"app": "notebook"})


@pytest.mark.parametrize("name", ["chart", "k8s-gpu-prod"])
def test_only_own_kfp_and_named_namespaces_reach_mlflow(rendered, name):
    text = (
        helm_template("--set", "mlflow.allowedNamespaces={team-notebooks}", namespace=NS)
        if name == "chart"
        else rendered[name]
    )
    pols = [o for o in documents(text) if o["kind"] == "NetworkPolicy"]
    (ns,) = {p["metadata"]["namespace"] for p in pols}
    target = mlflow_pod(ns)
    assert allowed(pols, client(ns), target, 5000), "own namespace"
    assert allowed(pols, client("kubeflow", {"app": "ml-pipeline"}), target, 5000), "KFP's namespace"
    assert not allowed(pols, client("other-team"), target, 5000), "any other namespace"
    if name == "chart":
        assert allowed(pols, client("team-notebooks"), target, 5000), "a named namespace"
        assert not allowed(pols, client("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"}), target, 5000)


def test_the_ingress_controller_is_admitted_with_the_ingress():
    text = helm_template("--set", "mlflow.ingress.enabled=true", namespace=NS)
    pols = [o for o in documents(text) if o["kind"] == "NetworkPolicy"]
    assert allowed(pols, client("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"}), mlflow_pod(NS), 5000)


def mlflow_args(*values: str, namespace: str = NS) -> list[str]:
    (deploy,) = [o for o in documents(helm_template(*values, namespace=namespace)) if o["kind"] == "Deployment"]
    return deploy["spec"]["template"]["spec"]["containers"][0]["args"]


def test_basic_auth_is_the_default_of_every_install():
    assert "--app-name=basic-auth" in mlflow_args()
    assert "--app-name=basic-auth" in mlflow_args(namespace="kubeflow")  # single-user: KFP's namespace too
    assert "--app-name=basic-auth" not in mlflow_args("--set", "mlflow.auth.enabled=false")


def test_an_ingress_without_auth_is_refused():
    proc = run(
        [tool("helm"), "template", "x", str(CHART), "-n", NS]
        + ["--set", "mlflow.ingress.enabled=true", "--set", "mlflow.auth.enabled=false"],
        check=False,
    )
    assert proc.returncode != 0 and "mlflow.ingress.enabled needs mlflow.auth.enabled" in proc.stderr


def test_the_generated_auth_settings_run_on_the_real_server(tmp_path):
    """MLflow with the chart's own basic_auth.ini (ConfigMap; its database_uri swapped for SQLite)
    and the admin account taken from the generated client Secret's keys (values as the hook would
    write them): 401 anonymous and with a wrong password, 200 with the steps' account."""
    import yaml

    objects = documents(helm_template(namespace=NS))
    (config,) = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("mlflow-auth-config")
    ]
    ini = config["data"]["basic_auth.ini"]
    assert "password" not in ini.lower() and "database_uri = postgresql+psycopg2://" in ini
    (deploy,) = [o for o in objects if o["kind"] == "Deployment"]
    env = {e["name"]: e for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    admin_ref = env["MLFLOW_AUTH_ADMIN_PASSWORD"]["valueFrom"]["secretKeyRef"]
    (job,) = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("secret-init")]
    specs = yaml.safe_load(
        {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}["SECRETS"]
    )
    (client_spec,) = [s for s in specs if s["name"] == admin_ref["name"]]
    assert admin_ref["key"] in client_spec["random"]
    user = client_spec["fixed"]["MLFLOW_TRACKING_USERNAME"]
    password = "generated-like-the-hook-" + os.urandom(8).hex()
    local_ini = tmp_path / "basic_auth.ini"
    local_ini.write_text(
        "\n".join(
            f"database_uri = sqlite:///{tmp_path}/auth.db" if line.startswith("database_uri") else line
            for line in ini.splitlines()
        )
    )
    server_env = {
        **os.environ,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_AUTH_CONFIG_PATH": str(local_ini),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": os.urandom(16).hex(),
        "MLFLOW_AUTH_ADMIN_USERNAME": user,
        "MLFLOW_AUTH_ADMIN_PASSWORD": password,
    }
    args = local_args(deploy["spec"]["template"]["spec"]["containers"][0]["args"], tmp_path, free_port())
    with chart_mlflow_server(args, server_env, tmp_path) as port:
        assert request(port, SERVICE_HOST, TRACKED) == 401
        assert request(port, SERVICE_HOST, TRACKED, (user, "wrong")) == 401
        assert request(port, SERVICE_HOST, TRACKED, (user, password)) == 200
