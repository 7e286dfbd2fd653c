"""The one module that talks to MLflow (see tracker.py)."""

from invfold.components.tracking.tracker import (
    CHAMPION,
    DEFAULT_EXPERIMENT,
    MODEL_TRAINING_VIEW,
    CommandTracking,
    RunContext,
    Tracker,
    TrackingError,
    default_tracking_uri,
    experiment_page,
    fetch_model_uri,
    fetch_registered_file,
    finish_pipeline,
    in_cluster,
    reachable,
    stop_pipeline_runs,
)

__all__ = [
    "fetch_model_uri",
    "fetch_registered_file",
    "CHAMPION",
    "CommandTracking",
    "DEFAULT_EXPERIMENT",
    "MODEL_TRAINING_VIEW",
    "RunContext",
    "Tracker",
    "TrackingError",
    "default_tracking_uri",
    "experiment_page",
    "finish_pipeline",
    "in_cluster",
    "reachable",
    "stop_pipeline_runs",
]
