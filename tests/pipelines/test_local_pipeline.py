"""The whole pipeline through KFP's local runner against a real MLflow server on loopback.

One ddp run of the `quality_gate` recipe (the pipeline's default recipe bounded by optimizer steps,
not seconds) is shared by the tests that read it back, and is also the training quality gate: its
model must beat the best constant predictor's median recovery on the held-out test split
(cluster-disjoint from training) by at least 3 points. Measured on a busy 2-core machine: 120 steps
gave 0.193 against 0.076. Further
runs check caching on the data fingerprint, that a worse model does not dethrone the champion,
that an unreachable tracking server costs nothing but the records, and that a failing step
leaves FAILED runs and a non-zero exit with its reason."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient

from invfold.components.register.step import compare_step
from invfold.components.train import recipes
from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS
from invfold.pipelines.local import run_local
from tests.support.docs import stores_found, where_things_land

GATE = recipes.QUALITY_GATE.settings
# The shared run trains a fixed number of steps, so its wall time follows the machine's load: on a
# machine loaded ~10x past its 2 cores it took over 900 s (the suite's per-test limit).
pytestmark = [pytest.mark.timeout(2400), pytest.mark.pipeline, pytest.mark.slow]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, mlflow_server):
    root = tmp_path_factory.mktemp("pipeline")
    data = root / "data"
    data.mkdir()
    shutil.copy(SAMPLE_CHAIN_SET, data / "chain_set.jsonl.gz")
    shutil.copy(SAMPLE_SPLITS, data / "chain_set_splits.json")
    suffix = uuid.uuid4().hex[:6]
    base = {
        "data_uri": str(data / "chain_set.jsonl.gz"),
        "split_file": str(data / "chain_set_splits.json"),
        "mlflow_experiment": f"pipeline-tests-{suffix}",
        "registered_model_name": f"invfold-test-{suffix}",
    }
    return {"root": root, "runs": str(root / "runs"), "base": base, "uri": mlflow_server}


@pytest.fixture(scope="module")
def ddp_run(workspace):
    """The pipeline's defaults (model, 2 processes) bounded by the quality gate's steps."""
    params = {**workspace["base"], "strategy": "ddp", "max_steps": GATE["max_steps"], "time_budget_s": 0}
    result = run_local(params, runs_dir=workspace["runs"], tracking_uri=workspace["uri"])
    return result


def _child_runs(client: MlflowClient, parent_id: str) -> dict:
    parent = client.get_run(parent_id)
    runs = client.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")
    return {r.data.tags["invfold.step"]: r for r in runs}


def test_pipeline_records_runs_metrics_datasets_and_artifacts(ddp_run, workspace):
    client = MlflowClient(workspace["uri"])
    folder = Path(ddp_run.run_folder)
    parent = client.get_run(ddp_run.mlflow_run_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["invfold.strategy"] == "ddp" and parent.data.tags["kfp.pipeline_version"]
    steps = _child_runs(client, ddp_run.mlflow_run_id)
    assert set(steps) == {"fingerprint", "train", "evaluate", "compare", "register"}
    assert {r.info.status for r in steps.values()} == {"FINISHED"}

    train = steps["train"]
    assert train.data.params["strategy"] == "ddp" and train.data.params["nodes"] == "1"
    records = [json.loads(line) for line in (folder / "train-op" / "model" / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in records if r["split"] == "train"]
    history = client.get_metric_history(train.info.run_id, "train/loss")
    assert sorted(m.step for m in history) == train_steps and len(train_steps) >= 2
    for name in ("wallclock/compute_s", "wallclock/sync_s", "wallclock/rank0/compute_s", "wallclock/rank1/sync_s"):
        assert sorted(m.step for m in client.get_metric_history(train.info.run_id, name)) == train_steps, name

    prepared = json.loads(next(folder.parent.glob("*/prep-op/prepared/index.json")).read_text())
    inputs = {i.dataset.name: i for i in train.inputs.dataset_inputs}
    assert set(inputs) == {"train", "validation"}
    assert json.loads(inputs["train"].dataset.source)["digest"] == prepared["digest"]
    assert [a.path for a in client.list_artifacts(train.info.run_id, "dataset")] == [
        "dataset/card.json",
        "dataset/card.md",
    ]

    evaluation = json.loads((folder / "evaluate-op" / "evaluation" / "metrics.json").read_text())
    evaluate = steps["evaluate"]
    assert evaluate.data.metrics["test/recovery"] == pytest.approx(evaluation["datasets"]["test"]["recovery"])
    assert parent.data.metrics["test/recovery"] == pytest.approx(evaluation["datasets"]["test"]["recovery"])
    artifacts = {a.path for a in client.list_artifacts(evaluate.info.run_id, "evaluation")}
    assert {"evaluation/confusion.json", "evaluation/confusion.png", "evaluation/report.html"} <= artifacts
    assert {i.dataset.name for i in evaluate.inputs.dataset_inputs} == {"test"}


def test_model_beats_the_constant_predictor_and_becomes_champion(ddp_run, workspace, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", workspace["uri"])
    client = MlflowClient(workspace["uri"])
    name = workspace["base"]["registered_model_name"]
    evaluation = json.loads((Path(ddp_run.run_folder) / "evaluate-op" / "evaluation" / "metrics.json").read_text())
    recovery = evaluation["datasets"]["test"]["recovery"]
    constant = evaluation["baseline"]["recovery"]["test"]
    assert recovery >= constant + 0.03, f"median test recovery {recovery:.3f} vs constant {constant:.3f}"
    assert ddp_run.registered_version == "1"
    champion = client.get_model_version_by_alias(name, "champion")
    assert champion.version == "1"
    assert float(champion.tags["invfold.test_recovery"]) == pytest.approx(recovery)  # reported
    validation = evaluation["datasets"]["validation"]["recovery"]  # chosen on
    assert float(champion.tags["invfold.validation_recovery"]) == pytest.approx(validation)
    assert champion.tags["invfold.champion_recovery"] == "none" and champion.tags["invfold.data_digest"]
    info = mlflow.models.get_model_info(f"models:/{name}/1")
    assert info.signature is not None and info.saved_input_example_info is not None
    register_dir = Path(ddp_run.run_folder) / "register-op" / "onnx_model"
    assert json.loads((register_dir / "model.parity.json").read_text())["passed"] is True


def test_mlflow_opens_as_a_model_training_experiment_with_datasets_links_metrics_and_descriptions(ddp_run, workspace):
    client = MlflowClient(workspace["uri"])
    name = workspace["base"]["registered_model_name"]
    experiment = client.get_experiment_by_name(workspace["base"]["mlflow_experiment"])
    # MLflow 3's UI shows runs and charts, not its GenAI overview, for this experiment kind
    # (mlflow/mlflow: mlflow/server/js/src/experiment-tracking/constants.ts, enum ExperimentKind)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    parent = client.get_run(ddp_run.mlflow_run_id)
    contexts = {
        i.dataset.name: {t.key: t.value for t in i.tags}["mlflow.data.context"] for i in parent.inputs.dataset_inputs
    }
    assert contexts == {"train": "training", "validation": "validation", "test": "testing"}
    assert f"#/models/{name}/versions/1" in parent.data.tags["mlflow.note.content"]
    version = client.get_model_version(name, "1")
    digest = version.tags["invfold.data_digest"]
    for description in (client.get_registered_model(name).description, version.description):
        assert digest in description and "onnx" in description.lower() and f"models:/{name}@champion" in description
    assert version.run_id == _child_runs(client, ddp_run.mlflow_run_id)["train"].info.run_id  # the source run
    (logged,) = client.search_logged_models(
        [experiment.experiment_id], filter_string=f"source_run_id = '{version.tags['invfold.register_run_id']}'"
    )
    metrics = {m.key: m.value for m in logged.metrics}
    assert metrics["test/recovery"] == pytest.approx(float(version.tags["invfold.test_recovery"]))
    assert "test/perplexity" in metrics and "parity_max_abs_diff" in metrics


def test_kfp_outputs_show_metrics_confusion_matrix_and_reports(ddp_run):
    folder = Path(ddp_run.run_folder)
    out = json.loads((folder / "evaluate-op" / "executor_output.json").read_text())["artifacts"]
    matrix = out["confusion"]["artifacts"][0]["metadata"]["confusionMatrix"]
    assert [a["displayName"] for a in matrix["annotationSpecs"]] == list("ACDEFGHIKLMNPQRSTVWY")
    assert len(matrix["rows"]) == 20
    assert "test_recovery" in out["metrics"]["artifacts"][0]["metadata"]
    html = (folder / "evaluate-op" / "report").read_text()
    assert "data:image/png;base64," in html
    card = next(folder.parent.glob("*/prep-op/card")).read_text()
    assert card.startswith("#")
    train = json.loads((folder / "train-op" / "executor_output.json").read_text())["artifacts"]
    assert train["metrics"]["artifacts"][0]["metadata"]["step"] >= 1
    assert {t["step"] for t in ddp_run.timings} >= {"fingerprint", "train", "evaluate", "compare", "register"}


def test_unchanged_data_hits_prep_cache_and_a_worse_model_keeps_the_champion(ddp_run, workspace):
    params = {**workspace["base"], "time_budget_s": 0, "max_steps": 1, "preset": "tiny", "model_overrides": {}}
    again = run_local(params, runs_dir=workspace["runs"], tracking_uri=workspace["uri"])
    assert not (Path(again.run_folder) / "prep-op").exists(), "prep ran although the data did not change"
    assert again.registered_version is None
    client = MlflowClient(workspace["uri"])
    name = workspace["base"]["registered_model_name"]
    assert client.get_model_version_by_alias(name, "champion").version == "1"
    assert len(client.search_model_versions(f"name = '{name}'")) == 1
    compare = _child_runs(client, again.mlflow_run_id)["compare"]
    assert "does not beat champion v1" in compare.data.tags["invfold.decision"]
    assert "recorded on the same data" in compare.data.tags["invfold.decision"]


def test_champion_on_other_data_is_evaluated_again(ddp_run, workspace, tmp_path):
    folder = Path(ddp_run.run_folder)
    evaluation = tmp_path / "evaluation"
    shutil.copytree(folder / "evaluate-op" / "evaluation", evaluation)
    metrics = json.loads((evaluation / "metrics.json").read_text())
    metrics["data_digest"] = "sha256:" + "0" * 64  # as if this run's test data were different
    (evaluation / "metrics.json").write_text(json.dumps(metrics))
    prepared = next(folder.parent.glob("*/prep-op/prepared"))
    result = compare_step(
        prepared_path=str(prepared),
        evaluation_path=str(evaluation),
        pipeline_run_id="re-eval",
        tracking_uri=workspace["uri"],
        experiment=workspace["base"]["mlflow_experiment"],
        model_name=workspace["base"]["registered_model_name"],
        threshold=0.0,
    )
    assert result.basis == "re-evaluated on this run's validation data"
    assert result.champion == pytest.approx(metrics["datasets"]["validation"]["recovery"], abs=1e-6)
    assert result.register is False  # equal, not better


def test_fine_tuning_from_a_model_is_registered_only_if_it_beats_its_starting_weights(ddp_run, workspace):
    """init_from through the pipeline: the train step fine-tunes (frozen encoder) from the first
    run's model, and compare scores those starting weights on the same validation data."""
    import torch

    start = Path(ddp_run.run_folder) / "train-op" / "model" / "model.pt"
    params = {
        **workspace["base"],
        "init_from": str(start),
        "freeze_encoder": True,
        "lr": 1e-4,
        "warmup_steps": 1,
        "max_steps": 2,
        "time_budget_s": 0,
        "procs_per_node": 1,
    }
    tuned = run_local(params, runs_dir=workspace["runs"], tracking_uri=workspace["uri"])
    folder = Path(tuned.run_folder)
    model = torch.load(folder / "train-op" / "model" / "model.pt", weights_only=True)
    assert model["provenance"]["init_from"] == str(start)
    initial = torch.load(start, weights_only=True)["state_dict"]
    frozen = [k for k in initial if k.startswith("encoder")]
    assert frozen and all(torch.equal(model["state_dict"][k], initial[k]) for k in frozen)
    assert any(not torch.equal(model["state_dict"][k], initial[k]) for k in initial if k.startswith("readout"))

    comparison = json.loads((folder / "compare-op" / "comparison").read_text())
    first = json.loads((Path(ddp_run.run_folder) / "evaluate-op" / "evaluation" / "metrics.json").read_text())
    tuned_metrics = json.loads((folder / "evaluate-op" / "evaluation" / "metrics.json").read_text())
    start_recovery = first["datasets"]["validation"]["recovery"]  # the same model on the same (cached) data
    assert comparison["init_from"] == str(start)
    assert comparison["starting_point"] == pytest.approx(start_recovery, abs=1e-6)
    assert comparison["candidate"] == pytest.approx(tuned_metrics["datasets"]["validation"]["recovery"])
    beats = comparison["candidate"] > start_recovery  # the champion (v1) is that same model
    assert comparison["register"] is beats and (tuned.registered_version is not None) is beats
    assert ("beats" if beats else "does not beat the starting weights") in comparison["decision"]


