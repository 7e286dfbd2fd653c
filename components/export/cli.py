"""`invfold export MODEL --out model.onnx [--data PATH]`."""

from __future__ import annotations

import argparse

from invfold import storage
from invfold.options import add_command, from_args

# the subcommands this module adds, with their line in `invfold --help` (listed without building them)
COMMANDS = {
    "export": "export a model to ONNX or to ProteinMPNN's checkpoint format, gated on parity",
}

# examples at the end of each subcommand's --help (real commands, as the README runs them)
EXAMPLES = {
    "export": (
        "invfold export train/model.pt --data prepared/ --out model.onnx",
        "invfold export proteinmpnn:v_48_020 --out v_48_020.onnx",
        "invfold export train/model.pt --format proteinmpnn --out weights/my_model.pt",
    ),
}


# exit codes `invfold export` can return (its --help lists these): no training, so no 3 or 143
EXIT_CODES = {"export": (0, 1, 2, 141)}


def add_parser(subparsers) -> None:
    from invfold.components.export.config import ExportConfig
    from invfold.components.model.reference import ModelSource

    add_command(
        subparsers,
        "export",
        run,
        ExportConfig,
        ModelSource,
        help=COMMANDS["export"],
        description="Export an invfold model file to ONNX (dynamic batch and length) and check "
        "that onnxruntime reproduces PyTorch's logits on real proteins; or, with --format proteinmpnn, "
        "to the checkpoint ProteinMPNN's protein_mpnn_run.py loads (--model_name = the file's stem), "
        "checked by reading it back; exits 1 when the logits differ.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.allocator import reexec_under_jemalloc
    from invfold.components.export.config import ExportConfig
    from invfold.components.model.reference import ModelSource, check_model, resolve_model

    cfg = from_args(ExportConfig, args)  # inputs judged before torch is imported
    check_model(cfg.model_path, onnx=False)
    storage.require_local(cfg.parity_data, "an existing prepared folder or protein set")
    cfg.model_path = resolve_model(cfg.model_path, from_args(ModelSource, args).tracking_uri)
    check_model(cfg.model_path, onnx=False)
    reexec_under_jemalloc()  # eager PyTorch without page faults on every large tensor (allocator.py)
    if cfg.format == "proteinmpnn":
        from invfold.components.export.proteinmpnn_export import export_proteinmpnn

        result = export_proteinmpnn(cfg)  # a ParityError exits 1 with its message (src/invfold/cli.py)
        keys = ("max_abs_diff", "tolerance", "size_bytes", "report_path")
        args.result = {"checkpoint": result.onnx, **{k: getattr(result, k) for k in keys}}
    else:
        from invfold.components.export.onnx_export import export_onnx

        result = export_onnx(cfg)  # a ParityError exits 1 with its message (src/invfold/cli.py)
        keys = ("onnx", "opset", "max_abs_diff", "tolerance", "size_bytes", "report_path")
        args.result = {k: getattr(result, k) for k in keys}
    print(f"wrote {cfg.out} ({args.result['size_bytes'] / 1e6:.1f} MB)")
    print(
        f"parity: max |logit difference| {args.result['max_abs_diff']:.2e} <= tolerance "
        f"{args.result['tolerance']:.0e} (report: {args.result['report_path']})"
    )
    return 0
