"""ONNX export with a parity gate: the exported graph must reproduce PyTorch's logits on real
proteins of several lengths, or the export fails."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from invfold import storage
from invfold.components.export import runtime
from invfold.components.model.io import load_model
from invfold.components.protein.alphabet import ALPHABET
from invfold.components.protein.batch import collate
from invfold.components.protein.record import ChainRecord
from invfold.components.protein.sources import read_protein_set
from invfold.errors import ConfigError, InvfoldError
from invfold.options import option

log = logging.getLogger(__name__)

SAMPLE_RESOURCE = "sample_chain_set.jsonl.gz"


class ParityError(InvfoldError, RuntimeError):
    """The ONNX graph's logits differ from PyTorch's by more than the tolerance."""

    def __init__(self, max_abs_diff: float, tolerance: float, report: dict):
        super().__init__(
            f"ONNX parity failed: max |logit difference| {max_abs_diff:.3g} > "
            f"tolerance {tolerance:.3g} (details: {report.get('report_path', 'n/a')})"
        )
        self.max_abs_diff = max_abs_diff
        self.tolerance = tolerance
        self.report = report


@dataclass
class ExportConfig:
    """model_path: an invfold model file (save_model). out_path: the .onnx to write; the parity
    report goes beside it as <stem>.parity.json.
    parity_records: proteins to check parity on; else parity_data (a prepared-data folder, or any
    protein set read_protein_set accepts); else the bundled real sample.
    parity_chains: how many chains, spread over the length range (at most max_length residues).
    """

    model_path: str = option(positional=True, metavar="MODEL", help="model file written by training (model.pt)")
    out_path: str = option(aliases=("--out",), help="the .onnx file to write")
    parity_records: list[ChainRecord] | None = option(None, "proteins to check parity on (Python only)", cli=False)
    parity_data: str | None = option(
        None,
        "proteins for the parity check: a prepared-data folder or any protein set (jsonl, TS50 json, "
        "PDB/mmCIF); default: the bundled real sample",
        aliases=("--data",),
    )
    tolerance: float = option(1e-4, "largest allowed |logit difference|")
    parity_chains: int = option(4, "parity chains of different lengths", aliases=("--chains",))
    max_length: int = option(500, "longest parity chain, in residues")
    seed: int = option(0, "seed of the decoding order of the parity check")
    opset: int | None = option(None, "ONNX opset (default: the exporter's)")

    def __post_init__(self):
        if not str(self.out_path).endswith(".onnx"):
            raise ConfigError(f"ExportConfig.out_path: expected a path ending in .onnx, got {self.out_path!r}")
        if not self.tolerance > 0:
            raise ConfigError(f"ExportConfig.tolerance: expected > 0, got {self.tolerance!r}")
        if self.parity_chains < 1:
            raise ConfigError(f"ExportConfig.parity_chains: expected >= 1, got {self.parity_chains!r}")
        if self.parity_records is not None and not self.parity_records:
            raise ConfigError("ExportConfig.parity_records: expected at least one record, got an empty list")


@dataclass(frozen=True)
class ExportResult:
    """What `export_onnx` wrote: the figures a caller acts on, and the whole parity report
    (model.parity.json) as `report`."""

    onnx: str
    opset: int
    max_abs_diff: float
    tolerance: float
    size_bytes: int
    sha256: str
    num_parameters: int
    report_path: str
    report: dict = field(repr=False)

    @classmethod
    def from_report(cls, report: dict) -> ExportResult:
        names = [f.name for f in fields(cls) if f.name != "report"]
        return cls(**{n: report[n] for n in names}, report=report)


def report_path(out_path: str | os.PathLike) -> Path:
    out = Path(out_path)
    return out.with_name(out.stem + ".parity.json")


def bundled_sample() -> str:
    path = resources.files("invfold.data") / SAMPLE_RESOURCE
    if not path.is_file():
        raise FileNotFoundError(
            f"the bundled sample {SAMPLE_RESOURCE} is missing from invfold.data; give parity records or a data path"
        )
    return str(path)


def load_parity_records(data: str | None, count: int, max_length: int) -> list[ChainRecord]:
    """`count` real chains of different lengths (shortest, longest and evenly between)."""
    records = [r for r in _read_records(data or bundled_sample()) if len(r) <= max_length and np.asarray(r.mask).any()]
    if not records:
        raise ValueError(
            f"{data or SAMPLE_RESOURCE}: no chain of at most {max_length} residues "
            "with an observed residue for the parity check"
        )
    records.sort(key=len)
    picks = np.unique(np.linspace(0, len(records) - 1, min(count, len(records))).round().astype(int))
    return [records[i] for i in picks]


def _read_records(data: str) -> list[ChainRecord]:

    if storage.is_dir(data) and storage.exists(f"{str(data).rstrip('/')}/index.json"):
        from invfold.components.prep.shards import open_prepared

        prepared = open_prepared(data)
        name = "test" if "test" in prepared.datasets else next(iter(prepared.datasets))
        dataset = prepared.open(name)
        return [dataset[i] for i in range(len(dataset))]

    return [r for r in read_protein_set(data) if isinstance(r, ChainRecord)]


def _example_inputs(length: int, batch: int = 2):
    g = torch.Generator().manual_seed(0)
    X = torch.cumsum(torch.randn(batch, length, 1, 3, generator=g), 1) * 2.0
    X = X + torch.randn(batch, length, 4, 3, generator=g)
    ridx = torch.arange(length).expand(batch, length).contiguous()
    return (
        X,
        torch.zeros(batch, length, dtype=torch.long),
        torch.ones(batch, length),
        ridx,
        torch.rand(batch, length, generator=g),
    )


def write_onnx(model, out_path: str | os.PathLike, opset: int | None = None) -> int:
    """Export `model` (eval) to one self-contained file with dynamic batch and length, with the
    model config and alphabet as metadata; returns the default-domain opset written."""
    import onnx

    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    dynamic = {name: {0: batch, 1: length} for name in runtime.INPUT_NAMES}
    example = _example_inputs(length=2 * model.cfg.k_neighbors + 3)
    kwargs = {} if opset is None else {"opset_version": opset}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*axis name.*will not be used.*")
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        torch.onnx.export(
            model.eval(),
            example,
            str(out_path),
            dynamo=True,
            external_data=False,
            dynamic_shapes=dynamic,
            input_names=list(runtime.INPUT_NAMES),
            output_names=list(runtime.OUTPUT_NAMES),
            optimize=True,
            verbose=False,
            **kwargs,
        )
    proto = onnx.load(str(out_path))
    onnx.helper.set_model_props(
        proto,
        {
            runtime.META_CONFIG: json.dumps(model.cfg.to_dict(), sort_keys=True),
            runtime.META_ALPHABET: ALPHABET,
        },
    )
    onnx.save_model(proto, str(out_path), save_as_external_data=False)
    return next(op.version for op in proto.opset_import if op.domain in ("", "ai.onnx"))


def check_parity(
    onnx_path: str | os.PathLike, model, records: list[ChainRecord], tolerance: float, seed: int = 0
) -> dict:
    """Max |logit difference| between onnxruntime and PyTorch eager, per chain (batch of one)
    and for all chains padded into one batch. Native sequences and a seeded random decoding
    order are the S and decoding_order inputs. Returns the figures; never raises."""
    session = runtime.session(onnx_path)
    g = torch.Generator().manual_seed(seed)
    model.eval()

    def diff(batch) -> float:
        order = torch.rand(batch.S.shape, generator=g)
        with torch.no_grad():
            ref = model(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, order).numpy()
        feeds = runtime.feeds(batch.X, batch.tokens, batch.structure_mask, batch.residue_index, order)
        got = session.run(None, feeds)[0]
        if got.shape != ref.shape:
            return float("inf")
        real = batch.structure_mask.numpy() > 0  # logits at unobserved/padded residues carry no meaning
        return float(np.abs(got - ref)[real].max()) if real.any() else 0.0

    chains = [{"name": r.name, "length": len(r), "max_abs_diff": diff(collate([r]))} for r in records]
    padded = diff(collate(records))
    worst = max([c["max_abs_diff"] for c in chains] + [padded])
    return {
        "tolerance": tolerance,
        "max_abs_diff": worst,
        "passed": bool(worst <= tolerance),
        "chains": chains,
        "padded_batch": {"size": len(records), "max_abs_diff": padded},
    }


def export_onnx(cfg: ExportConfig) -> ExportResult:
    """Export, check parity, and write <stem>.parity.json. On a parity failure the graph is kept
    as <stem>.rejected.onnx (for inspection), nothing is left at out_path, and ParityError is
    raised."""
    import onnxruntime

    model = load_model(cfg.model_path)
    records = (
        cfg.parity_records
        if cfg.parity_records is not None
        else load_parity_records(cfg.parity_data, cfg.parity_chains, cfg.max_length)
    )
    out = Path(cfg.out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(out.stem + ".rejected.onnx")
    opset = write_onnx(model, staging, cfg.opset)
    parity = check_parity(staging, model, records, cfg.tolerance, cfg.seed)
    data = staging.read_bytes()
    result = {
        "onnx": out.name,
        "passed": parity["passed"],
        "max_abs_diff": parity["max_abs_diff"],
        "tolerance": cfg.tolerance,
        "opset": opset,
        "size_bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "torch_version": torch.__version__,
        "onnxruntime_version": onnxruntime.__version__,
        "model_config": model.cfg.to_dict(),
        "num_parameters": model.num_parameters(),
        "contract": {
            "inputs": {n: _describe(n) for n in runtime.INPUT_NAMES},
            "outputs": {n: _describe(n) for n in runtime.OUTPUT_NAMES},
            "dynamic_axes": ["B", "L"],
        },
        "parity": parity,
        "report_path": str(report_path(out)),
    }
    report_path(out).write_text(json.dumps(result, indent=2) + "\n")
    if not parity["passed"]:
        out.unlink(missing_ok=True)
        raise ParityError(parity["max_abs_diff"], cfg.tolerance, result)
    os.replace(staging, out)
    exported = ExportResult.from_report(result)
    log.info(
        "exported %s (opset %d, %.1f MB); parity max |diff| %.2e over %d chains",
        out,
        opset,
        len(data) / 1e6,
        parity["max_abs_diff"],
        len(records),
    )
    return exported


def _describe(name: str) -> dict:
    dtype, shape, meaning = runtime.CONTRACT[name]
    return {"dtype": dtype, "shape": shape, "meaning": meaning}
