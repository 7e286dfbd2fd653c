"""KFP component of the fingerprint step (work in step.py): the input data's digest, passed to
prep so that KFP's cache follows the data, not the path."""

from kfp import dsl

from invfold.runtime import runtime_image


@dsl.component(base_image=runtime_image(), install_kfp_package=False)
def fingerprint_op(
    data_uri: str,
    split_file: str,
    pipeline_run_id: str,
    pipeline_run_name: str,
    tracking_uri: str,
    experiment: str,
    storage_endpoint: str = "",
) -> str:
    """Digest of the input data's contents, passed to prep so its cache follows the data.

    Args:
        data_uri: The protein set (path or URI).
        split_file: The split file ('' when prep makes the split).
        pipeline_run_id: KFP run id (MLflow parent-run key).
        pipeline_run_name: KFP run name (MLflow parent run name).
        tracking_uri: MLflow tracking URI ('' = MLFLOW_TRACKING_URI of the pod).
        experiment: MLflow experiment name.
        storage_endpoint: S3-compatible endpoint of the object store (KFP's SeaweedFS / MinIO); '' for AWS.
    """
    from invfold.components.fingerprint.step import fingerprint_step

    return fingerprint_step(
        data_uri, split_file, pipeline_run_id, pipeline_run_name, tracking_uri, experiment, storage_endpoint
    )
