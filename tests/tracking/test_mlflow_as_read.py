"""MLflow as its users read it, read back from a real MLflow server after the pipeline's own steps
ran (train on 2 real processes, evaluate, compare, export and register; no KFP around them):
the pipeline's run carries the options that decide a run and its card and report, every figure
has one name, the training charts open on loss and recovery, and the registered version's source
run is the training run."""

from __future__ import annotations

import json
import uuid

import pytest
import torch
from mlflow import MlflowClient

from invfold.components.evaluate.step import HEADLINE_DATASETS, HEADLINE_FIGURES, evaluate_step
from invfold.components.launch.step import train_step
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.register.step import compare_step, register_step
from invfold.components.tracking.tracker import (
    PARENT_TAG,
    PROGRESS_FIGURES,
    RUN_LIST_COLUMNS,
    RUN_LIST_VIEW_KEY,
    SHARED_VIEW_TAG_PREFIX,
    experiment_page,
)
from tests.support.browser import rendered_dom, run_list_cells

STEPS = 4


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory, sample_prepared, mlflow_server) -> dict:
    """Fine-tunes a `tiny` model while `preset` says "default" (ignored when fine-tuning): MLflow
    must record the preset that ran."""
    root = tmp_path_factory.mktemp("as-read")
    torch.manual_seed(0)
    start = root / "start.pt"
    save_model(start, InverseFoldingModel(ModelConfig.preset("tiny")))
    names = {"experiment": f"as-read-{uuid.uuid4().hex[:6]}", "model": f"invfold-{uuid.uuid4().hex[:6]}"}
    common = {
        "pipeline_run_id": f"kfp-{uuid.uuid4().hex[:8]}",
        "tracking_uri": mlflow_server,
        "experiment": names["experiment"],
    }
    model = root / "model"
    model.mkdir()
    options = {"preset": "default", "init_from": str(start), "lr": 1e-3, "warmup_steps": 1, "max_steps": STEPS}
    trained = train_step(
        prepared_path=sample_prepared,
        prepared_uri="",
        model_path=str(model),
        pipeline_run_name="as-read",
        strategy="ddp",
        nodes=1,
        procs_per_node=2,
        gpus_per_node=0,
        train_options={**options, "log_every": 1, "validate_every": 2, "threads": 1},
        checkpoint_root=str(root / "checkpoints"),
        storage_root="",
        storage_secret="",
        **common,
    )
    evaluated = evaluate_step(
        prepared_path=sample_prepared,
        model_path=str(model),
        out=str(root / "evaluation"),
        report_path=str(root / "report.html"),
        **common,
    )
    comparison = compare_step(
        prepared_path=sample_prepared,
        evaluation_path=str(root / "evaluation"),
        model_name=names["model"],
        threshold=0.0,
        init_from=str(start),
        **common,
    )
    registered = register_step(
        prepared_path=sample_prepared,
        model_path=str(model),
        onnx_dir=str(root / "onnx"),
        comparison=comparison,  # registered whatever compare decided: the records are under test
        model_name=names["model"],
        **common,
    )
    client = MlflowClient(mlflow_server)
    parent = client.get_run(trained["metadata"]["mlflow_parent_run_id"])
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'"
    )
    return {
        "client": client,
        "parent": parent,
        "steps": {r.data.tags["invfold.step"]: r for r in children},
        "evaluation": json.loads((root / "evaluation" / "metrics.json").read_text()),
        "model": names["model"],
        "version": registered["metadata"]["version"],
        "start": str(start),
        "evaluate_run": evaluated["metadata"]["mlflow_run_id"],
        "options": options,
        "root": root,
        "prepared": sample_prepared,
        "common": common,
    }


