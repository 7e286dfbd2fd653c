"""`invfold export MODEL --out model.onnx [--data PATH]`."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> None:
    from invfold.components.export.onnx_export import ExportConfig
    from invfold.options import add_command

    add_command(
        subparsers,
        "export",
        run,
        ExportConfig,
        help="export a model to one ONNX file, gated on onnxruntime/PyTorch parity",
        description="Export an invfold model file to ONNX (dynamic batch and length) and check "
        "that onnxruntime reproduces PyTorch's logits on real proteins; exits 1 when it does not.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.allocator import reexec_under_jemalloc
    from invfold.components.export.onnx_export import ExportConfig, export_onnx
    from invfold.options import from_args

    cfg = from_args(ExportConfig, args)
    reexec_under_jemalloc()  # eager PyTorch without page faults on every large tensor (allocator.py)
    result = export_onnx(cfg)  # a ParityError exits 1 with its message (src/invfold/cli.py)
    print(
        json.dumps(
            {
                k: getattr(result, k)
                for k in ("onnx", "opset", "max_abs_diff", "tolerance", "size_bytes", "report_path")
            },
            indent=2,
        )
    )
    return 0
