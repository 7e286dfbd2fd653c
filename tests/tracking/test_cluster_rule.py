"""On a cluster a tracking failure fails the step that needs the record; compare never decides
against a registry it could not read. (Locally the same failures are skipped and reported: see
test_tracker.py.)"""

from __future__ import annotations

import json
import uuid

import pytest

from invfold.components.register.step import compare_step
from invfold.components.tracking import RunContext, Tracker, TrackingError


def cluster_context(uri: str) -> RunContext:
    return RunContext(pipeline_run_id=uuid.uuid4().hex, tracking_uri=uri, experiment="cluster-rule")


def test_inside_a_pod_tracking_is_required_by_default(monkeypatch, unreachable_uri):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert cluster_context(unreachable_uri).required is True
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert cluster_context(unreachable_uri).required is False


def test_an_unreachable_server_fails_a_cluster_step(monkeypatch, unreachable_uri):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    with pytest.raises(TrackingError, match="unreachable.*train step needs its record"):
        Tracker(cluster_context(unreachable_uri), "train")


def test_a_failed_call_fails_a_cluster_step(monkeypatch, mlflow_server, tmp_path):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    with (
        pytest.raises(TrackingError, match="could not record artifact"),
        Tracker(cluster_context(mlflow_server), "evaluate") as tracker,
    ):
        tracker.log_artifact(tmp_path / "missing.json")


def test_compare_on_a_cluster_refuses_to_decide_without_the_registry(monkeypatch, unreachable_uri, tmp_path):
    """Before: compare answered "not registering" against an empty registry and the run went green."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    evaluation = tmp_path / "evaluation"
    evaluation.mkdir()
    (evaluation / "metrics.json").write_text(
        json.dumps({"datasets": {"validation": {"recovery": 0.3}, "test": {"recovery": 0.3}}, "data_digest": "d" * 16})
    )
    with pytest.raises(TrackingError):
        compare_step(
            prepared_path=str(tmp_path),
            evaluation_path=str(evaluation),
            pipeline_run_id=uuid.uuid4().hex,
            tracking_uri=unreachable_uri,
            experiment="cluster-rule",
            model_name="invfold-cluster-rule",
            threshold=0.0,
        )
