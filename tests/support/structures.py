"""Real chains of the bundled sample written as PDB/mmCIF files through gemmi (no files checked in)."""

from __future__ import annotations

from pathlib import Path

import gemmi

from invfold.components.protein.complexes import split_complex
from invfold.components.protein.jsonl import read_chain_set
from invfold.components.protein.record import BACKBONE_ATOMS, ChainRecord

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "invfold" / "data" / "sample_chain_set.jsonl.gz"
ONE_TO_THREE = {
    gemmi.find_tabulated_residue(n).one_letter_code.upper(): n
    for n in "ALA CYS ASP GLU PHE GLY HIS ILE LYS LEU MET ASN PRO GLN ARG SER THR VAL TRP TYR".split()
}


def sample_complex(entry: str) -> ChainRecord:
    """One multi-chain entry of the bundled sample (1BD2, 3KPR, 7CFN, 6WG6, 1tii, ...) as a complex."""
    return next(r for r in read_chain_set(SAMPLE, complexes=True) if isinstance(r, ChainRecord) and r.name == entry)


def write_structure(path: Path, chains: list[ChainRecord]) -> Path:
    """The chains' observed backbones (chain id = the part of each name after the last "."; numbered
    from 1, unobserved residues left out) as a PDB or mmCIF file, by the path's suffix."""
    structure = gemmi.Structure()
    model = gemmi.Model("1")
    for record in chains:
        chain = gemmi.Chain(record.name.rsplit(".", 1)[-1])
        for i, (letter, xyz, ok) in enumerate(zip(record.seq, record.coords, record.mask, strict=True)):
            if not ok or letter not in ONE_TO_THREE:
                continue
            residue = gemmi.Residue()
            residue.name = ONE_TO_THREE[letter]
            residue.seqid = gemmi.SeqId(1 + i, " ")
            for name, pos in zip(BACKBONE_ATOMS, xyz, strict=True):
                atom = gemmi.Atom()
                atom.name, atom.element, atom.pos = name, gemmi.Element(name[0]), gemmi.Position(*map(float, pos))
                residue.add_atom(atom)
            chain.add_residue(residue)
        model.add_chain(chain)
    structure.add_model(model)
    structure.setup_entities()
    if path.suffix == ".cif":
        structure.make_mmcif_document().write_file(str(path))
    else:
        structure.write_pdb(str(path))
    return path


def write_sample_complex(path: Path, entry: str) -> Path:
    return write_structure(path, split_complex(sample_complex(entry)))
