"""What an invfold run needs on the network, and what it must not get: one table, checked with real
connections between pods of the test cluster for every rendering (tests/cluster/test_network_policies.py),
and by the evaluator for the rows that cluster cannot show (tests/deploy/test_network_policies.py).

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
cluster/addons/dns/nodelocaldns/nodelocaldns.yaml).

A destination is an invfold role (a pod of the chart's namespace with that `invfold.dev/role`), a
`Pod` of another component, or an `Address` outside the pod network."""

from __future__ import annotations

from tests.support.network_policy import Address, Pod

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

# (source role, destination, port, why)
DENIED = [
    ("trainer", API_SERVER, 443, "trainer pods have no business with the API"),
    ("step", INTERNET, 443, "no internet"),
    ("launcher", INTERNET, 443, "no internet"),
    ("trainer", INTERNET, 443, "no internet"),
    ("step", "trainer", 29500, "steps do not join a job's rendezvous"),
    ("trainer", ML_PIPELINE, 8888, "trainers do not call KFP"),
    ("step", "mlflow-db", 5432, "only MLflow reaches its database"),
]
