"""What the design tests write and read: a record as a PDB file, and design FASTA parsed by its header."""

from __future__ import annotations

import re

import gemmi

from invfold.components.protein.record import BACKBONE_ATOMS

HEADER = re.compile(r"^>(\S+) sample=(\d+) T=(\S+) seed=(\d+) mean_nll=(\S+) recovery=(\S+) model=(\S+)$")


def read_fasta(path):
    lines = path.read_text().splitlines()
    assert len(lines) % 2 == 0
    return [(HEADER.match(h), s) for h, s in zip(lines[::2], lines[1::2], strict=True)]


def write_pdb(path, record):
    """The record's observed backbone as a PDB file, through gemmi (numbered from 10)."""
    one_to_three = {
        gemmi.find_tabulated_residue(n).one_letter_code.upper(): n
        for n in ("ALA CYS ASP GLU PHE GLY HIS ILE LYS LEU MET ASN PRO GLN ARG SER THR VAL TRP TYR".split())
    }
    structure = gemmi.Structure()
    model = gemmi.Model("1")
    chain = gemmi.Chain("B")
    for i, (letter, xyz, ok) in enumerate(zip(record.seq, record.coords, record.mask, strict=True)):
        if not ok:
            continue
        residue = gemmi.Residue()
        residue.name = one_to_three[letter]
        residue.seqid = gemmi.SeqId(10 + i, " ")
        for name, pos in zip(BACKBONE_ATOMS, xyz, strict=True):
            atom = gemmi.Atom()
            atom.name, atom.element, atom.pos = name, gemmi.Element(name[0]), gemmi.Position(*map(float, pos))
            residue.add_atom(atom)
        chain.add_residue(residue)
    model.add_chain(chain)
    structure.add_model(model)
    structure.setup_entities()
    structure.write_pdb(str(path))
    return path
