"""KFP component of the evaluate step (work in step.py: evaluate_step).

What the Kubeflow UI shows: scalar Metrics (test perplexity and median recovery, per subset,
and the constant-predictor baseline), a ClassificationMetrics confusion matrix over the 20 amino
acids, and the HTML report with its plots embedded."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output

from invfold.runtime import runtime_image


@dsl.component(base_image=runtime_image(), install_kfp_package=False)
def evaluate_op(
    prepared: Input[Dataset],
    model: Input[Model],
    # begin generated: step inputs (scripts/generate_signatures.py, from step.py's evaluate_step)
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
    # end generated: step inputs
    metrics: Output[Metrics],
    confusion: Output[ClassificationMetrics],
    report: Output[HTML],
    evaluation: Output[Artifact],
):
    """Score the model on the held-out test split and its subsets.

    Args:
        pipeline_run_id: KFP run id (MLflow parent-run key).
        tracking_uri: MLflow tracking URI ('' = MLFLOW_TRACKING_URI of the pod).
        experiment: MLflow experiment name.
        prepared: The prepared data.
        model: The trained model folder.
        metrics: Perplexity and median recovery per dataset, and the constant baseline.
        confusion: Native x designed amino-acid confusion matrix on the test split.
        report: The evaluation report with its plots.
        evaluation: metrics.json, confusion.json, plots and reports.
    """
    from invfold.components.evaluate.step import evaluate_step
    from invfold.runtime import artifact_metadata

    out = evaluate_step(
        prepared_path=prepared.path,
        model_path=model.path,
        out=evaluation.path,
        report_path=report.path,
        # begin generated: step call
        pipeline_run_id=pipeline_run_id,
        tracking_uri=tracking_uri,
        experiment=experiment,
        # end generated: step call
    )
    for key, value in out["metrics"].items():
        metrics.log_metric(key, value)
    confusion.log_confusion_matrix(out["confusion"]["labels"], out["confusion"]["matrix"])
    evaluation.metadata.update(artifact_metadata(out["metadata"]))
