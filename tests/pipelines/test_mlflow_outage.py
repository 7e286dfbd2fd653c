"""The local rule for a tracking outage: a real `mlflow server` SIGKILLed while the train step
trains. Training completes, the step says what it did not record, nothing else is lost (the
model, summary and metrics files are whole; what MLflow got before the kill is still there)."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient

from invfold.components.launch.step import train_step
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS
from tests.support.mlflow_server import MlflowServer

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

STEPS = 60


def _train_steps_logged(metrics: Path) -> list[int]:
    if not metrics.exists():
        return []
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r["step"] for r in records if r.get("split") == "train"]


def test_mlflow_server_killed_mid_training_costs_only_the_records(tmp_path, caplog):
    prepared = tmp_path / "prepared"
    run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), out=str(prepared)))
    (tmp_path / "mlflow").mkdir()
    server = MlflowServer(tmp_path / "mlflow")
    uri = server.start()
    model = tmp_path / "model"
    model.mkdir()
    killed_after: list[list[int]] = []

    def kill_once_training_runs() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not _train_steps_logged(model / "metrics.jsonl"):
            time.sleep(0.05)
        server.kill()
        killed_after.append(_train_steps_logged(model / "metrics.jsonl"))

    killer = threading.Thread(target=kill_once_training_runs, daemon=True)
    killer.start()
    run_id = f"outage-{uuid.uuid4().hex[:8]}"
    try:
        with caplog.at_level(logging.WARNING):
            result = train_step(
                prepared_path=str(prepared),
                prepared_uri="",
                model_path=str(model),
                pipeline_run_id=run_id,
                pipeline_run_name="outage",
                tracking_uri=uri,
                experiment="outage",
                strategy="ddp",
                nodes=1,
                procs_per_node=1,
                gpus_per_node=0,
                train_options={"preset": "tiny", "max_steps": STEPS, "log_every": 1, "warmup_steps": 5},
                checkpoint_root=str(tmp_path / "checkpoints"),
                storage_root="",
                storage_secret="",
            )
        killer.join(timeout=30)
        assert killed_after and killed_after[0][-1] < STEPS, "the server was not killed while training ran"

        # training completed: every step logged, the model and its summary written
        assert _train_steps_logged(model / "metrics.jsonl")[-1] == STEPS
        summary = json.loads((model / "summary.json").read_text())
        assert summary["step"] == STEPS and (model / "model.pt").stat().st_size > 0
        assert result["metadata"]["mlflow_run_id"]

        # the step says what was not recorded, and why
        warnings = [r.getMessage() for r in caplog.records if "did NOT record" in r.getMessage()]
        assert len(warnings) == 1, caplog.text
        assert "metric points from metrics.jsonl" in warnings[0] and "stopped answering" in warnings[0]
        assert "summary.json" in warnings[0]

        # what MLflow got before the kill is kept
        server.start()
        client = MlflowClient(uri)
        train = client.get_run(result["metadata"]["mlflow_run_id"])
        assert train.data.params["strategy"] == "ddp" and train.data.params["max_steps"] == str(STEPS)
        assert {i.dataset.name for i in train.inputs.dataset_inputs} == {"train", "validation"}
        assert client.get_metric_history(train.info.run_id, "train/loss") == []
    finally:
        server.stop()
