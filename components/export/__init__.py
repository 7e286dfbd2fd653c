"""ONNX export with an onnxruntime parity gate (see README.md for the I/O contract).

The names below load on first use (PEP 562), so `invfold.components.export.config` imports
without torch (the CLI builds its options from it)."""

from invfold.lazy import lazy_exports

_WHERE = {
    "ExportConfig": "invfold.components.export.config",
    "ParityError": "invfold.components.export.onnx_export",
    "check_parity": "invfold.components.export.onnx_export",
    "export_onnx": "invfold.components.export.onnx_export",
    "write_onnx": "invfold.components.export.onnx_export",
}
__all__ = list(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
