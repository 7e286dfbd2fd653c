"""The compare and register steps in the pipeline: gather the facts (the candidate's evaluation,
the champion's score on the same test data, the tracking server's state), let `decide` (decision.py)
choose, and on `register` export ONNX with its parity gate and register it as the champion.

Kept apart from the `@dsl.component` definition (component.py): inside a running step KFP loads a
reduced `kfp.dsl` without the decorators, so the code a step imports must not define components.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

from invfold.runtime import record_timing

from .decision import METRIC, Champion, Comparison, Evaluation, decide


TAG_RECOVERY = "invfold.test_recovery"
TAG_DIGEST = "invfold.data_digest"
MODEL_PT_PATH = "model_pt"


def read_evaluation(evaluation_path: str) -> Evaluation:
    with open(os.path.join(evaluation_path, "metrics.json")) as fh:
        return Evaluation.from_metrics(json.load(fh))


def score_champion(tracker, found: dict, candidate: Evaluation, prepared_path: str) -> Champion:
    """The champion's test recovery on the candidate's test data: the figure recorded on its
    version when the data digests match, else the champion's model.pt evaluated again here."""
    from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate

    tags = found["tags"]
    if tags.get(TAG_DIGEST) == candidate.data_digest and TAG_RECOVERY in tags:
        return Champion(found["version"], float(tags[TAG_RECOVERY]), "recorded on the same data")
    with tempfile.TemporaryDirectory() as tmp:
        path = tracker.download_artifact(found["run_id"], f"{MODEL_PT_PATH}/model.pt", tmp)
        if not path:
            return Champion(found["version"], None, "no model.pt to evaluate")
        cfg = EvaluateConfig(model_path=path, data=prepared_path, out=os.path.join(tmp, "eval"), datasets=["test"])
        again = Evaluation.from_metrics(evaluate(cfg))
    return Champion(found["version"], again.test_recovery, "re-evaluated on this run's test data")


def compare_step(
    *,
    prepared_path: str,
    evaluation_path: str,
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
    model_name: str,
    threshold: float,
) -> Comparison:
    from invfold.components.tracking import RunContext, Tracker

    candidate = read_evaluation(evaluation_path)
    ctx = RunContext(pipeline_run_id=pipeline_run_id, tracking_uri=tracking_uri, experiment=experiment)
    with Tracker(ctx, "compare") as tracker:
        start = time.perf_counter()
        found = tracker.champion(model_name) if tracker.available else None
        champion = score_champion(tracker, found, candidate, prepared_path) if found else None
        result = decide(candidate, threshold, champion, tracking_down="" if tracker.available else tracker.reason)
        record_timing("compare", time.perf_counter() - start, register=result.register, decision=result.decision)
        tracker.log_metrics(
            {
                "candidate_" + METRIC: result.candidate,
                **({"champion_" + METRIC: result.champion} if result.champion is not None else {}),
            }
        )
        tracker.set_tags({"invfold.decision": result.decision})
    print(f"compare: {result.decision}")
    return result


def input_example(prepared_path: str) -> dict:
    """The model's ONNX inputs for the shortest test chain (a real protein)."""
    import torch
    from invfold.components.export.runtime import feeds
    from invfold.components.prep.shards import open_prepared
    from invfold.components.protein.batch import collate

    test = open_prepared(prepared_path).open("test")
    record = test[int(min(range(len(test)), key=lambda i: test.lengths[i]))]
    batch = collate([record])
    order = torch.rand(batch.S.shape, generator=torch.Generator().manual_seed(0))
    return feeds(batch.X, batch.S, batch.mask, batch.residue_index, order)


def model_description(model_name: str, comparison: Comparison) -> str:
    """The registered model's description (markdown): what it is, its data, how to use it."""
    perplexity = comparison.test_metrics.get("test_perplexity")
    return (
        "invfold protein inverse-folding model (backbone coordinates in, per-residue amino-acid "
        "logits out) as ONNX, exported and checked for parity with the PyTorch model.\n\n"
        f"- data digest: `{comparison.data_digest}`\n"
        f"- test median recovery: {comparison.candidate:.4f}"
        + (f", test perplexity: {perplexity:.3f}" if perplexity is not None else "")
        + "\n"
        f"- decision: {comparison.decision}\n\n"
        "Use: `mlflow.onnx.load_model(f'models:/" + model_name + "@champion')` or onnxruntime on "
        "the version's `model/model.onnx`; inputs and outputs are in the model's signature. "
        "`invfold design` designs sequences with the PyTorch checkpoint logged beside it (`model_pt/`)."
    )


def register_step(
    *,
    prepared_path: str,
    model_path: str,
    onnx_dir: str,
    comparison: Comparison,
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
    model_name: str,
) -> dict:
    from invfold.components.export.onnx_export import ExportConfig, export_onnx
    from invfold.components.tracking import RunContext, Tracker

    os.makedirs(onnx_dir, exist_ok=True)
    onnx_path = os.path.join(onnx_dir, "model.onnx")
    ctx = RunContext(pipeline_run_id=pipeline_run_id, tracking_uri=tracking_uri, experiment=experiment)
    with Tracker(ctx, "register") as tracker:
        start = time.perf_counter()
        exported = export_onnx(
            ExportConfig(model_path=os.path.join(model_path, "model.pt"), out_path=onnx_path, parity_data=prepared_path)
        )
        export_metrics = {
            "parity_max_abs_diff": exported.max_abs_diff,
            "parity_tolerance": exported.tolerance,
            "onnx_size_bytes": exported.size_bytes,
            "num_parameters": exported.num_parameters,
        }
        tracker.log_metrics(export_metrics)
        tracker.log_artifact(os.path.join(model_path, "model.pt"), MODEL_PT_PATH)
        tracker.log_artifact(os.path.join(onnx_dir, "model.parity.json"), "export")
        tags = {
            TAG_RECOVERY: comparison.candidate,
            TAG_DIGEST: comparison.data_digest,
            "invfold.candidate_recovery": comparison.candidate,
            "invfold.champion_recovery": comparison.champion if comparison.champion is not None else "none",
            "invfold.champion_version": comparison.champion_version or "none",
            "invfold.champion_basis": comparison.basis,
            "invfold.decision": comparison.decision,
            "kfp.pipeline_run_id": pipeline_run_id,
        }
        version = tracker.log_onnx_model(
            onnx_path,
            model_name,
            input_example(prepared_path),
            tags,
            metrics={**comparison.test_metrics, **export_metrics},
            description=model_description(model_name, comparison),
        )
        if version:
            tracker.set_champion(model_name, version)
        seconds = time.perf_counter() - start
        record_timing("register", seconds, version=version or "not recorded")
        tracker.set_tags({"invfold.registered_version": version or "not recorded"}, parent=True)
    return {
        "metrics": export_metrics,
        "metadata": {
            "compute_s": round(seconds, 3),
            "registered_model": model_name,
            "version": version or "",
            "sha256": exported.sha256,
            "mlflow_run_id": tracker.run_id or "",
        },
    }
