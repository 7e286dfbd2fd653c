"""The train step in the pipeline: where checkpoints go, the TrainConfig from pipeline parameters,
the launcher (local processes or a TrainJob), and what is recorded in MLflow and KFP.

Kept apart from the `@dsl.component` definition (component.py): inside a running step KFP loads a
reduced `kfp.dsl` without the decorators, so the code a step imports must not define components.
"""

from __future__ import annotations

import dataclasses
import os
import time

from invfold import storage
from invfold.components.launch import Resources, on_kubernetes, select_launcher
from invfold.components.launch.trainjob import WORKSPACE_MOUNT
from invfold.components.model.config import ModelConfig
from invfold.components.prep.shards import open_prepared
from invfold.components.tracking import RunContext, Tracker
from invfold.components.train.budget import RECORDING_S, budget_from_process_start
from invfold.components.train.config import TrainConfig
from invfold.components.train.record import processes, record_result, record_start
from invfold.components.train.strategies import strategy_spec
from invfold.errors import ConfigError
from invfold.options import from_pipeline
from invfold.runtime import record_timing

SUMMARY_METRICS = ("step", "epoch", "elapsed_s", "residues", "residues_per_s")


def object_store_uri(uri: str) -> str:
    """An artifact URI as fsspec reads it (KFP's default store is MinIO, written minio://)."""
    return "s3://" + uri[len("minio://") :] if uri.startswith("minio://") else uri


def _model_overrides(overrides: dict) -> dict:
    """KFP passes dict parameters as JSON objects, so 64 arrives as 64.0: restore the ints the
    model config declares."""
    ints = {f.name for f in dataclasses.fields(ModelConfig) if f.type in (int, "int")}
    return {
        k: int(v) if k in ints and isinstance(v, float) and v.is_integer() else v for k, v in (overrides or {}).items()
    }


def checkpoint_location(
    strategy: str,
    remote: bool,
    pipeline_run_id: str,
    checkpoint_root: str,
    storage_root: str,
    workspace_pvc: str,
    local_root: str,
) -> str:
    """Where the run's checkpoints go: a folder keyed by the KFP run id (a retried step resumes
    there). Locally beside the model; on a cluster under `storage_root` (object storage), except
    for a strategy whose checkpoints are local files (DeepSpeed): they go to the shared workspace volume."""

    if checkpoint_root:
        root = checkpoint_root
    elif not remote:
        root = os.path.join(local_root, "checkpoints")
    elif not strategy_spec(strategy).remote_checkpoints:
        if not workspace_pvc:
            raise ConfigError(
                f"strategy {strategy} on a cluster writes its checkpoints as local files: set the "
                "pipeline parameter workspace_pvc to a ReadWriteMany claim (e.g. invfold-workspace) "
                "or checkpoint_root to a path on a volume every training pod mounts"
            )
        root = f"{WORKSPACE_MOUNT}/checkpoints"
    elif storage_root:
        root = f"{storage_root.rstrip('/')}/checkpoints"
    else:
        raise ConfigError("on a cluster the train step needs storage_root (s3://bucket/prefix) or checkpoint_root")
    return f"{root.rstrip('/')}/{pipeline_run_id}"


def train_step(
    *,
    prepared_path: str,
    prepared_uri: str,
    model_path: str,
    pipeline_run_id: str,
    pipeline_run_name: str,
    tracking_uri: str,
    experiment: str,
    strategy: str,
    nodes: int,
    procs_per_node: int,
    gpus_per_node: int,
    train_options: dict,
    checkpoint_root: str,
    storage_root: str,
    storage_secret: str,
    storage_endpoint: str = "",
    workspace_pvc: str = "",
    runtime_kind: str = "ClusterTrainingRuntime",
    task_config=None,
) -> dict:
    """Train and record; returns {'metrics': scalars for the KFP Metrics, 'metadata': ...}."""

    remote = on_kubernetes()
    if remote:
        # This pod reads the job's outputs (and init_from) from the same store as the job's pods.
        storage.use_endpoint(storage_endpoint)
    data = object_store_uri(prepared_uri) if remote else prepared_path
    checkpoint_dir = checkpoint_location(
        strategy,
        remote,
        pipeline_run_id,
        checkpoint_root,
        storage_root,
        workspace_pvc,
        local_root=os.path.dirname(model_path),
    )
    # an optional setting's empty parameter (0, "") is None, which is its default
    options = {k: v for k, v in from_pipeline(TrainConfig, train_options).items() if v not in (None, "")}
    options["model_overrides"] = _model_overrides(options.get("model_overrides") or {})
    cfg = TrainConfig(data=data, out=model_path, checkpoint_dir=checkpoint_dir, strategy=strategy, **options)
    resources = Resources(nodes=nodes, procs_per_node=procs_per_node, gpus_per_node=gpus_per_node)
    prepared = open_prepared(prepared_path)
    ctx = RunContext(
        pipeline_run_id=pipeline_run_id,
        tracking_uri=tracking_uri,
        experiment=experiment,
        pipeline_run_name=pipeline_run_name,
        tags={"invfold.strategy": strategy},
    )
    with Tracker(ctx, "train") as tracker:
        tracker.set_tags({"invfold.strategy": strategy, "invfold.pipeline_version": ctx.pipeline_version}, parent=True)
        record_start(tracker, cfg, prepared, data, processes(nodes, procs_per_node, gpus_per_node))
        cluster = {
            "storage_root": storage_root,
            "storage_secret": storage_secret or None,
            "storage_endpoint": storage_endpoint or None,
            "workspace_pvc": workspace_pvc or None,
            "runtime_kind": runtime_kind,
            "pipeline_run_id": pipeline_run_id,
        }
        if task_config is not None:
            cluster["node_selector"] = getattr(task_config, "node_selector", None) or {}
            cluster["tolerations"] = getattr(task_config, "tolerations", None) or []
        launcher = select_launcher(**cluster)
        start = time.perf_counter()
        with budget_from_process_start(RECORDING_S):  # the time budget counts from this step's start
            result = launcher.run(cfg, resources)
        job_seconds = time.perf_counter() - start
        summary = record_result(tracker, cfg, model_path)
        # The training loop's own time; the ranks' start-up and imports count as overhead.
        seconds = float(summary.get("elapsed_s") or job_seconds)
        record_timing(
            "train",
            seconds,
            steps=summary.get("step"),
            val_recovery=(summary.get("validation") or {}).get("recovery"),
            stop=summary.get("stop_reason"),
        )
        # KFP's Metrics (no histories there): the run's figures and its last validation
        scalars = {k: float(summary[k]) for k in SUMMARY_METRICS if isinstance(summary.get(k), (int, float))}
        for key, value in (summary.get("validation") or {}).items():
            if isinstance(value, (int, float)):
                scalars[f"validation_{key}"] = float(value)
        tracker.set_tags({"invfold.launcher": result.backend, "invfold.trainjob": result.job_name or ""})
    metadata = {
        "compute_s": round(seconds, 3),
        "job_s": round(job_seconds, 3),
        "strategy": strategy,
        "world_size": resources.world_size,
        "data_digest": prepared.digest,
        "checkpoint_dir": checkpoint_dir,
        "launcher": result.backend,
        "stop_reason": summary.get("stop_reason"),
        "mlflow_run_id": tracker.run_id or "",
        "mlflow_parent_run_id": tracker.parent_run_id or "",
    }
    return {"metrics": scalars, "metadata": metadata}
