"""A second profile installed beside the first on the real cluster (docs/deploy.md, "More
profiles"): the lane's release in `kubeflow` owns the cluster-wide ClusterTrainingRuntimes and
PriorityClasses; a further release with the same values is refused by helm (another release's
ownership annotations), and with `clusterScoped=false` installs its own MLflow, quota and policies,
passes `helm test`, and its TrainJobs use the shared runtimes. Its uninstall leaves them to the first."""

from __future__ import annotations

import json

import pytest

from tests.support.cluster import PROFILE_LABELS, RELEASE, install_args, prerequisites
from tests.support.deploy_tools import CHART

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TEAM = "kubeflow-user-team-b"
SHARED = [("clustertrainingruntime", "invfold-ddp"), ("priorityclass", "invfold-training")]


@pytest.fixture(scope="module")
def team(cluster, release):
    ns = cluster.namespace(TEAM, PROFILE_LABELS)
    prerequisites(cluster, ns)
    yield ns
    cluster.helm("uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "5m", check=False)
    cluster.delete_namespace(ns)


def owner(cluster, kind: str, name: str) -> str:
    annotations = cluster.get(kind, name)["metadata"].get("annotations", {})
    return annotations.get("meta.helm.sh/release-namespace", "")


def test_a_further_profile_that_would_own_the_cluster_wide_objects_is_refused(cluster, cpu_images, team):
    out = cluster.helm(
        "install", RELEASE, str(CHART), *install_args(cpu_images, team)[:-3], "--dry-run=server", check=False
    )
    assert out.returncode != 0, out.stdout
    assert "exists and cannot be imported into the current release" in out.stderr, out.stderr
    assert f'must equal "{team}": current value is "kubeflow"' in out.stderr, out.stderr


def dry_run_trainjob(cluster, ns: str, runtime: str):
    return cluster.kubectl(
        "create", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(trainjob(ns, runtime)), check=False
    )


def trainjob(ns: str, runtime: str) -> dict:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "uses-the-shared-runtime", "namespace": ns},
        "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": runtime}},
    }


def test_a_further_profile_installs_with_cluster_scoped_off_and_uses_the_shared_objects(cluster, cpu_images, team):
    cluster.helm("install", RELEASE, str(CHART), *install_args(cpu_images, team), "--set", "clusterScoped=false")
    releases = json.loads(cluster.helm("list", "-A", "-o", "json").stdout)
    assert {(r["namespace"], r["status"]) for r in releases if r["name"] == RELEASE} >= {
        ("kubeflow", "deployed"),
        (team, "deployed"),
    }
    out = cluster.helm("test", RELEASE, "-n", team, "--logs", "--timeout", "5m")
    assert "Phase:          Succeeded" in out.stdout, out.stdout
    assert f"MLflow answers http://invfold-mlflow.{team}.svc.cluster.local:5000" in out.stdout, out.stdout
    assert all(owner(cluster, *shared) == "kubeflow" for shared in SHARED)
    quota = cluster.get("resourcequota", "-n", team, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    scopes = [e["values"] for q in quota for e in q["spec"].get("scopeSelector", {}).get("matchExpressions", [])]
    assert ["invfold-training"] in scopes, quota  # the compute quota counts the shared PriorityClass
    # Trainer's webhook looks the runtime up (trainer v2.3.0 pkg/runtime/core/clustertrainingruntime.go
    # ValidateObjects): the shared one is found, a missing one refused.
    accepted = dry_run_trainjob(cluster, team, "invfold-ddp")
    assert accepted.returncode == 0, accepted.stderr
    refused = dry_run_trainjob(cluster, team, "invfold-missing")
    assert "must be created before the TrainJob is created" in refused.stderr, refused.stderr

    cluster.helm("uninstall", RELEASE, "-n", team, "--wait", "--timeout", "5m")
    assert all(owner(cluster, *shared) == "kubeflow" for shared in SHARED)
    assert (
        json.loads(cluster.helm("status", RELEASE, "-n", "kubeflow", "-o", "json").stdout)["info"]["status"]
        == "deployed"
    )
