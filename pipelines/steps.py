"""The work of each pipeline step, as plain functions the KFP components call.

Kept apart from the `@dsl.component` definitions (components/*/component.py): inside a running
step KFP loads a reduced `kfp.dsl` without the decorators, so the code a step imports must not
define components. Each function calls the step's plain function (run_prep, the launcher,
evaluate, export_onnx), records in MLflow through components/tracking, notes its compute time
(settings.record_timing) and returns what the component puts into its KFP outputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time

from invfold.errors import ConfigError

from .settings import record_timing

# -- fingerprint: KFP caches on input values, not on the files behind a path; prep receives
# this digest as a parameter, so changed data at the same path misses prep's cache.

CHUNK = 4 * 2**20


def fingerprint(uris: list[str]) -> str:
    """sha256 over every file's relative name and bytes (a folder: its files in sorted order);
    local paths and fsspec URIs."""
    from invfold import storage

    digest = hashlib.sha256()
    for uri in uris:
        if not uri:
            continue
        fs, root = storage.filesystem(uri)
        if not fs.exists(root):
            raise FileNotFoundError(f"fingerprint: {uri} does not exist")
        files = sorted(fs.find(root)) if fs.isdir(root) else [root]
        digest.update(f"input {uri}\n".encode())
        for path in files:
            digest.update(f"file {path[len(root) :].lstrip('/')}\n".encode())
            with fs.open(path, "rb") as fh:
                while chunk := fh.read(CHUNK):
                    digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def fingerprint_step(
    data_uri: str, split_file: str, pipeline_run_id: str, pipeline_run_name: str, tracking_uri: str, experiment: str
) -> str:
    """Digest the inputs; as the first step of every run it also opens the pipeline's MLflow run."""
    from invfold.components.tracking import RunContext, Tracker

    from invfold import __version__

    ctx = RunContext(
        pipeline_run_id=pipeline_run_id,
        tracking_uri=tracking_uri,
        experiment=experiment,
        pipeline_run_name=pipeline_run_name,
        pipeline_version=__version__,
    )
    with Tracker(ctx, "fingerprint") as tracker:
        start = time.perf_counter()
        result = fingerprint([data_uri, split_file])
        record_timing("fingerprint", time.perf_counter() - start, digest=result[:19])
        inputs = {"data_uri": data_uri, "split_file": split_file, "input_fingerprint": result}
        tracker.log_params(inputs)
        tracker.log_params(inputs, parent=True)
    return result


# -- prep


def prep_step(data_uri: str, split_file: str, data_digest: str, prepared_path: str, card_path: str) -> dict:
    """Prep into prepared_path, copy its card to card_path; returns the artifact metadata."""
    from invfold.components.prep.config import PrepConfig
    from invfold.components.prep.run import run_prep
    from invfold.components.prep.shards import open_prepared

    start = time.perf_counter()
    result = run_prep(PrepConfig(input=data_uri, output=prepared_path, split_file=split_file or None))
    shutil.copyfile(open_prepared(prepared_path).root / "card.md", card_path)
    seconds = time.perf_counter() - start
    record_timing("prep", seconds, digest=result.digest[:19])
    return {
        "digest": result.digest,
        "input_digest": data_digest,
        "datasets": result.datasets,
        "compute_s": round(seconds, 3),
    }


# -- train

SUMMARY_METRICS = ("step", "epoch", "elapsed_s", "residues", "residues_per_s")


def object_store_uri(uri: str) -> str:
    """An artifact URI as fsspec reads it (KFP's default store is MinIO, written minio://)."""
    return "s3://" + uri[len("minio://") :] if uri.startswith("minio://") else uri