def test_changed_data_misses_the_cache_and_an_unreachable_server_loses_only_records(
    ddp_run, workspace, unreachable_uri, capfd
):
    data = Path(workspace["base"]["data_uri"])
    with gzip.open(data, "rt") as fh:
        lines = fh.readlines()
    with gzip.open(data, "wt") as fh:  # same path, different content
        fh.writelines(lines[:-3])
    params = {**workspace["base"], "time_budget_s": 0, "max_steps": 2, "preset": "tiny", "model_overrides": {}}
    result = run_local(params, runs_dir=workspace["runs"], tracking_uri=unreachable_uri)
    output = capfd.readouterr()
    assert (Path(result.run_folder) / "prep-op").exists(), "prep was served from the cache after the data changed"
    assert (Path(result.run_folder) / "train-op" / "model" / "model.pt").exists()
    assert result.mlflow_run_id is None and result.registered_version is None
    text = output.out + output.err
    assert "unreachable" in text and "did NOT record" in text and "metric points from metrics.jsonl" in text


def test_invfold_run_prints_a_line_per_step_and_a_summary_and_keeps_logs_and_artifacts_under_runs(
    workspace, tmp_path, monkeypatch, capfd
):
    """The main job as a person runs it (SQLite store, the default): a short readable output,
    the whole output in runs/logs, MLflow's artifacts under runs/ (none in the working folder)."""
    from invfold.cli import main

    monkeypatch.chdir(tmp_path)
    base = workspace["base"]
    code = main(
        ["run", "--data", base["data_uri"], "--split-file", base["split_file"], "--runs-dir", "runs"]
        + ["--preset", "tiny", "--max-steps", "3", "--nproc", "1", "--time-budget", "0"]
    )
    out = capfd.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert len(lines) < 45, out  # the local runner alone prints about a thousand
    # the run's estimate (pipelines/estimate.py), before the first step starts
    estimate = [i for i, line in enumerate(lines) if line.startswith("estimate: about")]
    first_step = min(i for i, line in enumerate(lines) if line.split()[1:2] == ["fingerprint"])
    assert estimate and estimate[0] < first_step, out
    for step in ("fingerprint", "prep", "train", "evaluate", "compare", "register"):
        assert any(line.split()[:2] == ["ok", step] for line in lines), out
    assert "test median recovery" in out and "constant predictor" in out and "champion decision" in out
    flat = re.sub(r"[│\s]", "", out)  # the table wraps long cells
    assert "mlflowui--backend-store-urisqlite:///" in flat and "?workflowType=machine_learning" in flat
    log_file = next((tmp_path / "runs" / "logs").glob("run-*.log"))
    logged = log_file.read_text()
    assert "Executing task 'train-op'" in logged and "| loss " in logged and len(logged.splitlines()) > 5 * len(lines)
    assert not (tmp_path / "mlruns").exists()
    assert list((tmp_path / "runs" / "artifacts").rglob("model.onnx"))
    # ARCHITECTURE.md's "Where things land", row by row, against what this run left
    runs, rows = tmp_path / "runs", where_things_land()
    for pattern, kept in rows:
        found = stores_found(runs, pattern)
        assert bool(found) is kept, f"runs/{pattern}: ARCHITECTURE.md says {'kept' if kept else 'removed'}; {found}"
    assert {p.name for p in runs.iterdir()} <= {pattern.split("/")[0] for pattern, _ in rows}


def test_a_failing_step_fails_the_run_with_its_reason_and_marks_mlflow_runs_failed(workspace, tmp_path, capfd):
    from invfold.cli import main

    bad = tmp_path / "broken.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    code = main(
        [
            "run",
            "--data",
            str(bad),
            "--runs-dir",
            workspace["runs"],
            "--tracking-uri",
            workspace["uri"],
            "--experiment",
            workspace["base"]["mlflow_experiment"],
            "--no-cache",
        ]
    )
    captured = capfd.readouterr()
    err, out = captured.err, captured.out
    assert code == 1
    assert "invfold run: error: the pipeline failed" in err and "prep-op" in err
    # the failing step's own error, in full, where a person reads (not only in the log file)
    assert "FAILED prep" in out and "Traceback (most recent call last)" in out and str(bad) in out
    client = MlflowClient(workspace["uri"])
    experiment = client.get_experiment_by_name(workspace["base"]["mlflow_experiment"])
    failed = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`invfold.pipeline_status` LIKE 'FAILED%'"
    )
    assert len(failed) == 1 and failed[0].info.status == "FAILED"
    assert failed[0].data.params["data_uri"] == str(bad)
