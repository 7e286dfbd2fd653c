"""One model reference for every command (components/model/reference.py): a file, a published
name, and MLflow's models:/NAME@ALIAS, models:/NAME/VERSION and runs:/ID/PATH read from a real
MLflow server (tests/support/mlflow_server.py), registered the way the register step records a model
(the PyTorch checkpoint under the run's model_pt/, the ONNX model as the version's source)."""

from __future__ import annotations

import json
import secrets

import pytest
import torch
from mlflow import MlflowClient

from invfold.cli import main
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.protein.sources import read_protein_set
from invfold.data import SAMPLE_CHAIN_SET
from tests.support.onnx_files import onnx_file


@pytest.fixture(scope="module")
def registry(tmp_path_factory, mlflow_server):
    """Version 1 (alias champion): a run with model_pt/model.pt and the ONNX model under model/;
    version 2: a run with the ONNX model only."""
    root = tmp_path_factory.mktemp("reference")
    torch.manual_seed(0)
    model = InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval()
    save_model(root / "model.pt", model)
    (root / "onnx").mkdir()
    onnx_file(model, root / "onnx" / "model.onnx")
    client = MlflowClient(mlflow_server)
    name = f"reference-{secrets.token_hex(4)}"
    experiment = client.create_experiment(name)
    client.create_registered_model(name)
    runs = []
    for with_checkpoint in (True, False):
        run = client.create_run(experiment).info.run_id
        if with_checkpoint:
            client.log_artifact(run, str(root / "model.pt"), "model_pt")
        client.log_artifact(run, str(root / "onnx" / "model.onnx"), "model")
        client.set_terminated(run)
        client.create_model_version(name, f"runs:/{run}/model", run)
        runs.append(run)
    client.set_registered_model_alias(name, "champion", "1")
    record = min(read_protein_set(str(SAMPLE_CHAIN_SET)), key=len)
    return {"root": root, "uri": mlflow_server, "name": name, "runs": runs, "record": record.name}


def _design(registry, model: str, out, *extra: str) -> tuple[int, list[str]]:
    argv = ["design", model, str(SAMPLE_CHAIN_SET), "--name", registry["record"], "--out", str(out), "-n", "2"]
    code = main([*argv, "--tracking-uri", registry["uri"], *extra])
    sequences = [line for line in out.read_text().splitlines() if not line.startswith(">")] if code == 0 else []
    return code, sequences


@pytest.mark.parametrize(
    "reference",
    [
        pytest.param("models:/{name}@champion", marks=pytest.mark.slow),
        "models:/{name}/1",
        "models:/{name}/2",  # no checkpoint beside it: the registered ONNX model itself
        "runs:/{run}/model_pt/model.pt",
        "runs:/{run}/model_pt",  # a folder holding model.pt
        "runs:/{run}/model",  # a folder holding model.onnx
        "file://{root}/model.pt",
        "{root}/onnx/model.onnx",
    ],
)
def test_every_reference_form_designs_what_the_file_designs(registry, reference, tmp_path):
    _, expected = _design(registry, str(registry["root"] / "model.pt"), tmp_path / "file.fasta")
    model = reference.format(name=registry["name"], run=registry["runs"][0], root=registry["root"])
    code, sequences = _design(registry, model, tmp_path / "ref.fasta")
    assert code == 0 and len(expected) == 2 and sequences == expected


def test_score_takes_a_registered_model(registry, tmp_path, capsys):
    out = tmp_path / "scores.csv"
    argv = ["score", f"models:/{registry['name']}@champion", str(SAMPLE_CHAIN_SET), "--name", registry["record"]]
    assert main([*argv, "--out", str(out), "--num-orders", "2", "--tracking-uri", registry["uri"]]) == 0
    assert out.read_text().splitlines()[0].startswith("structure,sequence_name,mean_nll")


def test_design_takes_a_published_name(registry, tmp_path):
    code, sequences = _design(registry, "proteinmpnn:v_48_020", tmp_path / "published.fasta")
    assert code == 0 and len(sequences) == 2


@pytest.mark.parametrize(
    "command, reference, code, message",
    [
        ("design", "models:/{name}@nosuch", 2, "expected a registered model version"),
        ("design", "models:/{name}-missing/1", 2, "expected a registered model version"),
        ("design", "runs:/{run}/nothing-here", 2, "expected an artifact of an existing run"),
        ("evaluate", "models:/{name}/2", 2, "needs the PyTorch model (model.pt), not its ONNX export"),
    ],
)
def test_a_reference_that_names_nothing_is_one_line(registry, tmp_path, capsys, command, reference, code, message):
    model = reference.format(name=registry["name"], run=registry["runs"][0])
    if command == "design":
        argv = ["design", model, str(SAMPLE_CHAIN_SET), "--out", str(tmp_path / "d.fasta")]
    else:
        argv = ["evaluate", model, "--data", str(tmp_path), "--out", str(tmp_path / "eval")]
    assert main([*argv, "--tracking-uri", registry["uri"]]) == code
    err = capsys.readouterr().err
    assert err.startswith(f"invfold {command}: error: ") and message in err and len(err.splitlines()) == 1, err


