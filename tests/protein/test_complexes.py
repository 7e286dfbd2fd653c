"""Complexes: several chains of one entry as one record, from chain sets, ProteinMPNN's
parse_multiple_chains.py jsonl and PDB/mmCIF files; real multi-chain entries of the bundled sample."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from invfold.components.model import features
from invfold.components.protein.complexes import join_chains, split_complex
from invfold.components.protein.errors import InputError
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import CHAIN_OFFSET, ChainRecord
from invfold.components.protein.sources import read_protein_set
from tests.support.structures import SAMPLE, sample_complex, write_sample_complex

ENTRIES = {
    "1BD2": ("A", "B", "D", "E"),
    "3KPR": ("A", "D", "E"),
    "7CFN": ("B", "G", "N", "R"),
    "6WG6": ("A", "L"),
    "1tii": ("A", "D"),
}


@pytest.fixture(scope="module")
def sample():
    singles = [r for r in read_chain_set(SAMPLE) if isinstance(r, ChainRecord)]
    grouped = [r for r in read_chain_set(SAMPLE, complexes=True) if isinstance(r, ChainRecord)]
    return {r.name: r for r in singles}, {r.name: r for r in grouped}


def test_chain_set_lines_of_one_entry_become_one_complex(sample):
    singles, grouped = sample
    for entry, chains in ENTRIES.items():
        record = grouped[entry]
        assert record.chain_names == chains and record.is_complex and record.num_chains >= len(chains)
        assert not any(f"{entry}.{c}" in grouped for c in chains)
        parts = [singles[f"{entry}.{c}"] for c in chains]
        assert record.seq == "".join(p.seq for p in parts)
        np.testing.assert_array_equal(record.coords, np.concatenate([p.coords for p in parts]))
        positions = record.chain_positions()
        for cid, part in zip(chains, parts, strict=True):
            index = positions[cid]
            assert "".join(record.seq[i] for i in index) == part.seq
            # each chain keeps its own numbering (breaks included), shifted
            np.testing.assert_array_equal(np.diff(record.residue_index[index]), np.diff(part.residue_index))
        starts = [positions[c][0] for c in chains[1:]]
        assert all(record.residue_index[s] - record.residue_index[s - 1] == CHAIN_OFFSET for s in starts)
    # single-chain entries and chains of other entries stay as they were
    assert len(grouped) == len(singles) - sum(
        len(r.chain_names) - 1 for r in grouped.values() if r.chain_index is not None
    )


def test_cross_chain_pairs_fall_in_the_different_chain_bucket(sample):
    record = sample[1]["1tii"]
    ridx = torch.as_tensor(record.residue_index, dtype=torch.long)[None]
    seg = features.segment_ids(ridx)[0].numpy()
    chain = record.chain_index
    # a segment never spans two chains: every cross-chain pair is "different chain"
    for s in np.unique(seg):
        assert len(np.unique(chain[seg == s])) == 1
    length = len(record)
    E_idx = torch.arange(length)[None, None, :].expand(1, length, length)
    buckets = features.relative_position_buckets(ridx, E_idx, 32)[0].numpy()
    cross = chain[:, None] != chain[None, :]
    assert (buckets[cross] == 65).all()


def test_split_complex_inverts_join(sample):
    record = sample[1]["7CFN"]
    parts = split_complex(record)
    assert [p.name for p in parts] == ["7CFN.B", "7CFN.G", "7CFN.N", "7CFN.R"]
    again = join_chains("7CFN", parts)
    np.testing.assert_array_equal(again.residue_index, record.residue_index)
    np.testing.assert_array_equal(again.chain_index, record.chain_index)


def _proteinmpnn_line(record: ChainRecord) -> dict:
    """What ProteinMPNN's helper_scripts/parse_multiple_chains.py writes for a structure: per chain
    seq_chain_X and coords_chain_X {N_chain_X, CA_chain_X, C_chain_X, O_chain_X}, NaN for missing
    atoms, "-" for a residue without coordinates."""
    line = {}
    seq = ""
    for cid, index in record.chain_positions().items():
        letters = "".join(record.seq[i] if record.mask[i] else "-" for i in index)
        line[f"seq_chain_{cid}"] = letters
        line[f"coords_chain_{cid}"] = {
            f"{atom}_chain_{cid}": record.coords[index, a].tolist() for a, atom in enumerate(("N", "CA", "C", "O"))
        }
        seq += letters
    line.update(name=record.name, num_of_chains=len(record.chain_names), seq=seq)
    return line


def test_proteinmpnn_parse_multiple_chains_lines(tmp_path, sample):
    record = sample[1]["3KPR"]
    path = tmp_path / "parsed_pdbs.jsonl"
    path.write_text(json.dumps(_proteinmpnn_line(record)) + "\n")  # bare NaN tokens, as json.dumps writes
    (read,) = read_chain_set(path, complexes=True)
    assert read.name == "3KPR" and read.chain_names == ("A", "D", "E")
    np.testing.assert_array_equal(read.chain_index, record.chain_index)
    np.testing.assert_array_equal(read.mask, record.mask)
    np.testing.assert_array_equal(np.diff(read.residue_index), np.diff(record.residue_index))
    assert read.seq == "".join(c if m else "X" for c, m in zip(record.seq, record.mask, strict=True))
    # without complexes: one record per chain
    assert [r.name for r in read_chain_set(path)] == ["3KPR.A", "3KPR.D", "3KPR.E"]
    bad = _proteinmpnn_line(record)
    del bad["coords_chain_D"]["CA_chain_D"]
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(InputError, match="coords_chain_D.CA_chain_D"):
        list(read_chain_set(path, strict=True))


@pytest.mark.parametrize("suffix", [".pdb", ".cif"])
def test_structure_file_as_one_complex(tmp_path, suffix):
    native = sample_complex("6WG6")
    path = write_sample_complex(tmp_path / f"6WG6{suffix}", "6WG6")
    singles = list(read_protein_set(str(path)))
    assert [r.name for r in singles] == ["6WG6.A", "6WG6.L"]
    (record,) = read_protein_set(str(path), complexes=True)
    assert record.name == "6WG6" and record.chain_names == ("A", "L") and record.num_chains == 2
    positions, native_positions = record.chain_positions(), native.chain_positions()
    for cid, single in zip(("A", "L"), singles, strict=True):
        index, nat = positions[cid], native_positions[cid]
        assert "".join(record.seq[i] for i in index) == single.seq
        observed = record.coords[index][record.mask[index]]
        np.testing.assert_allclose(observed, native.coords[nat][native.mask[nat]], atol=1e-3)
    jump = record.residue_index[positions["L"][0]] - record.residue_index[positions["A"][-1]]
    assert jump == CHAIN_OFFSET
    # a folder of structure files: one complex per file
    assert [r.name for r in read_protein_set(str(tmp_path), complexes=True)] == ["6WG6"]


def test_lines_of_one_entry_apart_in_the_file_make_one_complex(tmp_path):
    """Real chain sets list an entry's chains apart (the shared real set does); grouping only
    neighbouring lines made several records with the entry's name, which prep dropped as duplicates."""
    import gzip

    lines = gzip.open(SAMPLE, "rt").read().splitlines()
    moved = [line for line in lines if json.loads(line)["name"] in ("1BD2.A", "3KPR.E")]
    rest = [line for line in lines if line not in moved]
    path = tmp_path / "apart.jsonl"
    path.write_text("\n".join(moved[:1] + rest + moved[1:]) + "\n")
    grouped = [r for r in read_chain_set(path, complexes=True) if isinstance(r, ChainRecord)]
    names = [r.name for r in grouped]
    assert len(names) == len(set(names))
    by_name = {r.name: r for r in grouped}
    assert set(by_name["1BD2"].chain_names) == set(ENTRIES["1BD2"])
    assert set(by_name["3KPR"].chain_names) == set(ENTRIES["3KPR"])
    in_order = {r.name: r for r in read_chain_set(SAMPLE, complexes=True) if isinstance(r, ChainRecord)}
    assert set(by_name) == set(in_order)
    assert sum(len(r) for r in grouped) == sum(len(r) for r in in_order.values())
