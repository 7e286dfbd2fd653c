"""The tracking module against a real MLflow server: run layout, what gets recorded, the
registry, closing runs, and going on without a reachable server."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid

import pytest
from mlflow import MlflowClient

from invfold.components.tracking import RunContext, Tracker, finish_pipeline
from invfold.components.tracking.tracker import PARENT_TAG, PIPELINE_RUN_TAG, experiment_tags
from tests.support.onnx_files import identity_onnx


def context(uri: str, **kw) -> RunContext:
    return RunContext(
        pipeline_run_id=kw.pop("run_id", uuid.uuid4().hex),
        tracking_uri=uri,
        experiment=kw.pop("experiment", "tracker-tests"),
        pipeline_run_name="demo-run",
        pipeline_version="0.1.0",
        **kw,
    )


def test_steps_nest_under_one_parent_run_per_pipeline_run(mlflow_server, tmp_path):
    ctx = context(mlflow_server, run_url="http://kfp.example/#/runs/details/x")
    metrics_file = tmp_path / "metrics.jsonl"
    metrics_file.write_text(
        "".join(
            json.dumps({"split": "train", "step": s, "time": 1.7e9 + s, "loss": 3.0 - s / 10, "lr": 1e-3}) + "\n"
            for s in range(1, 6)
        )
        + json.dumps({"split": "validation", "step": 5, "time": 1.7e9 + 6, "recovery": 0.2})
        + "\n"
    )
    (tmp_path / "card.md").write_text("# card\n")
    with Tracker(ctx, "train", params={"lr": 0.002, "model_overrides": {"hidden": 64}}) as train:
        assert train.log_metrics_file(metrics_file) == 11
        train.log_dataset("train", "sha256:" + "ab" * 32, "/data/prepared", "training", {"chains": 10})
        train.log_artifact(tmp_path / "card.md", "dataset")
    with Tracker(ctx, "evaluate") as evaluate:
        evaluate.log_metrics({"test_recovery": 0.25, "test_perplexity": float("nan")})
    assert train.parent_run_id == evaluate.parent_run_id and not train.skipped and not evaluate.skipped

    client = MlflowClient(mlflow_server)
    parent = client.get_run(train.parent_run_id)
    assert parent.data.tags[PIPELINE_RUN_TAG] == ctx.pipeline_run_id
    assert parent.data.tags["kfp.run_url"] == ctx.run_url and parent.data.tags["kfp.pipeline_version"] == "0.1.0"
    child = client.get_run(train.run_id)
    assert child.data.tags[PARENT_TAG] == parent.info.run_id and child.info.status == "FINISHED"
    assert child.data.params["lr"] == "0.002" and json.loads(child.data.params["model_overrides"]) == {"hidden": 64}
    history = client.get_metric_history(train.run_id, "train/loss")
    assert [(m.step, round(m.value, 3)) for m in sorted(history, key=lambda m: m.step)] == [
        (s, round(3.0 - s / 10, 3)) for s in range(1, 6)
    ]
    assert client.get_metric_history(train.run_id, "validation/recovery")[0].value == 0.2
    (dataset_input,) = child.inputs.dataset_inputs
    assert dataset_input.dataset.name == "train" and dataset_input.tags[0].value == "training"
    assert json.loads(dataset_input.dataset.source)["digest"] == "sha256:" + "ab" * 32
    assert [a.path for a in client.list_artifacts(train.run_id, "dataset")] == ["dataset/card.md"]
    assert "test_perplexity" not in client.get_run(evaluate.run_id).data.metrics  # NaN is not recorded


def test_a_failed_step_and_its_pipeline_end_failed(mlflow_server):
    ctx = context(mlflow_server)
    with pytest.raises(RuntimeError):
        with Tracker(ctx, "train") as train:
            raise RuntimeError("boom")
    with Tracker(ctx, "prep") as dangling:
        pass
    client = MlflowClient(mlflow_server)
    assert client.get_run(train.run_id).info.status == "FAILED"
    closed = finish_pipeline(ctx, failed=True, message="FAILED: train failed")
    assert train.parent_run_id in closed
    parent = client.get_run(train.parent_run_id)
    assert parent.info.status == "FAILED" and parent.data.tags["invfold.pipeline_status"] == "FAILED: train failed"
    assert client.get_run(dangling.run_id).info.status == "FINISHED"


def test_a_pipeline_that_succeeded_ends_finished(mlflow_server):
    ctx = context(mlflow_server)
    with Tracker(ctx, "train") as train:
        pass
    finish_pipeline(ctx, failed=False)
    assert MlflowClient(mlflow_server).get_run(train.parent_run_id).info.status == "FINISHED"


def test_injected_run_id_is_used_as_the_step_run(mlflow_server, monkeypatch):
    """KFP's MLflow plugin nests the task's run under a run per DAG (here the exit handler's):
    the pipeline's run is the top one. The plugin makes the experiment too: it gets invfold's
    tags, so MLflow's UI opens it on the run list, not as a GenAI experiment."""
    client = MlflowClient(mlflow_server)
    experiment = client.create_experiment(f"kfp-injected-{uuid.uuid4().hex[:6]}")
    kfp_parent = client.create_run(experiment).info.run_id
    exit_handler = client.create_run(experiment, tags={PARENT_TAG: kfp_parent}).info.run_id
    kfp_task = client.create_run(experiment, tags={PARENT_TAG: exit_handler}).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", kfp_task)
    with Tracker(context(mlflow_server), "train") as train:
        train.log_metrics({"x": 1.0})
    assert (train.run_id, train.parent_run_id) == (kfp_task, kfp_parent)
    assert client.get_run(kfp_task).data.metrics["x"] == 1.0
    tags = client.get_experiment(experiment).tags
    assert {key: tags.get(key) for key in experiment_tags()} == experiment_tags()


def test_unreachable_server_skips_recording_and_says_what(unreachable_uri, tmp_path, caplog):
    ctx = context(unreachable_uri)
    metrics_file = tmp_path / "metrics.jsonl"
    metrics_file.write_text(json.dumps({"split": "train", "step": 1, "loss": 2.0}) + "\n")
    with caplog.at_level(logging.WARNING, logger="invfold.components.tracking.tracker"):
        with Tracker(ctx, "train", params={"lr": 1}) as tracker:
            tracker.log_metrics_file(metrics_file)
            tracker.log_artifact(metrics_file)
            assert tracker.champion("m") is None
    assert not tracker.available and tracker.run_id is None
    assert {"step run", "1 params", "1 metric points from metrics.jsonl", "artifact metrics.jsonl"} <= set(
        tracker.skipped
    )
    text = caplog.text
    assert "unreachable" in text and "did NOT record" in text and "metric points from metrics.jsonl" in text
    assert finish_pipeline(ctx, failed=True) == []


def test_default_tracking_uri_is_a_sqlite_file_under_the_runs_folder(tmp_path):
    from invfold.components.tracking import default_tracking_uri

    assert default_tracking_uri(tmp_path / "runs") == f"sqlite:///{tmp_path}/runs/mlflow.db"


def test_a_registered_version_names_the_training_run_as_its_source_and_links_both(mlflow_server, tmp_path):
    ctx = context(mlflow_server)
    with Tracker(ctx, "train") as train:
        pass
    name = f"tracker-model-{uuid.uuid4().hex[:6]}"
    example = identity_onnx(tmp_path / "model.onnx")
    with Tracker(ctx, "register") as register:
        assert register.step_run_id("train") == train.run_id
        assert register.step_run_id("evaluate") is None
        version = register.log_onnx_model(
            str(tmp_path / "model.onnx"),
            name,
            example,
            {"invfold.decision": "first"},
            metrics={"test/recovery": 0.3},
            description="what the model is",
            source_run_id=register.step_run_id("train"),
        )
    assert version == "1" and not register.skipped
    client = MlflowClient(mlflow_server)
    found = client.get_model_version(name, "1")
    assert found.run_id == train.run_id  # the version page's source run: where the weights were made
    assert found.tags["invfold.register_run_id"] == register.run_id and found.tags["invfold.decision"] == "first"
    assert found.description.startswith("what the model is")
    assert f"/runs/{train.run_id})" in found.description and f"/runs/{register.run_id})" in found.description
    experiment = client.get_run(train.run_id).info.experiment_id
    (logged,) = client.search_logged_models([experiment], filter_string=f"source_run_id = '{register.run_id}'")
    assert {m.key: m.value for m in logged.metrics} == {"test/recovery": 0.3}
    assert client.get_run(train.run_id).data.tags["invfold.registered_version"] == f"{name} v1"
    assert found.source == f"models:/{logged.model_id}"  # the version's files: the ONNX model logged by register


def test_mlflows_client_telemetry_is_off_unless_asked_for():
    """Its thread mutated os.environ under a step's request (KeyError '_MLFLOW_TELEMETRY_SESSION_ID').
    (Read from MLflow's own setting: MLflow also turns telemetry off under pytest and CI.)"""
    probe = (
        "import invfold.components.tracking\n"
        "from mlflow.environment_variables import MLFLOW_DISABLE_TELEMETRY\n"
        "print(MLFLOW_DISABLE_TELEMETRY.get())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")}
    off = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    on = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "MLFLOW_DISABLE_TELEMETRY": "false"}, capture_output=True, text=True
    )
    assert off.stdout.split()[-1] == "True", off.stderr[-2000:]
    assert on.stdout.split()[-1] == "False", on.stderr[-2000:]


def test_the_pipeline_runs_page_is_linked_for_other_uis(mlflow_server, tmp_path):
    """The address other UIs link to (the Kubeflow UI's register summary): the pipeline's run in
    MLflow's UI; none for a store without a UI of its own."""
    ctx = RunContext(
        pipeline_run_id=f"kfp-{uuid.uuid4().hex[:8]}", tracking_uri=mlflow_server + "/", experiment="links"
    )
    with Tracker(ctx, "register") as tracker:
        page = tracker.pipeline_run_page()
    parent = MlflowClient(mlflow_server).get_run(tracker.parent_run_id)
    assert page == f"{mlflow_server}/#/experiments/{parent.info.experiment_id}/runs/{parent.info.run_id}"
    local = RunContext(pipeline_run_id="kfp-local", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    with Tracker(local, "register") as tracker:
        assert tracker.pipeline_run_page() is None
