"""The invfold pipeline: fingerprint -> prep -> train -> evaluate -> compare -> (if better)
register, inside an exit handler that closes the MLflow runs (FAILED when a step failed).

The same definition runs locally (`invfold run`, KFP's local runner: images ignored, training
as local processes) and on Kubeflow (`invfold compile` / `invfold submit`: every step in the
runtime image, training as a Kubeflow Trainer TrainJob)."""

from kfp import dsl, kubernetes

from invfold.components.evaluate.component import evaluate_op
from invfold.components.fingerprint.component import fingerprint_op
from invfold.components.launch.component import train_op
from invfold.components.launch.trainjob import SECRET_KEYS
from invfold.components.prep.component import prep_op
from invfold.components.register.component import compare_op, register_op
from invfold.components.tracking.component import finish_tracking_op
from invfold.components.train.config import TrainConfig
from invfold.options import with_field_help
from invfold.pipelines import defaults as d

PIPELINE_NAME = "invfold"
RUN_ID = dsl.PIPELINE_JOB_ID_PLACEHOLDER
RUN_NAME = dsl.PIPELINE_JOB_NAME_PLACEHOLDER
MLFLOW_CLIENT_KEYS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
STORAGE_SECRET_TO_ENV = {key: env for env, key in SECRET_KEYS.items()}
RUN_AS = 10001  # the images' user (images/runtime/Dockerfile)


def _labelled(task, mlflow_secret, role: str = "step"):
    """What every step pod gets on a cluster (the local runner ignores it): the pod labels the
    NetworkPolicies select on (`launcher`: the train step, which creates TrainJobs); MLflow's
    client credentials from the Secret `mlflow_secret` as env (optional: absent without auth);
    a non-root security context as the images' user, which namespaces enforcing Pod Security
    `restricted` require of KFP's executor pods."""
    kubernetes.add_pod_label(task, "app.kubernetes.io/part-of", "invfold")
    kubernetes.add_pod_label(task, "invfold.dev/role", role)
    kubernetes.add_pod_annotation(task, "sidecar.istio.io/inject", "false")
    kubernetes.use_secret_as_env(
        task, secret_name=mlflow_secret, secret_key_to_env={k: k for k in MLFLOW_CLIENT_KEYS}, optional=True
    )
    kubernetes.set_security_context(task, run_as_user=RUN_AS, run_as_group=RUN_AS, run_as_non_root=True)
    return task


def _with_storage(task, storage_secret):
    """A step that reads or writes object storage (the input data, init_from, the job's outputs):
    the store's keys from the Secret `storage_secret` (KFP's layout, optional: absent on AWS with
    workload identity), the same keys the TrainJob's pods get. Its endpoint arrives as the step's
    `storage_endpoint` input (invfold.storage.use_endpoint)."""
    kubernetes.use_secret_as_env(
        task, secret_name=storage_secret, secret_key_to_env=STORAGE_SECRET_TO_ENV, optional=True
    )
    return task


