"""Fixtures shared by the batch design tests: a tiny autoregressive model (.pt and .onnx) and a small
set of structures (a chain set, and a folder of PDB files with one unreadable file)."""

from __future__ import annotations

import json

import pytest
import torch

from invfold.components.model import InverseFoldingModel, ModelConfig, save_model
from invfold.components.protein.sources import read_protein_set
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set
from tests.support.design_files import write_pdb
from tests.support.onnx_files import onnx_file


@pytest.fixture(scope="module")
def structures(tmp_path_factory):
    """A chain set of 3 chains, a folder with 2 of them as PDB files plus one unreadable file."""
    folder = tmp_path_factory.mktemp("batch")
    write_synthetic_set(
        folder,
        SyntheticConfig(
            num_chains=3, seed=7, min_length=30, max_length=60, median_length=45, gap_fraction=1.0, break_fraction=0.0
        ),
    )
    lines = (folder / "chain_set.jsonl").read_text().splitlines()
    short = json.loads(lines[1])  # one chain shorter than the others
    short["seq"] = short["seq"][:40]
    short["coords"] = {atom: xyz[:40] for atom, xyz in short["coords"].items()}
    jsonl = folder / "chains.jsonl"
    jsonl.write_text("\n".join([lines[0], json.dumps(short), *lines[2:]]) + "\n")
    records = list(read_protein_set(str(jsonl)))
    assert sorted(len(r) for r in records)[0] == 40 < sorted(len(r) for r in records)[1]
    pdbs = folder / "pdbs"
    pdbs.mkdir()
    for i, r in enumerate(records[:2]):
        write_pdb(pdbs / f"s{i}.pdb", r)
    (pdbs / "broken.pdb").write_text("not a structure\n")
    return jsonl, records, pdbs


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    m = InverseFoldingModel(ModelConfig.preset("tiny", decoding="autoregressive")).eval()
    save_model(folder / "m.pt", m)
    onnx_file(m, folder / "m.onnx")
    return folder / "m.pt", folder / "m.onnx"
