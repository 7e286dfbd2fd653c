"""Every kustomize overlay on the real API server, and the admission each one claims.

Each overlay goes through `kubectl apply --server-side --dry-run=server` whole (schemas, CEL rules
and Trainer's validating webhook for its runtimes). Its namespace and ResourceQuota are applied for
real, and the real admission plugins then answer for pods created with `--dry-run=server` in that
namespace: PodSecurity at the level the Namespace carries, ResourceQuota's refusal of a trainer
(and only a trainer) that does not fit. The objects the installed chart owns (runtimes, PriorityClasses)
are not taken over: the dry-run never persists."""

from __future__ import annotations

import copy
import json

import pytest

from tests.support.deploy_tools import OVERLAYS, documents, kustomize

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def rendered(overlay: str) -> list[dict]:
    return documents(kustomize(overlay))


def namespace_of(docs: list[dict]) -> str:
    return next(d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace"))


def runtime_pod(docs: list[dict], ns: str) -> dict:
    """A pod of the overlay's ddp runtime, as Trainer and JobSet make it (their template)."""
    runtime = next(d for d in docs if d["kind"].endswith("TrainingRuntime") and d["metadata"]["name"] == "invfold-ddp")
    template = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ddp-node-0-0", "namespace": ns, "labels": template["metadata"]["labels"]},
        "spec": {**copy.deepcopy(template["spec"]), "restartPolicy": "Never"},
    }


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request, cluster, release):
    """(name, rendered docs, namespace) with the overlay's Namespace and quota applied."""
    docs = rendered(request.param)
    ns = namespace_of(docs)
    applied = [d for d in docs if d["kind"] in ("Namespace", "ResourceQuota")]
    if not any(d["kind"] == "Namespace" for d in docs):
        cluster.namespace(ns)  # single-user: KFP's namespace, made by KFP's install
    for doc in applied:
        cluster.apply(doc)
    for quota in [d["metadata"]["name"] for d in applied if d["kind"] == "ResourceQuota"]:
        # The quota controller (kube-controller-manager) must have counted usage, or every pod is refused.
        cluster.wait_for(
            f"quota {quota} counted",
            lambda name=quota: cluster.get("resourcequota", name, "-n", ns).get("status", {}).get("used"),
            60,
        )
    yield request.param, docs, ns
    for doc in reversed(applied):
        if doc["kind"] != "Namespace":
            cluster.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], "-n", ns, "--ignore-not-found")
    if any(d["kind"] == "Namespace" for d in applied):
        cluster.delete_namespace(ns)


def dry_run_pod(cluster, pod: dict):
    return cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod), check=False)


def test_the_overlay_passes_the_servers_dry_run(cluster, overlay):
    name, docs, ns = overlay
    out = cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}), check=False,
    )  # fmt: skip
    assert out.returncode == 0, f"{name}: {out.stderr}"
    assert len(out.stdout.splitlines()) == len(docs), out.stdout


RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


@pytest.fixture(scope="module")
def restricted_namespace(cluster):
    """A namespace enforcing `restricted`, whatever the overlay's own namespace enforces."""
    ns = cluster.namespace("invfold-pod-security-restricted", RESTRICTED)
    yield ns
    cluster.delete_namespace(ns)


def as_root(pod: dict) -> dict:
    bad = copy.deepcopy(pod)
    bad["spec"]["securityContext"] = {}
    bad["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": True}
    return bad


def test_pod_security_admits_the_runtime_pods_at_restricted_and_at_the_namespaces_level(
    cluster, overlay, restricted_namespace
):
    """The trainer pods meet `restricted` (the level k8s/base gives invfold's own namespace) in
    every overlay. single-user and cpu-dev install into KFP's namespace, which KFP's manifests label
    enforce `baseline`, warn `restricted` (kubeflow/pipelines 2.17.0
    manifests/kustomize/cluster-scoped-resources/namespace.yaml) and which a cluster without KFP
    leaves unlabelled (privileged): so each pod is also checked in a namespace enforcing
    `restricted`, where the same pod run as root with privilege escalation is refused."""
    name, docs, ns = overlay
    level = cluster.get("namespace", ns)["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce")
    if any(d["kind"] == "Namespace" for d in docs):
        assert level == "restricted", f"{name}: its Namespace enforces {level}"
    pod = runtime_pod(docs, ns)
    out = dry_run_pod(cluster, pod)
    assert out.returncode == 0, f"{name} ({level}): {out.stderr}"
    assert "violate" not in out.stderr, out.stderr
    strict = runtime_pod(docs, restricted_namespace)
    out = dry_run_pod(cluster, strict)
    assert out.returncode == 0 and "violate" not in out.stderr, f"{name} at restricted: {out.stderr}"
    refused = dry_run_pod(cluster, as_root(strict))
    assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr


def test_the_quota_refuses_a_trainer_that_does_not_fit_and_counts_trainers_only(cluster, overlay):
    """No LimitRange (it would give every container of a shared namespace invfold's defaults): the
    quota is scoped to invfold's trainers by their PriorityClass, so a notebook asking as much passes."""
    name, docs, ns = overlay
    assert not [d for d in docs if d["kind"] == "LimitRange"], name
    quotas = [d for d in docs if d["kind"] == "ResourceQuota" and d["metadata"]["name"] == "invfold-compute"]
    if not quotas:
        # single-user and cpu-dev (built on it) install into KFP's own namespace, where a quota would
        # count KFP's pods too; a tenant cannot create the PriorityClass the quota is scoped to, so
        # it keeps only the TrainJob count.
        assert name in ("single-user", "cpu-dev", "tenant"), f"{name} has no compute quota"
        return
    hard_cpu = quotas[0]["spec"]["hard"]["requests.cpu"]
    greedy = runtime_pod(docs, ns)
    greedy["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": str(int(hard_cpu) + 1), "memory": "1Gi"},
        "limits": {"memory": "1Gi"},
    }
    refused = dry_run_pod(cluster, greedy)
    assert refused.returncode != 0 and "exceeded quota: invfold-compute" in refused.stderr, refused.stderr
    other = copy.deepcopy(greedy)
    other["metadata"]["name"] = "notebook-0"
    other["spec"].pop("priorityClassName", None)
    admitted = dry_run_pod(cluster, other)
    assert admitted.returncode == 0, admitted.stderr
