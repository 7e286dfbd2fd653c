"""The compare step chooses on validation recovery; test recovery is for reporting only (a real
evaluation of a tiny model on the bundled sample, a real MLflow server)."""

from __future__ import annotations

import json
import uuid

import pytest
import torch
from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate
from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.pipelines.steps import compare_step

from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    run_prep(PrepConfig(input=str(SAMPLE_CHAIN_SET), split_file=str(SAMPLE_SPLITS), output=str(root / "prepared")))
    torch.manual_seed(0)
    save_model(root / "model.pt", InverseFoldingModel(ModelConfig.preset("tiny", decoding="one_shot")))
    metrics = evaluate(
        EvaluateConfig(
            model_path=str(root / "model.pt"),
            data=str(root / "prepared"),
            out=str(root / "evaluation"),
            designs_per_protein=0,
            threads=1,
        )
    )
    return root, metrics


def _compare(root, evaluation, uri, name):
    return compare_step(
        prepared_path=str(root / "prepared"),
        evaluation_path=str(evaluation),
        pipeline_run_id=f"run-{uuid.uuid4().hex[:6]}",
        tracking_uri=uri,
        experiment=f"compare-{name}",
        model_name=name,
        threshold=0.0,
    )


def test_candidate_is_its_validation_recovery_not_its_test_recovery(evaluated, mlflow_server):
    root, metrics = evaluated
    name = f"invfold-compare-{uuid.uuid4().hex[:6]}"
    result = _compare(root, root / "evaluation", mlflow_server, name)
    assert result["metric"] == "validation_recovery"
    assert result["candidate"] == pytest.approx(metrics["datasets"]["validation"]["recovery"])
    assert result["candidate_test_recovery"] == pytest.approx(metrics["datasets"]["test"]["recovery"])
    assert result["register"] is True and "validation_recovery" in result["decision"]


def test_evaluation_without_validation_is_a_clear_error(evaluated, mlflow_server, tmp_path):
    root, metrics = evaluated
    (tmp_path / "metrics.json").write_text(
        json.dumps({**metrics, "datasets": {k: v for k, v in metrics["datasets"].items() if k != "validation"}})
    )
    with pytest.raises(ValueError, match="no validation recovery.*test split is for reporting only"):
        _compare(root, tmp_path, mlflow_server, "unused")
