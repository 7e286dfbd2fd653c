"""The compare step against a real MLflow server on loopback: the champion is scored on the
candidate's VALIDATION data (its recorded figure when the data digests match, else its model.pt
evaluated again), and a fine-tuned candidate must also beat the weights it started from on the
same validation data. Test figures are recorded on the version, never compared."""

from __future__ import annotations

import dataclasses
import json
import shutil
import uuid
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.protein.alphabet import AA_TO_INDEX
from invfold.components.register.decision import Comparison
from invfold.components.register.step import compare_step, register_step


@pytest.fixture(scope="module")
def prepared(sample_prepared) -> str:
    return sample_prepared


@pytest.fixture(scope="module")
def models(tmp_path_factory, prepared) -> dict:
    """Two tiny one-shot models with different weights, each in a model folder as the train step
    leaves it, with its evaluation (test and validation) as the evaluate step leaves it. Their
    readouts are biased to one letter each (a: W, rare; b: L, the commonest), so b leads a on
    nearly every chain: beyond the registration gate's noise, which two random models are not."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("models")
    out = {}
    for name, seed, letter in (("a", 0, "W"), ("b", 1, "L")):
        torch.manual_seed(seed)
        folder = root / name
        folder.mkdir()
        model = InverseFoldingModel(ModelConfig.preset("tiny"))
        readout = [m for m in model.readout.modules() if isinstance(m, torch.nn.Linear)][-1]
        with torch.no_grad():
            readout.bias[AA_TO_INDEX[letter]] += 10.0
        save_model(folder / "model.pt", model)
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


def validation_chains(model: dict) -> int:
    """How many validation chains the model's evaluation scored (the paired test's n)."""
    return len(model["metrics"]["per_chain"]["validation"])


def _with_digest(evaluation: Path, tmp_path: Path, digest: str) -> Path:
    """The candidate's evaluation as if its data (digest) were different."""
    metrics = json.loads((evaluation / "metrics.json").read_text())
    metrics["data_digest"] = digest
    copy = tmp_path / f"evaluation-{digest[-4:]}"
    copy.mkdir()
    (copy / "metrics.json").write_text(json.dumps(metrics))
    return copy


@pytest.mark.slow
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
    # the register step's Markdown (the Kubeflow UI shows it) links the pipeline's MLflow run
    parent = client.search_runs(
        [client.get_experiment_by_name(names["experiment"]).experiment_id],
        filter_string="tags.`kfp.pipeline_run_id` = 'register-a'",
    )
    (parent,) = [r for r in parent if "mlflow.parentRunId" not in r.data.tags]
    page = f"{mlflow_server}/#/experiments/{parent.info.experiment_id}/runs/{parent.info.run_id}"
    assert "version 1, now its `champion`" in out["summary"] and f"[MLflow run]({page})" in out["summary"]

    # other data: the champion's model.pt is evaluated again on the candidate's VALIDATION split
    again = _compare(prepared, b["evaluation"], mlflow_server, names)
    assert again.basis == "re-evaluated on this run's validation data"
    assert again.champion == pytest.approx(a_val, abs=1e-6) and again.candidate == pytest.approx(b_val)
    # re-evaluated: per-chain values on both sides, so the paired test decides; b (L) leads a (W)
    assert b_val > a_val and again.register and "beyond noise: paired bootstrap" in again.decision
    assert again.statistic["test"] == "paired bootstrap" and again.statistic["n"] == validation_chains(a)
    assert again.statistic["p"] < again.statistic["alpha"]

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


def _register(prepared, model, comparison, uri, names, tmp_path, run: str) -> dict:
    return register_step(
        prepared_path=prepared,
        model_path=str(model["folder"]),
        onnx_dir=str(tmp_path / f"onnx-{run}"),
        comparison=comparison,
        pipeline_run_id=run,
        tracking_uri=uri,
        experiment=names["experiment"],
        model_name=names["model"],
    )


def _ranked(models) -> tuple[dict, dict]:
    """(the better, the worse) of the two models on validation recovery."""
    a, b = models["a"], models["b"]
    recovery = lambda m: m["metrics"]["datasets"]["validation"]["recovery"]  # noqa: E731
    return (a, b) if recovery(a) > recovery(b) else (b, a)


