"""The compare step against a real MLflow server on loopback: the champion is scored on the
candidate's VALIDATION data (its recorded figure when the data digests match, else its model.pt
evaluated again), and a fine-tuned candidate must also beat the weights it started from on the
same validation data. Test figures are recorded on the version, never compared."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.register.decision import Comparison
from invfold.components.register.step import compare_step, register_step


@pytest.fixture(scope="module")
def prepared(sample_prepared) -> str:
    return sample_prepared


@pytest.fixture(scope="module")
def models(tmp_path_factory, prepared) -> dict:
    """Two tiny one-shot models with different weights, each in a model folder as the train step
    leaves it, with its evaluation (test and validation) as the evaluate step leaves it."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("models")
    out = {}
    for name, seed in (("a", 0), ("b", 1)):
        torch.manual_seed(seed)
        folder = root / name
        folder.mkdir()
        save_model(folder / "model.pt", InverseFoldingModel(ModelConfig.preset("tiny")))
        metrics = evaluate(
            EvaluateConfig(
                model_path=str(folder / "model.pt"),
                data=prepared,
                out=str(root / f"eval-{name}"),
                designs_per_protein=0,
            )
        )
        out[name] = {"folder": folder, "evaluation": root / f"eval-{name}", "metrics": metrics}
    a, b = (out[k]["metrics"]["datasets"] for k in ("a", "b"))
    assert a["validation"]["recovery"] != b["validation"]["recovery"], "the models must be told apart"
    return out


def _compare(prepared, evaluation, uri, names, init_from=""):
    return compare_step(
        prepared_path=prepared,
        evaluation_path=str(evaluation),
        pipeline_run_id=f"compare-{uuid.uuid4().hex[:6]}",
        tracking_uri=uri,
        experiment=names["experiment"],
        model_name=names["model"],
        threshold=0.0,
        init_from=init_from,
    )


def _with_digest(evaluation: Path, tmp_path: Path, digest: str) -> Path:
    """The candidate's evaluation as if its data (digest) were different."""
    metrics = json.loads((evaluation / "metrics.json").read_text())
    metrics["data_digest"] = digest
    copy = tmp_path / f"evaluation-{digest[-4:]}"
    copy.mkdir()
    (copy / "metrics.json").write_text(json.dumps(metrics))
    return copy


def test_the_champion_is_scored_and_chosen_on_validation_data(mlflow_server, prepared, models, tmp_path):
    names = {"experiment": f"register-{uuid.uuid4().hex[:6]}", "model": f"invfold-{uuid.uuid4().hex[:6]}"}
    a, b = models["a"], models["b"]
    a_val, b_val = (m["metrics"]["datasets"]["validation"]["recovery"] for m in (a, b))
    a_test = a["metrics"]["datasets"]["test"]["recovery"]

    first = _compare(prepared, a["evaluation"], mlflow_server, names)
    assert first.register and first.candidate == pytest.approx(a_val) and first.metric == "validation_recovery"
    assert first.metrics["test/recovery"] == pytest.approx(a_test)
    # register `a` as if its data had been different, so a later compare must evaluate it again
    recorded = Comparison.from_dict({**first.to_dict(), "data_digest": "sha256:" + "0" * 64})
    out = register_step(
        prepared_path=prepared,
        model_path=str(a["folder"]),
        onnx_dir=str(tmp_path / "onnx"),
        comparison=recorded,
        pipeline_run_id="register-a",
        tracking_uri=mlflow_server,
        experiment=names["experiment"],
        model_name=names["model"],
    )
    client = MlflowClient(mlflow_server)
    version = client.get_model_version_by_alias(names["model"], "champion")
    assert version.version == out["metadata"]["version"] == "1"
    assert float(version.tags["invfold.validation_recovery"]) == pytest.approx(a_val)
    assert float(version.tags["invfold.test_recovery"]) == pytest.approx(a_test)  # for the record
    assert "validation median recovery (chosen on)" in client.get_registered_model(names["model"]).description

    # other data: the champion's model.pt is evaluated again on the candidate's VALIDATION split
    again = _compare(prepared, b["evaluation"], mlflow_server, names)
    assert again.basis == "re-evaluated on this run's validation data"
    assert again.champion == pytest.approx(a_val, abs=1e-6) and again.candidate == pytest.approx(b_val)
    assert again.register == (b_val > a_val)
    assert ("beats" if b_val > a_val else "does not beat") in again.decision

    # same data: the validation figure recorded on the champion's version is used as it is
    same = _compare(prepared, _with_digest(a["evaluation"], tmp_path, "sha256:" + "0" * 64), mlflow_server, names)
    assert same.basis == "recorded on the same data" and same.champion == pytest.approx(a_val)
    assert not same.register and "does not beat champion v1" in same.decision  # a tie keeps the champion


def test_a_fine_tuned_candidate_must_beat_its_starting_weights_on_validation(mlflow_server, prepared, models):
    names = {"experiment": f"register-{uuid.uuid4().hex[:6]}", "model": f"invfold-{uuid.uuid4().hex[:6]}"}
    a, b = models["a"], models["b"]
    a_val, b_val = (m["metrics"]["datasets"]["validation"]["recovery"] for m in (a, b))
    start = str(a["folder"] / "model.pt")

    # "fine-tuned" from a and no better than a (it is a): refused although there is no champion
    tie = _compare(prepared, a["evaluation"], mlflow_server, names, init_from=start)
    assert (tie.init_from, tie.starting_point) == (start, pytest.approx(a_val, abs=1e-6))
    assert not tie.register and f"does not beat the starting weights {start}" in tie.decision

    other = _compare(prepared, b["evaluation"], mlflow_server, names, init_from=start)
    assert other.starting_point == pytest.approx(a_val, abs=1e-6)
    assert other.register == (b_val > a_val)
    run = MlflowClient(mlflow_server).search_runs(
        [MlflowClient(mlflow_server).get_experiment_by_name(names["experiment"]).experiment_id],
        filter_string="tags.`invfold.step` = 'compare'",
        order_by=["attributes.start_time DESC"],
    )[0]
    assert run.data.metrics["validation/starting_recovery"] == pytest.approx(a_val, abs=1e-6)
    assert run.data.tags["invfold.decision"] == other.decision
