"""The inverse-folding network, its config and its file format."""

from .config import ModelConfig
from .io import load_model, save_model
from .network import InverseFoldingModel, random_decoding_order, sampling_noise

__all__ = ["ModelConfig", "InverseFoldingModel", "load_model", "save_model", "random_decoding_order", "sampling_noise"]
