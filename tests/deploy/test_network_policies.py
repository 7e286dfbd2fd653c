"""The reachability table of tests/support/network_table.py evaluated against the rendered
NetworkPolicies (chart and every overlay) by tests/support/network_policy.py.

The real cluster now checks, with real connections between pods and kube-router enforcing the
policies (tests/cluster/test_network_policies.py), every row of the table but the "no internet"
ones for the chart's single-user values (the NodeLocal DNSCache rule at the address the test
cluster's DNS answers on). The evaluator stays for what that cluster cannot show: the other
renderings (GPU values, every kustomize overlay), the internet rows (pods there leave the machine
unmasqueraded, so what answers is the test machine's own network, not a policy), istiod (no Istio
there), and its own refusal."""

from __future__ import annotations

import pytest

from tests.support.deploy_tools import documents
from tests.support.network_policy import Pod, allowed
from tests.support.network_table import DENIED, METADATA_GRPC, NEEDED

RENDERINGS = ("chart-default", "chart-gpu", "k8s-cpu-dev", "k8s-gpu-prod", "k8s-tenant", "k8s-single-user")


def policies(text: str) -> list[dict]:
    return [o for o in documents(text) if o["kind"] == "NetworkPolicy"]


def namespace_of(pols: list[dict]) -> str:
    (ns,) = {p["metadata"]["namespace"] for p in pols}
    return ns


def invfold(ns: str, role: str) -> Pod:
    return Pod(
        ns, {"app.kubernetes.io/part-of": "invfold", "app.kubernetes.io/instance": "invfold", "invfold.dev/role": role}
    )


def resolve(dest, ns: str):
    return invfold(ns, dest) if isinstance(dest, str) else dest


@pytest.mark.parametrize("name", RENDERINGS)
@pytest.mark.parametrize(
    ("role", "dest", "port", "proto", "why"), NEEDED, ids=[f"{r}-{w}-{p}-{pr}" for r, _, p, pr, w in NEEDED]
)
def test_a_run_reaches_what_it_needs(rendered, name, role, dest, port, proto, why):
    pols = policies(rendered[name])
    ns = namespace_of(pols)
    assert allowed(pols, invfold(ns, role), resolve(dest, ns), port, proto), f"{name}: {role} -> {why} ({port}/{proto})"


@pytest.mark.parametrize("name", RENDERINGS)
@pytest.mark.parametrize(("role", "dest", "port", "why"), DENIED, ids=[f"{r}-{p}-{w}" for r, _, p, w in DENIED])
def test_nothing_else_is_open(rendered, name, role, dest, port, why):
    pols = policies(rendered[name])
    ns = namespace_of(pols)
    assert not allowed(pols, invfold(ns, role), resolve(dest, ns), port), f"{name}: {why}"


@pytest.mark.parametrize("name", RENDERINGS)
def test_sidecars_reach_istiod(rendered, name):
    """MLflow and PostgreSQL run with Istio sidecars in profile namespaces: xDS/CA on istiod:15012."""
    pols = policies(rendered[name])
    ns = namespace_of(pols)
    istiod = Pod("istio-system", {"app": "istiod", "istio": "pilot"})
    for role in ("mlflow", "mlflow-db"):
        assert allowed(pols, invfold(ns, role), istiod, 15012), f"{name}: {role} -> istiod"


@pytest.mark.parametrize("name", RENDERINGS)
def test_default_deny_covers_every_invfold_pod(rendered, name):
    deny = {p["metadata"]["name"]: p["spec"] for p in policies(rendered[name])}["invfold-default-deny"]
    assert deny["podSelector"] == {"matchLabels": {"app.kubernetes.io/part-of": "invfold"}}
    assert set(deny["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny and "egress" not in deny


def test_the_evaluator_can_refuse():
    """The evaluator itself: the old selector (`app: metadata-grpc-server`) does not admit upstream's pod."""
    old = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kubeflow"}},
                            "podSelector": {
                                "matchExpressions": [
                                    {"key": "app", "operator": "In", "values": ["metadata-grpc-server"]}
                                ]
                            },
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": 8080}],
                }
            ],
        },
    }
    step = Pod("ns", {"invfold.dev/role": "step"})
    assert not allowed([old], step, METADATA_GRPC, 8080)
    assert allowed([old], step, Pod("kubeflow", {"app": "metadata-grpc-server"}), 8080)
    assert not allowed([old], step, Pod("kubeflow", {"app": "metadata-grpc-server"}), 8081)


def test_a_whole_internet_api_rule_is_refused():
    from tests.support.deploy_tools import CHART, run, tool

    proc = run(
        [tool("helm"), "template", "x", str(CHART), "--set", "networkPolicies.kubeApiCidrs[0]=0.0.0.0/0"], check=False
    )
    assert proc.returncode != 0 and "kubeApiCidrs" in proc.stderr