@pytest.mark.slow
def test_two_interleaved_runs_the_later_register_decides_again_against_the_new_champion(
    mlflow_server, prepared, models, tmp_path
):
    """Two pipeline runs compare against the same (absent) champion and both decide to register;
    the other run registers first. The later register reads the alias again: when the champion
    it now finds is better it neither registers nor takes `champion`; when it is worse it still
    beats it, on the champion's score made again for this run."""
    better, worse = _ranked(models)
    client = MlflowClient(mlflow_server)

    # run A (worse) compares and decides; run B (better) compares, decides and registers first
    names = {"experiment": f"race-{uuid.uuid4().hex[:6]}", "model": f"invfold-{uuid.uuid4().hex[:6]}"}
    a_decision = _compare(prepared, worse["evaluation"], mlflow_server, names)
    b_decision = _compare(prepared, better["evaluation"], mlflow_server, names)
    assert a_decision.register and b_decision.register and a_decision.champion_version is None
    b = _register(prepared, better, b_decision, mlflow_server, names, tmp_path, "race-b")
    assert b["metadata"]["champion"] and b["metadata"]["version"] == "1"
    a = _register(prepared, worse, a_decision, mlflow_server, names, tmp_path, "race-a")
    assert client.get_model_version_by_alias(names["model"], "champion").version == "1"  # B keeps it
    assert not a["metadata"]["champion"] and a["metadata"]["version"] == ""  # nothing registered
    assert a["summary"].startswith("### Registration\n\nNothing registered in") and "does not beat" in a["summary"]
    assert a["metadata"]["decision"].startswith("the champion moved since compare (none -> v1)")
    assert "does not beat champion v1" in a["metadata"]["decision"]
    assert [v.version for v in client.search_model_versions(f"name = '{names['model']}'")] == ["1"]

    # the other way round: the worse run registers first, the better one still takes the champion
    names = {"experiment": f"race-{uuid.uuid4().hex[:6]}", "model": f"invfold-{uuid.uuid4().hex[:6]}"}
    a_decision = _compare(prepared, better["evaluation"], mlflow_server, names)
    b_decision = _compare(prepared, worse["evaluation"], mlflow_server, names)
    _register(prepared, worse, b_decision, mlflow_server, names, tmp_path, "race-b2")
    a = _register(prepared, better, a_decision, mlflow_server, names, tmp_path, "race-a2")
    assert a["metadata"]["champion"] and a["metadata"]["version"] == "2"
    assert client.get_model_version_by_alias(names["model"], "champion").version == "2"
    assert "the champion moved since compare (none -> v1)" in a["metadata"]["decision"]
    assert "beats" in a["metadata"]["decision"] and "champion v1" in a["metadata"]["decision"]


@pytest.mark.slow
def test_a_champion_that_moves_while_registering_is_not_overwritten(mlflow_server, prepared, models, tmp_path):
    """The alias moves after register's first read, while the ONNX model is being registered (the
    other run's write is injected right after this run's version is created): the read just
    before the alias write sees it, and the better version keeps `champion`."""
    from invfold.components.tracking import Tracker

    better, worse = _ranked(models)
    client = MlflowClient(mlflow_server)
    names = {"experiment": f"race-{uuid.uuid4().hex[:6]}", "model": f"invfold-{uuid.uuid4().hex[:6]}"}
    a_decision = _compare(prepared, worse["evaluation"], mlflow_server, names)
    b_decision = _compare(prepared, better["evaluation"], mlflow_server, names)
    _register(prepared, better, b_decision, mlflow_server, names, tmp_path, "race-b")  # v1
    client.delete_registered_model_alias(names["model"], "champion")  # as when A compared: none

    original = Tracker.log_onnx_model

    def registers_while_the_other_run_moves_the_alias(self, *args, **kwargs):
        version = original(self, *args, **kwargs)
        client.set_registered_model_alias(names["model"], "champion", "1")  # run B, meanwhile
        return version

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Tracker, "log_onnx_model", registers_while_the_other_run_moves_the_alias)
        a = _register(prepared, worse, a_decision, mlflow_server, names, tmp_path, "race-a")
    assert a["metadata"]["version"] == "2" and not a["metadata"]["champion"]
    assert client.get_model_version_by_alias(names["model"], "champion").version == "1"
    tags = client.get_model_version(names["model"], "2").tags
    assert tags["invfold.decision"].startswith("the champion moved since compare (none -> v1)")


def test_the_starting_weights_credentials_reach_no_mlflow_record(
    mlflow_server, prepared, models, http_server, tmp_path
):
    """A candidate fine-tuned from weights behind a URL with `user:password@` and a presigned
    query (the loopback server ignores both): compare scores them, register records the
    candidate; no param, tag, version tag or description in MLflow holds the secrets, nor does
    the comparison (the step's output). Register redacts itself too: a comparison holding the raw
    URI (as an older compare wrote it) records none of it either."""
    better, worse = _ranked(models)
    shutil.copy(worse["folder"] / "model.pt", http_server.root / "start-secret.pt")
    host = http_server.url.removeprefix("http://")
    password, signature = "s3cr3t-passw0rd", "a1b2c3d4e5f6"
    start = f"http://reader:{password}@{host}/start-secret.pt?X-Amz-Signature={signature}"
    names = {"experiment": f"secret-{uuid.uuid4().hex[:6]}", "model": f"invfold-{uuid.uuid4().hex[:6]}"}
    comparison = _compare(prepared, better["evaluation"], mlflow_server, names, init_from=start)
    assert comparison.register and comparison.init_from.startswith("http://***@127.0.0.1:")  # scored, shown
    raw = dataclasses.replace(comparison, init_from=start)
    result = _register(prepared, better, raw, mlflow_server, names, tmp_path, "secret-run")
    assert result["metadata"]["version"] == "1"

    client = MlflowClient(mlflow_server)
    version = client.get_model_version(names["model"], "1")
    registered = client.get_registered_model(names["model"])
    experiment = client.get_experiment_by_name(names["experiment"]).experiment_id
    runs = client.search_runs([experiment])
    recorded = json.dumps(
        {
            "comparison": comparison.to_dict(),
            "version_tags": version.tags,
            "version_description": version.description,
            "model_description": registered.description,
            "runs": [{**r.data.params, **r.data.tags} for r in runs],
        }
    )
    assert "fine-tuned from: http://***@127.0.0.1:" in version.description  # recorded, redacted
    assert version.tags["invfold.init_from"].startswith("http://***@127.0.0.1:")
    for secret in (password, signature):
        assert secret not in recorded, f"{secret!r} leaked into MLflow: {recorded[:3000]}"
    (http_server.root / "start-secret.pt").unlink()
