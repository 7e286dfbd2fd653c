"""ONNX export with a parity gate: the exported graph must reproduce PyTorch's logits on real
proteins of several lengths, or the export fails."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import tempfile
import warnings
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from invfold import storage
from invfold.components.export import runtime
from invfold.components.export.config import ExportConfig
from invfold.components.model.io import load_model_or_published
from invfold.components.protein.alphabet import ALPHABET, NUM_AA
from invfold.components.protein.batch import collate
from invfold.components.protein.record import ChainRecord, with_structure_atoms
from invfold.components.protein.sources import read_protein_set
from invfold.errors import ConfigError, InputError, InvfoldError
from invfold.progress import progress

log = logging.getLogger(__name__)
# torch's exporter warns once per torchvision op it cannot register when torchvision is absent (4
# lines per export); invfold's graphs use none of them, and torchvision is not installed here
logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)

SAMPLE_RESOURCE = "sample_chain_set.jsonl.gz"


class ParityError(InvfoldError, RuntimeError):
    """The exported file's logits differ from PyTorch's by more than the tolerance."""

    def __init__(self, max_abs_diff: float, tolerance: float, report: dict, what: str = "ONNX", hint: str = ""):
        super().__init__(
            f"{what} parity failed: max |logit difference| {max_abs_diff:.3g} > "
            f"tolerance {tolerance:.3g}{hint} (details: {report.get('report_path', 'n/a')})"
        )
        self.max_abs_diff = max_abs_diff
        self.tolerance = tolerance
        self.report = report


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
        raise ConfigError(
            f"the bundled sample {SAMPLE_RESOURCE} is missing from invfold.data; give --parity-data (a prepared "
            "folder or a protein set)"
        )
    return str(path)


def load_parity_records(data: str | None, count: int, max_length: int) -> list[ChainRecord]:
    """`count` real chains of different lengths (shortest, longest and evenly between)."""
    records = [r for r in _read_records(data or bundled_sample()) if len(r) <= max_length and np.asarray(r.mask).any()]
    if not records:
        raise InputError(
            data or SAMPLE_RESOURCE,
            None,
            None,
            f"a chain of at most {max_length} residues (--max-length) with an observed residue for the parity check",
            "none",
            reason="no_parity_chain",
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


class EncodeForDecoding(torch.nn.Module):
    """The encoder of an autoregressive model and each decoder layer's structure-only
    projections: what incremental decoding computes once per structure."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, X, mask, residue_index):
        h_enc, h_E, E_idx, nb_mask = self.model.encode(X, mask, residue_index)
        e_proj = torch.stack([layer.msg_edge(h_E) for layer in self.model.decoder])
        enc_proj = torch.stack([layer.msg_nb(h_enc) for layer in self.model.decoder])
        return h_enc, E_idx, nb_mask, e_proj, enc_proj


class DecodeStep(torch.nn.Module):
    """One decoding step through every decoder layer for the positions decoded now (rows
    gathered by the caller): logits, and each layer's input there (the decoder's cached state)."""

    def __init__(self, model):
        super().__init__()
        self.decoder, self.readout = model.decoder, model.readout

    def forward(self, h, e_rows, nb_proj, nb_mask, mask):
        inputs = []
        for li, layer in enumerate(self.decoder):
            inputs.append(h)
            h = layer(h, e_rows[li], nb_proj[li], nb_mask, mask)
        return self.readout(h), torch.stack(inputs)


class DecodeUpdate(torch.nn.Module):
    """The cache rows of positions just decoded: each layer's projection of its input there and of
    the chosen letter (what later positions read for a decoded neighbour)."""

    def __init__(self, model):
        super().__init__()
        self.decoder, self.seq_embed = model.decoder, model.seq_embed
        self.x_row = model.seq_embed.num_embeddings > NUM_AA  # X keeps its own row (InverseFoldingModel.tokens)

    def forward(self, layer_inputs, letters):
        if not self.x_row:  # a fixed X (no backbone atoms) reads as A, as in PyTorch
            letters = torch.where(letters < NUM_AA, letters, torch.zeros_like(letters))
        h_S = self.seq_embed(letters)
        return torch.stack(
            [layer.msg_nb(layer_inputs[li]) + layer.msg_seq(h_S) for li, layer in enumerate(self.decoder)]
        )


def _export(module, example, names_in, names_out, dynamic, path, opset) -> None:
    kwargs = {} if opset is None else {"opset_version": opset}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*axis name.*will not be used.*")
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        torch.onnx.export(
            module.eval(),
            example,
            str(path),
            dynamo=True,
            external_data=False,
            dynamic_shapes=dynamic,
            input_names=list(names_in),
            output_names=list(names_out),
            optimize=True,
            verbose=False,
            **kwargs,
        )


