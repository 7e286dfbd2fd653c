"""images.pullSecrets reaches every pod the chart renders: MLflow, PostgreSQL, every Trainer
runtime's replicated jobs, both hook Jobs (secret-init, pipeline upload) and the `helm test` pod.
The walk finds pod specs by shape (any mapping with `containers`), so a pod template added later
without the Secrets fails here too. The compiled steps get them through the upload hook:
tests/pipelines/test_upload_images.py."""

from __future__ import annotations

import pytest

from tests.support.deploy_tools import CHART, documents, helm_template, pod_specs

SECRETS = [{"name": "regcred"}, {"name": "mirror-cred"}]
PULL = ("--set", "images.pullSecrets[0].name=regcred", "--set", "images.pullSecrets[1].name=mirror-cred")
# Every optional pod on: the workspace, a GPU install, namespaced runtimes, auth's init container.
RENDERINGS = {
    "profile": ((), "team-a"),
    "single-user": ((), "kubeflow"),
    "gpu": (("-f", str(CHART / "values-gpu.yaml")), "team-a"),
    "tenant": (("--set", "runtimes.kind=TrainingRuntime", "--set", "workspace.create=true"), "team-a"),
}


def all_pod_specs(*values: str, namespace: str) -> dict[str, dict]:
    out = {}
    for obj in documents(helm_template(*values, namespace=namespace)):
        out.update(pod_specs(obj, f"{obj['kind']}/{obj['metadata']['name']}"))
    return out


@pytest.mark.parametrize("name", RENDERINGS)
def test_every_rendered_pod_pulls_with_the_secrets(name):
    values, namespace = RENDERINGS[name]
    specs = all_pod_specs(*values, *PULL, namespace=namespace)
    kinds = {path.split("/")[0] for path in specs}
    assert {"Deployment", "StatefulSet", "Job", "Pod"} <= kinds, kinds
    assert kinds & {"ClusterTrainingRuntime", "TrainingRuntime"}, kinds
    missing = [path for path, spec in specs.items() if spec.get("imagePullSecrets") != SECRETS]
    assert not missing, f"pods without images.pullSecrets: {missing}"


def test_without_pull_secrets_no_pod_names_any():
    specs = all_pod_specs(namespace="team-a")
    assert specs and not [path for path, spec in specs.items() if "imagePullSecrets" in spec]
