"""`invfold export MODEL --out model.onnx [--data PATH]`."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a model to one ONNX file, gated on onnxruntime/PyTorch parity",
        description="Export an invfold model file to ONNX (dynamic batch and length) and check "
        "that onnxruntime reproduces PyTorch's logits on real proteins; exits 1 when it does not.",
    )
    parser.add_argument("model", help="model file written by training (model.pt)")
    parser.add_argument("--out", required=True, help="the .onnx file to write")
    parser.add_argument(
        "--data",
        default=None,
        help="proteins for the parity check: a prepared-data folder or any protein "
        "set (jsonl, TS50 json, PDB/mmCIF); default: the bundled real sample",
    )
    parser.add_argument(
        "--tolerance", type=float, default=1e-4, help="largest allowed |logit difference| (default 1e-4)"
    )
    parser.add_argument("--chains", type=int, default=4, help="parity chains of different lengths")
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset (default: the exporter's)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .onnx_export import ExportConfig, export_onnx

    cfg = ExportConfig(
        model_path=args.model,
        out_path=args.out,
        parity_data=args.data,
        tolerance=args.tolerance,
        parity_chains=args.chains,
        opset=args.opset,
    )
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
