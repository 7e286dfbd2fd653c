"""KFP component of the prep step (work in step.py: prep_step).

Outputs the prepared folder (Dataset, with digest and datasets in its metadata) and the dataset
card (Markdown, shown in the Kubeflow UI). No Metrics output: it would defeat caching, which
follows the data fingerprint passed in."""

from kfp import dsl
from kfp.dsl import Dataset, Markdown, Output

from invfold.runtime import runtime_image


@dsl.component(base_image=runtime_image(), install_kfp_package=False)
def prep_op(
    data_uri: str,
    split_file: str,
    complexes: bool,
    data_digest: str,
    prepared: Output[Dataset],
    card: Output[Markdown],
    storage_endpoint: str = "",
):
    """Validate, filter, split and shard the protein set; write the dataset card.

    Args:
        data_uri: The protein set: chain_set.jsonl[.gz], a TS50 JSON list or a folder of PDB/mmCIF files (path or URI).
        split_file: chain_set_splits.json-style file ('' to let prep make a cluster-disjoint split).
        complexes: The chains of one entry as one multi-chain record.
        data_digest: Fingerprint of the input bytes; only here so the cache follows the data.
        prepared: The prepared data (Arrow files, index, card).
        card: The dataset card.
        storage_endpoint: S3-compatible endpoint of the object store (KFP's SeaweedFS / MinIO); '' for AWS.
    """
    from invfold.components.prep.step import prep_step
    from invfold.runtime import artifact_metadata

    prepared.metadata.update(
        artifact_metadata(
            prep_step(
                data_uri,
                split_file,
                data_digest,
                prepared.path,
                card.path,
                complexes=complexes,
                storage_endpoint=storage_endpoint,
            )
        )
    )
