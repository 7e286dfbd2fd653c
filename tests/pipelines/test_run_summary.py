"""The end of `invfold run` (pipelines/cli.py): the figures in a table without an empty header,
then what to type next as plain lines that no console width breaks: the venv's commands as typed
when they are not on PATH, the MLflow UI and its page, and designing with the champion, a command
that runs as printed (checked here as a real shell command against a registered model)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient
from rich.console import Console

from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.tracking import default_tracking_uri
from invfold.pipelines.cli import next_steps, summary_table
from invfold.pipelines.local import LocalRun

MODEL = "invfold-summary-test"


@pytest.fixture(scope="module")
def registered(tmp_path_factory) -> LocalRun:
    """A run's outcome with a champion registered as the register step records it (model.pt under
    the version's run, model_pt/), in a SQLite store under the runs folder."""
    runs = tmp_path_factory.mktemp("summary") / "runs"
    uri = default_tracking_uri(runs)
    torch.manual_seed(0)
    save_model(runs / "model.pt", InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval())
    client = MlflowClient(uri)
    experiment = client.create_experiment("invfold")
    run = client.create_run(experiment).info.run_id
    client.log_artifact(run, str(runs / "model.pt"), "model_pt")
    client.set_terminated(run)
    client.create_registered_model(MODEL)
    client.create_model_version(MODEL, f"runs:/{run}/model_pt", run)
    client.set_registered_model_alias(MODEL, "champion", "1")
    timings = [{"step": "evaluate", "compute_s": 9.5, "figures": {"test_recovery": 0.2512, "constant_recovery": 0.07}}]
    return LocalRun(
        runs_dir=str(runs),
        pipeline_root=str(runs / "pipeline_root"),
        run_folder=str(runs / "pipeline_root" / "invfold-1"),
        tracking_uri=uri,
        experiment="invfold",
        mlflow_run_id=run,
        registered_model=MODEL,
        registered_version="1",
        wall_s=201.0,
        timings=timings,
        log_file=str(runs / "logs" / "run-1.log"),
        experiment_id=experiment,
        champion_version="1",
    )


def test_the_table_has_no_empty_header_row(registered):
    out = io.StringIO()
    Console(file=out, width=80).print(summary_table(registered))
    lines = out.getvalue().splitlines()
    assert "test median recovery" in out.getvalue() and "0.2512" in out.getvalue()
    assert not any(set(line) <= set("┃┏┓┳━ │") and "┃" in line for line in lines), out.getvalue()


def test_commands_and_urls_are_whole_lines_whatever_the_width(registered, monkeypatch):
    monkeypatch.setenv("PATH", os.defpath)  # the venv's bin not on PATH: commands as typed there
    lines = next_steps(registered)
    venv_bin = Path(sys.prefix) / "bin"
    assert any("source " in line and "activate" in line for line in lines), lines
    (ui,) = [line.strip() for line in lines if " ui --backend-store-uri " in line]
    assert ui.split()[0].endswith("bin/mlflow") and ui.endswith(registered.tracking_uri)
    assert any(f"http://127.0.0.1:5000/#/experiments/{registered.experiment_id}" in line for line in lines)
    monkeypatch.setenv("PATH", f"{venv_bin}{os.pathsep}{os.defpath}")  # activated: the bare names
    assert not any("source " in line for line in next_steps(registered))
    assert any(line.strip().startswith("mlflow ui ") for line in next_steps(registered))


def test_the_printed_design_command_designs_with_the_champion(registered, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", os.defpath)
    (design,) = [line.strip() for line in next_steps(registered) if " design models:/" in line]
    assert f"models:/{MODEL}@champion" in design and "--tracking-uri" in design
    proc = subprocess.run(design, shell=True, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    fasta = (tmp_path / "designs.fasta").read_text()
    assert fasta.count(">") == 4 and f"model=models:/{MODEL}@champion model_version=1" in fasta
