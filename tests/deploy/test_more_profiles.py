"""A second profile installs beside the first: one release owns the cluster-wide objects (the
ClusterTrainingRuntimes and PriorityClasses, `clusterScoped: true`), every other renders none of
them (helm refuses to install an object that carries another release's ownership annotations,
meta.helm.sh/release-name / release-namespace: helm pkg/action/validate.go `existingResourceConflict`).
Checked here on the renderings of two profiles against each other; both installed on the real
cluster in tests/cluster/test_more_profiles.py."""

from __future__ import annotations

from tests.support.deploy_tools import CHART, documents, helm_template

GPU = ("-f", str(CHART / "values-gpu.yaml"))


def cluster_scoped(objects: list[dict]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects if "namespace" not in o["metadata"]}


def test_two_profiles_share_no_cluster_scoped_object():
    first = documents(helm_template(*GPU, namespace="team-a"))
    second = documents(helm_template(*GPU, "--set", "clusterScoped=false", namespace="team-b"))
    owned = cluster_scoped(first)
    assert {"ClusterTrainingRuntime", "PriorityClass"} <= {kind for kind, _ in owned}
    assert cluster_scoped(second) == set()
    # without the switch the second profile would claim the first one's objects
    assert cluster_scoped(documents(helm_template(*GPU, namespace="team-b"))) == owned


def test_the_second_profile_still_uses_the_shared_objects():
    objects = documents(helm_template(*GPU, "--set", "clusterScoped=false", namespace="team-b"))
    (compute,) = [o for o in objects if o["kind"] == "ResourceQuota" and o["metadata"]["name"].endswith("-compute")]
    (scope,) = compute["spec"]["scopeSelector"]["matchExpressions"]
    assert scope["values"] == ["invfold-training"]
    upload = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].endswith("pipeline-upload"))
    env = {e["name"]: e.get("value") for e in upload["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "team-b" in env["PIPELINE_DEFAULTS"]  # its own storage root and MLflow
    assert any(o["kind"] == "Deployment" for o in objects)  # its own MLflow


def test_namespaced_runtimes_stay_with_each_profile():
    values = ("--set", "clusterScoped=false", "--set", "runtimes.kind=TrainingRuntime")
    objects = documents(helm_template(*GPU, *values, namespace="team-b"))
    runtimes = [o for o in objects if o["kind"] == "TrainingRuntime"]
    assert runtimes and {o["metadata"]["namespace"] for o in runtimes} == {"team-b"}
