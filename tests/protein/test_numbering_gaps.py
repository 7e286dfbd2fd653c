"""Numbering jumps and coordinate magnitudes in structure and chain-set files.

A real chain of the bundled sample written as a PDB without SEQRES, renumbered: a last residue
numbered 9999 made the reader fill about 9,500 X (design then used gigabytes), fusion-style
numbering (1-100, 1001-1160, 101-...) about 900; ProteinMPNN's parser fills every missing number
without a bound. A jump wider than max_numbering_gap is now renumbering: nothing is filled. An atom
beyond what a PDB column holds (|x| > 9999.999 A) is a counted `coordinate_range` skip."""

from __future__ import annotations

import json

import gemmi
import numpy as np
import pytest

from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.limits import ReadLimits
from invfold.components.protein.record import ChainRecord, chain_breaks
from invfold.components.protein.sources import read_protein_set
from invfold.components.protein.structure import read_structure
from invfold.errors import ConfigError, InputError
from tests.support.structures import SAMPLE, ChainSpec, write_chains


@pytest.fixture(scope="module")
def chain() -> ChainRecord:
    """A fully observed real chain of at least 300 residues."""
    return next(r for r in read_chain_set(SAMPLE) if isinstance(r, ChainRecord) and r.mask.all() and len(r) >= 300)


def _renumbered(tmp_path, record: ChainRecord, numbers: list[int], name: str = "x.pdb"):
    return write_chains(tmp_path / name, [ChainSpec("A", record, residue_ids=[str(n) for n in numbers])])


def test_a_last_residue_numbered_9999_adds_no_residues(chain, tmp_path):
    numbers = list(range(1, len(chain))) + [9999]
    (record,) = read_structure(_renumbered(tmp_path, chain, numbers))
    assert len(record) == len(chain) and "X" not in record.seq and record.seq == chain.seq
    assert record.extra["numbering_jumps"] == 1 and "gap_filled" not in record.extra
    assert record.residue_ids[-1] == "9999"


def test_fusion_numbering_keeps_file_order_and_fills_nothing(chain, tmp_path):
    numbers = [*range(1, 101), *range(1001, 1161), *range(101, 101 + len(chain) - 260)]
    (record,) = read_structure(_renumbered(tmp_path, chain, numbers))
    assert record.seq == chain.seq and record.extra["numbering_jumps"] == 1
    assert list(record.residue_ids[99:101]) == ["100", "1001"]
    # adjacent in space (the numbering jumps, the chain does not): no break in residue_index
    assert not chain_breaks(record.residue_index)[99]


def test_a_gap_up_to_max_numbering_gap_is_still_filled(chain, tmp_path):
    first, second = chain.seq[:150], chain.seq[150:]
    numbers = [*range(1, 151), *range(351, 351 + len(second))]  # 200 numbers missing: filled, as upstream
    (record,) = read_structure(_renumbered(tmp_path, chain, numbers))
    assert record.seq == first + "X" * 200 + second and record.extra["gap_filled"] == 200
    assert "numbering_jumps" not in record.extra
    numbers = [*range(1, 151), *range(352, 352 + len(second))]  # 201 missing: a jump
    (record,) = read_structure(_renumbered(tmp_path, chain, numbers))
    assert record.seq == chain.seq and record.extra["numbering_jumps"] == 1


def test_the_gap_bound_is_the_limit_given(chain, tmp_path):
    numbers = [*range(1, 101), *range(1001, 1001 + len(chain) - 100)]
    path = _renumbered(tmp_path, chain, numbers)
    (wide,) = read_protein_set(path, limits=ReadLimits(max_numbering_gap=900))
    assert wide.seq == chain.seq[:100] + "X" * 900 + chain.seq[100:]
    (none,) = read_protein_set(path, limits=ReadLimits(max_numbering_gap=0))
    assert none.seq == chain.seq
    with pytest.raises(ConfigError, match="max_numbering_gap: expected an integer >= 0"):
        ReadLimits(max_numbering_gap=-1)


def test_prep_takes_the_gap_bound_as_an_option(chain, tmp_path):
    from invfold.components.prep.config import PrepConfig

    cfg = PrepConfig(input="in", out="out", max_numbering_gap=900)
    assert cfg.read_limits().max_numbering_gap == 900


def _cif_with(tmp_path, chain: ChainRecord, value: float):
    path = write_chains(tmp_path / "far.cif", [ChainSpec("A", chain)])
    doc = gemmi.cif.read(str(path))
    table = doc.sole_block().find("_atom_site.", ["Cartn_x"])
    table[4][0] = f"{value}"  # residue 2, atom N
    doc.write_file(str(path))
    return path


def test_an_atom_past_what_a_pdb_column_holds_is_a_counted_skip(chain, tmp_path):
    far = _cif_with(tmp_path, chain, 9.9e7)
    with pytest.raises(InputError, match=r"coordinate_range.*\|x\|, \|y\|, \|z\| <= 9999.999 Angstrom"):
        list(read_structure(far))  # the file's only chain: nothing left
    with pytest.raises(InputError, match=r"residue 2 atom N: 9\.9e\+07") as err:
        list(read_structure(far, strict=True))
    assert err.value.reason == "coordinate_range"
    assert len(next(iter(read_structure(_cif_with(tmp_path, chain, 9999.0))))) == len(chain)  # still a coordinate


def test_a_chain_set_line_with_a_far_atom_is_a_counted_skip(chain, tmp_path):
    coords = {a: chain.coords[:, i].astype(float).tolist() for i, a in enumerate(("N", "CA", "C", "O"))}
    far = json.loads(json.dumps(coords))
    far["CA"][3][1] = -9.9e7
    lines = [{"name": "far.A", "seq": chain.seq, "coords": far}, {"name": "near.A", "seq": chain.seq, "coords": coords}]
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = list(read_chain_set(path))
    assert [r.name for r in out if isinstance(r, ChainRecord)] == ["near.A"]
    (skip,) = [s for s in out if not isinstance(s, ChainRecord)]
    assert skip.reason == "coordinate_range" and "residue 4 atom CA: -9.9e+07" in skip.message
    assert np.isfinite(out[-1].coords).all()
