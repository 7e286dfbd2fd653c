"""ChainRecord's chain fields: a complex says which chain each residue is in."""

from __future__ import annotations

import numpy as np

from invfold.components.design import positions
from invfold.components.protein.record import ChainRecord


def _record(name: str, length: int, **kw) -> ChainRecord:
    coords = np.zeros((length, 4, 3), dtype=np.float32)
    return ChainRecord(name, "A" * length, coords, np.ones(length, bool), np.arange(length, dtype=np.int32), **kw)


def test_single_chain_is_named_by_its_name_suffix():
    record = _record("1abc.B", 5)
    assert record.chain_index is None and record.chain_names == () and not record.is_complex
    chains = record.chain_positions()
    assert list(chains) == ["B"] and chains["B"].tolist() == [0, 1, 2, 3, 4]
    assert list(_record("model", 3).chain_positions()) == ["A"]
    assert list(_record("model", 3, chain_names=("H",)).chain_positions()) == ["H"]
    assert positions.entry_name(record) == "1abc"


def test_complex_chain_positions_follow_chain_index():
    record = _record(
        "1abc", 6, num_chains=2, chain_index=np.array([0, 0, 0, 1, 1, 1], np.int32), chain_names=("H", "L")
    )
    assert record.is_complex
    chains = record.chain_positions()
    assert list(chains) == ["H", "L"]
    assert chains["H"].tolist() == [0, 1, 2] and chains["L"].tolist() == [3, 4, 5]
    assert positions.chain_positions(record).keys() == chains.keys()
    assert positions.entry_name(record) == "1abc"
    assert positions.resolve(chains, "L", 2, "test") == 4
