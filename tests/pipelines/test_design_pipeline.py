"""The design pipeline through KFP's local runner: a tiny model registered in a local MLflow
store (as the register step records it), a few chains of the bundled sample plus one broken
record, two shards in a ParallelFor -> gathered designs with scores, a Markdown report, one
MLflow run with the artifacts, and the skipped record counted."""

from __future__ import annotations

import builtins
import contextlib
import gzip
import io
import json
import logging
from pathlib import Path
from unittest import mock

import pytest
import torch
from mlflow import MlflowClient

from invfold.cli import main
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.tracking import default_tracking_uri
from invfold.data import SAMPLE_CHAIN_SET
from invfold.pipelines.local import PipelineFailed, run_design_local

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

MODEL = "invfold-design-test"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("design-pipeline")
    runs = root / "runs"
    runs.mkdir()
    uri = default_tracking_uri(runs)
    torch.manual_seed(0)
    model = InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval()
    save_model(root / "model.pt", model)
    client = MlflowClient(uri)
    experiment = client.create_experiment("register-test")
    run = client.create_run(experiment, run_name="register")
    client.log_artifact(run.info.run_id, str(root / "model.pt"), "model_pt")  # as register_step logs it
    client.set_terminated(run.info.run_id)
    client.create_registered_model(MODEL)
    version = client.create_model_version(MODEL, f"runs:/{run.info.run_id}/model_pt", run.info.run_id)
    client.set_registered_model_alias(MODEL, "champion", version.version)
    lines = []
    with gzip.open(SAMPLE_CHAIN_SET, "rt") as fh:
        for line in fh:
            if len(json.loads(line.replace("NaN", "null"))["seq"]) <= 80:
                lines.append(line.strip())
            if len(lines) == 3:
                break
    structures = root / "chains.jsonl"
    structures.write_text("\n".join([lines[0], '{"name": "broken.A", "seq": "AC"}', *lines[1:]]) + "\n")
    names = [json.loads(line.replace("NaN", "null"))["name"] for line in lines]
    return {"runs": str(runs), "uri": uri, "structures": str(structures), "names": names}


@pytest.fixture(scope="module")
def design_run(setup):
    """`invfold run --pipeline design` (the CLI's front door), which must hand the local runner
    these parameters; the run it returns is what the tests below read."""
    params = {
        "structures": setup["structures"],
        "model_name": MODEL,
        "model_version": "champion",
        "shards": 2,
        "temperatures": "0.1,0.3",
        "num_sequences": 2,
        "score_orders": 2,
        "threads": 1,
        "mlflow_experiment": "design-test",
    }
    argv = ["run", "--pipeline", "design", "--data", setup["structures"], "--model", f"models:/{MODEL}@champion"]
    argv += ["--shards", "2", "--temperatures", "0.1,0.3", "--num-sequences", "2", "--score-orders", "2"]
    argv += ["--threads", "1", "--experiment", "design-test"]
    argv += ["--runs-dir", setup["runs"], "--tracking-uri", setup["uri"]]
    calls = []

    def runner(*args, **kwargs):
        calls.append((args, kwargs, run_design_local(*args, **kwargs)))
        return calls[-1][2]

    root = logging.getLogger()
    printed, before = io.StringIO(), (builtins.print, root.level, root.handlers[:])
    with mock.patch("invfold.pipelines.local.run_design_local", runner), contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    assert (builtins.print, root.level, root.handlers) == before  # not what the shards' threads left swapped
    ((args, kwargs, run),) = calls
    assert args == (params,) and kwargs.pop("console") is not None and kwargs.pop("verbose") is False
    assert kwargs == {"runs_dir": setup["runs"], "tracking_uri": setup["uri"]}
    run.printed = printed.getvalue()
    return run


def _output(run, task: str, name: str) -> Path:
    found = sorted(Path(run.run_folder).glob(f"{task}*/**/{name}"))
    assert found, f"no {name} under {task} in {run.run_folder}"
    return found[-1]


def test_designs_scores_report_and_skips_are_gathered(design_run, setup):
    rows = [
        json.loads(line) for line in _output(design_run, "gather-designs", "designs.jsonl").read_text().splitlines()
    ]
    assert sorted({r["name"] for r in rows}) == sorted(setup["names"])
    assert len(rows) == 3 * 2 * 2  # structures x temperatures x sequences
    assert all(r["score_nll"] > 0 and r["temperature"] in (0.1, 0.3) for r in rows)
    summary = json.loads(_output(design_run, "gather-designs", "summary.json").read_text())
    assert summary["shards"] == 2 and summary["structures_designed"] == 3
    assert summary["skip_counts"] and sum(summary["skip_counts"].values()) == 1
    assert summary["model"]["version"] == "1"
    assert {r["model"] for r in rows} == {f"models:/{MODEL}@champion (version 1)"}  # the reference, not model.pt
    report = _output(design_run, "gather-designs", "report").read_text()
    assert "# Designs" in report and "## Skipped" in report and "score_nll" in report
    shard_outputs = sorted(Path(design_run.run_folder).glob("**/design-shard*/**/designs.jsonl"))
    assert len(shard_outputs) == 2  # the ParallelFor ran one design step per shard


def test_designs_are_recorded_in_one_mlflow_run(design_run, setup):
    client = MlflowClient(setup["uri"])
    experiment = client.get_experiment_by_name("design-test")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`invfold.step` = 'design'")
    assert len(runs) == 1
    run = runs[0]
    assert run.data.metrics["designs"] == 12 and run.data.metrics["skipped"] == 1
    assert "mean_score_nll" in run.data.metrics and run.data.params["model_version"] == "1"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "designs")}
    assert {"designs/designs.jsonl", "designs/summary.json"} <= artifacts
    assert client.list_artifacts(run.info.run_id, "report")


def test_an_unknown_alias_fails_naming_it(setup, tmp_path):
    params = {"structures": setup["structures"], "model_name": MODEL, "model_version": "no-such-alias"}
    with pytest.raises(PipelineFailed, match="design pipeline failed"):
        run_design_local(params, runs_dir=str(tmp_path / "runs"), tracking_uri=setup["uri"])


def test_the_run_shows_one_line_per_step_and_where_the_designs_are(design_run, setup):
    """`invfold run --pipeline design` off a terminal: the steps and the summary, not the runner's
    own output (that is in the log file), and no colour codes."""
    printed = design_run.printed
    lines = printed.splitlines()
    assert "\x1b[" not in printed and "executor_output" not in printed, printed
    assert lines[0].startswith("invfold run --pipeline design: fetch-model") and f"models:/{MODEL}@champion" in lines[0]
    assert lines[1].startswith("estimate: about ") and "4 chains" in lines[1]  # the broken record too
    steps = [line.split()[1] for line in lines if line.split()[:1] == ["ok"]]
    # fetch-model and plan-shards depend on nothing: KFP's local runner takes them in either order
    assert sorted(steps[:2]) == ["fetch-model", "plan-shards"], printed
    assert steps[2:4] == ["design-shard"] * 2 and steps[4] == "gather-designs", printed
    assert len(lines) < 25, printed
    assert f"model:      models:/{MODEL}@champion (version 1)" in printed
    (designs,) = [line for line in lines if line.strip().startswith("designs:")]
    assert designs.split()[-1].endswith("designs.jsonl") and Path(designs.split()[-1]).is_file()
    assert "12 designs of 3 structures, 1 skipped" in printed
    log = Path(next(line for line in lines if "full log:" in line).split()[-1])
    assert "Executing task" in log.read_text()
