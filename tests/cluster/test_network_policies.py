"""The chart's NetworkPolicies enforced for real: kube-router's policy controller on the test
cluster (scripts/cluster), real TCP connections and DNS queries between real pods.

Small probe pods (the MLflow image the release already runs, Pod Security `restricted`) carry the
labels of each invfold role in the chart's namespace, or of the components a run talks to (KFP's
API server and ML Metadata, MinIO, kube-dns); the destinations that really exist here are the real
ones: MLflow's and SeaweedFS's Services, the Kubernetes API (its Service and its endpoint), and the
cluster's DNS. Every row of tests/support/network_table.py is probed except those this machine
cannot show: the internet (pods leave the machine unmasqueraded, so what answers is the test
machine's own network, not a policy) and NodeLocal DNSCache's 169.254.20.10 (the cluster's DNS answers on the node's
address, which the install names in networkPolicies.nodeLocalDnsAddresses, as one does for a
node-local cache; that address is probed instead). tests/deploy/test_network_policies.py keeps
the evaluator for those rows and for the renderings this cluster does not install.

kube-router rejects a denied connection (ICMP port unreachable: "refused" at once) rather than
dropping it, so each denied destination is also reached by an allowed row of the same table: the
listener is there, and only the policy keeps the denied source out. On the plain bridge (no
enforcer) every denied row connects."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.cluster import CHART_NAMESPACE as NAMESPACE
from tests.support.cluster import GATEWAY
from tests.support.network_table import (
    API_SERVER,
    DENIED,
    INTERNET,
    KUBE_DNS,
    METADATA_GRPC,
    MINIO,
    ML_PIPELINE,
    NEEDED,
    NODE_LOCAL_DNS,
    SEAWEEDFS,
)

SCRIPT = (Path(__file__).parents[1] / "support" / "netprobe_pod.py").read_text()
OUTSIDER_NAMESPACE = "netpol-outsider"
PROBE_LABEL = "invfold.test/netpol-probe"
# name: (namespace, labels, listening ports). Invfold roles carry the chart's part-of label (what
# its policies select) but not its instance label (what its Services and Deployments select).
PROBES = {
    "step": (NAMESPACE, {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "step"}, []),
    "launcher": (NAMESPACE, {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "launcher"}, []),
    "trainer-0": (
        NAMESPACE,
        {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "trainer"},
        ["29500", "2222", "41000"],
    ),
    "trainer-1": (NAMESPACE, {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "trainer"}, []),
    "mlflow": (NAMESPACE, {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "mlflow"}, []),
    "mlflow-db": (NAMESPACE, {"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "mlflow-db"}, ["5432"]),
    "kfp": (NAMESPACE, {**ML_PIPELINE.labels, **METADATA_GRPC.labels}, ["8887", "8888", "8080"]),
    "minio": (NAMESPACE, MINIO.labels, ["9000"]),
    "kube-dns": ("kube-system", KUBE_DNS.labels, ["53", "53/udp"]),
    "outsider": (OUTSIDER_NAMESPACE, {}, []),
}
SOURCES = {"step": "step", "launcher": "launcher", "trainer": "trainer-1", "mlflow": "mlflow"}


def probe_pod(name: str, image: str) -> dict:
    namespace, labels, ports = PROBES[name]
    sysctls = [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}] if "53" in ports else []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"netpol-{name}", "namespace": namespace, "labels": {**labels, PROBE_LABEL: name}},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 10001,
                "seccompProfile": {"type": "RuntimeDefault"},
                "sysctls": sysctls,
            },
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", SCRIPT, "listen", *ports],
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "32Mi"},
                        "limits": {"cpu": "200m", "memory": "128Mi"},
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def probes(cluster, release, node_images):
    """Every probe pod Running, by name: its pod IP."""
    (image,) = node_images("mlflow")
    cluster.namespace(OUTSIDER_NAMESPACE, {"pod-security.kubernetes.io/enforce": "restricted"})
    for name in PROBES:
        cluster.apply(probe_pod(name, image))

    def addresses() -> dict[str, str] | None:
        found = {}
        for namespace in {ns for ns, _, _ in PROBES.values()}:
            for pod in cluster.get("pods", "-n", namespace, "-l", PROBE_LABEL)["items"]:
                ready = any(c.get("ready") for c in pod["status"].get("containerStatuses", []))
                if ready and pod["status"].get("podIP"):
                    found[pod["metadata"]["labels"][PROBE_LABEL]] = pod["status"]["podIP"]
        return found if set(found) == set(PROBES) else None

    def explain() -> str:
        return cluster.kubectl("get", "pods", "-A", "-l", PROBE_LABEL, "-o", "wide", check=False).stdout

    yield cluster.wait_for("the probe pods running", addresses, 180, explain=explain)
    for name, (namespace, _, _) in PROBES.items():
        cluster.kubectl("delete", "pod", f"netpol-{name}", "-n", namespace, "--wait=false", check=False)
    cluster.delete_namespace(OUTSIDER_NAMESPACE)


def service_ip(cluster, name: str, namespace: str) -> str:
    return cluster.get("service", name, "-n", namespace)["spec"]["clusterIP"]


def targets(cluster, pods: dict[str, str], dest, port: int) -> list[tuple[str, int]]:
    """Where a destination of the table answers here: (address, port) pairs; [] for what this
    cluster cannot show (see the module docstring)."""
    if dest == "trainer":
        return [(pods["trainer-0"], port)]
    if dest == "mlflow":  # the release's MLflow, through its Service
        return [(service_ip(cluster, "invfold-mlflow", NAMESPACE), port)]
    if dest == "mlflow-db":
        return [(pods["mlflow-db"], port)]
    if dest in (ML_PIPELINE, METADATA_GRPC):
        return [(pods["kfp"], port)]
    if dest == MINIO:
        return [(pods["minio"], port)]
    if dest == KUBE_DNS:
        return [(pods["kube-dns"], port)]
    if dest == SEAWEEDFS:  # the cluster's store: its Service on the port and on KFP's 9000
        return [(service_ip(cluster, "seaweedfs", "kubeflow"), p) for p in (port, 9000)]
    if dest == API_SERVER:  # 443: the `kubernetes` Service; 6443: its endpoint, the node's address
        return [(service_ip(cluster, "kubernetes", "default"), 443)] if port == 443 else [(GATEWAY, port)]
    if dest == NODE_LOCAL_DNS:
        return [(GATEWAY, port)]
    assert dest == INTERNET, f"the cluster test has no place for {dest!r}: add it to targets()"
    return []


def table(cluster, pods: dict[str, str]) -> dict[tuple[str, str, int, str], bool]:
    """(source probe, address, port, protocol) -> expected open, for every row of the table that
    this cluster can show, and the outsider's two: MLflow and a trainer admit no other namespace."""
    rows = {}
    for role, dest, port, proto, _ in NEEDED:
        for address, p in targets(cluster, pods, dest, port):
            rows[(SOURCES[role], address, p, proto)] = True
    for role, dest, port, _ in DENIED:
        for address, p in targets(cluster, pods, dest, port):
            rows[(SOURCES[role], address, p, "TCP")] = False
    rows[("outsider", service_ip(cluster, "invfold-mlflow", NAMESPACE), 5000, "TCP")] = False
    rows[("outsider", pods["trainer-0"], 29500, "TCP")] = False
    return rows


