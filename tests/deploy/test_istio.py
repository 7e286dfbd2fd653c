"""Istio in profile namespaces: pods that must not get a sidecar say so, as KFP's own pods do.

Upstream facts: Kubeflow profile namespaces carry `istio-injection: enabled`
(kubeflow/kubeflow components/profile-controller/controllers/profile_controller.go, applied by
kubeflow/manifests); KFP's driver annotates its executor pods `sidecar.istio.io/inject: "false"`
(kubeflow/pipelines backend/src/v2/compiler/argocompiler/container.go). Sidecars would intercept
sshd (2222), torchrun's rendezvous and NCCL/Gloo between trainer pods, and keep a finished Job's
pod running. MLflow and PostgreSQL may run with sidecars: their istiod egress is in
test_network_policies.py."""

from __future__ import annotations

import pytest
import yaml

from tests.support.deploy_tools import REPO, documents, pod_templates

RENDERINGS = ("chart-default", "chart-gpu", "k8s-cpu-dev", "k8s-gpu-prod", "k8s-tenant", "k8s-single-user")


def template_annotations(obj: dict) -> dict[str, dict]:
    out = {}
    for o in [obj]:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] == "Job":
            out[name] = o["spec"]["template"].get("metadata", {}).get("annotations", {})
        elif o["kind"] == "Pod":
            out[name] = o["metadata"].get("annotations", {})
        elif o["kind"].endswith("TrainingRuntime"):
            for rj in o["spec"]["template"]["spec"]["replicatedJobs"]:
                out[f"{name}/{rj['name']}"] = (
                    rj["template"]["spec"]["template"].get("metadata", {}).get("annotations", {})
                )
    return out


@pytest.mark.parametrize("name", RENDERINGS)
def test_trainer_hook_and_test_pods_opt_out_of_sidecars(rendered, name):
    objs = documents(rendered[name])
    checked = 0
    for obj in objs:
        for where, found in template_annotations(obj).items():
            assert found.get("sidecar.istio.io/inject") == "false", f"{name}: {where}"
            checked += 1
    assert checked >= 5  # ddp node + 2 MPI runtimes x (node, launcher) [+ hook, helm test]
    assert pod_templates(objs)


def test_every_step_pod_opts_out_of_sidecars():
    _, platform = yaml.safe_load_all((REPO / "pipelines" / "invfold_pipeline.yaml").read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert len(executors) >= 7
    for name, executor in executors.items():
        assert executor["podMetadata"]["annotations"]["sidecar.istio.io/inject"] == "false", name
