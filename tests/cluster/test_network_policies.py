"""invfold's NetworkPolicies enforced for real: kube-router's policy controller on the test
cluster (scripts/cluster), real TCP connections and DNS queries between real pods. The chart as the
lane installs it (single-user values), and every other rendering (the chart's GPU values, each
kustomize overlay) with its policies applied as rendered into a namespace of its own.

Small probe pods (the MLflow image the release already runs, Pod Security `restricted`) carry the
labels of each invfold role in the policies' namespace, or of the components a run talks to (KFP's
API server and ML Metadata, MinIO, kube-dns); the destinations that really exist here are the real
ones: the release's MLflow Service (for the other renderings, a probe with MLflow's labels),
SeaweedFS's Service, the Kubernetes API (its Service and its endpoint), and the cluster's DNS. Every
row of tests/support/network_table.py is probed except those this machine cannot show: the
internet (pods leave the machine unmasqueraded, so what answers is the test machine's own network,
not a policy) and NodeLocal DNSCache's 169.254.20.10 (nothing listens there; the cluster's DNS
answers on the node's address, which the lane's install names in
networkPolicies.nodeLocalDnsAddresses, as one does for a node-local cache: that address is probed
instead for the installed chart; the other renderings keep 169.254.20.10).
tests/deploy/test_network_policies.py keeps the evaluator for those rows.

A rendering's policies name invfold's own pods by podSelector alone (the policies' namespace) and
KFP's by `kubernetes.io/metadata.name: kubeflow`: moved into a namespace of their own (the
single-user and cpu-dev renderings' is `kubeflow`, where the release's policies of the same names
live), they keep their meaning.

kube-router rejects a denied connection (ICMP port unreachable: "refused" at once) rather than
dropping it, so each denied destination is also reached by an allowed row of the same table: the
listener is there, and only the policy keeps the denied source out. On the plain bridge (no
enforcer) every denied row connects."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cluster import CHART_NAMESPACE as NAMESPACE
from tests.support.cluster import GATEWAY, PROFILE_LABELS
from tests.support.deploy_tools import RENDERINGS, documents, rendering
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

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SCRIPT = (Path(__file__).parents[1] / "support" / "netprobe_pod.py").read_text()
OUTSIDER_NAMESPACE = "netpol-outsider"
PROBE_LABEL = "invfold.test/netpol-probe"
# The renderings applied here beside the installed chart (chart-default, single-user values).
APPLIED = tuple(name for name in RENDERINGS if name != "chart-default")
# Other components' pods, and a pod of a namespace nobody admits: name: (namespace, labels, ports).
COMPONENTS = {
    "kfp": (NAMESPACE, {**ML_PIPELINE.labels, **METADATA_GRPC.labels}, ["8887", "8888", "8080"]),
    "minio": (NAMESPACE, MINIO.labels, ["9000"]),
    "kube-dns": ("kube-system", KUBE_DNS.labels, ["53", "53/udp"]),
    "outsider": (OUTSIDER_NAMESPACE, {}, []),
}
# invfold's roles in the policies' namespace: name: (labels, ports). They carry the chart's part-of
# label (what its policies select) but not its instance label (what its Services select).
ROLES = {
    "step": ({"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "step"}, []),
    "launcher": ({"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "launcher"}, []),
    "trainer-0": ({"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "trainer"}, ["29500", "2222", "41000"]),
    "trainer-1": ({"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "trainer"}, []),
    "mlflow": ({"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "mlflow"}, ["5000"]),
    "mlflow-db": ({"app.kubernetes.io/part-of": "invfold", "invfold.dev/role": "mlflow-db"}, ["5432"]),
}
SOURCES = {"step": "step", "launcher": "launcher", "trainer": "trainer-1", "mlflow": "mlflow"}


def probe_pod(name: str, namespace: str, labels: dict[str, str], ports: list[str], image: str) -> dict:
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


def start_probes(cluster, pods: list[dict]) -> dict[tuple[str, str], str]:
    """Apply the probe pods and wait until each runs: {(namespace, name): pod IP}."""
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": pods})
    wanted = {(p["metadata"]["namespace"], p["metadata"]["labels"][PROBE_LABEL]) for p in pods}

    def addresses() -> dict[tuple[str, str], str] | None:
        found = {}
        for namespace in {ns for ns, _ in wanted}:
            for pod in cluster.get("pods", "-n", namespace, "-l", PROBE_LABEL)["items"]:
                ready = any(c.get("ready") for c in pod["status"].get("containerStatuses", []))
                if ready and pod["status"].get("podIP"):
                    found[(namespace, pod["metadata"]["labels"][PROBE_LABEL])] = pod["status"]["podIP"]
        return found if wanted <= set(found) else None

    def explain() -> str:
        return cluster.kubectl("get", "pods", "-A", "-l", PROBE_LABEL, "-o", "wide", check=False).stdout

    return cluster.wait_for("the probe pods running", addresses, 240, explain=explain)


def stop_probes(cluster, pods: list[dict]) -> None:
    for pod in pods:
        cluster.kubectl(
            "delete", "pod", pod["metadata"]["name"], "-n", pod["metadata"]["namespace"], "--wait=false", check=False
        )


@dataclass(frozen=True)
class Probes:
    """The probe pods one table is checked with: invfold's roles in `namespace`, the components."""

    namespace: str
    ips: dict[tuple[str, str], str]
    mlflow: tuple[str, int]  # where MLflow answers

    def ip(self, name: str) -> str:
        return self.ips[(self.namespace, name) if name in ROLES else (COMPONENTS[name][0], name)]

    def namespace_of(self, name: str) -> str:
        return self.namespace if name in ROLES else COMPONENTS[name][0]


