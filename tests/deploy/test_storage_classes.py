"""PostgreSQL's claim and the workspace need a StorageClass the cluster has: the install refuses an
empty name on a cluster without a default class (from Kubernetes 1.30 EKS no longer marks `gp2`
default: AWS EKS user guide, "Review release notes for Kubernetes versions"), and a name the
cluster lacks, before a claim waits Pending forever.

`helm template` has no cluster for the chart's `lookup` of StorageClasses, so the check (the
chart's own helper `invfold.storageClassCheck`) is rendered by real helm in a harness chart that
hands it the list as values; an empty answer (no cluster to ask) passes. A default class carries
the annotation storageclass.kubernetes.io/is-default-class: "true" (Kubernetes docs, "Change the
default StorageClass")."""

from __future__ import annotations

import pytest
import yaml

from tests.support.deploy_tools import CHART, helper_chart, run, tool

DEFAULT = {"storageclass.kubernetes.io/is-default-class": "true"}


def classes(*names: str, default: str | None = None) -> dict:
    """A StorageClassList as `lookup "storage.k8s.io/v1" "StorageClass" "" ""` returns it."""
    items = [{"metadata": {"name": n, "annotations": DEFAULT if n == default else {}}} for n in names]
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClassList", "items": items}


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    field = "postgresql.storage.storageClassName"
    return helper_chart(
        tmp_path_factory.mktemp("storage-classes"),
        f'{{{{- include "invfold.storageClassCheck" (list .Values.classes .Values.name "{field}") }}}}\n',
    )


def render(harness, found, name: str = ""):
    values = harness / "values.yaml"
    values.write_text(yaml.safe_dump({"classes": found, "name": name}))
    return run([tool("helm"), "template", "h", str(harness), "-f", str(values)], check=False)


def test_a_cluster_without_a_default_class_is_refused_naming_its_classes(harness):
    proc = render(harness, classes("gp2", "efs-sc"))  # a new EKS cluster
    assert proc.returncode != 0
    assert "postgresql.storage.storageClassName" in proc.stderr and "no default StorageClass" in proc.stderr
    assert "gp2, efs-sc" in proc.stderr


def test_a_class_the_cluster_lacks_is_refused(harness):
    proc = render(harness, classes("standard-rwo", default="standard-rwo"), "gp3")
    assert proc.returncode != 0 and "gp3" in proc.stderr and "no such StorageClass" in proc.stderr


@pytest.mark.parametrize(
    ("found", "name"),
    [
        (classes("standard-rwo", "premium-rwo", default="standard-rwo"), ""),
        (classes("gp2", "gp3"), "gp3"),
        ({}, ""),  # helm template, or no rights to list classes: nothing to judge
    ],
    ids=["default-class", "named-class", "no-cluster"],
)
def test_a_default_or_existing_class_passes(harness, found, name):
    proc = render(harness, found, name)
    assert proc.returncode == 0, proc.stderr


def test_the_chart_checks_both_claims_at_install():
    text = (CHART / "templates" / "checks.yaml").read_text()
    assert 'lookup "storage.k8s.io/v1" "StorageClass" "" ""' in text
    assert "postgresql.storage.storageClassName" in text and "workspace.storageClassName" in text
