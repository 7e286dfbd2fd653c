"""MLflow behind Istio in a profile namespace (L7): the steps, trainers and `helm test` run without
sidecars (plaintext, no mTLS identity), and the profile's AuthorizationPolicy admits only the
ingress gateway / KFP UI with the owner's header and mTLS peers of the namespace. So MLflow either
runs out of the mesh (the default) or ships an AuthorizationPolicy admitting its clients
(mlflow.istioSidecar=true); either way a step reaches it, and `port-forward` was never a proof.

Upstream fact: the profile controller's policy `ns-owner-access-istio` (kubeflow/dashboard
components/profile-controller/controllers/profile_controller.go, getAuthorizationPolicy): ALLOW,
no selector, rules: (1) from principals istio-ingressgateway / ml-pipeline-ui when the user header
names the owner; (2) when source.namespace is the profile; (3) to paths /healthz, /metrics,
/wait-for-drain; (4) the notebook controller GET */api/kernels. Evaluated by tests/support/istio_authz.py."""

from __future__ import annotations

import pytest

from tests.support.deploy_tools import CHART, documents, helm_template
from tests.support.istio_authz import Request, allowed

NS = "kubeflow-user-example-com"
PROFILE_POLICY = {
    "metadata": {"namespace": NS, "name": "ns-owner-access-istio"},
    "spec": {
        "action": "ALLOW",
        "rules": [
            {
                "from": [
                    {
                        "source": {
                            "principals": [
                                "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account",
                                "cluster.local/ns/kubeflow/sa/ml-pipeline-ui",
                            ]
                        }
                    }
                ],
                "when": [{"key": "request.headers[kubeflow-userid]", "values": ["user@example.com"]}],
            },
            {"when": [{"key": "source.namespace", "values": [NS]}]},
            {"to": [{"operation": {"paths": ["/healthz", "/metrics", "/wait-for-drain"]}}]},
            {
                "from": [
                    {"source": {"principals": ["cluster.local/ns/kubeflow/sa/notebook-controller-service-account"]}}
                ],
                "to": [{"operation": {"methods": ["GET"], "paths": ["*/api/kernels"]}}],
            },
        ],
    },
}
# A step pod (sidecar.istio.io/inject "false", as KFP's own executor pods) calling the tracking API.
STEP_CALL = Request(source_namespace=None, port=5000, path="/api/2.0/mlflow/experiments/search")


def workload(objects: list[dict], role: str) -> tuple[dict[str, str], bool]:
    (tpl,) = [
        o["spec"]["template"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
        and o["spec"]["template"]["metadata"]["labels"].get("invfold.dev/role") == role
    ]
    annotations = tpl["metadata"].get("annotations") or {}
    return tpl["metadata"]["labels"], annotations.get("sidecar.istio.io/inject") != "false"


@pytest.mark.parametrize("values", [(), ("--set", "mlflow.istioSidecar=true")], ids=["out-of-mesh", "sidecar"])
def test_a_step_without_a_sidecar_reaches_mlflow_in_a_profile_namespace(values):
    objects = documents(helm_template("-f", str(CHART / "values-gpu.yaml"), *values, namespace=NS))
    policies = [PROFILE_POLICY] + [o for o in objects if o["kind"] == "AuthorizationPolicy"]
    labels, sidecar = workload(objects, "mlflow")
    assert allowed(policies, NS, labels, sidecar, STEP_CALL)
    if not sidecar:
        db_labels, db_sidecar = workload(objects, "mlflow-db")
        assert not db_sidecar, "PostgreSQL keeps a sidecar while MLflow, its only client, has none"


def test_the_evaluator_refuses_what_the_profile_policy_refuses():
    """The chart before the fix: MLflow with a sidecar, no policy of ours: a step gets 403."""
    labels = {"invfold.dev/role": "mlflow"}
    assert not allowed([PROFILE_POLICY], NS, labels, True, STEP_CALL)
    assert allowed([PROFILE_POLICY], NS, labels, True, Request(source_namespace=NS, port=5000))
    assert allowed([PROFILE_POLICY], NS, labels, True, Request(source_namespace=None, port=5000, path="/healthz"))