def decoding_graphs(model, opset: int | None = None) -> dict[str, bytes]:
    """The encoder (once per structure), step and update graphs of incremental decoding
    (runtime.DECODING_GRAPHS), serialized: ProteinMPNN's sample() updates only the decoded
    position, so a design costs one encoder run and O(L * K) decoder work, not L full runs."""
    model = model.eval()
    cfg = model.cfg
    layers, k, h = cfg.decoder_layers, cfg.k_neighbors, cfg.hidden
    batch, length, width = torch.export.Dim("batch"), torch.export.Dim("length"), torch.export.Dim("members")
    X, _, mask, ridx, _ = _example_inputs(length=2 * k + 3)
    g = torch.Generator().manual_seed(1)
    b, m = 2, 3
    step_example = (
        torch.randn(b, m, h, generator=g),
        torch.randn(layers, b, m, k, h, generator=g),
        torch.randn(layers, b, m, k, h, generator=g),
        torch.ones(b, m, k),
        torch.ones(b, m),
    )
    specs = {
        "encoder": (
            EncodeForDecoding(model),
            (X, mask, ridx),
            ("X", "mask", "residue_index"),
            runtime.ENCODER_OUTPUTS,
            {n: {0: batch, 1: length} for n in ("X", "mask", "residue_index")},
        ),
        "step": (
            DecodeStep(model),
            step_example,
            runtime.STEP_INPUTS,
            ("logits", "layer_inputs"),
            {
                "h": {0: batch, 1: width},
                "e_rows": {1: batch, 2: width},
                "nb_proj": {1: batch, 2: width},
                "nb_mask": {0: batch, 1: width},
                "mask": {0: batch, 1: width},
            },
        ),
        "update": (
            DecodeUpdate(model),
            (torch.randn(layers, b, m, h, generator=g), torch.zeros(b, m, dtype=torch.long)),
            ("layer_inputs", "letters"),
            ("dec_rows",),
            {"layer_inputs": {1: batch, 2: width}, "letters": {0: batch, 1: width}},
        ),
    }
    graphs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (module, example, names_in, names_out, dynamic) in specs.items():
            path = Path(tmp) / f"{name}.onnx"
            _export(module, example, names_in, names_out, dynamic, path, opset)
            graphs[name] = path.read_bytes()
    return graphs


def write_onnx(model, out_path: str | os.PathLike, opset: int | None = None) -> int:
    """Export `model` (eval) to one self-contained file with dynamic batch and length, with the
    model config and alphabet as metadata (and, for an autoregressive model, the graphs of
    incremental decoding, base64 in metadata); returns the default-domain opset written."""
    import onnx

    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    dynamic = {name: {0: batch, 1: length} for name in runtime.INPUT_NAMES}
    example = _example_inputs(length=2 * model.cfg.k_neighbors + 3)
    _export(model.eval(), example, runtime.INPUT_NAMES, runtime.OUTPUT_NAMES, dynamic, out_path, opset)
    proto = onnx.load(str(out_path))
    props = {
        runtime.META_CONFIG: json.dumps(model.cfg.to_dict(), sort_keys=True),
        runtime.META_ALPHABET: ALPHABET,
    }
    if model.cfg.autoregressive:
        graphs = decoding_graphs(model, opset)
        props[runtime.META_DECODING] = json.dumps({k: base64.b64encode(v).decode() for k, v in graphs.items()})
    onnx.helper.set_model_props(proto, props)
    onnx.save_model(proto, str(out_path), save_as_external_data=False)
    return next(op.version for op in proto.opset_import if op.domain in ("", "ai.onnx"))


def check_parity(
    onnx_path: str | os.PathLike, model, records: list[ChainRecord], tolerance: float, seed: int = 0
) -> dict:
    """Max |logit difference| between onnxruntime and PyTorch eager, per chain (batch of one)
    and for all chains padded into one batch. Native sequences and a seeded random decoding
    order are the S and decoding_order inputs. Records are seen as the model reads them
    (with_structure_atoms: a CA-only model's residues are those with a CA). Returns the figures;
    never raises."""
    records = [with_structure_atoms(r, model.cfg.input_atoms) for r in records]
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

    return parity_figures(records, diff, tolerance)


def parity_figures(records: list[ChainRecord], diff, tolerance: float) -> dict:
    """The parity report of `diff(batch) -> max |logit difference|`: each chain as a batch of one
    and all chains padded into one batch (padding must change nothing); passed when the worst is
    finite and within tolerance."""
    chains = [{"name": r.name, "length": len(r), "max_abs_diff": diff(collate([r]))} for r in records]
    padded = diff(collate(records))
    worst = max([c["max_abs_diff"] for c in chains] + [padded])
    return {
        "tolerance": tolerance,
        "max_abs_diff": worst,
        "passed": bool(np.isfinite(worst) and worst <= tolerance),
        "chains": chains,
        "padded_batch": {"size": len(records), "max_abs_diff": padded},
    }


def export_onnx(cfg: ExportConfig) -> ExportResult:
    """Export, check parity, and write <stem>.parity.json. On a parity failure the graph is kept
    as <stem>.rejected.onnx (for inspection), nothing is left at cfg.out, and ParityError is
    raised."""
    import onnxruntime

    model = load_model_or_published(cfg.model_path)
    records = (
        cfg.parity_records
        if cfg.parity_records is not None
        else load_parity_records(cfg.parity_data, cfg.parity_chains, cfg.max_length)
    )
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(out.stem + ".rejected.onnx")
    with progress(2, "export", unit="stages", log_every=1) as advance:
        opset = write_onnx(model, staging, cfg.opset)
        advance(1, "graph written; parity check")
        parity = check_parity(staging, model, records, cfg.tolerance, cfg.seed)
        advance(1, f"parity {parity['max_abs_diff']:.1e}")
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