@pytest.mark.slow
def test_the_pipeline_run_carries_the_options_that_decide_it_and_its_card_and_report(pipeline_run):
    client, parent = pipeline_run["client"], pipeline_run["parent"]
    params = parent.data.params
    assert params["preset"] == "tiny"  # the preset that ran, not the "default" the options said
    assert pipeline_run["steps"]["train"].data.params["preset"] == "tiny"
    assert params["init_from"] == pipeline_run["start"] and params["strategy"] == "ddp"
    assert float(params["lr"]) == 1e-3 and params["max_steps"] == str(STEPS) and params["time_budget_s"] == "null"
    assert (params["processes"], params["nodes"], params["procs_per_node"]) == ("2", "1", "2")
    assert params["data_digest"].startswith("sha256:")

    artifacts = {a.path for folder in ("dataset", "report") for a in client.list_artifacts(parent.info.run_id, folder)}
    assert {"dataset/card.md", "dataset/card.json", "report/report.html", "report/per_protein.csv"} <= artifacts
    local = client.download_artifacts(parent.info.run_id, "report/per_protein.csv")
    with open(local) as fh:
        assert fh.readline().startswith("protein,length,chains,scored_residues,recovery,perplexity")

    test = pipeline_run["evaluation"]["datasets"]["test"]
    validation = pipeline_run["evaluation"]["datasets"]["validation"]
    assert parent.data.metrics["test/recovery"] == pytest.approx(test["recovery"])
    assert parent.data.metrics["validation/recovery"] == pytest.approx(validation["recovery"])  # chosen on


def test_each_figure_has_one_name(pipeline_run):
    steps = pipeline_run["steps"]
    every = {key for run in [pipeline_run["parent"], *steps.values()] for key in run.data.metrics}
    flat = {k for k in every if "/" not in k}  # summary and export figures; the rest is `<group>/<figure>`
    assert not {k for k in flat if k.startswith(("validation_", "test_", "candidate_", "starting_", "champion_"))}
    train = steps["train"].data.metrics
    assert "epoch" not in train and "wallclock/epoch" in train  # the summary's epoch is the history's last point
    # the candidate's validation recovery lives on the evaluate run (and the pipeline's), not on compare
    assert set(steps["compare"].data.metrics) == {"validation/starting_recovery"}
    evaluated = steps["evaluate"].data.metrics
    assert evaluated["validation/recovery"] == pytest.approx(pipeline_run["parent"].data.metrics["validation/recovery"])
    assert {"test/recovery", "test/perplexity", "test/constant_recovery", "test_short_L100/recovery"} <= set(evaluated)


def test_evaluation_figures_sit_on_the_evaluate_run_and_the_headline_once_more_where_people_look(pipeline_run):
    """Every figure of an evaluation is the evaluate run's. The headline (recovery with its
    interval, perplexity, the constant predictor; test and validation) is also on the pipeline's
    run, the row of MLflow's run list, and on the registered model; nothing else is repeated."""
    steps, parent = pipeline_run["steps"], pipeline_run["parent"]
    evaluated = steps["evaluate"].data.metrics
    expected = {f"{d}/{f}" for d in HEADLINE_DATASETS for f in HEADLINE_FIGURES} & set(evaluated)
    assert {"test/recovery", "test/perplexity", "validation/recovery"} <= expected
    assert set(parent.data.metrics) == expected
    for key in expected:
        assert parent.data.metrics[key] == pytest.approx(evaluated[key])
    export = {"parity_max_abs_diff", "parity_tolerance", "onnx_size_bytes", "num_parameters"}
    assert set(steps["register"].data.metrics) == expected | export
    repeated = [
        (key, step)
        for step, run in steps.items()
        if step not in ("evaluate", "register", "train")  # train's validation/* is its own history
        for key in run.data.metrics
        if key in evaluated
    ]
    assert not repeated


def test_the_training_charts_open_on_loss_and_recovery_with_timing_after(pipeline_run):
    """MLflow's run page draws a chart section per metric-name prefix, sections sorted by name,
    unprefixed metrics last (mlflow/server/js/src/experiment-tracking/components/runs-charts/
    runs-charts.types.ts, getBaseChartAndSectionConfigs; MLflow 3.17's UI): the order is computed
    here from the names read back; the screenshot script shows the page itself."""
    client = pipeline_run["client"]
    train = pipeline_run["steps"]["train"]
    keys = set(train.data.metrics)
    sections = sorted({k.rsplit("/", 1)[0] for k in keys if "/" in k})
    assert sections[:2] == ["train", "validation"], sections
    assert "train/loss" in keys and "validation/recovery" in keys
    timing = [s for s in sections if s.startswith("wallclock")]
    assert timing == ["wallclock", "wallclock/rank0", "wallclock/rank1"] and sections[2:] == timing
    # the train section holds the curves a run is judged by; progress counters are time figures
    curves = {k.split("/", 1)[1] for k in keys if k.startswith("train/")}
    assert curves == {"loss", "nll", "perplexity", "accuracy", "lr", "grad_norm", "nonfinite_steps"}, curves
    assert {f"wallclock/{k}" for k in PROGRESS_FIGURES} <= keys
    assert not [k for k in keys if k.startswith("time/")]
    history = client.get_metric_history(train.info.run_id, "validation/recovery")
    assert sorted(m.step for m in history) == [2, 4]
    assert len(client.get_metric_history(train.info.run_id, "wallclock/rank1/sync_s")) == STEPS


