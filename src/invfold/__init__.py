"""invfold: declarative Kubeflow pipelines for protein inverse-folding models."""

__version__ = "0.1.0"
