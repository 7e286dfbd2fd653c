"""`invfold design` on a 30,000-residue chain: the k-NN step asked for 10.8 GB and the raw
RuntimeError ended the whole design (a batch: the whole shard) with a traceback (issue 23, item
4). Now a record longer than DesignConfig.max_length is refused before the model runs (one line,
exit 2; a batch counts it as skipped), and running out of memory on one record is that record's
`out_of_memory` error or skip. Run under an address-space limit of 4 GiB: importing PyPI's torch
alone takes 3.1 GiB of it (tests/support/memory_bombs.py)."""

from __future__ import annotations

import json

import pytest
import torch

from invfold.components.design.config import DesignConfig, ScoreConfig
from invfold.components.design.design import memory_guard
from invfold.components.model.config import ModelConfig
from invfold.components.model.io import save_model
from invfold.components.model.network import InverseFoldingModel
from invfold.components.protein.jsonl import read_chain_set
from invfold.errors import ConfigError, InputError
from tests.support.memory_bombs import TORCH_LIMIT, long_chain_jsonl, one_line_error, run_limited


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    model = root / "tiny.pt"
    save_model(model, InverseFoldingModel(ModelConfig.preset("tiny")))
    return model, long_chain_jsonl(root / "long.jsonl", 30_000), root


def test_designing_a_30000_residue_chain_is_a_one_line_error_naming_the_limit(inputs, tmp_path):
    model, long, _ = inputs
    result = run_limited(["design", str(model), str(long), "-n", "1", "--out", str(tmp_path / "d.fasta")], TORCH_LIMIT)
    line = one_line_error(result)
    assert "long.A" in line and "30,000 residues" in line and "--max-length" in line


def test_a_batch_counts_the_long_record_as_skipped_and_designs_the_rest(inputs, tmp_path):
    model, long, root = inputs
    short = long_chain_jsonl(root / "short.jsonl", 60).read_text().replace("long.A", "short.A")
    batch = tmp_path / "set.jsonl"
    batch.write_text(long.read_text() + short)
    out = tmp_path / "designs"
    result = run_limited(["design", str(model), str(batch), "-n", "1", "--out", str(out)], TORCH_LIMIT)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    summary = json.loads(next(out.glob("*.json")).read_text())
    assert summary["designed"] == 1 and summary["skip_counts"] == {"too_long": 1}
    assert (out / "short.A.fasta").exists()


def test_scoring_is_bounded_the_same_way(inputs, tmp_path):
    model, long, _ = inputs
    result = run_limited(["score", str(model), str(long), "--out", str(tmp_path / "s.csv")], TORCH_LIMIT)
    line = one_line_error(result)
    assert "long.A" in line and "30,000 residues" in line and "--max-length" in line


def test_a_real_allocation_failure_is_the_records_out_of_memory_error(inputs):
    """PyTorch's CPU allocator refusing 2^62 bytes raises a RuntimeError, not MemoryError."""
    record = next(iter(read_chain_set(inputs[1])))
    with pytest.raises(InputError, match=r"record 'long\.A'.*can't allocate memory") as err:
        with memory_guard(record):
            torch.empty(2**62, dtype=torch.uint8)
    assert err.value.reason == "out_of_memory"
    with pytest.raises(RuntimeError, match="not memory"):  # other errors are not disguised
        with memory_guard(record):
            raise RuntimeError("not memory")


def test_max_length_must_be_positive():
    with pytest.raises(ConfigError, match="DesignConfig.max_length"):
        DesignConfig(model="m.pt", structure="s.pdb", out="d.fasta", max_length=0)
    with pytest.raises(ConfigError, match="ScoreConfig.max_length"):
        ScoreConfig(model="m.pt", structure="s.pdb", out="s.csv", max_length=0)