@pytest.fixture(scope="module")
def components(cluster, node_images):
    """The component probes (and the outsider's namespace): {(namespace, name): pod IP}, the image."""
    (image,) = node_images("mlflow")
    cluster.namespace(OUTSIDER_NAMESPACE, {"pod-security.kubernetes.io/enforce": "restricted"})
    pods = [probe_pod(name, ns, labels, ports, image) for name, (ns, labels, ports) in COMPONENTS.items()]
    yield start_probes(cluster, pods), image
    stop_probes(cluster, pods)
    cluster.delete_namespace(OUTSIDER_NAMESPACE)


@pytest.fixture(scope="module")
def probes(cluster, release, components):
    """The roles beside the installed chart's MLflow (its Service is MLflow here)."""
    ips, image = components
    roles = {**ROLES, "mlflow": (ROLES["mlflow"][0], [])}  # a source only: MLflow is real here
    pods = [probe_pod(name, NAMESPACE, labels, ports, image) for name, (labels, ports) in roles.items()]
    mlflow = (service_ip(cluster, "invfold-mlflow", NAMESPACE), 5000)
    yield Probes(NAMESPACE, {**ips, **start_probes(cluster, pods)}, mlflow)
    stop_probes(cluster, pods)


def moved_policies(name: str, namespace: str) -> list[dict]:
    """The rendering's NetworkPolicies, in `namespace` (see the module docstring)."""
    policies = [d for d in documents(rendering(name)) if d["kind"] == "NetworkPolicy"]
    assert policies, name
    for policy in policies:
        policy["metadata"]["namespace"] = namespace
    return policies


@pytest.fixture(scope="module")
def applied(cluster, components):
    """Every other rendering's policies applied in a namespace of its own, with role probes there:
    {rendering: Probes}, all started at once."""
    ips, image = components
    spaces = {name: f"netpol-{name}" for name in APPLIED}
    pods = []
    for name, namespace in spaces.items():
        cluster.namespace(namespace, {"pod-security.kubernetes.io/enforce": "restricted", **PROFILE_LABELS})
        cluster.apply({"apiVersion": "v1", "kind": "List", "items": moved_policies(name, namespace)})
        pods += [probe_pod(role, namespace, labels, ports, image) for role, (labels, ports) in ROLES.items()]
    started = start_probes(cluster, pods)
    yield {
        name: Probes(namespace, {**ips, **started}, (started[(namespace, "mlflow")], 5000))
        for name, namespace in spaces.items()
    }
    for namespace in spaces.values():
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def service_ip(cluster, name: str, namespace: str) -> str:
    return cluster.get("service", name, "-n", namespace)["spec"]["clusterIP"]


