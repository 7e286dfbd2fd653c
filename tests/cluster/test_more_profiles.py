"""A second profile installed beside the first on the real cluster (docs/deploy.md, "More
profiles"): the lane's release in `kubeflow` owns the cluster-wide ClusterTrainingRuntimes and
PriorityClasses; a further release is refused by helm (another release's ownership annotations),
and with `clusterScoped=false` installs its own MLflow, quota and policies, passes `helm test`, and
its TrainJobs use the shared runtimes. Its uninstall leaves them to the first.

The second profile's MLflow runs as the lane's: on its own PostgreSQL (Debian's PostgreSQL 15
image built with KFP's, in place of the official image no registry here serves; its claim bound to a
hostPath volume, as no provisioner runs here) with basic-auth."""

from __future__ import annotations

import json

import pytest

from tests.support.cluster import (
    PROFILE_LABELS,
    RELEASE,
    database_volume,
    install_args,
    prerequisites,
)
from tests.support.deploy_tools import CHART

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TEAM = "kubeflow-user-team-b"
SHARED = [("clustertrainingruntime", "invfold-ddp"), ("priorityclass", "invfold-training")]


@pytest.fixture(scope="module")
def team(cluster, release, tmp_path_factory):
    """The profile's namespace with MLflow's store keys, and a volume for its PostgreSQL's claim."""
    ns = cluster.namespace(TEAM, PROFILE_LABELS)
    prerequisites(cluster, ns)
    volume = database_volume(cluster, tmp_path_factory.mktemp("team-b-postgresql"), ns)
    yield ns
    cluster.helm("uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "5m", check=False)
    cluster.delete_namespace(ns)
    cluster.kubectl("delete", "pv", volume, "--ignore-not-found", "--wait=false", check=False)


# A search of MLflow's experiments from inside its pod, without an account: the HTTP status.
ANONYMOUS_SEARCH = """
import urllib.error, urllib.request
try:
    print(urllib.request.urlopen("http://127.0.0.1:5000/api/2.0/mlflow/experiments/search?max_results=1").status)
except urllib.error.HTTPError as err:
    print(err.code)
"""


def owner(cluster, kind: str, name: str) -> str:
    annotations = cluster.get(kind, name)["metadata"].get("annotations", {})
    return annotations.get("meta.helm.sh/release-namespace", "")


def test_a_further_profile_that_would_own_the_cluster_wide_objects_is_refused(cluster, cpu_images, team):
    out = cluster.helm("install", RELEASE, str(CHART), *install_args(cpu_images, team), "--dry-run=server", check=False)
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


@pytest.mark.kfp  # its PostgreSQL image comes onto the node with KFP's
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
    # The chart's own database and basic-auth: helm test got in with the steps' account; no account, no entry.
    database = cluster.get("statefulset", f"{RELEASE}-postgresql", "-n", team)
    assert database["status"].get("readyReplicas") == 1, database["status"]
    anonymous = cluster.kubectl("exec", "-n", team, f"deploy/{RELEASE}-mlflow", "--", "python3", "-c", ANONYMOUS_SEARCH)
    assert anonymous.stdout.strip() == "401", anonymous.stdout
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
