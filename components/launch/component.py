"""KFP component of the train step (work in step.py: train_step).

Locally the job runs as processes of this machine; in a pod it becomes a Kubeflow Trainer
TrainJob (components/launch), with the node selector and tolerations of the task passed through
(dsl.TaskConfig) to the TrainJob's runtimePatches. Checkpoints live under a location keyed by
the KFP run id, so a retried step resumes from the last complete checkpoint."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from invfold.components.train.config import TrainConfig
from invfold.options import with_field_help
from invfold.runtime import runtime_image


@dsl.component(
    base_image=runtime_image(),
    install_kfp_package=False,
    task_config_passthroughs=[dsl.TaskConfigField.KUBERNETES_NODE_SELECTOR, dsl.TaskConfigField.KUBERNETES_TOLERATIONS],
)
@with_field_help(TrainConfig)
def train_op(
    prepared: Input[Dataset],
    pipeline_run_id: str,
    pipeline_run_name: str,
    tracking_uri: str,
    experiment: str,
    strategy: str,
    nodes: int,
    procs_per_node: int,
    gpus_per_node: int,
    # begin generated: train settings (scripts/generate_signatures.py, from TrainConfig)
    preset: str,
    model_overrides: dict,
    init_from: str,
    freeze_encoder: bool,
    zero_stage: int,
    precision: str,
    tokens_per_batch: int,
    max_steps: int,
    epochs: int,
    lr: float,
    warmup_steps: int,
    seed: int,
    threads: int,
    time_budget_s: float,
    # end generated: train settings
    checkpoint_root: str,
    storage_root: str,
    storage_secret: str,
    storage_endpoint: str,
    workspace_pvc: str,
    runtime_kind: str,
    model: Output[Model],
    metrics: Output[Metrics],
    task_config: dsl.TaskConfig = None,
):
    """Train the model with the chosen strategy (local processes, or a TrainJob on a cluster).

    Args:
        prepared: The prepared data.
        pipeline_run_id: KFP run id (MLflow parent-run key, checkpoint location key).
        pipeline_run_name: KFP run name (MLflow parent run name).
        tracking_uri: MLflow tracking URI ('' = MLFLOW_TRACKING_URI of the pod).
        experiment: MLflow experiment name.
        @pipeline
        nodes: Training nodes.
        procs_per_node: Processes per node.
        gpus_per_node: GPUs per node (0 = CPU).
        checkpoint_root: Where checkpoints go (a run-id folder under it); '' = beside the model locally, under storage_root on a cluster.
        storage_root: Object-storage URI for TrainJob outputs (cluster only).
        storage_secret: Secret holding the storage keys `accesskey` / `secretkey` (KFP's layout; cluster only; referenced, never copied).
        storage_endpoint: S3-compatible endpoint URL of the store (KFP's MinIO / SeaweedFS); '' for AWS.
        runtime_kind: ClusterTrainingRuntime or TrainingRuntime (tenants), the kind of runtime the TrainJob references.
        workspace_pvc: ReadWriteMany claim mounted at /workspace in every training pod (cluster only; DeepSpeed checkpoints go there).
        model: The trained model folder (model.pt, metrics.jsonl, summary.json, tensorboard/).
        metrics: Final training figures.
        task_config: Node selector and tolerations passed through to the TrainJob.
    """
    from invfold.components.launch.step import train_step
    from invfold.runtime import artifact_metadata

    out = train_step(
        prepared_path=prepared.path,
        prepared_uri=prepared.uri,
        model_path=model.path,
        pipeline_run_id=pipeline_run_id,
        pipeline_run_name=pipeline_run_name,
        tracking_uri=tracking_uri,
        experiment=experiment,
        strategy=strategy,
        nodes=nodes,
        procs_per_node=procs_per_node,
        gpus_per_node=gpus_per_node,
        train_options={
            # begin generated: train options
            "preset": preset,
            "model_overrides": model_overrides,
            "init_from": init_from,
            "freeze_encoder": freeze_encoder,
            "zero_stage": zero_stage,
            "precision": precision,
            "tokens_per_batch": tokens_per_batch,
            "max_steps": max_steps,
            "epochs": epochs,
            "lr": lr,
            "warmup_steps": warmup_steps,
            "seed": seed,
            "threads": threads,
            "time_budget_s": time_budget_s,
            # end generated: train options
        },
        checkpoint_root=checkpoint_root,
        storage_root=storage_root,
        storage_secret=storage_secret,
        storage_endpoint=storage_endpoint,
        workspace_pvc=workspace_pvc,
        runtime_kind=runtime_kind,
        task_config=task_config,
    )
    for key, value in out["metrics"].items():
        metrics.log_metric(key, value)
    model.metadata.update(artifact_metadata(out["metadata"]))
