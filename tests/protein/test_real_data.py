"""The project's bundled sample, and (when present) the 833 real chains in ../shared/data."""

from collections import Counter

import numpy as np
import pytest

from invfold.components.protein.errors import Skip
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import ChainRecord, chain_breaks
from invfold.components.protein.splits import read_split_file
from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS
from tests.support.paths import SHARED_DATA


def check_chain_set(records, split_file, expected_counts):
    assert not [r for r in records if isinstance(r, Skip)]
    names = [r.name for r in records]
    assert len(set(names)) == len(names)
    for r in records:
        assert r.coords.shape == (len(r), 4, 3) and r.coords.dtype == np.float32
        assert r.mask.mean() >= 0.5 and set(r.seq) <= set("ACDEFGHIKLMNPQRSTVWYX")  # X: unknown or gap-filled
        assert np.all(np.diff(r.residue_index) >= 1)
    splits = read_split_file(split_file).splits
    assert {k: len(v) for k, v in splits.items()} == expected_counts
    assert set().union(*splits.values()) == set(names)
    cluster = {r.name: r.cluster for r in records}
    sides = [{cluster[n] for n in names} for names in splits.values()]
    assert all(sides[i].isdisjoint(sides[j]) for i in range(3) for j in range(i + 1, 3)), "a cluster spans splits"
    return splits


def test_bundled_sample_loads_with_cluster_disjoint_splits():
    records = list(read_chain_set(SAMPLE_CHAIN_SET))
    assert 250 <= len(records) <= 400
    splits = check_chain_set(
        records, SAMPLE_SPLITS, {k: len(v) for k, v in read_split_file(SAMPLE_SPLITS).splits.items()}
    )
    assert len(splits["test"]) >= 0.08 * len(records) and len(splits["validation"]) >= 0.05 * len(records)
    assert all(r.cluster and r.extra["source"] for r in records)
    assert 40 <= min(map(len, records)) and max(map(len, records)) <= 500
    # numbering gaps are filled with unobserved residues (as ProteinMPNN's PDB parser does); the
    # breaks that remain are called from C-N distances
    filled = [r for r in records if any(c == "X" and not m for c, m in zip(r.seq, r.mask, strict=True))]
    assert len(filled) > 50 and sum(int(chain_breaks(r.residue_index).sum()) for r in records) > 0
    assert SAMPLE_CHAIN_SET.stat().st_size < 3_000_000


@pytest.mark.skipif(
    not (SHARED_DATA / "real_chain_set.jsonl.gz").exists(),
    reason=f"the shared real data set is absent ({SHARED_DATA.name} beside the repository)",
)
def test_shared_real_chain_set_reads_completely():
    records = list(read_chain_set(SHARED_DATA / "real_chain_set.jsonl.gz"))
    assert len(records) == 833 and all(isinstance(r, ChainRecord) for r in records)
    check_chain_set(records, SHARED_DATA / "real_chain_set_splits.json", {"train": 681, "validation": 85, "test": 67})
    assert sum(len(r) for r in records) > 150_000
    assert Counter(bool((~r.mask).any()) for r in records)[True] > 0  # NaN tokens were read as missing