def _model_overrides(overrides: dict) -> dict:
    """KFP passes dict parameters as JSON objects, so 64 arrives as 64.0: restore the ints the
    model config declares."""
    import dataclasses

    from invfold.components.model.config import ModelConfig

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
    for DeepSpeed, whose checkpoints are local files: they go to the shared workspace volume."""
    from invfold.components.launch.trainjob import WORKSPACE_MOUNT

    if checkpoint_root:
        root = checkpoint_root
    elif not remote:
        root = os.path.join(local_root, "checkpoints")
    elif strategy == "deepspeed":
        if not workspace_pvc:
            raise ConfigError(
                "strategy deepspeed on a cluster writes its checkpoints as local files: set the "
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
    from invfold.components.launch import Resources, on_kubernetes, select_launcher
    from invfold.components.prep.shards import open_prepared
    from invfold.components.tracking import RunContext, Tracker
    from invfold.components.train.config import TrainConfig

    from invfold import __version__

    remote = on_kubernetes()
    if remote and storage_endpoint:
        # This pod reads the job's outputs from the same store (s3fs/botocore read the variable).
        os.environ["AWS_ENDPOINT_URL"] = storage_endpoint
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
    options = {k: v for k, v in train_options.items() if v not in (None, "")}
    options["model_overrides"] = _model_overrides(options.get("model_overrides") or {})
    for key in ("max_steps", "epochs", "time_budget_s"):
        if not options.get(key):
            options.pop(key, None)
    cfg = TrainConfig(data=data, out=model_path, checkpoint_dir=checkpoint_dir, strategy=strategy, **options)
    resources = Resources(nodes=nodes, procs_per_node=procs_per_node, gpus_per_node=gpus_per_node)
    prepared = open_prepared(prepared_path)
    ctx = RunContext(
        pipeline_run_id=pipeline_run_id,
        tracking_uri=tracking_uri,
        experiment=experiment,
        pipeline_run_name=pipeline_run_name,
        pipeline_version=__version__,
        tags={"invfold.strategy": strategy},
    )
    with Tracker(ctx, "train") as tracker:
        tracker.set_tags({"invfold.strategy": strategy, "invfold.pipeline_version": __version__}, parent=True)
        tracker.log_params(
            {
                **cfg.to_dict(),
                "nodes": nodes,
                "procs_per_node": procs_per_node,
                "gpus_per_node": gpus_per_node,
                "data_digest": prepared.digest,
            }
        )
        tracker.log_params({"strategy": strategy, "data": data, "data_digest": prepared.digest}, parent=True)
        for name, context in (("train", "training"), ("validation", "validation")):
            if name in prepared.datasets:
                for parent in (False, True):
                    tracker.log_dataset(name, prepared.digest, data, context, prepared.index["datasets"][name], parent)
        tracker.log_artifact(str(prepared.root / "card.md"), "dataset")
        tracker.log_artifact(str(prepared.root / "card.json"), "dataset")
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
        result = launcher.run(cfg, resources)
        job_seconds = time.perf_counter() - start
        with open(os.path.join(model_path, "summary.json")) as fh:
            summary = json.load(fh)
        # The training loop's own time; the ranks' start-up and imports count as overhead.
        seconds = float(summary.get("elapsed_s") or job_seconds)
        record_timing(
            "train",
            seconds,
            steps=summary.get("step"),
            val_recovery=(summary.get("validation") or {}).get("recovery"),
            stop=summary.get("stop_reason"),
        )
        tracker.log_metrics_file(os.path.join(model_path, "metrics.jsonl"))
        scalars = {k: float(summary[k]) for k in SUMMARY_METRICS if isinstance(summary.get(k), (int, float))}
        for key, value in (summary.get("validation") or {}).items():
            if isinstance(value, (int, float)):
                scalars[f"validation_{key}"] = float(value)
        tracker.log_metrics(scalars)
        tracker.log_artifact(os.path.join(model_path, "summary.json"))
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


# -- evaluate


def scalar_metrics(metrics: dict) -> dict[str, float]:
    """Flat name -> value figures of evaluate()'s result (test_recovery, test_perplexity, ...)."""
    flat = {}
    for dataset, figures in metrics["datasets"].items():
        for key, value in figures.items():
            if isinstance(value, (int, float)) and value == value:
                flat[f"{dataset}_{key}"] = float(value)
    for dataset, value in ((metrics.get("baseline") or {}).get("recovery") or {}).items():
        if isinstance(value, (int, float)) and value == value:
            flat[f"{dataset}_constant_recovery"] = float(value)
    return flat


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
    from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate
    from invfold.components.tracking import RunContext, Tracker

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
        tracker.log_metrics(flat)
        tracker.log_metrics({k: v for k, v in flat.items() if k.startswith("test_")}, parent=True)
        for parent in (False, True):
            tracker.log_dataset("test", metrics["data_digest"], prepared_path, "testing", parent=parent)
        tracker.log_artifacts(out, "evaluation")
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


# -- compare and register

METRIC = "test_recovery"  # median per-protein recovery on the test split; higher is better
TAG_RECOVERY = "invfold.test_recovery"
TAG_DIGEST = "invfold.data_digest"
MODEL_PT_PATH = "model_pt"


def _candidate(evaluation_path: str) -> tuple[float, str, dict[str, float]]:
    """The candidate's test recovery, data digest and test figures."""
    with open(os.path.join(evaluation_path, "metrics.json")) as fh:
        metrics = json.load(fh)
    figures = {k: v for k, v in scalar_metrics(metrics).items() if k.startswith("test_")}
    return float(metrics["datasets"]["test"]["recovery"]), metrics["data_digest"], figures