@dsl.pipeline(
    name=PIPELINE_NAME,
    description="Train a protein inverse-folding model (backbone structure in, sequence out): "
    "prepare the protein set, train with DDP, Horovod or DeepSpeed, evaluate on held-out "
    "chains, and register the ONNX model in MLflow when it beats the champion.",
)
@with_field_help(TrainConfig)
def invfold_pipeline(
    data_uri: str,
    split_file: str = "",
    complexes: bool = False,
    nodes: int = 1,
    procs_per_node: int = d.PROCS_PER_NODE,
    gpus_per_node: int = 0,
    # begin generated: train settings (scripts/generate_signatures.py, from TrainConfig)
    preset: str = d.TRAIN["preset"],
    model_overrides: dict = d.TRAIN["model_overrides"],
    init_from: str = d.TRAIN["init_from"],
    freeze_encoder: bool = d.TRAIN["freeze_encoder"],
    strategy: str = d.TRAIN["strategy"],
    zero_stage: int = d.TRAIN["zero_stage"],
    precision: str = d.TRAIN["precision"],
    tokens_per_batch: int = d.TRAIN["tokens_per_batch"],
    max_steps: int = d.TRAIN["max_steps"],
    epochs: int = d.TRAIN["epochs"],
    lr: float = d.TRAIN["lr"],
    warmup_steps: int = d.TRAIN["warmup_steps"],
    seed: int = d.TRAIN["seed"],
    threads: int = d.TRAIN["threads"],
    time_budget_s: float = d.TRAIN["time_budget_s"],
    # end generated: train settings
    registration_threshold: float = 0.0,
    mlflow_tracking_uri: str = "",
    mlflow_experiment: str = d.EXPERIMENT,
    mlflow_secret: str = "invfold-mlflow-auth",
    registered_model_name: str = d.REGISTERED_MODEL,
    checkpoint_root: str = "",
    storage_root: str = "",
    storage_secret: str = "mlpipeline-minio-artifact",
    storage_endpoint: str = "",
    workspace_pvc: str = "",
    trainer_runtime_kind: str = "ClusterTrainingRuntime",
    gpu_node_selector: dict = {},
    gpu_tolerations: list = [],
):
    """Prepare, train, evaluate and register an inverse-folding model.

    Args:
        data_uri: Protein set: a CATH-style chain_set.jsonl[.gz], a TS50-style JSON list, or a folder of PDB/mmCIF files (path or s3://, gs://, https:// URI).
        split_file: chain_set_splits.json with train/validation/test names; empty to let prep make a cluster-disjoint split.
        complexes: Read the chains of one entry (a PDB/mmCIF file, chain-set lines 1abc.A, 1abc.B) as one multi-chain record, so the model trains on complexes.
        @pipeline
        nodes: Training nodes (TrainJob numNodes on a cluster).
        procs_per_node: Training processes per node (one per GPU on GPU nodes).
        gpus_per_node: GPUs per training node (0 trains on CPU).
        registration_threshold: Minimum median validation recovery (0-1) for the model to be registered (models are chosen on validation; test figures are reported only).
        mlflow_tracking_uri: MLflow tracking URI; empty to use the MLFLOW_TRACKING_URI the cluster gives the steps.
        mlflow_experiment: MLflow experiment that records the run.
        mlflow_secret: Secret with MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD every step sends to MLflow (basic auth); ignored when absent.
        registered_model_name: MLflow registered model that receives the ONNX model; its champion alias marks the best.
        checkpoint_root: Checkpoint location (a folder per pipeline run under it, so a retried step resumes); empty for the default.
        storage_root: Object-storage URI (s3://bucket/prefix) the TrainJob writes its outputs and checkpoints under (clusters); on KFP's store in a profile namespace it must lie under s3://mlpipeline/private/<namespace>/ (or artifacts/, shared/), the only keys the profile's credentials may write.
        storage_secret: Secret with the object-storage keys `accesskey` / `secretkey` (KFP's own layout: its mlpipeline-minio-artifact Secret, copied into every profile namespace) for every step that reads or writes object storage (fingerprint, prep, train, compare) and the TrainJob pods; referenced, never copied.
        storage_endpoint: S3-compatible endpoint of that store for every step and TrainJob pod: http://seaweedfs.kubeflow:8333 on KFP 2.16+ (SeaweedFS), http://minio-service.kubeflow:9000 before; empty for AWS S3.
        workspace_pvc: ReadWriteMany PersistentVolumeClaim mounted at /workspace in every training pod (clusters); required for deepspeed, whose checkpoints are local files (they go to /workspace/checkpoints/<run id>).
        trainer_runtime_kind: ClusterTrainingRuntime (runtimes installed cluster-wide) or TrainingRuntime (a tenant's runtimes in its own namespace).
        gpu_node_selector: Node selector of the GPU node pool for the TrainJob, e.g. {"nvidia.com/gpu.present": "true"}.
        gpu_tolerations: Tolerations for the GPU node pool's taints, e.g. [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}].
    """
    tracking = {"pipeline_run_id": RUN_ID, "tracking_uri": mlflow_tracking_uri, "experiment": mlflow_experiment}
    finish = _labelled(
        finish_tracking_op(**tracking).set_caching_options(False).set_display_name("finish-tracking"), mlflow_secret
    )
    with dsl.ExitHandler(finish, name="invfold-run"):
        fingerprint = fingerprint_op(
            data_uri=data_uri,
            split_file=split_file,
            pipeline_run_name=RUN_NAME,
            storage_endpoint=storage_endpoint,
            **tracking,
        )
        _labelled(fingerprint.set_caching_options(False).set_display_name("fingerprint"), mlflow_secret)
        _with_storage(fingerprint, storage_secret)
        prep = prep_op(
            data_uri=data_uri,
            split_file=split_file,
            complexes=complexes,
            data_digest=fingerprint.output,
            storage_endpoint=storage_endpoint,
        )
        _labelled(prep.set_display_name("prep"), mlflow_secret)
        _with_storage(prep, storage_secret)
        train = train_op(
            prepared=prep.outputs["prepared"],
            pipeline_run_name=RUN_NAME,
            nodes=nodes,
            procs_per_node=procs_per_node,
            gpus_per_node=gpus_per_node,
            # begin generated: train call
            preset=preset,
            model_overrides=model_overrides,
            init_from=init_from,
            freeze_encoder=freeze_encoder,
            strategy=strategy,
            zero_stage=zero_stage,
            precision=precision,
            tokens_per_batch=tokens_per_batch,
            max_steps=max_steps,
            epochs=epochs,
            lr=lr,
            warmup_steps=warmup_steps,
            seed=seed,
            threads=threads,
            time_budget_s=time_budget_s,
            # end generated: train call
            checkpoint_root=checkpoint_root,
            storage_root=storage_root,
            storage_secret=storage_secret,
            storage_endpoint=storage_endpoint,
            workspace_pvc=workspace_pvc,
            runtime_kind=trainer_runtime_kind,
            **tracking,
        )
        _labelled(
            train.set_display_name("train").set_retry(num_retries=d.TRAIN_RETRIES, backoff_duration="10s"),
            mlflow_secret,
            role="launcher",
        )
        kubernetes.add_node_selector_json(train, gpu_node_selector)
        kubernetes.add_toleration_json(train, gpu_tolerations)
        # The train step itself reads the job's outputs from the store: same keys as the job.
        _with_storage(train, storage_secret)
        kubernetes.use_field_path_as_env(train, "POD_NAME", "metadata.name")
        kubernetes.use_field_path_as_env(train, "POD_UID", "metadata.uid")
        evaluate = evaluate_op(prepared=prep.outputs["prepared"], model=train.outputs["model"], **tracking)
        _labelled(evaluate.set_display_name("evaluate"), mlflow_secret)
        compare = compare_op(
            prepared=prep.outputs["prepared"],
            evaluation=evaluate.outputs["evaluation"],
            model_name=registered_model_name,
            threshold=registration_threshold,
            init_from=init_from,
            storage_endpoint=storage_endpoint,
            **tracking,
        )
        _labelled(compare.set_display_name("compare-with-champion").set_caching_options(False), mlflow_secret)
        _with_storage(compare, storage_secret)
        with dsl.If(compare.outputs["Output"] == True, name="better-than-champion"):  # noqa: E712
            register = register_op(
                prepared=prep.outputs["prepared"],
                model=train.outputs["model"],
                comparison=compare.outputs["comparison"],
                model_name=registered_model_name,
                **tracking,
            )
            _labelled(register.set_display_name("export-and-register").set_caching_options(False), mlflow_secret)
