"""`invfold train`, `evaluate` and `design` run on their own record to MLflow with
`--tracking-uri` / `--experiment`: one top-level run each, in the pipeline's experiment beside the
pipelines' runs, holding what the pipeline's steps record; read back from a real MLflow server."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient

from invfold.cli import main
from invfold.components.prep.shards import open_prepared
from invfold.components.tracking import RunContext, Tracker
from invfold.components.tracking.tracker import PARENT_TAG


@pytest.fixture(scope="module")
def commands(tmp_path_factory, sample_prepared, mlflow_server) -> dict:
    root = tmp_path_factory.mktemp("commands")
    experiment = f"commands-{uuid.uuid4().hex[:6]}"
    with Tracker(RunContext(pipeline_run_id=uuid.uuid4().hex, tracking_uri=mlflow_server, experiment=experiment), "x"):
        pass  # a pipeline's runs in that experiment, for the ad-hoc runs to land beside
    flags = ["--tracking-uri", mlflow_server, "--experiment", experiment]
    train = ["train", "--data", sample_prepared, "--out", str(root / "train"), "--preset", "tiny"]
    train += ["--max-steps", "2", "--log-every", "1", "--validate-every", "2", "--nproc", "2", "--lr", "0.001"]
    assert main([*train, *flags]) == 0
    model = str(root / "train" / "model.pt")
    assert main(["evaluate", model, "--data", sample_prepared, "--out", str(root / "eval"), *flags]) == 0
    test = open_prepared(sample_prepared).open("test")
    chain = test[0].name
    from invfold.data import SAMPLE_CHAIN_SET

    design = ["design", model, str(SAMPLE_CHAIN_SET), "--name", chain, "-n", "2", "--out", str(root / "d.fasta")]
    assert main([*design, *flags]) == 0
    client = MlflowClient(mlflow_server)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id])
    return {"client": client, "root": root, "runs": runs, "chain": chain}


def _run(commands, step):
    (run,) = [r for r in commands["runs"] if r.data.tags.get("invfold.step") == step and PARENT_TAG not in r.data.tags]
    return run


def test_each_command_lands_as_a_run_of_its_own_beside_the_pipelines_runs(commands):
    tops = [r for r in commands["runs"] if PARENT_TAG not in r.data.tags]
    assert sorted(r.data.tags.get("invfold.step", "pipeline") for r in tops) == [
        "design",
        "evaluate",
        "pipeline",
        "train",
    ]
    for step in ("train", "evaluate", "design"):
        run = _run(commands, step)
        assert run.info.status == "FINISHED" and run.data.tags["invfold.source"] == "command line"
        assert run.info.run_name.startswith(f"{step}-")


def test_invfold_train_records_what_the_pipelines_train_step_records(commands):
    client, run = commands["client"], _run(commands, "train")
    params = run.data.params
    assert (params["preset"], params["strategy"], params["processes"], params["max_steps"]) == ("tiny", "ddp", "2", "2")
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert sorted(m.step for m in history) == [1, 2]
    assert client.get_metric_history(run.info.run_id, "validation/recovery")[0].step == 2
    assert {"wallclock/rank1/compute_s", "step", "elapsed_s"} <= set(run.data.metrics)
    assert {i.dataset.name for i in run.inputs.dataset_inputs} == {"train", "validation"}  # once each, not twice
    assert {a.path for a in client.list_artifacts(run.info.run_id, "dataset")} == {
        "dataset/card.md",
        "dataset/card.json",
    }


def test_invfold_evaluate_and_design_record_their_figures_and_outputs(commands):
    client, root = commands["client"], commands["root"]
    evaluation = _run(commands, "evaluate")
    metrics = json.loads((root / "eval" / "metrics.json").read_text())
    assert evaluation.data.metrics["test/recovery"] == pytest.approx(metrics["datasets"]["test"]["recovery"])
    assert len(client.get_metric_history(evaluation.info.run_id, "test/recovery")) == 1  # not again as "parent"
    assert evaluation.data.params["data"] == metrics["data"]
    artifacts = {a.path for a in client.list_artifacts(evaluation.info.run_id, "evaluation")}
    assert {"evaluation/report.html", "evaluation/per_protein.csv", "evaluation/metrics.json"} <= artifacts

    design = _run(commands, "design")
    assert design.data.metrics["designs"] == 2 and 0 <= design.data.metrics["mean_recovery"] <= 1
    assert design.data.params["name"] == commands["chain"]
    assert [a.path for a in client.list_artifacts(design.info.run_id, "designs")] == ["designs/d.fasta"]


def test_experiment_without_a_tracking_uri_is_one_line_naming_the_flags(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code = main(
        ["evaluate", str(tmp_path / "m.pt"), "--data", str(tmp_path), "--out", str(tmp_path / "e")]
        + [
            "--experiment",
            "x",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "--experiment" in err[0] and "--tracking-uri" in err[0] and "MLFLOW_TRACKING_URI" in err[0]
    assert not Path(tmp_path / "e").exists()
