"""Sequence design for a backbone with a trained model (checkpoint or ONNX)."""

from invfold.components.design.design import Design, DesignConfig, design, design_record, load_backend, parse_positions

__all__ = ["Design", "DesignConfig", "design", "design_record", "load_backend", "parse_positions"]
