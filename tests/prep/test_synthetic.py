"""The synthetic generator: deterministic, ideal peptide geometry, CATH-like lengths, gaps and breaks."""

from __future__ import annotations

import json

import numpy as np

from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import chain_breaks
from invfold.components.protein.synthetic import SyntheticConfig, write_synthetic_set


def test_generator_is_deterministic_and_realistic(tmp_path):
    cfg = SyntheticConfig(num_chains=40, seed=3, gap_fraction=0.5, break_fraction=0.5)
    a = write_synthetic_set(tmp_path / "a", cfg, filename="chain_set.jsonl.gz")
    b = write_synthetic_set(tmp_path / "b", cfg, filename="chain_set.jsonl.gz")
    assert a.chain_set.read_bytes() == b.chain_set.read_bytes()
    assert a.splits.read_text() == b.splits.read_text()
    records = list(read_chain_set(a.chain_set))
    assert len(records) == 40 and all(not isinstance(r, str) and r.seq for r in records)
    lengths = np.array([len(r.seq) for r in records])
    assert lengths.min() >= cfg.min_length - 5 and lengths.max() <= cfg.max_length
    assert 120 < np.median(lengths) < 400
    peptide, ca_ca = [], []
    for r in records:
        x = r.coords.astype(np.float64)
        step = ~chain_breaks(r.residue_index)
        peptide.append(np.linalg.norm(x[1:, 0] - x[:-1, 2], axis=-1)[step])
        ca_ca.append(np.linalg.norm(x[1:, 1] - x[:-1, 1], axis=-1)[step])
    peptide, ca_ca = np.concatenate(peptide), np.concatenate(ca_ca)
    assert abs(np.nanmedian(peptide) - 1.33) < 0.02 and np.nanmax(peptide) < 1.6
    assert abs(np.nanmedian(ca_ca) - 3.8) < 0.05
    assert sum(bool(chain_breaks(r.residue_index).any()) for r in records) >= 10
    assert sum(not r.mask.all() for r in records) >= 10
    splits = json.loads(a.splits.read_text())
    assert sum(len(splits[s]) for s in ("train", "validation", "test")) == 40
    assert set(splits["cath_nodes"]) == {r.name for r in records}


def test_null_for_missing_atoms(tmp_path):
    cfg = SyntheticConfig(num_chains=5, seed=1, gap_fraction=1.0, null_for_missing=True)
    written = write_synthetic_set(tmp_path, cfg)
    text = written.chain_set.read_text()
    assert "NaN" not in text and "null" in text
    assert all(not r.mask.all() for r in read_chain_set(written.chain_set))