def compare_step(
    *,
    prepared_path: str,
    evaluation_path: str,
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
    model_name: str,
    threshold: float,
) -> dict:
    from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate
    from invfold.components.tracking import RunContext, Tracker

    candidate, digest, test_figures = _candidate(evaluation_path)
    result = {
        "test_metrics": test_figures,
        "metric": METRIC,
        "candidate": candidate,
        "threshold": threshold,
        "data_digest": digest,
        "champion": None,
        "champion_version": None,
        "basis": "no champion",
    }
    ctx = RunContext(pipeline_run_id=pipeline_run_id, tracking_uri=tracking_uri, experiment=experiment)
    with Tracker(ctx, "compare") as tracker:
        start = time.perf_counter()
        champion = tracker.champion(model_name) if tracker.available else None
        if champion:
            result["champion_version"] = champion["version"]
            tags = champion["tags"]
            if tags.get(TAG_DIGEST) == digest and TAG_RECOVERY in tags:
                result["champion"], result["basis"] = float(tags[TAG_RECOVERY]), "recorded on the same data"
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    path = tracker.download_artifact(champion["run_id"], f"{MODEL_PT_PATH}/model.pt", tmp)
                    if path:
                        again = evaluate(
                            EvaluateConfig(
                                model_path=path, data=prepared_path, out=os.path.join(tmp, "eval"), datasets=["test"]
                            )
                        )
                        result["champion"] = float(again["datasets"]["test"]["recovery"])
                        result["basis"] = "re-evaluated on this run's test data"
        if not tracker.available:
            register, why = False, f"not registering: {tracker.reason}"
        elif candidate < threshold:
            register, why = False, f"{METRIC} {candidate:.4f} below the threshold {threshold:.4f}"
        elif champion and result["champion"] is None:
            register, why = False, f"champion v{champion['version']} could not be scored; keeping it"
        elif result["champion"] is not None and candidate <= result["champion"]:
            register, why = (
                False,
                (
                    f"{METRIC} {candidate:.4f} does not beat champion "
                    f"v{result['champion_version']} ({result['champion']:.4f}, {result['basis']})"
                ),
            )
        else:
            register, why = (
                True,
                (
                    f"{METRIC} {candidate:.4f} beats the threshold {threshold:.4f}"
                    + (
                        f" and champion v{result['champion_version']} ({result['champion']:.4f}, {result['basis']})"
                        if champion
                        else " (no champion yet)"
                    )
                ),
            )
        result.update(register=register, decision=why)
        record_timing("compare", time.perf_counter() - start, register=register, decision=why)
        tracker.log_metrics(
            {
                "candidate_" + METRIC: candidate,
                **({"champion_" + METRIC: result["champion"]} if result["champion"] is not None else {}),
            }
        )
        tracker.set_tags({"invfold.decision": why})
    print(f"compare: {why}")
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


def model_description(model_name: str, comparison: dict) -> str:
    """The registered model's description (markdown): what it is, its data, how to use it."""
    figures = comparison.get("test_metrics", {})
    perplexity = figures.get("test_perplexity")
    return (
        "invfold protein inverse-folding model (backbone coordinates in, per-residue amino-acid "
        "logits out) as ONNX, exported and checked for parity with the PyTorch model.\n\n"
        f"- data digest: `{comparison['data_digest']}`\n"
        f"- test median recovery: {comparison['candidate']:.4f}"
        + (f", test perplexity: {perplexity:.3f}" if perplexity is not None else "")
        + "\n"
        f"- decision: {comparison['decision']}\n\n"
        "Use: `mlflow.onnx.load_model(f'models:/" + model_name + "@champion')` or onnxruntime on "
        "the version's `model/model.onnx`; inputs and outputs are in the model's signature. "
        "`invfold design` designs sequences with the PyTorch checkpoint logged beside it (`model_pt/`)."
    )


def register_step(
    *,
    prepared_path: str,
    model_path: str,
    onnx_dir: str,
    comparison: dict,
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
            "parity_max_abs_diff": exported["max_abs_diff"],
            "parity_tolerance": exported["tolerance"],
            "onnx_size_bytes": exported["size_bytes"],
            "num_parameters": exported["num_parameters"],
        }
        tracker.log_metrics(export_metrics)
        tracker.log_artifact(os.path.join(model_path, "model.pt"), MODEL_PT_PATH)
        tracker.log_artifact(os.path.join(onnx_dir, "model.parity.json"), "export")
        tags = {
            TAG_RECOVERY: comparison["candidate"],
            TAG_DIGEST: comparison["data_digest"],
            "invfold.candidate_recovery": comparison["candidate"],
            "invfold.champion_recovery": comparison["champion"] if comparison["champion"] is not None else "none",
            "invfold.champion_version": comparison["champion_version"] or "none",
            "invfold.champion_basis": comparison["basis"],
            "invfold.decision": comparison["decision"],
            "kfp.pipeline_run_id": pipeline_run_id,
        }
        version = tracker.log_onnx_model(
            onnx_path,
            model_name,
            input_example(prepared_path),
            tags,
            metrics={**comparison.get("test_metrics", {}), **export_metrics},
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
            "sha256": exported["sha256"],
            "mlflow_run_id": tracker.run_id or "",
        },
    }


# -- exit handler


def finish_step(state: str, error_message: str, pipeline_run_id: str, tracking_uri: str, experiment: str) -> bool:
    """Returns whether the pipeline failed."""
    from invfold.components.tracking import RunContext, finish_pipeline

    failed = state not in ("SUCCEEDED", "SUCCESS", "COMPLETE")
    ctx = RunContext(pipeline_run_id=pipeline_run_id, tracking_uri=tracking_uri, experiment=experiment)
    closed = finish_pipeline(ctx, failed, f"{state}: {error_message}" if failed else state)
    print(
        f"finish-tracking: pipeline {state}; closed {len(closed)} MLflow run(s) as {'FAILED' if failed else 'FINISHED'}"
    )
    return failed
