"""What `invfold export` takes. Light on purpose (no torch, no numpy): the CLI builds its options
and rejects bad values from it before any model code is imported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from invfold.errors import ConfigError
from invfold.options import check_values, option

if TYPE_CHECKING:
    from invfold.components.protein.record import ChainRecord

FORMATS = {"onnx": ".onnx", "proteinmpnn": ".pt"}  # format -> the suffix of its file


@dataclass
class ExportConfig:
    """model_path: an invfold model file (save_model). out: the .onnx (format "onnx") or the
    ProteinMPNN checkpoint .pt (format "proteinmpnn") to write; the parity report goes beside it
    as <stem>.parity.json.
    parity_records: proteins to check parity on; else parity_data (a prepared-data folder, or any
    protein set read_protein_set accepts); else the bundled real sample.
    parity_chains: how many chains, spread over the length range (at most max_length residues).
    """

    model_path: str = option(positional=True, metavar="MODEL", help="model file written by training (model.pt)")
    out: str = option(
        aliases=("--out-path",), help="the file to write: .onnx (--format onnx) or .pt (--format proteinmpnn)"
    )
    format: str = option(
        "onnx",
        "onnx: one ONNX graph; proteinmpnn: upstream's checkpoint, which protein_mpnn_run.py loads unchanged",
        choices=FORMATS,
    )
    noise_level: float = option(
        0.0,
        "--format proteinmpnn: the training backbone noise (Angstrom) the checkpoint records as noise_level",
        min=0.0,
        max=10.0,
    )
    parity_records: list[ChainRecord] | None = option(None, "proteins to check parity on (Python only)", cli=False)
    parity_data: str | None = option(
        None,
        "proteins for the parity check: a prepared-data folder or any protein set (jsonl, TS50 json, "
        "PDB/mmCIF); default: the bundled real sample",
        aliases=("--data",),
    )
    tolerance: float = option(1e-4, "largest allowed |logit difference|", above=0)
    parity_chains: int = option(4, "parity chains of different lengths", aliases=("--chains",), min=1, max=1000)
    max_length: int = option(500, "longest parity chain, in residues", min=1, max=100_000)
    seed: int = option(0, "seed of the decoding order of the parity check")
    opset: int | None = option(None, "ONNX opset (default: the exporter's)")

    def __post_init__(self):
        check_values(self)
        suffix = FORMATS[self.format]  # one of them: check_values holds the choices
        if not str(self.out).endswith(suffix):
            raise ConfigError(
                f"ExportConfig.out: expected a path ending in {suffix} (format {self.format}), got {self.out!r}"
            )
        if self.parity_records is not None and not self.parity_records:
            raise ConfigError("ExportConfig.parity_records: expected at least one record, got an empty list")
