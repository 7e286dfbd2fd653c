"""Non-finite numbers in training, on 2 real processes (gloo): a chain with an implausible coordinate
(the kind prep now drops, written straight into the shards here) makes the loss and gradients of its
batch NaN on the rank that draws it; every rank must skip that update together, count it, and end
with equal, finite weights. A run of such steps fails the job with a clear error and saves nothing;
evaluate and export refuse a model with non-finite weights."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate
from invfold.components.export.onnx_export import ExportConfig, export_onnx
from invfold.components.model.config import ModelConfig
from invfold.components.model.io import NonFiniteWeightsError, load_model, save_model
from invfold.components.model.network import InverseFoldingModel
from invfold.components.prep.shards import DatasetWriter, ShardedDataset, dataset_file, open_prepared
from invfold.components.protein.sampler import TokenBudgetSampler
from invfold.components.train import checkpoint as ckpt
from tests.support.training import STRATEGIES, read_metrics, run_job, summary, tiny_config

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

TOKENS = 300  # about 5 synthetic chains a batch: the poisoned chain is in one step of four


def _poisoned_copy(prepared: str, dest: Path, rows: set[int] | None) -> str:
    """A copy of `prepared` whose train rows `rows` (None: all) have one CA at 1e30 A."""
    shutil.copytree(prepared, dest)
    path = dest / dataset_file("train")
    records = list(ShardedDataset(Path(prepared) / dataset_file("train"), "train"))
    writer = DatasetWriter(path, batch_rows=16, batch_bytes=1 << 20)
    for i, record in enumerate(records):
        if rows is None or i in rows:
            record.coords[record.mask.argmax(), 1] = 1e30
        writer.add(record)
    writer.close()
    return str(dest)


def _first_row_of_rank0(prepared: str, cfg) -> int:
    lengths = open_prepared(prepared).open("train").lengths
    sampler = TokenBudgetSampler(lengths, cfg.tokens_per_batch, 0, 2, cfg.seed, cfg.pool_batches, balance=cfg.balance)
    rows, _, _ = next(sampler.iterate(0, 0))
    return int(rows[0])


@pytest.mark.parametrize("strategy, extra", STRATEGIES)
def test_a_nan_batch_on_one_rank_is_skipped_by_all(strategy, extra, synthetic_prepared, tmp_path):
    cfg = tiny_config(synthetic_prepared, tmp_path / "run", strategy=strategy, tokens_per_batch=TOKENS, **extra)
    data = _poisoned_copy(synthetic_prepared, tmp_path / "poisoned", {_first_row_of_rank0(synthetic_prepared, cfg)})
    cfg = tiny_config(data, tmp_path / "run", strategy=strategy, tokens_per_batch=TOKENS, **extra)
    assert run_job(cfg) == 0

    done = summary(tmp_path / "run")
    assert done["stop_reason"] == "finished" and done["step"] == cfg.max_steps
    assert 1 <= done["nonfinite_steps"] < cfg.max_steps
    assert len(set(done["params_digests"])) == 1  # the ranks skipped the same updates
    records = read_metrics(tmp_path / "run")
    assert records[0]["nonfinite_steps"] == 1  # step 1 held the poisoned chain on rank 0
    assert records[-1]["nonfinite_steps"] == done["nonfinite_steps"]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in records)
    weights = load_model(tmp_path / "run" / "model.pt").state_dict()
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_a_run_of_nan_steps_fails_the_job_and_saves_nothing(synthetic_prepared, tmp_path, capfd):
    data = _poisoned_copy(synthetic_prepared, tmp_path / "poisoned", None)
    cfg = tiny_config(data, tmp_path / "run", max_nonfinite_steps=3, checkpoint_every=2)
    assert run_job(cfg) != 0
    err = capfd.readouterr().err
    assert "3 optimizer steps in a row (up to step 3) had a NaN or infinite loss or gradient" in err
    assert "model.pt was not written" in err
    assert not (tmp_path / "run" / "model.pt").exists()
    # the step-2 checkpoint holds the untouched initial weights: skipped updates changed nothing
    state = ckpt.load_torch(f"{ckpt.latest_complete(cfg.checkpoint_dir)}/state.pt")
    assert state["trainer"]["nonfinite_steps"] == 2
    assert all(torch.isfinite(w).all() for w in state["model"].values())


@pytest.fixture()
def nan_model(tmp_path) -> Path:
    """A model file with one NaN weight, written around save_model's own refusal."""
    model = InverseFoldingModel(ModelConfig.preset("tiny"))
    path = tmp_path / "nan.pt"
    save_model(path, model)
    payload = torch.load(path, weights_only=True)
    first = next(k for k, v in payload["state_dict"].items() if v.is_floating_point())
    payload["state_dict"][first].view(-1)[0] = float("nan")
    torch.save(payload, path)
    return path


def test_save_model_refuses_nonfinite_weights(tmp_path):
    model = InverseFoldingModel(ModelConfig.preset("tiny"))
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("inf")
    with pytest.raises(NonFiniteWeightsError, match="expected finite weights"):
        save_model(tmp_path / "model.pt", model)
    assert not (tmp_path / "model.pt").exists()


def test_evaluate_and_export_refuse_a_model_with_nan_weights(nan_model, sample_prepared, tmp_path):
    with pytest.raises(NonFiniteWeightsError, match=f"{nan_model}: expected finite weights.*1 value"):
        evaluate(EvaluateConfig(model_path=str(nan_model), data=sample_prepared, out=str(tmp_path / "eval")))
    with pytest.raises(NonFiniteWeightsError, match=f"{nan_model}: expected finite weights"):
        export_onnx(ExportConfig(model_path=str(nan_model), out=str(tmp_path / "m.onnx"), parity_data=sample_prepared))
    assert not (tmp_path / "m.onnx").exists()
