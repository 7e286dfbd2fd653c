"""KFP components of compare and export-and-register (work in step.py; the decision in decision.py).

compare_op: the candidate's validation recovery against the registration threshold, the
`champion` of the registered model on the same validation data (the recorded figure only when the
dataset digests match, else the champion evaluated again) and, for a fine-tuned candidate, the
weights it started from on the same validation data. Test figures are recorded, never chosen on. register_op, under dsl.If: ONNX export with its
parity gate, MLflow logging with signature and input example, registration, both figures
tagged on the new version, and the `champion` alias moved to it."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Metrics, Model, Output

from invfold.runtime import runtime_image


@dsl.component(base_image=runtime_image(), install_kfp_package=False)
def compare_op(
    prepared: Input[Dataset],
    evaluation: Input[Artifact],
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
    model_name: str,
    threshold: float,
    init_from: str,
    comparison: Output[Artifact],
    storage_endpoint: str = "",
) -> bool:
    """Decide whether the candidate is registered: it must reach the threshold, beat the champion
    and, when fine-tuned, beat its starting weights, all on validation recovery.

    Args:
        prepared: The prepared data (to re-evaluate a champion recorded on other data).
        evaluation: The candidate's evaluation folder.
        pipeline_run_id: KFP run id (MLflow parent-run key).
        tracking_uri: MLflow tracking URI ('' = MLFLOW_TRACKING_URI of the pod).
        experiment: MLflow experiment name.
        model_name: Registered model name.
        threshold: Minimum validation median recovery to register.
        init_from: The weights training started from ('' = none); a fine-tuned model must beat them on the same validation data.
        comparison: Both figures, how the champion's was obtained, and the decision (JSON).
        storage_endpoint: S3-compatible endpoint of the object store (KFP's SeaweedFS / MinIO); '' for AWS.

    Returns:
        Whether to register the candidate.
    """
    import json

    from invfold import storage
    from invfold.components.register.step import compare_step
    from invfold.runtime import artifact_metadata

    storage.use_endpoint(storage_endpoint)  # init_from may be an s3:// URI

    result = compare_step(
        prepared_path=prepared.path,
        evaluation_path=evaluation.path,
        pipeline_run_id=pipeline_run_id,
        tracking_uri=tracking_uri,
        experiment=experiment,
        model_name=model_name,
        threshold=threshold,
        init_from=init_from,
    )
    with open(comparison.path, "w") as fh:
        json.dump(result.to_dict(), fh, indent=2)
    comparison.metadata.update(artifact_metadata(result.to_dict()))
    return result.register


@dsl.component(base_image=runtime_image(), install_kfp_package=False)
def register_op(
    prepared: Input[Dataset],
    model: Input[Model],
    comparison: Input[Artifact],
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
    model_name: str,
    onnx_model: Output[Model],
    metrics: Output[Metrics],
    summary: Output[Markdown],
):
    """Export ONNX (parity-gated), register it in MLflow and make it the champion.

    Args:
        prepared: The prepared data (parity chains and the input example).
        model: The trained model folder.
        comparison: The compare step's figures (tagged on the new version).
        pipeline_run_id: KFP run id (MLflow parent-run key).
        tracking_uri: MLflow tracking URI ('' = MLFLOW_TRACKING_URI of the pod).
        experiment: MLflow experiment name.
        model_name: Registered model name.
        onnx_model: model.onnx and its parity report.
        metrics: Parity and size figures.
        summary: The outcome and the link to the pipeline's MLflow run (Markdown, shown in the Kubeflow UI).
    """
    import json

    from invfold.components.register.decision import Comparison
    from invfold.components.register.step import register_step
    from invfold.runtime import artifact_metadata

    out = register_step(
        prepared_path=prepared.path,
        model_path=model.path,
        onnx_dir=onnx_model.path,
        comparison=Comparison.from_dict(json.load(open(comparison.path))),
        pipeline_run_id=pipeline_run_id,
        tracking_uri=tracking_uri,
        experiment=experiment,
        model_name=model_name,
    )
    for key, value in out["metrics"].items():
        metrics.log_metric(key, value)
    onnx_model.metadata.update(artifact_metadata(out["metadata"]))
    with open(summary.path, "w") as fh:
        fh.write(out["summary"])