def observe(cluster, rows) -> dict[tuple[str, str, int, str], str]:
    """Each row probed once from its source pod (one exec per source, its probes in parallel)."""
    seen = {}
    for source in sorted({row[0] for row in rows}):
        mine = [row for row in rows if row[0] == source]
        namespace = PROBES[source][0]
        out = cluster.kubectl(
            "exec", "-n", namespace, f"netpol-{source}", "--", "python3", "-c", SCRIPT, "probe",
            json.dumps([[address, port, proto] for _, address, port, proto in mine]),
            timeout=120,
        ).stdout  # fmt: skip
        seen.update(zip(mine, json.loads(out.strip().splitlines()[-1]), strict=True))
    return seen


def test_the_table_holds_with_real_connections(cluster, probes):
    rows = table(cluster, probes)
    # A denied row means something only where its listener answers someone: an allowed row of the
    # same destination proves it.
    reached = {(address, port) for (_, address, port, _), expected in rows.items() if expected}
    assert {(address, port) for (_, address, port, _), expected in rows.items() if not expected} <= reached

    def mismatches() -> list[str]:
        seen = observe(cluster, rows)
        return [
            f"{source} -> {address}:{port}/{proto}: {seen[(source, address, port, proto)]}, "
            f"expected {'open' if expected else 'closed'}"
            for (source, address, port, proto), expected in rows.items()
            if (seen[(source, address, port, proto)] == "open") != expected
        ]

    # kube-router applies a new pod's rules within seconds of the pod's start: probe until the
    # table holds, and fail with what the last round saw.
    deadline = time.monotonic() + 90
    wrong = mismatches()
    while wrong and time.monotonic() < deadline:
        time.sleep(3)
        wrong = mismatches()
    assert not wrong, "\n".join(wrong)
