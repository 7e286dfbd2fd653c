"""KFP exit-handler component: close the pipeline run's MLflow runs, FAILED when a step failed."""

from kfp import dsl

from invfold.runtime import runtime_image


@dsl.component(base_image=runtime_image(), install_kfp_package=False)
def finish_tracking_op(status: dsl.PipelineTaskFinalStatus, pipeline_run_id: str, tracking_uri: str, experiment: str):
    """Mark the pipeline's MLflow runs FAILED when a step failed, FINISHED otherwise.

    Args:
        status: The pipeline's final status (KFP fills it in).
        pipeline_run_id: KFP run id (MLflow parent-run key).
        tracking_uri: MLflow tracking URI ('' = MLFLOW_TRACKING_URI of the pod).
        experiment: MLflow experiment name.
    """
    from invfold.components.tracking.step import finish_step

    finish_step(status.state, status.error_message or "", pipeline_run_id, tracking_uri, experiment)
