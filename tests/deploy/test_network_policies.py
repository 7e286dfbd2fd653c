"""The rows of the reachability table (tests/support/network_table.py) that no real cluster here
can show, evaluated against the rendered NetworkPolicies (chart and every overlay) by
tests/support/network_policy.py.

Every other row is checked with real connections between pods, kube-router enforcing the policies,
for the installed chart and for every other rendering (the GPU values, each overlay):
tests/cluster/test_network_policies.py. What stays here: the "no internet" rows (pods of the test
cluster leave the machine unmasqueraded, so what answers there is the test machine's own network,
not a policy), NodeLocal DNSCache at 169.254.20.10 (nothing listens there; the lane's install names
the address the cluster's DNS answers on instead), istiod (no Istio there), the shape of the
default deny, and the evaluator's own refusal."""

from __future__ import annotations

import pytest

from tests.support.deploy_tools import RENDERINGS, documents
from tests.support.network_policy import Pod, allowed
from tests.support.network_table import DENIED, INTERNET, METADATA_GRPC, NEEDED, NODE_LOCAL_DNS

# The rows the real cluster cannot show (see above).
UNSHOWN_NEEDED = [row for row in NEEDED if row[1] == NODE_LOCAL_DNS]
UNSHOWN_DENIED = [row for row in DENIED if row[1] == INTERNET]


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
    ("role", "dest", "port", "proto", "why"),
    UNSHOWN_NEEDED,
    ids=[f"{r}-{w}-{p}-{pr}" for r, _, p, pr, w in UNSHOWN_NEEDED],
)
def test_a_run_reaches_what_it_needs(rendered, name, role, dest, port, proto, why):
    pols = policies(rendered[name])
    ns = namespace_of(pols)
    assert allowed(pols, invfold(ns, role), resolve(dest, ns), port, proto), f"{name}: {role} -> {why} ({port}/{proto})"


@pytest.mark.parametrize("name", RENDERINGS)
@pytest.mark.parametrize(
    ("role", "dest", "port", "why"), UNSHOWN_DENIED, ids=[f"{r}-{p}-{w}" for r, _, p, w in UNSHOWN_DENIED]
)
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
