"""The one module that talks to MLflow (see tracker.py)."""

from .tracker import (
    CHAMPION,
    DEFAULT_EXPERIMENT,
    MODEL_TRAINING_VIEW,
    RunContext,
    Tracker,
    TrackingError,
    default_tracking_uri,
    finish_pipeline,
    in_cluster,
    reachable,
)

__all__ = [
    "CHAMPION",
    "DEFAULT_EXPERIMENT",
    "MODEL_TRAINING_VIEW",
    "RunContext",
    "Tracker",
    "TrackingError",
    "default_tracking_uri",
    "finish_pipeline",
    "in_cluster",
    "reachable",
]
