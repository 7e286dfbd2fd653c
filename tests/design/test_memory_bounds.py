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
from invfold.components.protein.record import ChainRecord
from invfold.errors import ConfigError, InputError
from tests.support.memory_bombs import (
    GIB,
    TORCH_LIMIT,
    long_chain_jsonl,
    one_line_error,
    run_limited,
    run_measured,
)
from tests.support.structures import SAMPLE, ChainSpec, write_chains


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


# Peak resident memory a design of a few hundred residues may take with the tiny model: importing
# torch alone is about 0.5 GB (memory_bombs.py); the runs below measured 0.88-1.0 GB (/usr/bin/time -v).
DESIGN_RSS = 1.25 * GIB


@pytest.fixture(scope="module")
def real_chain() -> ChainRecord:
    """The longest fully observed chain of the bundled sample (436 residues)."""
    return max((r for r in read_chain_set(SAMPLE) if isinstance(r, ChainRecord) and r.mask.all()), key=len)


def _fasta_sequences(path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith(">")]


@pytest.mark.parametrize(
    "numbers",
    [
        pytest.param(lambda n: [*range(1, n), 9999], id="last-residue-9999"),
        pytest.param(lambda n: [*range(1, 101), *range(1001, 1161), *range(101, 101 + n - 260)], id="fusion"),
    ],
)
def test_a_renumbered_pdb_designs_its_own_residues_in_bounded_memory(inputs, real_chain, numbers, tmp_path):
    """A 140 KB PDB whose last residue is numbered 9999 designed 10,000 positions (9,563 X) at a
    peak of 12.0 GB (`/usr/bin/time -v`, -n 4, tiny model); fusion-style numbering 1,274 (900 X).
    Both under an address-space limit and, as a pod's cgroup counts, by peak resident memory."""
    model, *_ = inputs
    ids = [str(n) for n in numbers(len(real_chain))]
    pdb = write_chains(tmp_path / "renumbered.pdb", [ChainSpec("A", real_chain, residue_ids=ids)])
    out = tmp_path / "d.fasta"
    result, peak = run_measured(["design", str(model), str(pdb), "-n", "4", "--out", str(out)], TORCH_LIMIT)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    sequences = _fasta_sequences(out)
    assert len(sequences) == 4 and all(len(s) == len(real_chain) and "X" not in s for s in sequences)
    assert "max_numbering_gap" in result.stderr  # the warning names the bound
    assert peak < DESIGN_RSS, f"peak RSS {peak / GIB:.2f} GiB"


def test_many_sequences_are_sampled_in_runs_that_memory_follows(inputs, real_chain, tmp_path):
    """Sampled all at once, each sequence of 436 residues added about 10 MB (-n 64: 1.51 GB peak,
    `/usr/bin/time -v`, tiny model); in runs of --batch-residues (8,000 residues: 18 sequences)
    -n 128 stays where -n 4 is."""
    model, *_ = inputs
    pdb = write_chains(tmp_path / "chain.pdb", [ChainSpec("A", real_chain)])
    out = tmp_path / "d.fasta"
    result, peak = run_measured(["design", str(model), str(pdb), "-n", "128", "--out", str(out)], TORCH_LIMIT)
    assert result.returncode == 0 and len(_fasta_sequences(out)) == 128, result.stderr[-3000:]
    assert peak < DESIGN_RSS, f"peak RSS {peak / GIB:.2f} GiB"


def test_the_runs_do_not_change_the_designs(inputs, real_chain, tmp_path):
    from invfold.components.design.design import design

    model, *_ = inputs
    pdb = write_chains(tmp_path / "chain.pdb", [ChainSpec("A", real_chain)])
    base = dict(model=str(model), structure=str(pdb), num_sequences=5)
    whole = design(DesignConfig(**base, out=str(tmp_path / "a.fasta"), batch_residues=100_000))
    one_by_one = design(DesignConfig(**base, out=str(tmp_path / "b.fasta"), batch_residues=len(real_chain)))
    assert [(d.index, d.seed, d.sequence, d.mean_nll) for d in whole] == [
        (d.index, d.seed, d.sequence, d.mean_nll) for d in one_by_one
    ]
    assert (tmp_path / "a.fasta").read_text() == (tmp_path / "b.fasta").read_text()


def test_scoring_runs_follow_batch_residues(inputs, real_chain, tmp_path):
    """batch_size 64 orders of 436 residues would decode 27,904 residues at once; with
    batch_residues 1,000 each run holds two orders, and the scores are those of one run."""
    from invfold.components.design.score import score

    model, *_ = inputs
    pdb = write_chains(tmp_path / "chain.pdb", [ChainSpec("A", real_chain)])
    base = dict(model=str(model), structure=str(pdb), num_orders=6, batch_size=64)
    whole = score(ScoreConfig(**base, out=str(tmp_path / "a.csv")))
    runs = score(ScoreConfig(**base, out=str(tmp_path / "b.csv"), batch_residues=1000))
    assert [s.mean_nll for s in whole] == pytest.approx([s.mean_nll for s in runs], rel=1e-6)
