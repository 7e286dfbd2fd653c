"""The evaluate step in the pipeline: evaluate(), its scalars flattened for KFP Metrics and MLflow.

Kept apart from the `@dsl.component` definition (component.py): inside a running step KFP loads a
reduced `kfp.dsl` without the decorators, so the code a step imports must not define components.
"""

from __future__ import annotations

import json
import os
import shutil
import time

from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate
from invfold.components.evaluate.report import REPORT_FILES
from invfold.components.tracking import RunContext, Tracker
from invfold.runtime import record_timing


def scalar_metrics(metrics: dict, sep: str = "_") -> dict[str, float]:
    """Name -> value figures of evaluate()'s result: `test_recovery`, `test_perplexity`, ... for
    KFP's Metrics; with sep "/" MLflow's names (`test/recovery`: one chart section per dataset, and
    training's `validation/recovery` is the same figure under the same name)."""
    flat = {}
    for dataset, figures in metrics["datasets"].items():
        for key, value in figures.items():
            if isinstance(value, (int, float)) and value == value:
                flat[f"{dataset}{sep}{key}"] = float(value)
    for dataset, value in ((metrics.get("baseline") or {}).get("recovery") or {}).items():
        if isinstance(value, (int, float)) and value == value:
            flat[f"{dataset}{sep}constant_recovery"] = float(value)
    return flat


# The figures a model is judged by, on the pipeline's run (the row of MLflow's run list) and on the
# registered model: recovery with its interval, perplexity and the constant predictor, on the
# test and validation splits. Every other figure (subsets, counts, sampled and per-order recovery)
# is the evaluate run's alone.
HEADLINE_DATASETS = ("test", "validation")
HEADLINE_FIGURES = ("recovery", "recovery_ci_low", "recovery_ci_high", "perplexity", "constant_recovery")


def headline(named: dict[str, float]) -> dict[str, float]:
    """The headline figures among MLflow-named ones (`test/recovery`, ...)."""
    keys = {f"{d}/{f}" for d in HEADLINE_DATASETS for f in HEADLINE_FIGURES}
    return {k: v for k, v in named.items() if k in keys}


def record_evaluation(tracker, metrics: dict, prepared: str, out: str) -> None:
    """What an evaluation records in MLflow, from the pipeline's step and from `invfold evaluate
    --tracking-uri`: every figure as `<dataset>/<figure>`, the headline ones, the report
    and the per-protein table on the pipeline's run too, the test set as a dataset input, the output
    folder as artifacts."""
    named = scalar_metrics(metrics, "/")
    tracker.log_metrics(named)
    tracker.log_metrics(headline(named), parent=True)
    for parent in (False, True):
        tracker.log_dataset("test", metrics["data_digest"], prepared, "testing", parent=parent)
    tracker.log_artifacts(out, "evaluation")
    for name in REPORT_FILES:
        if os.path.exists(os.path.join(out, name)):
            tracker.log_artifact(os.path.join(out, name), "report", parent=True)


def evaluate_step(
    *,
    prepared_path: str,
    model_path: str,
    out: str,
    report_path: str,
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
) -> dict:
    """Evaluate the trained model into `out` (the report's HTML also to `report_path`) and record
    it; returns what the component reports (metrics, confusion, metadata). Its inputs that are no
    path are the component's parameters (scripts/generate_signatures.py writes them there).

    Args:
        pipeline_run_id: KFP run id (MLflow parent-run key).
        tracking_uri: MLflow tracking URI ('' = MLFLOW_TRACKING_URI of the pod).
        experiment: MLflow experiment name.
    """
    ctx = RunContext(pipeline_run_id=pipeline_run_id, tracking_uri=tracking_uri, experiment=experiment)
    with Tracker(ctx, "evaluate") as tracker:
        start = time.perf_counter()
        metrics = evaluate(
            EvaluateConfig(
                model_path=os.path.join(model_path, "model.pt"), data=prepared_path, out=out, threads=os.cpu_count()
            )
        )
        seconds = time.perf_counter() - start
        shutil.copyfile(os.path.join(out, "report.html"), report_path)
        with open(os.path.join(out, "confusion.json")) as fh:
            confusion = json.load(fh)
        flat = scalar_metrics(metrics)
        record_timing(
            "evaluate",
            seconds,
            test_recovery=flat.get("test_recovery"),
            test_perplexity=flat.get("test_perplexity"),
            constant_recovery=flat.get("test_constant_recovery"),
        )
        record_evaluation(tracker, metrics, prepared_path, out)
    return {
        "metrics": flat,
        "confusion": confusion,
        "metadata": {
            "compute_s": round(seconds, 3),
            "data_digest": metrics["data_digest"],
            "test_recovery": flat.get("test_recovery"),
            "mlflow_run_id": tracker.run_id or "",
        },
    }
