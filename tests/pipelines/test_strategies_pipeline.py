"""The whole local pipeline with Horovod and with DeepSpeed (tiny model, a few steps), recorded
in the MLflow server on loopback. These strategies must be installed (`make test` builds them):
a missing one fails here rather than skipping."""

from __future__ import annotations

import importlib
import json
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient

from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS
from invfold.pipelines.local import run_local

pytestmark = [pytest.mark.pipeline, pytest.mark.multiproc, pytest.mark.slow]


@pytest.mark.parametrize(
    "strategy, module, extra",
    [
        ("horovod", "horovod.torch", {}),
        ("deepspeed", "deepspeed", {"zero_stage": 2}),
    ],
)
def test_pipeline_trains_and_registers_with_strategy(strategy, module, extra, mlflow_server, tmp_path, monkeypatch):
    try:
        importlib.import_module(module)
    except ImportError as err:
        pytest.fail(f"{strategy} is not installed ({err}); install it with `make test` (scripts/setup.sh)")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    name = f"invfold-{strategy}-{uuid.uuid4().hex[:6]}"
    params = {
        "data_uri": str(SAMPLE_CHAIN_SET),
        "split_file": str(SAMPLE_SPLITS),
        "strategy": strategy,
        "preset": "tiny",
        "model_overrides": {},
        "max_steps": 3,
        "time_budget_s": 0,
        "mlflow_experiment": name,
        "registered_model_name": name,
        **extra,
    }
    result = run_local(params, runs_dir=str(tmp_path / "runs"), tracking_uri=mlflow_server)
    summary = json.loads((Path(result.run_folder) / "train-op" / "model" / "summary.json").read_text())
    assert (summary["strategy"], summary["world_size"], summary["step"]) == (strategy, 2, 3)
    assert summary["zero_stage"] == extra.get("zero_stage", 0)
    client = MlflowClient(mlflow_server)
    parent = client.get_run(result.mlflow_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["invfold.strategy"] == strategy
    assert result.registered_version == "1"
    assert client.get_model_version_by_alias(name, "champion").version == "1"
