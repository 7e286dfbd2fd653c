"""One residue numbering: a real chain of the bundled sample, with a real chain break, written as a
chain-set line (missing residues as NaN, CATH style) and as an mmCIF file (missing residues absent
from the model, named in entity_poly_seq) gives identical model inputs; as a PDB file without
SEQRES, the same inputs except the letters of the masked gap residues (X, as in ProteinMPNN's
parse_PDB_biounits in protein_mpnn_utils.py)."""

from __future__ import annotations

import json

import gemmi
import numpy as np
import pytest
import torch

from invfold.components.protein.alphabet import THREE_TO_ONE
from invfold.components.protein.batch import collate
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import BACKBONE_ATOMS, chain_breaks
from invfold.components.protein.structure import read_structures
from invfold.data import SAMPLE_CHAIN_SET
from tests.support.builders import pdb_text

ONE_TO_THREE = {v: k for k, v in THREE_TO_ONE.items()}
MISSING = "GSG"  # residues the deposited sequence names at the break, with no coordinates


@pytest.fixture(scope="module")
def chain():
    """(record, break position) of a real sample chain with one chain break and observed ends."""
    for record in read_chain_set(SAMPLE_CHAIN_SET):
        breaks = np.flatnonzero(chain_breaks(record.residue_index))
        if len(breaks) == 1 and record.mask[0] and record.mask[-1] and set(record.seq) <= set(THREE_TO_ONE.values()):
            return record, int(breaks[0])
    pytest.fail("the sample has no chain with exactly one break")


def _with_missing(record, at: int) -> tuple[str, np.ndarray]:
    seq = record.seq[: at + 1] + MISSING + record.seq[at + 1 :]
    gap = np.full((len(MISSING), 4, 3), np.nan, dtype=np.float32)
    coords = np.concatenate([record.coords[: at + 1], gap, record.coords[at + 1 :]])
    return seq, coords


def _jsonl(tmp_path, record, at: int):
    seq, coords = _with_missing(record, at)
    coords_json = {
        atom: [[None if np.isnan(v) else float(v) for v in xyz] for xyz in coords[:, i]]
        for i, atom in enumerate(BACKBONE_ATOMS)
    }
    path = tmp_path / "chain_set.jsonl"
    path.write_text(json.dumps({"name": "x.A", "seq": seq, "coords": coords_json}) + "\n")
    (out,) = read_chain_set(path)
    return out


def _mmcif(tmp_path, record, at: int):
    seq, coords = _with_missing(record, at)
    structure = gemmi.Structure()
    model = gemmi.Model("1")
    model.add_chain(gemmi.Chain("A"))
    for position, (letter, xyz) in enumerate(zip(seq, coords, strict=True), 1):
        if np.isnan(xyz).all():
            continue  # not modelled: only the entity sequence names it
        residue = gemmi.Residue()
        residue.name, residue.seqid, residue.label_seq = ONE_TO_THREE[letter], gemmi.SeqId(position, " "), position
        residue.entity_type = gemmi.EntityType.Polymer
        for atom_name, p in zip(BACKBONE_ATOMS, xyz, strict=True):
            if np.isfinite(p).all():
                atom = gemmi.Atom()
                atom.name, atom.element, atom.pos = atom_name, gemmi.Element(atom_name[0]), gemmi.Position(*p)
                residue.add_atom(atom)
        model[0].add_residue(residue)
    structure.add_model(model)
    structure.setup_entities()
    structure.entities[0].full_sequence = [ONE_TO_THREE[c] for c in seq]
    path = tmp_path / "x.cif"
    path.write_text(structure.make_mmcif_document().as_string())
    assert "_entity_poly_seq" in path.read_text()
    (out,) = read_structures(path)
    return out


def _pdb(tmp_path, record, at: int):
    seq, coords = _with_missing(record, at)
    residues = [
        (ONE_TO_THREE[letter], number, " ", xyz)
        for number, (letter, xyz) in enumerate(zip(seq, coords, strict=True), 1)
        if not np.isnan(xyz).all()
    ]
    path = tmp_path / "x.pdb"
    path.write_text(pdb_text({"A": residues}))
    (out,) = read_structures(path)
    return out


def _inputs(record) -> dict[str, torch.Tensor]:
    batch = collate([record])
    return {"X": batch.X, "S": batch.S, "mask": batch.mask, "residue_index": batch.residue_index}


def test_jsonl_and_mmcif_give_identical_model_inputs(tmp_path, chain):
    record, at = chain
    from_jsonl, from_cif = _jsonl(tmp_path, record, at), _mmcif(tmp_path, record, at)
    assert from_cif.seq == from_jsonl.seq and from_cif.extra["gap_filled"] == len(MISSING)
    a, b = _inputs(from_jsonl), _inputs(from_cif)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-3 if key == "X" else 0, msg=key)
    assert not chain_breaks(from_cif.residue_index).any()  # the gap is filled, not a numbering jump


def test_pdb_without_seqres_fills_the_gap_with_masked_x(tmp_path, chain):
    record, at = chain
    from_jsonl, from_pdb = _jsonl(tmp_path, record, at), _pdb(tmp_path, record, at)
    assert from_pdb.seq == from_jsonl.seq[: at + 1] + "X" * len(MISSING) + from_jsonl.seq[at + 1 + len(MISSING) :]
    a, b = _inputs(from_jsonl), _inputs(from_pdb)
    for key in ("X", "mask", "residue_index"):
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-3 if key == "X" else 0, msg=key)
    observed = a["mask"] > 0
    assert torch.equal(a["S"][observed], b["S"][observed])  # letters differ only where nothing is observed
