"""Sequence design for a backbone with a trained model (checkpoint or ONNX)."""

from .design import Design, DesignConfig, design, parse_positions

__all__ = ["Design", "DesignConfig", "design", "parse_positions"]
