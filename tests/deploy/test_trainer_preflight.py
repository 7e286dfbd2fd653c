"""The chart refuses a Trainer whose TrainJob API lacks `spec.runtimePatches` (the train step does
the same at run time: tests/launch/test_cluster_preflight.py).

`helm template` has no cluster for the chart's `lookup` of the CRD, so the check (the chart's own
helper `invfold.trainerCheck`) is rendered by real helm in a harness chart that hands it a CRD as
values. Upstream facts: kubeflow/trainer v2.1.0's TrainJobSpec has runtimeRef, initializer,
trainer, labels, annotations, podTemplateOverrides, suspend, managedBy; v2.2.0 added
runtimePatches (pkg/apis/trainer/v1alpha1/trainjob_types.go at each tag); the CRD carries the
fields as spec.versions[v1alpha1].schema.openAPIV3Schema.properties.spec.properties."""

from __future__ import annotations

import pytest
import yaml

from tests.support.deploy_tools import CHART, helper_chart, run, tool

V2_1 = ["runtimeRef", "initializer", "trainer", "labels", "annotations", "podTemplateOverrides", "suspend", "managedBy"]
V2_3 = ["runtimeRef", "initializer", "trainer", "runtimePatches", "suspend", "activeDeadlineSeconds", "managedBy"]


def crd(fields: list[str]) -> dict:
    spec = {"type": "object", "properties": {f: {"type": "object"} for f in fields}}
    schema = {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}
    return {
        "metadata": {"name": "trainjobs.trainer.kubeflow.org"},
        "spec": {"versions": [{"name": "v1alpha1", "served": True, "storage": True, "schema": schema}]},
    }


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    return helper_chart(
        tmp_path_factory.mktemp("harness"), '{{- include "invfold.trainerCheck" (list . .Values.crd) }}\n'
    )


def render(harness, value) -> object:
    values = harness / "values.yaml"
    values.write_text(yaml.safe_dump({"crd": value}))
    return run([tool("helm"), "template", "h", str(harness), "-f", str(values)], check=False)


def test_trainer_v2_1_is_refused_by_name(harness):
    proc = render(harness, crd(V2_1))
    assert proc.returncode != 0
    assert "Kubeflow Trainer v2.3 or later" in proc.stderr and "runtimePatches" in proc.stderr


@pytest.mark.parametrize("value", [crd(V2_3), {}], ids=["v2.3", "no-cluster"])
def test_trainer_v2_3_and_no_cluster_pass(harness, value):
    proc = render(harness, value)
    assert proc.returncode == 0, proc.stderr


def test_the_chart_runs_the_check():
    assert "invfold.trainerCheck" in (CHART / "templates" / "checks.yaml").read_text()
