"""KFP components of the design pipeline (work in step.py): fetch a registered model, plan the
shards of a structure set, design and score one shard, gather designs + scores + a report."""

from typing import List

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output

from invfold.runtime import runtime_image


@dsl.component(base_image=runtime_image(), install_kfp_package=False)
def fetch_model_op(model_name: str, model_version: str, tracking_uri: str, model: Output[Model]):
    """Download the model.pt of a registered model version (or alias) from MLflow.

    Args:
        model_name: Registered model name (as the register step records it).
        model_version: Version number ("3") or alias ("champion").
        tracking_uri: MLflow tracking URI ('' = MLFLOW_TRACKING_URI of the pod).
        model: Folder with model.pt.
    """
    from invfold.components.design.step import fetch_model_step
    from invfold.runtime import artifact_metadata

    found = fetch_model_step(
        model_name=model_name, model_version=model_version, tracking_uri=tracking_uri, out_dir=model.path
    )
    model.metadata.update(artifact_metadata(found))


@dsl.component(base_image=runtime_image(), install_kfp_package=False)
def plan_shards_op(structures: str, shards: int, design_chains: str = "", storage_endpoint: str = "") -> List[str]:
    """Split the structure set into shards ("k/n"), at most one per record.

    Args:
        structures: Structure set: a folder of PDB/mmCIF files, a chain-set jsonl[.gz], or a text list of paths.
        shards: Shards wanted (design runs one step per shard).
        storage_endpoint: S3-compatible endpoint of the object store (KFP's SeaweedFS / MinIO); '' for AWS.
        design_chains: Chains to design ("A,B"); set: one record per structure (a complex).

    Returns:
        The shards, "k/n" each.
    """
    from invfold import storage
    from invfold.components.design.step import plan_shards

    storage.use_endpoint(storage_endpoint)
    return plan_shards(structures, shards, design_chains)


@dsl.component(base_image=runtime_image(), install_kfp_package=False)
def design_shard_op(
    model: Input[Model],
    structures: str,
    shard: str,
    temperatures: str,
    num_sequences: int,
    seed: int,
    score_orders: int,
    threads: int,
    designs: Output[Dataset],
    storage_endpoint: str = "",
    design_chains: str = "",
):
    """Design and score the records of one shard.

    Args:
        model: Folder with model.pt.
        structures: Structure set (as for plan_shards_op).
        shard: Which shard, "k/n".
        temperatures: Sampling temperatures, e.g. "0.1,0.2".
        num_sequences: Sequences per structure and temperature.
        seed: Sample i uses seed + i.
        score_orders: Decoding orders each design's score averages over (0 = no score).
        threads: CPU threads (0 = the runtime's default).
        designs: designs.jsonl and designs.summary.json of the shard.
        storage_endpoint: S3-compatible endpoint of the object store (KFP's SeaweedFS / MinIO); '' for AWS.
        design_chains: Chains to design ("A,B"): each structure read as a complex, the other chains fixed context.
    """
    import os

    from invfold import storage
    from invfold.components.design.step import design_shard_step
    from invfold.runtime import artifact_metadata

    storage.use_endpoint(storage_endpoint)

    summary = design_shard_step(
        model_path=os.path.join(model.path, "model.pt"),
        structures=structures,
        shard=shard,
        temperatures=temperatures,
        num_sequences=num_sequences,
        seed=seed,
        score_orders=score_orders,
        threads=threads,
        out_dir=designs.path,
        design_chains=design_chains,
    )
    designs.metadata.update(artifact_metadata({k: summary[k] for k in ("designed", "designs", "skip_counts")}))


@dsl.component(base_image=runtime_image(), install_kfp_package=False)
def gather_designs_op(
    shards: Input[List[Dataset]],
    model: Input[Model],
    params: dict,
    pipeline_run_id: str,
    tracking_uri: str,
    experiment: str,
    designs: Output[Dataset],
    report: Output[Markdown],
    metrics: Output[Metrics],
):
    """Gather every shard's designs and scores, write a report, and log them to MLflow.

    Args:
        shards: The design steps' outputs.
        model: The fetched model (its registered name, version and run in the metadata).
        params: The design parameters (recorded with the designs).
        pipeline_run_id: KFP run id (MLflow parent-run key).
        tracking_uri: MLflow tracking URI ('' = MLFLOW_TRACKING_URI of the pod).
        experiment: MLflow experiment name.
        designs: designs.jsonl (every design with its score) and summary.json (counts, skips by reason).
        report: Totals, skips and the best design per structure (Markdown).
        metrics: Design counts, mean recovery and NLL.
    """
    from invfold.components.design.step import gather_step
    from invfold.runtime import artifact_metadata

    out = gather_step(
        shard_dirs=[s.path for s in shards],
        out_dir=designs.path,
        report_path=report.path,
        model={k: model.metadata.get(k, "") for k in ("registered_model", "version", "run_id")},
        params=params,
        pipeline_run_id=pipeline_run_id,
        tracking_uri=tracking_uri,
        experiment=experiment,
    )
    for key, value in out["metrics"].items():
        metrics.log_metric(key, value)
    designs.metadata.update(
        artifact_metadata({"designs": out["summary"]["designs"], "skip_counts": out["summary"]["skip_counts"]})
    )