def targets(cluster, probes: Probes, dest, port: int) -> list[tuple[str, int]]:
    """Where a destination of the table answers here: (address, port) pairs; [] for what this
    cluster cannot show (see the module docstring)."""
    if dest == "trainer":
        return [(probes.ip("trainer-0"), port)]
    if dest == "mlflow":
        return [probes.mlflow]
    if dest == "mlflow-db":
        return [(probes.ip("mlflow-db"), port)]
    if dest in (ML_PIPELINE, METADATA_GRPC):
        return [(probes.ip("kfp"), port)]
    if dest == MINIO:
        return [(probes.ip("minio"), port)]
    if dest == KUBE_DNS:
        return [(probes.ip("kube-dns"), port)]
    if dest == SEAWEEDFS:  # the cluster's store: its Service on the port and on KFP's 9000
        return [(service_ip(cluster, "seaweedfs", "kubeflow"), p) for p in (port, 9000)]
    if dest == API_SERVER:  # 443: the `kubernetes` Service; 6443: its endpoint, the node's address
        return [(service_ip(cluster, "kubernetes", "default"), 443)] if port == 443 else [(GATEWAY, port)]
    if dest == NODE_LOCAL_DNS:  # the lane's install names the node's address; a rendering keeps 169.254.20.10
        return [(GATEWAY, port)] if probes.namespace == NAMESPACE else []
    assert dest == INTERNET, f"the cluster test has no place for {dest!r}: add it to targets()"
    return []


def table(cluster, probes: Probes) -> dict[tuple[str, str, int, str], bool]:
    """(source probe, address, port, protocol) -> expected open, for every row of the table that
    this cluster can show, and the outsider's two: MLflow and a trainer admit no other namespace."""
    rows = {}
    for role, dest, port, proto, _ in NEEDED:
        for address, p in targets(cluster, probes, dest, port):
            rows[(SOURCES[role], address, p, proto)] = True
    for role, dest, port, _ in DENIED:
        for address, p in targets(cluster, probes, dest, port):
            rows[(SOURCES[role], address, p, "TCP")] = False
    rows[("outsider", *probes.mlflow, "TCP")] = False
    rows[("outsider", probes.ip("trainer-0"), 29500, "TCP")] = False
    return rows


def observe(cluster, probes: Probes, rows) -> dict[tuple[str, str, int, str], str]:
    """Each row probed once from its source pod (one exec per source, its probes in parallel)."""
    seen = {}
    for source in sorted({row[0] for row in rows}):
        mine = [row for row in rows if row[0] == source]
        out = cluster.kubectl(
            "exec", "-n", probes.namespace_of(source), f"netpol-{source}", "--", "python3", "-c", SCRIPT, "probe",
            json.dumps([[address, port, proto] for _, address, port, proto in mine]),
            timeout=120,
        ).stdout  # fmt: skip
        seen.update(zip(mine, json.loads(out.strip().splitlines()[-1]), strict=True))
    return seen


def check_table(cluster, probes: Probes) -> None:
    rows = table(cluster, probes)
    # A denied row means something only where its listener answers someone: an allowed row of the
    # same destination proves it.
    reached = {(address, port) for (_, address, port, _), expected in rows.items() if expected}
    assert {(address, port) for (_, address, port, _), expected in rows.items() if not expected} <= reached

    def mismatches() -> list[str]:
        seen = observe(cluster, probes, rows)
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


def test_the_table_holds_with_real_connections(cluster, probes):
    check_table(cluster, probes)


@pytest.mark.parametrize("name", APPLIED)
def test_every_rendering_holds_the_table_with_real_connections(cluster, applied, name):
    """The chart's GPU values and each overlay: their own policies, enforced by kube-router."""
    check_table(cluster, applied[name])
