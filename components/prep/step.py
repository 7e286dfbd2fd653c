"""The prep step in the pipeline: run_prep, the card copied out for the Kubeflow UI, timing.

Kept apart from the `@dsl.component` definition (component.py): inside a running step KFP loads a
reduced `kfp.dsl` without the decorators, so the code a step imports must not define components.
"""

from __future__ import annotations

import shutil
import time

from invfold import storage
from invfold.components.prep.config import PrepConfig
from invfold.components.prep.run import run_prep
from invfold.components.prep.shards import open_prepared
from invfold.runtime import record_timing


def prep_step(
    data_uri: str,
    split_file: str,
    data_digest: str,
    prepared_path: str,
    card_path: str,
    complexes: bool = False,
    storage_endpoint: str = "",
) -> dict:
    """Prep into prepared_path, copy its card to card_path; returns the artifact metadata."""

    storage.use_endpoint(storage_endpoint)
    start = time.perf_counter()
    result = run_prep(PrepConfig(input=data_uri, out=prepared_path, split_file=split_file or None, complexes=complexes))
    shutil.copyfile(open_prepared(prepared_path).root / "card.md", card_path)
    seconds = time.perf_counter() - start
    record_timing("prep", seconds, digest=result.digest[:19])
    return {
        "digest": result.digest,
        "input_digest": data_digest,
        "datasets": result.datasets,
        "compute_s": round(seconds, 3),
    }
