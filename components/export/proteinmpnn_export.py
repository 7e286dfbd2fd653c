"""Export to ProteinMPNN's own checkpoint format, so a model trained or fine-tuned here runs in
upstream's `protein_mpnn_run.py` unchanged (put the .pt where --model_name finds it).

The gate: the written state dict is read back with the importer (published.convert_state_dict,
whose network tests/model/test_published.py checks against upstream's on the same tensors) and
must reproduce the model's logits on real chains; the residual of the rank-16 relative-position
factorization (published.to_upstream_state_dict) is reported beside it."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from pathlib import Path

import torch

from invfold.components.export.config import ExportConfig
from invfold.components.export.onnx_export import (
    ExportResult,
    ParityError,
    load_parity_records,
    parity_figures,
    report_path,
)
from invfold.components.model import published
from invfold.components.model.io import load_model_or_published
from invfold.components.protein.record import ChainRecord

log = logging.getLogger(__name__)


def round_trip_parity(model, state: dict, records: list[ChainRecord], tolerance: float, seed: int = 0) -> dict:
    """Max |logit difference| between the model and the exported state dict read back, per chain
    and for all chains padded into one batch (native S, a seeded random decoding order)."""
    back = published.convert_state_dict(state, model.cfg.k_neighbors)
    g = torch.Generator().manual_seed(seed)
    model.eval()

    def diff(batch) -> float:
        order = torch.rand(batch.S.shape, generator=g)
        with torch.no_grad():
            ref = model(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, order)
            got = back(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, order)
        real = batch.structure_mask > 0
        delta = (got - ref).abs()[real]
        if not torch.isfinite(delta).all():
            return float("inf")
        return float(delta.max()) if real.any() else 0.0

    return parity_figures(records, diff, tolerance)


def export_proteinmpnn(cfg: ExportConfig) -> ExportResult:
    """Write cfg.out (upstream's checkpoint) and <stem>.parity.json; on a failed gate nothing is
    left at cfg.out and ParityError is raised (the report says why)."""
    model = load_model_or_published(cfg.model_path)
    checkpoint, residual = published.to_upstream_checkpoint(model, cfg.noise_level)
    records = (
        cfg.parity_records
        if cfg.parity_records is not None
        else load_parity_records(cfg.parity_data, cfg.parity_chains, cfg.max_length)
    )
    parity = round_trip_parity(model, checkpoint["model_state_dict"], records, cfg.tolerance, cfg.seed)
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    data = buffer.getvalue()
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "onnx": out.name,  # ExportResult's field for the written file
        "format": "proteinmpnn",
        "passed": parity["passed"],
        "max_abs_diff": parity["max_abs_diff"],
        "tolerance": cfg.tolerance,
        "opset": 0,  # no ONNX graph
        "size_bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "torch_version": torch.__version__,
        "model_config": model.cfg.to_dict(),
        "num_parameters": model.num_parameters(),
        "num_edges": checkpoint["num_edges"],
        "noise_level": checkpoint["noise_level"],
        "position_factorization_residual": residual,
        "upstream": "protein_mpnn_run.py --model_name <stem> (hidden_dim 128, 3 + 3 layers, 21 letters)",
        "parity": parity,
        "report_path": str(report_path(out)),
    }
    report_path(out).write_text(json.dumps(result, indent=2) + "\n")
    if not parity["passed"]:
        out.unlink(missing_ok=True)
        hint = (
            f"; the relative-position table does not fit upstream's rank-16 embedding (residual {residual:.3g})"
            if residual > cfg.tolerance
            else ""
        )
        raise ParityError(parity["max_abs_diff"], cfg.tolerance, result, what="ProteinMPNN export", hint=hint)
    staging = out.with_name(out.name + ".partial")
    staging.write_bytes(data)
    os.replace(staging, out)
    log.info("exported %s for protein_mpnn_run.py; round-trip max |diff| %.2e", out, parity["max_abs_diff"])
    return ExportResult.from_report(result)
