"""The fingerprint step: a digest of the input data's bytes. KFP caches on input values, not on
the files behind a path; prep receives this digest as a parameter, so changed data at the same
path misses prep's cache. As the first step of every run it also opens the pipeline's MLflow run.

Kept apart from the `@dsl.component` definition (component.py): inside a running step KFP loads a
reduced `kfp.dsl` without the decorators, so the code a step imports must not define components.
"""

from __future__ import annotations

import hashlib
import time

from invfold import storage
from invfold.components.tracking import RunContext, Tracker
from invfold.errors import InputError
from invfold.runtime import record_timing

CHUNK = 4 * 2**20


def fingerprint(uris: list[str]) -> str:
    """sha256 over every file's relative name and bytes (a folder: its files in sorted order);
    local paths and fsspec URIs."""

    digest = hashlib.sha256()
    for uri in uris:
        if not uri:
            continue
        fs, root = storage.filesystem(uri)
        if not fs.exists(root):
            raise InputError(uri, None, None, "an existing file or folder", "nothing there", reason="missing_file")
        files = sorted(fs.find(root)) if fs.isdir(root) else [root]
        digest.update(f"input {uri}\n".encode())
        for path in files:
            digest.update(f"file {path[len(root) :].lstrip('/')}\n".encode())
            with fs.open(path, "rb") as fh:
                while chunk := fh.read(CHUNK):
                    digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def fingerprint_step(
    data_uri: str,
    split_file: str,
    pipeline_run_id: str,
    pipeline_run_name: str,
    tracking_uri: str,
    experiment: str,
    storage_endpoint: str = "",
) -> str:
    """Digest the inputs; as the first step of every run it also opens the pipeline's MLflow run."""

    storage.use_endpoint(storage_endpoint)
    ctx = RunContext(
        pipeline_run_id=pipeline_run_id,
        tracking_uri=tracking_uri,
        experiment=experiment,
        pipeline_run_name=pipeline_run_name,
    )
    with Tracker(ctx, "fingerprint") as tracker:
        start = time.perf_counter()
        result = fingerprint([data_uri, split_file])
        record_timing("fingerprint", time.perf_counter() - start, digest=result[:19])
        inputs = {"data_uri": data_uri, "split_file": split_file, "input_fingerprint": result}
        tracker.log_params(inputs)
        tracker.log_params(inputs, parent=True)
    return result
