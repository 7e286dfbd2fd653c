"""The pipeline's exit handler: close the run's MLflow runs, FAILED when a step failed.

Kept apart from the `@dsl.component` definition (component.py): inside a running step KFP loads a
reduced `kfp.dsl` without the decorators, so the code a step imports must not define components.
"""

from __future__ import annotations

from invfold.components.tracking import RunContext, finish_pipeline


def finish_step(state: str, error_message: str, pipeline_run_id: str, tracking_uri: str, experiment: str) -> bool:
    """Returns whether the pipeline failed."""

    failed = state not in ("SUCCEEDED", "SUCCESS", "COMPLETE")
    ctx = RunContext(pipeline_run_id=pipeline_run_id, tracking_uri=tracking_uri, experiment=experiment)
    closed = finish_pipeline(ctx, failed, f"{state}: {error_message}" if failed else state)
    print(
        f"finish-tracking: pipeline {state}; closed {len(closed)} MLflow run(s) as {'FAILED' if failed else 'FINISHED'}"
    )
    return failed
