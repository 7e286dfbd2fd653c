"""ONNX export with an onnxruntime parity gate (see README.md for the I/O contract)."""

from invfold.components.export.onnx_export import ExportConfig, ParityError, check_parity, export_onnx, write_onnx

__all__ = ["ExportConfig", "ParityError", "check_parity", "export_onnx", "write_onnx"]
