"""Each network rule a run needs exists in the rendered policies (chart and every overlay), and
invfold pods are denied everything else by default. The list mirrors docs/deploy.md."""

from __future__ import annotations

import pytest

from tests.deploy.tools import documents

RENDERINGS = ("chart-default", "chart-gpu", "k8s-cpu-dev", "k8s-gpu-prod", "k8s-tenant")


def policies(text: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o["spec"] for o in documents(text) if o["kind"] == "NetworkPolicy"}


def ports(rule: dict) -> set[tuple[str, int, int | None]]:
    return {(p.get("protocol", "TCP"), p["port"], p.get("endPort")) for p in rule.get("ports", [])}


def selects(spec: dict, **labels: str) -> bool:
    """Whether the policy's pod selector matches a pod with these labels."""
    selector = spec["podSelector"]
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        if expr["operator"] == "In" and labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def egress_rules(pols: dict[str, dict], **pod: str) -> list[dict]:
    return [
        rule
        for spec in pols.values()
        if selects(spec, **pod) and "Egress" in spec["policyTypes"]
        for rule in spec.get("egress", [])
    ]


def ingress_rules(pols: dict[str, dict], **pod: str) -> list[dict]:
    return [
        rule
        for spec in pols.values()
        if selects(spec, **pod) and "Ingress" in spec["policyTypes"]
        for rule in spec.get("ingress", [])
    ]


STEP = {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "step"}
LAUNCHER = {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "launcher"}
TRAINER = {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "trainer"}
# (who, the pod's labels, what it needs, a predicate over one of its egress rules)
EGRESS_NEEDS = [
    (pod_name, pod, need, check)
    for pod_name, pod in (("step", STEP), ("launcher", LAUNCHER), ("trainer", TRAINER))
    for need, check in (
        (
            "dns",
            lambda r: (
                ("UDP", 53, None) in ports(r)
                and ("TCP", 53, None) in ports(r)
                and r["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
            ),
        ),
        (
            "mlflow",
            lambda r: (
                ("TCP", 5000, None) in ports(r)
                and r["to"][0].get("podSelector", {}).get("matchLabels") == {"invfold.dev/role": "mlflow"}
            ),
        ),
        ("artifact store", lambda r: ("TCP", 9000, None) in ports(r) or ("TCP", 8333, None) in ports(r)),
    )
]


@pytest.mark.parametrize("name", RENDERINGS)
def test_default_deny_covers_every_invfold_pod(rendered, name):
    pols = policies(rendered[name])
    deny = pols["invfold-default-deny"]
    assert deny["podSelector"] == {"matchLabels": {"app.kubernetes.io/part-of": "invfold"}}
    assert set(deny["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny and "egress" not in deny


@pytest.mark.parametrize("name", RENDERINGS)
@pytest.mark.parametrize(("who", "pod", "need", "check"), EGRESS_NEEDS, ids=[f"{w}-{n}" for w, _, n, _ in EGRESS_NEEDS])
def test_egress_rule_exists(rendered, name, who, pod, need, check):
    rules = egress_rules(policies(rendered[name]), **pod)
    assert any(check(rule) for rule in rules), f"{name}: no egress rule lets a {who} pod reach {need}"


@pytest.mark.parametrize("name", RENDERINGS)
def test_pods_of_a_job_reach_each_other(rendered, name):
    pols = policies(rendered[name])
    for direction, rules in (("ingress", ingress_rules(pols, **TRAINER)), ("egress", egress_rules(pols, **TRAINER))):
        peer_key = "from" if direction == "ingress" else "to"
        peers = [
            r
            for r in rules
            if any(p.get("podSelector", {}).get("matchLabels") == {"invfold.dev/role": "trainer"} for p in r[peer_key])
        ]
        allowed = set().union(*(ports(r) for r in peers)) if peers else set()
        for port, what in ((29500, "torchrun rendezvous"), (2222, "sshd for mpirun")):
            assert ("TCP", port, None) in allowed, f"{name}: {direction} {what} ({port}) between trainer pods"
        assert ("TCP", 1024, 65535) in allowed, f"{name}: {direction} NCCL/Gloo ports between trainer pods"


@pytest.mark.parametrize("name", RENDERINGS)
def test_only_the_launcher_reaches_the_kubernetes_api(rendered, name):
    pols = policies(rendered[name])
    api = lambda r: ("TCP", 443, None) in ports(r) and any("ipBlock" in p for p in r["to"])  # noqa: E731
    assert any(api(r) for r in egress_rules(pols, **LAUNCHER)), f"{name}: the train step cannot reach the API server"
    for other in (STEP, TRAINER):
        assert not any(api(r) for r in egress_rules(pols, **other)), f"{name}: {other} may reach the API server"


@pytest.mark.parametrize("name", RENDERINGS)
def test_steps_reach_the_pipeline_api(rendered, name):
    rules = egress_rules(policies(rendered[name]), **STEP)
    assert any(("TCP", 8887, None) in ports(r) and ("TCP", 8080, None) in ports(r) for r in rules)


def test_chart_lets_mlflow_reach_its_database(rendered):
    pols = policies(rendered["chart-default"])
    mlflow = {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "mlflow"}
    assert any(("TCP", 5000, None) in ports(r) for r in ingress_rules(pols, **mlflow))
    assert any(("TCP", 5432, None) in ports(r) for r in egress_rules(pols, **mlflow))
    db = {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "mlflow-db"}
    assert any(("TCP", 5432, None) in ports(r) for r in ingress_rules(pols, **db))
