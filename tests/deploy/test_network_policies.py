"""What a run needs on the network, evaluated against the rendered NetworkPolicies (chart and every
overlay) by tests/support/network_policy.py, and what it must not get.

Upstream facts the table encodes (kubeflow/pipelines, manifests/kustomize):
- ML Metadata's pods are labelled `component: metadata-grpc-server` (no `app` label), gRPC on 8080:
  base/metadata/base/metadata-grpc-deployment.yaml.
- the pipeline API server is `app: ml-pipeline` on 8887 (gRPC) / 8888 (HTTP):
  base/pipeline/ml-pipeline-apiserver-deployment.yaml.
- the artifact store is `app: seaweedfs` (8333) in 2.15+ or `app: minio` (9000):
  third-party/seaweedfs/base/seaweedfs/seaweedfs-deployment.yaml, third-party/minio/base.
- every step pod runs KFP's launcher (reads its own pod and the artifact-store Secret through the
  Kubernetes API) and Argo's wait container (writes WorkflowTaskResults through the API):
  backend/src/v2/component/launcher_v2.go, third-party/argo executor RBAC.
NodeLocal DNSCache listens on 169.254.20.10 (kubernetes/kubernetes
cluster/addons/dns/nodelocaldns/nodelocaldns.yaml)."""

from __future__ import annotations

import pytest

from tests.support.deploy_tools import documents
from tests.support.network_policy import Address, Pod, allowed

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


ML_PIPELINE = Pod("kubeflow", {"app": "ml-pipeline", "app.kubernetes.io/name": "kubeflow-pipelines"})
METADATA_GRPC = Pod("kubeflow", {"component": "metadata-grpc-server"})
SEAWEEDFS = Pod("kubeflow", {"app": "seaweedfs"})
MINIO = Pod("kubeflow", {"app": "minio"})
KUBE_DNS = Pod("kube-system", {"k8s-app": "kube-dns"})
NODE_LOCAL_DNS = Address("169.254.20.10")
API_SERVER = Address("10.0.0.1")  # an endpoint of `kubernetes` in a private range
INTERNET = Address("1.1.1.1")

# (source role, destination, port, protocol, why)
NEEDED = (
    [
        (role, dest, port, proto, why)
        for role in ("step", "launcher", "trainer")
        for dest, port, proto, why in (
            (KUBE_DNS, 53, "UDP", "DNS"),
            (KUBE_DNS, 53, "TCP", "DNS over TCP"),
            (NODE_LOCAL_DNS, 53, "UDP", "NodeLocal DNSCache"),
            ("mlflow", 5000, "TCP", "tracking"),
            (SEAWEEDFS, 8333, "TCP", "artifact store (SeaweedFS)"),
            (MINIO, 9000, "TCP", "artifact store (MinIO)"),
        )
    ]
    + [
        (role, dest, port, "TCP", why)
        for role in ("step", "launcher")
        for dest, port, why in (
            (ML_PIPELINE, 8887, "KFP API (gRPC)"),
            (ML_PIPELINE, 8888, "KFP API (HTTP)"),
            (METADATA_GRPC, 8080, "ML Metadata"),
            (API_SERVER, 443, "Kubernetes API (launcher, wait container)"),
            (API_SERVER, 6443, "Kubernetes API on its endpoint port"),
        )
    ]
    + [
        ("trainer", "trainer", 29500, "TCP", "torchrun rendezvous"),
        ("trainer", "trainer", 2222, "TCP", "sshd for mpirun"),
        ("trainer", "trainer", 41000, "TCP", "NCCL / Gloo / OpenMPI ephemeral ports"),
        ("mlflow", "mlflow-db", 5432, "TCP", "MLflow's database"),
        ("mlflow", SEAWEEDFS, 8333, "TCP", "MLflow's artifact proxy"),
    ]
)

DENIED = [
    ("trainer", API_SERVER, 443, "trainer pods have no business with the API"),
    ("step", INTERNET, 443, "no internet"),
    ("launcher", INTERNET, 443, "no internet"),
    ("trainer", INTERNET, 443, "no internet"),
    ("step", "trainer", 29500, "steps do not join a job's rendezvous"),
    ("trainer", ML_PIPELINE, 8888, "trainers do not call KFP"),
]


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