def test_without_a_tracking_uri_an_mlflow_reference_says_what_is_missing(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    argv = ["design", "models:/any@champion", str(SAMPLE_CHAIN_SET), "--out", str(tmp_path / "d.fasta")]
    assert main(argv) == 1
    assert "no tracking URI; give --tracking-uri or set MLFLOW_TRACKING_URI" in capsys.readouterr().err


def test_out_dash_writes_the_fasta_to_stdout(registry, tmp_path, capsys):
    code, expected = _design(registry, str(registry["root"] / "model.pt"), tmp_path / "file.fasta")
    capsys.readouterr()
    argv = ["design", str(registry["root"] / "model.pt"), str(SAMPLE_CHAIN_SET), "--name", registry["record"]]
    assert main([*argv, "--out", "-", "-n", "2"]) == 0
    out = capsys.readouterr()
    assert out.out == (tmp_path / "file.fasta").read_text() and len(expected) == 2
    assert "mean NLL" in out.err and "mean NLL" not in out.out


def test_json_design_result_matches_the_fasta(registry, tmp_path, capsys):
    code, sequences = _design(registry, f"models:/{registry['name']}@champion", tmp_path / "d.fasta", "--json")
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["exit_code"] == 0 and result["out"] == str(tmp_path / "d.fasta")
    assert [d["sequence"] for d in result["designs"]] == sequences


def _all_runs(uri: str) -> set[str]:
    client = MlflowClient(uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return {r.info.run_id for r in client.search_runs(ids, max_results=10_000)}


def test_what_a_user_keeps_names_the_reference_given_and_the_version_it_resolved_to(
    registry, tmp_path, sample_prepared
):
    """FASTA headers (both layouts), a batch's rows and the evaluation report say
    `models:/NAME@champion` and version 1, not the downloaded `model.pt`."""
    name, uri = registry["name"], registry["uri"]
    code, _ = _design(registry, f"models:/{name}@champion", tmp_path / "a.fasta")
    assert code == 0
    headers = [line for line in (tmp_path / "a.fasta").read_text().splitlines() if line.startswith(">")]
    assert all(h.endswith(f" model=models:/{name}@champion model_version=1") for h in headers), headers
    code, _ = _design(registry, f"models:/{name}/1", tmp_path / "b.fasta", "--fasta-layout", "proteinmpnn")
    assert code == 0 and f"model_name=models:/{name}/1 (version 1)," in (tmp_path / "b.fasta").read_text()
    code, _ = _design(registry, str(registry["root"] / "model.pt"), tmp_path / "file.fasta")
    assert code == 0 and " model=model.pt\n" in (tmp_path / "file.fasta").read_text()

    argv = ["design", f"models:/{name}@champion", str(SAMPLE_CHAIN_SET), "--name", registry["record"]]
    assert main([*argv, "--out", str(tmp_path / "d.jsonl"), "-n", "1", "--tracking-uri", uri]) == 0
    row = json.loads((tmp_path / "d.jsonl").read_text().splitlines()[0])
    assert row["model"] == f"models:/{name}@champion (version 1)"

    argv = ["evaluate", f"models:/{name}@champion", "--data", sample_prepared, "--out", str(tmp_path / "eval")]
    argv += ["--dataset", "test", "--designs-per-protein", "0", "--bootstrap-resamples", "0", "--orders", "1"]
    assert main([*argv, "--tracking-uri", uri]) == 0
    assert f"Model `models:/{name}@champion (version 1)`" in (tmp_path / "eval" / "report.md").read_text()


def test_reading_a_registered_model_records_no_run_unless_an_experiment_is_given(registry, tmp_path):
    """--tracking-uri is where a models:/ MODEL is read; --experiment asks for a run of the command."""
    name, uri = registry["name"], registry["uri"]
    before = _all_runs(uri)
    assert _design(registry, f"models:/{name}@champion", tmp_path / "a.fasta")[0] == 0
    assert _all_runs(uri) == before
    experiment = f"asked-{secrets.token_hex(3)}"
    assert _design(registry, f"models:/{name}@champion", tmp_path / "b.fasta", "--experiment", experiment)[0] == 0
    (new,) = _all_runs(uri) - before
    assert MlflowClient(uri).get_run(new).data.tags["invfold.step"] == "design"
