"""Values in a structure that no real protein has: `invfold design` on a chain whose atom sits at
9.9e7 Angstrom designed it (exit 0, from distances float32 cannot resolve). Now the reader skips
the chain (`coordinate_range`): one error line for a single record, a counted skip in a batch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from invfold.components.model.config import ModelConfig
from invfold.components.model.io import save_model
from invfold.components.model.network import InverseFoldingModel
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import ChainRecord
from tests.support.memory_bombs import one_line_error
from tests.support.structures import SAMPLE


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("far")
    model = root / "tiny.pt"
    save_model(model, InverseFoldingModel(ModelConfig.preset("tiny")))
    record = next(r for r in read_chain_set(SAMPLE) if isinstance(r, ChainRecord) and r.mask.all() and len(r) < 100)
    coords = {a: record.coords[:, i].astype(float).tolist() for i, a in enumerate(("N", "CA", "C", "O"))}
    far = json.loads(json.dumps(coords))
    far["C"][1][2] = 9.9e7
    line = {"name": "far.A", "seq": record.seq, "coords": far}
    (root / "far.jsonl").write_text(json.dumps(line) + "\n")
    near = {"name": "near.A", "seq": record.seq, "coords": coords}
    (root / "set.jsonl").write_text(json.dumps(line) + "\n" + json.dumps(near) + "\n")
    return model, root


def _invfold(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invfold", *args], capture_output=True, text=True, timeout=300)


def test_designing_a_chain_with_a_far_atom_is_one_error_line(files, tmp_path):
    model, root = files
    line = one_line_error(_invfold("design", str(model), str(root / "far.jsonl"), "--out", str(tmp_path / "d.fasta")))
    assert "far.A" in line and "residue 2 atom C: 9.9e+07" in line and "9999.999 Angstrom" in line
    assert not (tmp_path / "d.fasta").exists()


def test_a_batch_counts_the_far_chain_as_skipped(files, tmp_path):
    model, root = files
    out = tmp_path / "designs"
    result = _invfold("design", str(model), str(root / "set.jsonl"), "-n", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(next(out.glob("*.json")).read_text())
    assert summary["designed"] == 1 and summary["skip_counts"] == {"coordinate_range": 1}