def test_the_registered_version_comes_from_the_training_run_and_links_both(pipeline_run):
    client, name = pipeline_run["client"], pipeline_run["model"]
    version = client.get_model_version(name, pipeline_run["version"])
    train, register = pipeline_run["steps"]["train"], pipeline_run["steps"]["register"]
    assert version.run_id == train.info.run_id  # the version page's "source run"
    assert version.tags["invfold.train_run_id"] == train.info.run_id
    assert version.tags["invfold.register_run_id"] == register.info.run_id
    for run in (train, register):
        assert f"/runs/{run.info.run_id})" in version.description
    experiment = pipeline_run["parent"].info.experiment_id
    (logged,) = client.search_logged_models([experiment], filter_string=f"source_run_id = '{register.info.run_id}'")
    assert version.source == f"models:/{logged.model_id}"  # the ONNX graph, logged with its parity figures
    assert {m.key for m in logged.metrics} >= {"test/recovery", "test/perplexity", "parity_max_abs_diff"}
    assert not [m.key for m in logged.metrics if m.key.startswith("test_")]  # subsets stay on evaluate
    perplexity = pipeline_run["evaluation"]["datasets"]["test"]["perplexity"]
    assert f"test perplexity: {perplexity:.3f}" in client.get_registered_model(name).description
    assert client.get_run(train.info.run_id).data.tags["invfold.registered_version"] == f"{name} v{version.version}"
    assert f"#/models/{name}/versions/{version.version}" in pipeline_run["parent"].data.tags["mlflow.note.content"]


def test_the_champions_weights_are_read_from_its_source_run(pipeline_run, mlflow_server):
    """compare scores a champion from other data with the checkpoint in the version's source run
    (the training run logs model_pt/model.pt; the register run no longer carries a copy)."""
    client = pipeline_run["client"]
    train, register = pipeline_run["steps"]["train"], pipeline_run["steps"]["register"]
    assert [a.path for a in client.list_artifacts(train.info.run_id, "model_pt")] == ["model_pt/model.pt"]
    assert client.list_artifacts(register.info.run_id, "model_pt") == []
    evaluation = pipeline_run["root"] / "evaluation-other-data"
    metrics = dict(pipeline_run["evaluation"], data_digest="sha256:" + "1" * 64)
    evaluation.mkdir()
    (evaluation / "metrics.json").write_text(json.dumps(metrics))
    again = compare_step(
        prepared_path=pipeline_run["prepared"],
        evaluation_path=str(evaluation),
        model_name=pipeline_run["model"],
        threshold=0.0,
        **{**pipeline_run["common"], "pipeline_run_id": f"kfp-{uuid.uuid4().hex[:8]}"},
    )
    assert again.basis == "re-evaluated on this run's validation data"
    assert again.champion == pytest.approx(metrics["datasets"]["validation"]["recovery"], abs=1e-6)


def test_the_run_list_shows_how_good_each_run_is_in_a_real_browser(pipeline_run, mlflow_server):
    """The experiment page we print, opened in headless Chromium against the real server's own UI
    (MLflow 3.17's, as a person opens it): the pipeline's row shows validation and test recovery,
    test perplexity and the constant predictor, read from the page's grid cells. A metric renamed
    on either side leaves its cell empty and fails here."""
    client, parent = pipeline_run["client"], pipeline_run["parent"]
    experiment = client.get_experiment(parent.info.experiment_id)
    view = json.loads(experiment.tags[SHARED_VIEW_TAG_PREFIX + RUN_LIST_VIEW_KEY])
    assert view["selectedColumns"] == list(RUN_LIST_COLUMNS)
    dom = rendered_dom(f"{mlflow_server}/{experiment_page(experiment.experiment_id)}", wait_for="metrics.`")
    cells = run_list_cells(dom, parent.info.run_id)
    for column in RUN_LIST_COLUMNS:
        kind, name = column.split(".", 1)
        shown = cells.get(column, "")
        if kind == "metrics":
            assert shown and float(shown) == pytest.approx(parent.data.metrics[name.strip("`")], rel=1e-6), column
        else:
            assert shown == parent.data.params[name.strip("`")], column
