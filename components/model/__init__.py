"""The inverse-folding network, its config and its file format."""

from invfold.components.model.config import ModelConfig
from invfold.components.model.io import load_model, save_model
from invfold.components.model.network import InverseFoldingModel, random_decoding_order, sampling_noise

__all__ = ["ModelConfig", "InverseFoldingModel", "load_model", "save_model", "random_decoding_order", "sampling_noise"]
