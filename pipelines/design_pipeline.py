"""The design pipeline: a registered model (MLflow name + version or alias) and a structure set
in -> the set split into shards, one design-and-score step per shard (dsl.ParallelFor), the
shards gathered into designs + scores (Dataset), a report (Markdown) and metrics, recorded in one
MLflow run; inside an exit handler that closes the MLflow runs.

Runs locally through KFP's local runner (`invfold run --pipeline design`; pipelines/local.py:
run_design_local) and on Kubeflow (`invfold compile --pipeline design` ->
pipelines/design_pipeline.yaml, which the chart's hook uploads as `<pipelineName>-design` with the
install's tracking URI and store as defaults; `invfold submit --pipeline design`)."""

from kfp import dsl

from invfold.components.design.component import (
    design_shard_op,
    fetch_model_op,
    gather_designs_op,
    plan_shards_op,
)
from invfold.components.tracking.component import finish_tracking_op
from invfold.pipelines import defaults as d
from invfold.pipelines.pipeline import RUN_ID, _labelled, _with_storage

DESIGN_PIPELINE_NAME = "invfold-design"


@dsl.pipeline(
    name=DESIGN_PIPELINE_NAME,
    description="Design sequences for a set of protein backbones with a registered inverse-folding model: "
    "shard the structures, design and score each shard in parallel, gather designs, scores and a report "
    "as artifacts, and record them in MLflow.",
)
def design_pipeline(
    structures: str,
    model_name: str = d.REGISTERED_MODEL,
    model_version: str = "champion",
    shards: int = 4,
    temperatures: str = "0.1",
    num_sequences: int = 4,
    seed: int = 0,
    score_orders: int = 4,
    threads: int = 0,
    design_chains: str = "",
    mlflow_tracking_uri: str = "",
    mlflow_experiment: str = d.EXPERIMENT,
    mlflow_secret: str = "invfold-mlflow-auth",
    storage_secret: str = "mlpipeline-minio-artifact",
    storage_endpoint: str = "",
):
    """Design sequences for every structure of a set with a registered model.

    Args:
        structures: Structure set: a folder of PDB/mmCIF files, a chain-set jsonl[.gz], or a text list of structure paths (path or URI).
        model_name: MLflow registered model (what the training pipeline registers).
        model_version: Registered version number ("3") or alias ("champion").
        shards: Parallel design steps (at most one per structure).
        temperatures: Sampling temperatures, e.g. "0.1,0.2" (num_sequences at each).
        num_sequences: Sequences per structure and temperature; sample i uses seed + i.
        seed: Random seed of the designs.
        score_orders: Random decoding orders each design's score (mean NLL, as `invfold score`) averages over; 0 = no score.
        threads: CPU threads per design step (0 = the runtime's default).
        design_chains: Chains to design, e.g. "A" or "A,B": each structure is read as a complex (all its protein chains) and the other chains are fixed context; structures without them are skipped. Empty: every chain, each designed alone.
        mlflow_tracking_uri: MLflow tracking URI; empty to use the MLFLOW_TRACKING_URI the cluster gives the steps.
        mlflow_experiment: MLflow experiment that records the designs.
        mlflow_secret: Secret with MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD for MLflow (basic auth); ignored when absent.
        storage_secret: Secret with the object-storage keys `accesskey` / `secretkey` (KFP's layout) for the steps that read the structures; referenced, never copied.
        storage_endpoint: S3-compatible endpoint of that store: http://seaweedfs.kubeflow:8333 on KFP 2.16+ (SeaweedFS), http://minio-service.kubeflow:9000 before; empty for AWS S3.
    """
    tracking = {"pipeline_run_id": RUN_ID, "tracking_uri": mlflow_tracking_uri, "experiment": mlflow_experiment}
    finish = _labelled(
        finish_tracking_op(**tracking).set_caching_options(False).set_display_name("finish-tracking"), mlflow_secret
    )
    with dsl.ExitHandler(finish, name="invfold-design"):
        fetch = fetch_model_op(model_name=model_name, model_version=model_version, tracking_uri=mlflow_tracking_uri)
        _labelled(fetch.set_caching_options(False).set_display_name("fetch-model"), mlflow_secret)
        plan = plan_shards_op(
            structures=structures, shards=shards, design_chains=design_chains, storage_endpoint=storage_endpoint
        )
        _labelled(plan.set_display_name("plan-shards"), mlflow_secret)
        _with_storage(plan, storage_secret)
        with dsl.ParallelFor(plan.output, name="shards") as shard:
            design = design_shard_op(
                model=fetch.outputs["model"],
                structures=structures,
                shard=shard,
                temperatures=temperatures,
                num_sequences=num_sequences,
                seed=seed,
                score_orders=score_orders,
                threads=threads,
                storage_endpoint=storage_endpoint,
                design_chains=design_chains,
            )
            _labelled(design.set_display_name("design-shard"), mlflow_secret)
            _with_storage(design, storage_secret)
        gather = gather_designs_op(
            shards=dsl.Collected(design.outputs["designs"]),
            model=fetch.outputs["model"],
            params={
                "structures": structures,
                "temperatures": temperatures,
                "num_sequences": num_sequences,
                "seed": seed,
                "score_orders": score_orders,
                "shards": shards,
                "design_chains": design_chains,
            },
            **tracking,
        )
        _labelled(gather.set_display_name("gather-designs").set_caching_options(False), mlflow_secret)
