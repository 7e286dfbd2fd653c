"""What the chart and overlays render for admission, read from the YAML: no LimitRange, the
unscoped quota counts TrainJobs only, no quota in KFP's namespace, training never preempts.
What the API server then admits and counts (the PriorityClass-scoped compute quota, a
LimitRange default under a trainer's request) is checked on the real cluster:
tests/cluster/test_admission.py."""

from __future__ import annotations

import pytest

from tests.support.deploy_tools import RENDERINGS, documents, helm_template

QUOTA_RENDERINGS = ("chart-default", "chart-gpu", "k8s-gpu-prod")


@pytest.mark.parametrize("name", RENDERINGS)
def test_no_rendering_ships_a_limit_range(rendered, name):
    """A LimitRange gives every container of a shared profile namespace (notebooks
    too) invfold's defaults; its old default CPU limit of 2 also sat under a GPU trainer's request
    of 8, which the API server refuses (tests/cluster/test_admission.py shows both)."""
    assert not [o for o in documents(rendered[name]) if o["kind"] == "LimitRange"], name


@pytest.mark.parametrize("name", QUOTA_RENDERINGS)
def test_the_unscoped_quota_counts_trainjobs_only(rendered, name):
    """Object counts cannot be scoped to a PriorityClass, so they live in a second quota, which
    must hold nothing that would count the namespace's other pods."""
    quotas = [o for o in documents(rendered[name]) if o["kind"] == "ResourceQuota"]
    scoped = [o["metadata"]["name"] for o in quotas if o["spec"].get("scopeSelector")]
    assert scoped == ["invfold-compute"], name
    counted = [o for o in quotas if not o["spec"].get("scopeSelector")]
    assert [set(o["spec"]["hard"]) for o in counted] == [{"count/trainjobs.trainer.kubeflow.org"}]


def test_single_user_installs_leave_kfps_namespace_without_quota():
    objs = documents(helm_template(namespace="kubeflow"))
    kinds = {o["kind"] for o in objs}
    assert "ResourceQuota" not in kinds and "LimitRange" not in kinds
    assert "ResourceQuota" in {o["kind"] for o in documents(helm_template(namespace="team-a"))}


def test_training_never_preempts(rendered):
    for name in ("chart-default", "k8s-cpu-dev"):
        (training,) = [
            o
            for o in documents(rendered[name])
            if o["kind"] == "PriorityClass" and o["metadata"]["name"] == "invfold-training"
        ]
        assert training["preemptionPolicy"] == "Never", name
