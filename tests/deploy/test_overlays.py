"""Each overlay (and the chart) against the install layout upstream gives the namespaces it lands in.

Upstream facts:
- Multi-user Kubeflow: the profile controller owns each profile's Namespace and labels it
  `app.kubernetes.io/part-of: kubeflow-profile` (kubeflow/kubeflow components/profile-controller/
  controllers/profile_controller.go; KFP's artifact-store NetworkPolicy admits namespaces by that
  label: kubeflow/pipelines manifests/kustomize/third-party/seaweedfs/base/seaweedfs/
  seaweedfs-networkpolicy.yaml), and runs pipelines there as the `default-editor` account.
- Standalone (single-user) KFP runs workflows in its own namespace `kubeflow` as `pipeline-runner`
  (kubeflow/pipelines manifests/kustomize/base/pipeline/pipeline-runner-sa.yaml)."""

from __future__ import annotations

import pytest

from tests.support.deploy_tools import documents, helm_template

# overlay -> (namespace, the account KFP runs steps as, whether it may create the Namespace)
LAYOUT = {
    # a dev cluster runs standalone KFP: the train step runs in `kubeflow`, so the launcher's
    # rights must be bound there (in an `invfold-dev` namespace no KFP run ever executes: 403)
    "k8s-cpu-dev": ("kubeflow", "pipeline-runner", False),
    "k8s-gpu-prod": ("kubeflow-user-example-com", "default-editor", False),
    "k8s-tenant": ("kubeflow-user-example-com", "default-editor", False),
    "k8s-single-user": ("kubeflow", "pipeline-runner", False),
}


@pytest.mark.parametrize("name", sorted(LAYOUT))
def test_overlay_lands_in_its_namespace_and_binds_kfps_account(rendered, name):
    namespace, account, owns_namespace = LAYOUT[name]
    objs = documents(rendered[name])
    namespaces = [o for o in objs if o["kind"] == "Namespace"]
    if owns_namespace:
        assert [n["metadata"]["name"] for n in namespaces] == [namespace]
    else:
        assert not namespaces, f"{name} would rewrite {namespace}'s Namespace and its labels"
    namespaced = [o for o in objs if o["kind"] not in ("Namespace", "PriorityClass", "ClusterTrainingRuntime")]
    assert {o["metadata"]["namespace"] for o in namespaced} == {namespace}
    (binding,) = [o for o in objs if o["kind"] == "RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]


def test_single_user_overlay_leaves_kfps_namespace_alone(rendered):
    kinds = {o["kind"] for o in documents(rendered["k8s-single-user"])}
    assert not kinds & {"Namespace", "ResourceQuota", "LimitRange"}
    assert {"ClusterTrainingRuntime", "RoleBinding", "NetworkPolicy"} <= kinds


@pytest.mark.parametrize(
    ("namespace", "values", "account"),
    [
        ("kubeflow", (), "pipeline-runner"),
        ("kubeflow-user-example-com", ("--set", "pipelineServiceAccount=default-editor"), "default-editor"),
    ],
)
def test_chart_binds_the_account_of_each_install_kind(namespace, values, account):
    objs = documents(helm_template(*values, namespace=namespace))
    assert not [o for o in objs if o["kind"] == "Namespace"]
    binding = next(o for o in objs if o["kind"] == "RoleBinding")
    assert binding["subjects"][0]["name"] == account and binding["subjects"][0]["namespace"] == namespace


CLUSTER_SCOPED = {"Namespace", "PriorityClass", "ClusterTrainingRuntime", "ClusterRole", "ClusterRoleBinding"}


@pytest.mark.parametrize("name", [f"k8s-{o}" for o in ("cpu-dev", "gpu-prod", "tenant", "single-user")] + ["chart-gpu"])
def test_cluster_scoped_objects_carry_no_namespace(rendered, name):
    """kustomize's namespace transformer does not know a CRD's scope (ClusterTrainingRuntime is
    cluster-scoped: kubeflow/trainer manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml,
    `scope: Cluster`) and stamps it like a namespaced object."""
    stamped = [
        f"{o['kind']}/{o['metadata']['name']}: {o['metadata']['namespace']}"
        for o in documents(rendered[name])
        if o["kind"] in CLUSTER_SCOPED and o["metadata"].get("namespace")
    ]
    assert stamped == []
